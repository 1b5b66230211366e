"""Infer the job's shape (rank -> node -> GPU) from the logs themselves and the optional manifest.

Input: classified bundle files, scan findings (NCCL init lines, torchrun summaries carry facts as
fields), the manifest. Output: ``Topology`` and findings with their missing node/rank/GPU filled in
where the mapping is established by the bundle. Pure.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict

from crashcart.catalogue import TERMINATE_WHAT_LINES
from crashcart.ingest.manifest import Manifest
from crashcart.locate.owned import copied, in_place
from crashcart.models import BundleFile, Finding, RankInfo, Topology
from crashcart.text import prefix
from crashcart.text.gpuid import canonical_pci

_MAPPING = re.compile(r"'([A-Za-z0-9][\w.-]*)': \[([\d, ]*)\]")
# NCCL src/debug.cc (ncclDebugLog, 2.x): WARN lines "\n%s:%d:%d [%d] %s:%d NCCL WARN " and INFO lines
# "%s:%d:%d [%d] NCCL INFO " = hostname (cut at the first '.'), pid, tid, cudaDev; 2.26+ put "[%F %T] " first
# (NCCL_DEBUG_TIMESTAMP_FORMAT, on WARN lines by default) and 2.30 "<file>:<line> (<function>) NCCL WARN ".
_NCCL_PREFIX = re.compile(  # NCCL 2.3+ "... NCCL WARN|INFO"; 2.0-2.2 "<file>:<line> WARN ..." and "INFO <file>:<line>"
    r"(?:^|[\s\]])(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:(?:\S+:\d+ (?:\(\w+\) )?)?NCCL |[\w/.-]+\.(?:cc|cu|h):\d+ WARN |INFO [\w/.-]+\.(?:cc|cu|h):\d+ )"
)
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})
# Launcher prefixes that name a global rank: vLLM's worker processes "(VllmWorker rank=1 pid=2445156) "
# (vllm/v1/executor/multiproc_executor.py names workers "VllmWorker rank=<r>"; vllm's output prefix adds
# " pid=<pid>"), and "[rank=N]" / "[Rank N]" tags that training scripts and DeepSpeed's log_dist print.
_LAUNCHER_RANK = re.compile(
    r"^\((?:[A-Za-z][\w:.-]* )?rank=(?P<a>\d{1,7})(?:,? pid=\d+)?(?:,? ip=[\d.]+)?\) |^\[[Rr]ank[= ](?P<b>\d{1,7})\] "
)


def _single_paste(files: list[BundleFile]) -> bool:
    """One log file and nothing else: its name is whatever the person who pasted it chose."""
    logs = [bf for bf in files if bf.kind in {"rank_log", "combined_log", "kernel_log", "log", "scheduler"}]
    return len(logs) == 1 and "/" not in logs[0].path


def launcher_rank(text: str) -> int | None:
    """The global rank a launcher prefix names (``(VllmWorker rank=1 pid=7) ``, ``[rank=3] ``), if any."""
    if "ank=" not in text and "ank " not in text and not text.startswith("{"):  # the pattern's "rank=", "[Rank "
        return None
    m = _LAUNCHER_RANK.search(prefix.view(text).rest)
    if m is None:
        return None
    return int(m.group("a") or m.group("b"))


# a native crash's own exit code as torchrun reports it (-signal): abort, segfault, bus error, SIGILL, SIGFPE
_CRASH_EXIT = frozenset({"-6", "-11", "-7", "-4", "-8", "134", "139", "135"})


def nccl_prefix(text: str) -> tuple[str, str, int] | None:
    """(host, pid, cudaDev) from NCCL's line prefix, after any launcher prefix; None when absent."""
    if "NCCL " not in text and " WARN " not in text and "] INFO " not in text and not text.startswith("{"):
        return None  # the pattern holds one of these (a JSON record may escape them)
    m = _NCCL_PREFIX.search(prefix.view(text).rest[:200])
    return (m.group("host"), m.group("pid"), int(m.group("dev"))) if m else None


