"""Verify stage: re-open the bundle and check every citation before anyone sees it.

Input: a Diagnosis (evidence ids), the evidence registry, the Bundle. Output: ``Verified`` with a
Citation per id (status ok / unknown_id / missing_file / line_out_of_range / text_mismatch / file_changed:
the file's sha256 is no longer the scan's, when the scan ran elsewhere), claims whose citations all fail
dropped, and culprit fields that no verified root citation names removed.
I/O: reads bundle lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from crashcart.ingest.bundle import Bundle
from crashcart.models import Citation, Claim, Culprit, Diagnosis, Evidence, Finding, RankLast, Topology
from crashcart.scan.hang_evidence import reread
from crashcart.text.gpuid import canonical_pci
from crashcart.text.prefix import rank_of_path

_LOCAL_RANK = re.compile(r"\blocal[_-]rank\b[\s_:=-]*\d+", re.I)
_PCI_TOKEN = re.compile(r"[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?|busId [0-9a-fA-F]+")


@dataclass
class Verified:
    diagnosis: Diagnosis
    citations: dict[str, Citation]
    dropped: list[Claim] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def citations_dropped(self) -> int:
        return sum(1 for c in self.citations.values() if not c.verified)


def check(
    ev_id: str, registry: dict[str, Evidence], bundle: Bundle, changed: Mapping[str, str] | None = None
) -> Citation:
    """One citation, checked against the bundle's bytes; a file in ``changed`` (path -> why) fails it."""
    ev = registry.get(ev_id)
    if ev is None:
        return Citation(evidence_id=ev_id, file="", line=1, text="", verified=False, status="unknown_id")
    base = {"evidence_id": ev_id, "file": ev.file, "line": ev.line, "end_line": ev.end_line, "text": ev.text}
    phys = bundle.physical(ev.file)
    if phys is None:
        return Citation(**base, verified=False, status="missing_file")
    if changed and ev.file in changed:
        return Citation(**base, verified=False, status="file_changed")
    if ev.locator is not None:  # an entry inside a structured file: parsed afresh and rendered again
        got_entry = reread(phys, ev.file, ev.locator)
        base["locator"] = ev.locator
        if got_entry is None:
            return Citation(**base, verified=False, status="line_out_of_range")
        ok = got_entry == (ev.line, ev.text)
        return Citation(**base, verified=ok, status="ok" if ok else "text_mismatch")
    end = ev.end_line or ev.line
    got = bundle.read_lines(ev.file, ev.line, end)
    if len(got) != end - ev.line + 1:
        return Citation(**base, verified=False, status="line_out_of_range")
    if "\n".join(got) != ev.text:
        return Citation(**base, verified=False, status="text_mismatch")
    return Citation(**base, verified=True, status="ok")


