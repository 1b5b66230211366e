"""Infer the job's shape (rank -> node -> GPU) from the logs themselves and the optional manifest.

Input: classified bundle files, scan findings (NCCL init lines, torchrun summaries carry facts as
fields), the manifest. Output: ``Topology`` and findings with their missing node/rank/GPU filled in
where the mapping is established by the bundle. Pure.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict

from crashcart.ingest.bundle import Manifest
from crashcart.models import BundleFile, Finding, RankInfo, Topology
from crashcart.text import prefix
from crashcart.text.gpuid import canonical_pci

_MAPPING = re.compile(r"'([A-Za-z0-9][\w.-]*)': \[([\d, ]*)\]")


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
    for f in findings:
        if f.signature == "deepspeed.rank_mapping":  # {'host': [global ranks in local order], ...}
            for host, listed in _MAPPING.findall(f.fields.get("mapping", "")):
                for local_rank, r in enumerate(int(x) for x in listed.split(",") if x.strip().isdigit()):
                    hosts[r][host] += 4
                    local[r][local_rank] += 1
                    sources.add("DeepSpeed rank mapping")
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
        if said:
            hosts[f.rank][said] += 5
            sources.add("NCCL init lines" if "nranks" in f.fields else "torchrun summaries")
        pci = canonical_pci(f.fields.get("busid", "") or f.fields.get("pci", ""))
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


def attribute(findings: list[Finding], topo: Topology) -> list[Finding]:
    """Fill node from rank, and rank from (node, GPU), where the topology establishes them."""
    by_node_gpu = {(i.node, i.gpu): r for r, i in topo.ranks.items() if i.node and i.gpu}
    aliases = node_aliases(findings, topo.nodes)
    rank_nodes = tuple(sorted({i.node for i in topo.ranks.values() if i.node}, key=len, reverse=True))
    out: list[Finding] = []
    for f in findings:
        update: dict[str, object] = {}
        in_path = _node_in_path(f.evidence[0].file, rank_nodes)
        if f.node in aliases:
            f = f.model_copy(update={"node": aliases[f.node]})
        elif f.node is None and f.rank is None and in_path:
            f = f.model_copy(update={"node": in_path})  # e.g. kubectl_describe_pod_<pod>.txt names the host
        elif f.node is None and f.fields.get("_file_host") in aliases:
            f = f.model_copy(update={"node": aliases[f.fields["_file_host"]]})
        info = topo.ranks.get(f.rank) if f.rank is not None else None
        if f.node is None and info is not None and info.node:
            update["node"] = info.node
        elif f.node is None and f.fields.get("_file_host"):
            update["node"] = f.fields["_file_host"]
        if f.rank is None and f.node and f.gpu and (f.node, f.gpu) in by_node_gpu:
            update["rank"] = by_node_gpu[(f.node, f.gpu)]
        elif f.rank is None and f.node and (f.fields.get("gpu", "").isdigit() or (f.gpu or "").isdigit()):
            # "GPU 3" in a CUDA error or a telemetry row of a node: the rank whose local device that is
            local = int(f.fields["gpu"] if f.fields.get("gpu", "").isdigit() else f.gpu or 0)
            hit = [r for r, i in topo.ranks.items() if i.node == f.node and i.local_rank == local]
            if len(hit) == 1:
                update["rank"] = hit[0]
        out.append(f.model_copy(update=update) if update else f)
    return out


@functools.lru_cache(maxsize=4096)
def _node_in_path(path: str, nodes: tuple[str, ...]) -> str | None:
    """The one known node whose name stands as a whole token in ``path``, if exactly one does."""
    hits = [n for n in nodes if re.search(rf"(?<![A-Za-z0-9]){re.escape(n)}(?![A-Za-z0-9-])", path)]
    return hits[0] if len(hits) == 1 else None


def gpu_of(topo: Topology, rank: int | None) -> str | None:
    if rank is None:
        return None
    info = topo.ranks.get(rank)
    return info.gpu if info else None