def infer_topology(files: list[BundleFile], findings: list[Finding], manifest: Manifest | None) -> Topology:
    """Vote on rank -> host and rank -> GPU from every source; the majority wins, manifest first."""
    hosts: dict[int, Counter[str]] = defaultdict(Counter)
    gpus: dict[int, Counter[str]] = defaultdict(Counter)
    local: dict[int, Counter[int]] = defaultdict(Counter)
    rank_files: dict[int, set[str]] = defaultdict(set)
    sources: set[str] = set()
    nranks = [int(f.fields["nranks"]) for f in findings if f.fields.get("nranks", "").isdigit()]
    world = max(nranks) if nranks else None

    if manifest is not None and manifest.rank_map:
        for rank, host in manifest.rank_map.items():
            hosts[rank][host] += 100
        sources.add("manifest rank_map")
    for bf in files:
        if bf.rank is not None:
            rank_files[bf.rank].add(bf.path)
            if bf.host:
                hosts[bf.rank][bf.host] += 3
                sources.add("file paths")
    file_host = {bf.path: bf.host for bf in files if bf.host}
    for rank, (folder_host, folder_local, paths) in layout_ranks(files, findings).items():
        rank_files[rank].update(paths)
        local[rank][folder_local] += 3
        if folder_host:
            hosts[rank][folder_host] += 3
        sources.add("torchrun log folders")
    for f in findings:
        if f.signature == "deepspeed.rank_mapping":  # {'host': [global ranks in local order], ...}
            for host, listed in _MAPPING.findall(f.fields.get("mapping", "")):
                for local_rank, r in enumerate(int(x) for x in listed.split(",") if x.strip().isdigit()):
                    hosts[r][host] += 4
                    local[r][local_rank] += 1
                    sources.add("DeepSpeed rank mapping")
    for rank, host in _summary_hosts(findings):  # torchrun's failure summary: "host : <h>" above "rank : <r> ..."
        hosts[rank][host] += 5
        sources.add("torchrun summaries")
    for f in findings:  # srun without a launcher: "srun: error: <host>: task <n>: ..." names a rank's host
        if f.signature.startswith("slurm.task_") and f.fields.get("task", "").isdigit() and f.fields.get("host"):
            hosts[int(f.fields["task"])][f.fields["host"]] += 1
    for f in findings:
        if f.role != "context" or f.rank is None:
            continue
        comm = f.fields.get("nranks", "")
        if comm.isdigit() and world is not None and int(comm) != world:
            continue  # a sub-communicator: its ranks are not global ranks
        said = f.fields.get("host")
        if said in _LOOPBACK and file_host.get(f.evidence[0].file):
            said = None  # torchrun's summary says "localhost"; the folder names the node
        if said:
            hosts[f.rank][said] += 5
            sources.add("NCCL init lines" if "nranks" in f.fields else "torchrun summaries")
        busid = f.fields.get("busid", "") or f.fields.get("pci", "")
        pci = canonical_pci(busid) if busid else None  # (no id: none to read)
        if pci:
            gpus[f.rank][pci] += 5
        lr = f.fields.get("local_rank") or f.fields.get("cudadev")
        if lr and lr.isdigit():
            local[f.rank][int(lr)] += 1
        for ev in f.evidence:
            rank_files[f.rank].add(ev.file)

    all_ranks = set(hosts) | set(gpus) | set(rank_files)
    for f in findings:
        if f.rank is not None and f.rank >= 0:
            all_ranks.add(f.rank)
    ranks: dict[int, RankInfo] = {}
    for r in sorted(all_ranks):
        if r < 0 or (world is not None and r >= world):
            continue
        ranks[r] = RankInfo(
            rank=r,
            node=hosts[r].most_common(1)[0][0] if hosts[r] else None,
            gpu=gpus[r].most_common(1)[0][0] if gpus[r] else None,
            local_rank=local[r].most_common(1)[0][0] if local[r] else None,
            files=sorted(rank_files[r])[:8],
        )
    nodes = sorted(
        {i.node for i in ranks.values() if i.node} | {bf.host for bf in files if bf.host and bf.kind == "kernel_log"}
    )
    if manifest is not None:
        nodes = sorted(set(nodes) | {n.host for n in manifest.nodes})
    if world is None and ranks:
        world = max(ranks) + 1
    return Topology(world_size=world, ranks=ranks, nodes=nodes, sources=sorted(sources))