def verify(
    diag: Diagnosis,
    registry: dict[str, Evidence],
    bundle: Bundle,
    changed: Mapping[str, str] | None = None,
    *,
    one_node: bool = False,
) -> Verified:
    """Check every cited id; fail closed on the root cause.

    :param changed: cited files whose bytes changed since the scan (``cited_files``, ``scan.cluster``): path -> why;
        their citations are not verified, and the notes say why.
    :param one_node: the job ran on one node (``single_node``): a local rank in an argv names the rank."""
    ids = _all_ids(diag)
    cites = {i: check(i, registry, bundle, changed) for i in ids}
    ok = {i for i, c in cites.items() if c.verified}
    notes: list[str] = []
    stale = sorted({c.file for c in cites.values() if c.status == "file_changed"})
    if changed and stale:
        shown = "; ".join(f"{f} {changed[f]}" for f in stale[:3]) + ("; …" if len(stale) > 3 else "")
        notes.append(f"citations in {len(stale)} file(s) not verified, the file changed during the run: {shown}")
    dropped: list[Claim] = []

    def keep(claims: list[Claim]) -> list[Claim]:
        kept = []
        for c in claims:
            good = [i for i in c.evidence_ids if i in ok]
            if good:
                kept.append(c.model_copy(update={"evidence_ids": good}))
            else:
                dropped.append(c)
        return kept

    root_ok = [i for i in diag.root_evidence if i in ok]
    update: dict[str, object] = {
        "contributing": keep(diag.contributing),
        "symptoms": keep(diag.symptoms),
        "hypotheses": [
            h.model_copy(update={"evidence_ids": [i for i in h.evidence_ids if i in ok]}) for h in diag.hypotheses
        ],
        "timeline": [t for t in diag.timeline if t.evidence_id in ok],
        "root_evidence": root_ok,
        "rank_stops": [s for s in diag.rank_stops if s.evidence_id in ok],
    }
    if diag.root_class != "unknown" and not root_ok:
        notes.append(f"the evidence for {diag.root_class} did not verify, so no root cause is claimed")
        update.update(
            root_class="unknown",
            culprit=Culprit(),
            confidence=0.0,
            time=None,
            summary="Root cause not established: its evidence did not verify against the bundle",
        )
    else:
        texts = [(registry[i].file, registry[i].text) for i in root_ok]
        culprit, why = _proven_culprit(diag.culprit, texts, one_node)
        notes.extend(why)
        update["culprit"] = culprit
        said, proven = culprit_place(diag.culprit), culprit_place(culprit)
        if said != proven and said in diag.summary:  # the summary names no place the evidence does not
            update["summary"] = diag.summary.replace(said, proven, 1)
    if dropped:
        notes.append(f"{len(dropped)} claim(s) dropped: their citations did not verify")
    return Verified(diagnosis=diag.model_copy(update=update), citations=cites, dropped=dropped, notes=notes)


def cited_files(diag: Diagnosis, registry: dict[str, Evidence]) -> set[str]:
    """The files the diagnosis cites."""
    return {registry[i].file for i in _all_ids(diag) if i in registry}


def _all_ids(diag: Diagnosis) -> list[str]:
    ids: list[str] = list(diag.root_evidence)
    for c in (*diag.contributing, *diag.symptoms):
        ids.extend(c.evidence_ids)
    for h in diag.hypotheses:
        ids.extend(h.evidence_ids)
    ids.extend(t.evidence_id for t in diag.timeline)
    ids.extend(s.evidence_id for s in diag.rank_stops)
    return list(dict.fromkeys(ids))


def rank_named(rank: int, file: str, text: str, *, single_node: bool = False) -> bool:
    """Does this file path or line text name ``rank``?

    A local rank (``--local-rank 3``, ``local_rank: 3``) names a rank only on a single-node job, where it is the
    global rank: torch.distributed.launch passes ``--local_rank=N`` (torch <= 1.x; ``--local-rank=N`` from 2.0,
    torch/distributed/launch.py and run.py ``--use-env``), DeepSpeed's launcher ``--local_rank=N``."""
    r = str(rank)
    local = rf"|--local[_-]rank(?:=|\s+){r}\b" if single_node else ""
    pat = re.compile(
        rf"(?:\brank[\s_:=-]*{r}\b{local}"
        rf"|\[rank{r}\]|\brnk{r}\b|^\s*{r}!?: |\[\d+,{r}\]<|\bRank {r}\b|\brank\s*:\s*{r}\b"
        # Horovod's stall inspector ("2!: [t]", "[missing ranks: 1, 2]", behind mpirun's "[1,0]<stderr>:"),
        # Megatron's straggler report ("MxRtt/Rnk: 1570.32ms/30")
        # the TSL coordination service's task names ("/job:jax_worker/replica:0/task:2": the process index), a
        # task dispatcher's worker index ("worker 3 timeout, relaunch it"; a pod name "job-worker-3" is a node, a
        # "DataLoader worker 3" is no rank)
        rf"|\bmissing ranks:(?: \d+,)* {r}\b|\]<std(?:err|out)>:{r}!?: \[|\bMxRtt/Rnk: [\d.]+ms/{r}\b"
        rf"|/replica:\d+/task:{r}\b|(?<!dataloader )\bworker {r}\b)",
        re.I | re.M,
    )
    if not single_node:
        text = _LOCAL_RANK.sub(" ", text)  # "--local-rank 3" is no "rank 3" on several nodes
    # a path names a rank the way the bundle reads it ("worker-5.log", "proc5.log": text/prefix.rank_of_path)
    return bool(pat.search(text) or pat.search(file.replace("/", " ")) or rank_of_path(file) == rank)


def culprit_place(culprit: Culprit) -> str:
    """`` on node N (rank R, GPU G)``, `` on rank R``, or "" — the words a root cause's summary uses for its place."""
    extra = [
        x
        for x in (
            f"rank {culprit.rank}" if culprit.rank is not None else "",
            f"GPU {culprit.gpu}" if culprit.gpu else "",
        )
        if x
    ]
    if culprit.node:
        return f" on node {culprit.node}" + (f" ({', '.join(extra)})" if extra else "")
    return " on " + ", ".join(extra) if extra else ""


def node_named(node: str, file: str, text: str) -> bool:
    """Does the line or its path name ``node`` as a whole token (``gpu-node-01`` is not ``gpu-node-017``)?"""
    in_text = re.compile(rf"(?<![\w.-]){re.escape(node)}(?![\w-])")
    in_path = re.compile(rf"(?<![A-Za-z0-9.-]){re.escape(node)}(?![A-Za-z0-9-])")  # "pod_<node>.txt" counts
    return bool(in_text.search(text) or in_path.search(file))


def gpu_named(gpu: str, text: str) -> bool:
    """A PCI id in any spelling, or a device index as a whole token ("0" is not named by "node0" or "10")."""
    if ":" in gpu and gpu in text:
        return True
    if ":" not in gpu and re.search(rf"(?<![\w.-]){re.escape(gpu)}(?![\w.-])", text):
        return True
    return any(canonical_pci(tok.removeprefix("busId ")) == gpu for tok in _PCI_TOKEN.findall(text))


def single_node(topo: Topology) -> bool:
    """The job ran on one node as far as the bundle tells (a local rank is then the global rank): at most one node
    named, and no rank whose local rank differs from it."""
    nodes = set(topo.nodes) | {i.node for i in topo.ranks.values() if i.node}
    return len(nodes) <= 1 and all(i.local_rank in (None, r) for r, i in topo.ranks.items())


def _proven_culprit(c: Culprit, texts: list[tuple[str, str]], one_node: bool = False) -> tuple[Culprit, list[str]]:
    """Keep only the culprit fields that a verified root citation (its text or path) names."""
    notes = []
    node, rank, gpu = c.node, c.rank, c.gpu
    if node and not any(node_named(node, f, t) for f, t in texts):
        notes.append(f"culprit node {node} is not named in the verified evidence; not shown")
        node = None
    if rank is not None and not any(rank_named(rank, f, t, single_node=one_node) for f, t in texts):
        notes.append(f"culprit rank {rank} is not named in the verified evidence; not shown")
        rank = None
    if gpu and not any(gpu_named(gpu, t) for _, t in texts):
        notes.append(f"culprit GPU {gpu} is not named in the verified evidence; not shown")
        gpu = None
    return Culprit(node=node, rank=rank, gpu=gpu), notes


def evidence_registry(findings: list[Finding], last: dict[int, RankLast]) -> dict[str, Evidence]:
    """Every Evidence the diagnosis may cite, by id: the findings' and each rank's last line."""
    reg = {ev.id: ev for f in findings for ev in f.evidence}
    reg.update({rl.evidence.id: rl.evidence for rl in last.values() if rl.evidence is not None})
    return reg