def _summary_hosts(findings: list[Finding]) -> list[tuple[int, str]]:
    """(rank, host) of each entry of torchrun's failure summary (ChildFailedError.format_msg prints ``host :``
    then ``rank : R (local_rank: L)`` on the next line); a loopback host names no node."""
    hosts: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for f in findings:
        if f.signature == "torchrun.summary_host" and f.fields.get("host") not in (None, "", *_LOOPBACK):
            hosts[f.evidence[0].file].append((f.evidence[0].line, f.fields["host"]))
    out: list[tuple[int, str]] = []
    for f in findings:
        if f.signature != "torchrun.summary_rank" or not f.fields.get("rank", "").isdigit():
            continue
        ev = f.evidence[0]
        above = [h for n, h in hosts.get(ev.file, []) if 0 < ev.line - n <= 3]
        if above:
            out.append((int(f.fields["rank"]), above[-1]))
    return out


def layout_ranks(files: list[BundleFile], findings: list[Finding]) -> dict[int, tuple[str | None, int, set[str]]]:
    """Global rank -> (host, local rank, files) for torchrun ``--log-dir`` folders (``attempt_N/<local>/``).

    The folder gives the local rank; the global rank is what a file in that folder says (its ``[rankN]:``
    prefix), else torchrun's summary on that host (``rank : 3 (local_rank: 1)``), else, on a single-node
    job, the local rank itself.
    """
    dirs: dict[tuple[str | None, str], set[str]] = defaultdict(set)
    local_of: dict[str, int] = {}
    for bf in files:
        lr = prefix.local_of_path(bf.path)
        if lr is None:
            continue
        local_of[bf.path] = lr
        dirs[(bf.host, bf.path.rsplit("/", 1)[0])].add(bf.path)
    if not dirs:
        return {}
    said: dict[str, Counter[int]] = defaultdict(Counter)  # path -> ranks its own lines name
    for bf in files:
        if bf.path in local_of and bf.rank is not None:
            said[bf.path][bf.rank] += 10
    for f in findings:
        path = f.evidence[0].file
        if path in local_of and f.rank is not None and prefix.view(f.evidence[0].text).rank == f.rank:
            said[path][f.rank] += 1
    summary: dict[tuple[str | None, int], int] = {}
    host_of = {bf.path: bf.host for bf in files}
    for f in findings:
        said_rank, said_local = f.fields.get("rank", ""), f.fields.get("local_rank", "")
        if f.signature.startswith("torchrun.") and said_rank.isdigit() and said_local.isdigit():
            summary.setdefault((host_of.get(f.evidence[0].file), int(said_local)), int(said_rank))
    locals_seen = [local_of[next(iter(paths))] for paths in dirs.values()]
    single = len({h for h, _ in dirs}) <= 1 and len(locals_seen) == len(set(locals_seen))
    out: dict[int, tuple[str | None, int, set[str]]] = {}
    for (host, _), paths in dirs.items():
        lr = local_of[next(iter(paths))]
        votes: Counter[int] = Counter()
        for path in paths:
            votes.update(said.get(path, Counter()))
        if votes:
            rank: int | None = votes.most_common(1)[0][0]
        elif (host, lr) in summary:
            rank = summary[(host, lr)]
        else:
            rank = lr if single else None
        if rank is not None and rank not in out:
            out[rank] = (host, lr, set(paths))
    return out


def node_aliases(findings: list[Finding], nodes: list[str]) -> dict[str, str]:
    """Other names of a node: a pod's name (``kubectl describe`` "Node:" line), a node's FQDN."""
    aliases: dict[str, str] = {}
    for f in findings:
        if f.signature == "k8s.describe_node" and f.fields.get("host"):
            pod = prefix.host_of_path(f.evidence[0].file)
            if pod and pod not in nodes:  # when the logs call the pod a host, the pod is the place
                aliases[pod] = f.fields["host"]
    short = {n.split(".")[0]: n for n in nodes}
    for f in findings:
        if f.node and "." in f.node and f.node.split(".")[0] in short:
            aliases[f.node] = short[f.node.split(".")[0]]
    return aliases


def attribute(
    findings: list[Finding], topo: Topology, files: list[BundleFile] | None = None, *, owned: bool = False
) -> list[Finding]:
    """Fill node from rank, and rank from (node, GPU), where the topology establishes them.

    A line's rank is what the line itself says (a ``[rankN]:`` prefix, a ``rank`` field) or its file's
    path; otherwise the rank is looked up from what the line names: its torchrun log folder, a process
    id torchrun or NCCL tied to a rank, a ``[defaultN]:`` local rank, NCCL's ``host:pid:tid [cudaDev]``
    prefix. A native crash nobody's prefix claims belongs to the one worker torchrun saw die of a signal.
    ``owned``: the findings are the caller's to give away: they are changed in place (``owned.in_place``), not copied.
    """
    change = in_place if owned else copied
    files = files or []
    pasted = _single_paste(files)
    by_node_gpu = {(i.node, i.gpu): r for r, i in topo.ranks.items() if i.node and i.gpu}
    aliases = node_aliases(findings, topo.nodes)
    rank_nodes = tuple(sorted({i.node for i in topo.ranks.values() if i.node}, key=len, reverse=True))
    file_host = {bf.path: bf.host for bf in files if bf.host}
    path_rank = {path for bf in files if (path := bf.path) and prefix.rank_of_path(path) is not None}
    layout = {p: r for r, (_, _, paths) in layout_ranks(files, findings).items() for p in paths}
    facts = _RankFacts(topo, findings, file_host)
    crash_ranks: set[int] = set()
    guessed: set[str] = set()
    out: list[Finding] = []
    in_paths: dict[str, str | None] = {}  # path -> the node it names (findings come file by file)
    for f in findings:
        update: dict[str, object] = {}
        ev = f.evidence[0]
        if ev.file not in in_paths:
            in_paths[ev.file] = _node_in_path(ev.file, rank_nodes)
        in_path = in_paths[ev.file]
        said = f.fields.get("rank", "").isdigit() or ev.file in path_rank or prefix.names_rank(ev.text)
        nccl = nccl_prefix(ev.text) if f.node is None or not said else None  # read only then
        if f.node in _LOOPBACK and file_host.get(ev.file):
            f = change(f, {"node": file_host[ev.file]})
        if f.node in aliases:
            f = change(f, {"node": aliases[f.node]})
        elif f.node is None and nccl is not None and prefix.looks_like_host(nccl[0]):
            f = change(f, {"node": nccl[0]})  # NCCL's own prefix names the host
        elif f.node is None and (host := prefix.address_of(ev.text)):
            f = change(f, {"node": host})  # pdsh/clush "10.0.0.7: " names a node by its address
        elif f.node is None and f.rank is None and in_path:
            f = change(f, {"node": in_path})  # e.g. kubectl_describe_pod_<pod>.txt names the host
        elif f.node is None and f.fields.get("_file_host") in aliases:
            f = change(f, {"node": aliases[f.fields["_file_host"]]})
        tagged = None if said else launcher_rank(ev.text)
        if tagged is not None:
            f = change(f, {"rank": tagged})
        elif not said:
            found = facts.rank_of(f, layout.get(ev.file), nccl)
            if found is not None and found != f.rank:
                f = change(f, {"rank": found})
            elif found is None:
                guessed.add(f.id)  # a rank (if any) taken from the file's other lines, not from this one
        if f.signature.startswith("torchrun.") and f.fields.get("exitcode") in _CRASH_EXIT and f.rank is not None:
            crash_ranks.add(f.rank)
        info = topo.ranks.get(f.rank) if f.rank is not None else None
        if f.node is None and info is not None and info.node:
            update["node"] = info.node
        elif f.node is None and (host := f.fields.get("_file_host")) and (not pasted or host in ev.text):
            update["node"] = host  # (a single pasted file's name is not a node's; a host its line prints is)
        if f.rank is None and f.node and f.gpu and (f.node, f.gpu) in by_node_gpu:
            update["rank"] = by_node_gpu[(f.node, f.gpu)]
        elif f.rank is None and f.node and (f.fields.get("gpu", "").isdigit() or (f.gpu or "").isdigit()):
            # "GPU 3" in a CUDA error or a telemetry row of a node: the rank whose local device that is
            local = int(f.fields["gpu"] if f.fields.get("gpu", "").isdigit() else f.gpu or 0)
            hit = [r for r, i in topo.ranks.items() if i.node == f.node and i.local_rank == local]
            if len(hit) == 1:
                update["rank"] = hit[0]
        out.append(change(f, update) if update else f)
    out = _summary_entries(out, guessed)
    out = _under_prompts(out)
    if len(crash_ranks) == 1:  # the worker that died of a signal printed the crash lines nobody claims
        crashed = next(iter(crash_ranks))
        aborts = {(f.evidence[0].file, f.evidence[0].line) for f in out if f.signature == "native.terminate_called"}
        out = [
            change(f, {"rank": crashed})
            if (f.class_id == "native_crash_segfault_abort" or _what_of(f, aborts))
            and (f.rank is None or f.id in guessed)
            and not f.signature.startswith("kernel.")
            else f
            for f in out
        ]
    return out


def _what_of(f: Finding, aborts: set[tuple[str, int]]) -> bool:
    """Whether ``f`` is the ``what()`` of a "terminate called after throwing" line just above it (same process)."""
    ev = f.evidence[0]
    return any((ev.file, ev.line - k) in aborts for k in range(1, TERMINATE_WHAT_LINES + 1))


# Signatures whose line is a process saying which rank (worker) it is: ElasticDL worker/main.py "Starting worker
# <id>" (2019-2024), the index its master's task dispatcher and its pod names use.
DECLARING = frozenset({"elasticdl.worker_started"})


def declared_ranks(files: list[BundleFile], findings: list[Finding]) -> dict[str, int]:
    """Path -> rank for a log whose path names no rank but whose process declares one (``DECLARING``), when it
    declares exactly one and no line in it names another."""
    named = {bf.path for bf in files if bf.rank is not None}
    said: dict[str, set[int]] = defaultdict(set)
    other: dict[str, set[int]] = defaultdict(set)
    for f in findings:
        path = f.evidence[0].file
        if path in named or f.rank is None:
            continue
        (said if f.signature in DECLARING else other)[path].add(f.rank)
    return {p: next(iter(r)) for p, r in said.items() if len(r) == 1 and other.get(p, r) <= r}


def local_to_global(topo: Topology) -> dict[int, int]:
    """Local rank -> global rank on a single-node job (the only shape where a local rank alone says who)."""
    if len({i.node for i in topo.ranks.values() if i.node}) > 1:
        return {}
    out = {i.local_rank: r for r, i in topo.ranks.items() if i.local_rank is not None}
    if len(out) != len([i for i in topo.ranks.values() if i.local_rank is not None]):
        return {}  # two ranks share a local rank: more than one node after all
    for r in topo.ranks:
        out.setdefault(r, r)
    return out


def _under_prompts(findings: list[Finding]) -> list[Finding]:
    """Output pasted under a shell prompt ("root@gpu47:~# nvidia-smi") ran on the prompt's host."""
    prompts: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for f in findings:
        if f.signature != "shell.prompt":
            continue
        host = f.fields.get("host", "")
        if host not in _LOOPBACK and prefix.looks_like_host(host):
            prompts[f.evidence[0].file].append((f.evidence[0].line, host))
    if not prompts:
        return findings
    out: list[Finding] = []
    for f in findings:
        ev = f.evidence[0]
        above = [h for n, h in prompts.get(ev.file, []) if n < ev.line]
        if f.node is None and f.signature != "shell.prompt" and above:
            f = f.model_copy(update={"node": above[-1]})
        out.append(f)
    return out


SUMMARY_ENTRY = 60  # lines: an entry of torchrun's failure summary, from its "rank :" line to its traceback's end


def _summary_entries(findings: list[Finding], guessed: set[str]) -> list[Finding]:
    """Lines inside an entry of torchrun's failure summary belong to that entry's rank and host.

    torch/distributed/elastic/multiprocessing/errors (ChildFailedError.format_msg): each failure is
    ``[i]:`` then ``time``, ``host``, ``rank : R (local_rank: L)``, ``exitcode``, ``error_file`` and
    ``traceback`` (the worker's error file, re-printed), so an error line under ``rank : 304`` is rank 304's.
    """
    marks: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    for f in findings:
        if f.signature == "torchrun.summary_rank" and f.fields.get("rank", "").isdigit():
            marks[f.evidence[0].file].append((f.evidence[0].line, "rank", f.fields["rank"]))
        elif f.signature == "torchrun.summary_host" and f.fields.get("host"):
            marks[f.evidence[0].file].append((f.evidence[0].line, "host", f.fields["host"]))
    if not marks:
        return findings
    out: list[Finding] = []
    for f in findings:
        ev = f.evidence[0]
        if f.role == "context" or ev.file not in marks or not (f.rank is None or f.id in guessed):
            out.append(f)
            continue
        before = [m for m in marks[ev.file] if m[0] < ev.line]
        ranks = [m for m in before if m[1] == "rank"]
        if not ranks or ev.line - ranks[-1][0] > SUMMARY_ENTRY:
            out.append(f)
            continue
        entry = ranks[-1][0]
        update: dict[str, object] = {"rank": int(ranks[-1][2])}
        hosts = [m for m in before if m[1] == "host" and entry - m[0] <= 3]
        if f.node is None and hosts and hosts[-1][2] not in _LOOPBACK:
            update["node"] = hosts[-1][2]
        out.append(f.model_copy(update=update))
    return out


# launchers whose lines tie a pid to a local rank: torchrun's "failed (exitcode: ...) local_rank: L (pid: P)",
# DeepSpeed's "process P spawned with command: [... '--local_rank=L' ...]"
_LAUNCHERS = ("torchrun.", "deepspeed.process_spawned")


class _RankFacts:
    """Who is who, from what lines say: process ids, local ranks and NCCL devices tied to global ranks."""

    def __init__(self, topo: Topology, findings: list[Finding], file_host: dict[str, str]) -> None:
        self.topo = topo
        self.file_host = file_host
        self.single = len({i.node for i in topo.ranks.values() if i.node}) <= 1
        self.pids: dict[str, set[int]] = defaultdict(set)
        for f in findings:
            pid = f.fields.get("pid", "")
            if not pid.isdigit():
                continue
            comm = f.fields.get("nranks", "")
            if comm.isdigit() and topo.world_size is not None and int(comm) != topo.world_size:
                continue  # a sub-communicator's rank is not a global rank
            rank = f.rank if f.fields.get("rank", "").isdigit() else None
            if rank is None and f.fields.get("local_rank", "").isdigit() and f.signature.startswith(_LAUNCHERS):
                rank = self.global_of(self._host(f), int(f.fields["local_rank"]))
            if rank is None and f.role == "context" and prefix.names_rank(f.evidence[0].text):
                rank = f.rank
            if rank is not None:
                self.pids[pid].add(rank)

    def _host(self, f: Finding) -> str | None:
        return self.file_host.get(f.evidence[0].file) or (f.node if f.node not in _LOOPBACK else None)

    def global_of(self, host: str | None, local: int) -> int | None:
        """The global rank of local rank ``local`` on ``host`` (any host on a single-node job)."""
        hit = [
            r
            for r, i in self.topo.ranks.items()
            if i.local_rank == local and (host is None or i.node in (None, host) or self.single)
        ]
        if len(hit) == 1:
            return hit[0]
        return local if self.single and not hit else None  # one node in the bundle: local ranks are global

    def rank_of(self, f: Finding, layout: int | None, nccl: tuple[str, str, int] | None) -> int | None:
        if layout is not None:
            return layout
        pid = f.fields.get("pid", "") or (nccl[1] if nccl else "")
        if pid and len(self.pids.get(pid, ())) == 1:
            return next(iter(self.pids[pid]))
        local = prefix.view(f.evidence[0].text).local
        if local is not None:
            return self.global_of(self._host(f), local)
        if nccl is not None:
            hit = [r for r, i in self.topo.ranks.items() if i.node == nccl[0] and i.local_rank == nccl[2]]
            return hit[0] if len(hit) == 1 else None
        return None


@functools.lru_cache(maxsize=4096)
def _node_in_path(path: str, nodes: tuple[str, ...]) -> str | None:
    """The one known node whose name stands as a whole token in ``path``, if exactly one does."""
    hits = {m.group(0) for m in _node_names(nodes).finditer(path)} if nodes else set()
    return next(iter(hits)) if len(hits) == 1 else None


@functools.lru_cache(maxsize=16)
def _node_names(nodes: tuple[str, ...]) -> re.Pattern[str]:
    """One regex for all of ``nodes`` as whole tokens (longest first), compiled once per set of nodes: a
    bundle of 10,000 rank files on 1,250 nodes asks about every file."""
    names = "|".join(re.escape(n) for n in sorted(set(nodes), key=lambda n: (-len(n), n)))
    return re.compile(rf"(?<![A-Za-z0-9])(?:{names})(?![A-Za-z0-9-])")


def gpu_of(topo: Topology, rank: int | None) -> str | None:
    if rank is None:
        return None
    info = topo.ranks.get(rank)
    return info.gpu if info else None
