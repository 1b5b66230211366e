"""Explaining the offline answer: its culprit and support lines, the summary, the composed Diagnosis
(contributing factors, symptoms, hypotheses, timeline) and its confidence."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from crashcart.catalogue import load_catalogue
from crashcart.models import (
    WHOLE_JOB_STOPS,
    Claim,
    Culprit,
    Diagnosis,
    Evidence,
    Finding,
    Group,
    Hypothesis,
    RankLast,
    TimelineEntry,
    Topology,
)
from crashcart.reduce.adjust import calibrate, peer_suspect, specific_lines
from crashcart.reduce.causal import INHERITED_SLACK, Candidate, Picture, own_time
from crashcart.verify import culprit_place, gpu_named, node_named, rank_named

NEIGHBOUR_LINES = 5
MAX_TIMELINE = 24


def _rank_of_pid(node: str, pid: str, topo: Topology, findings: list[Finding]) -> int | None:
    """A process id named on a node (the OOM killer's victim) -> the rank whose NCCL lines show that pid."""
    ranks = {f.rank for f in findings if f.role == "context" and f.node == node and f.fields.get("pid") == pid}
    ranks.discard(None)
    return ranks.pop() if len(ranks) == 1 else None


def _culprit(c: Candidate, topo: Topology, findings: list[Finding] | None = None) -> Culprit:
    if c.where is not None:
        return c.where  # several programs on one host, a switch's GPU endpoint (reduce/host.py)
    first = c.first
    nodes = c.nodes
    node = first.node if len(nodes) <= 1 or len(nodes) * 3 <= max(len(topo.nodes), 1) else None
    if node is None and len(nodes) == 1:
        node = next(iter(nodes))  # another line of the same fault says where
    ranks = c.ranks
    rank = first.rank if first.rank is not None and (len(ranks) <= 2 or c.lead is not None) else None
    if c.class_id == "collective_mismatch_desync" and len(ranks) > 1 and c.lead is None:
        rank = None  # each side of a mismatch reports the other: only a majority says which one is odd
    if c.lead is not None and first.node:
        node = first.node
    gpu = first.gpu
    index = first.fields.get("gpu", "") or (
        "" if first.signature.startswith("kernel.") else first.fields.get("device", "")
    )
    if gpu is None and index.isdigit():
        gpu = index  # a device index the line names ("GPU 3 has a total capacity", "GPU4 GSP", Megatron's "Device: 5")
    if gpu is None and rank is not None and rank in topo.ranks and first.node == topo.ranks[rank].node:
        gpu = None  # a rank's GPU is only named when a line names it; see _support
    if rank is None and node and gpu:
        rank = next((r for r, i in topo.ranks.items() if i.node == node and i.gpu == gpu), None)
    if rank is None and node and first.fields.get("pid") and findings is not None:
        rank = _rank_of_pid(node, first.fields["pid"], topo, findings)
    if node is None and rank is not None and rank in topo.ranks and len(nodes) <= 1:
        node = topo.ranks[rank].node
    return Culprit(node=node, rank=rank, gpu=gpu)


def _support(culprit: Culprit, c: Candidate, findings: list[Finding], cited: list[Evidence]) -> list[str]:
    """Context lines that tie the culprit to what the root lines say (NCCL init: rank -> host, GPU)."""
    out: list[str] = []
    texts = [(e.file, e.text) for e in cited]
    need_rank = culprit.rank is not None and not any(rank_named(culprit.rank, f, t) for f, t in texts)
    need_node = culprit.node is not None and not any(node_named(culprit.node, f, t) for f, t in texts)
    need_gpu = culprit.gpu is not None and not any(gpu_named(culprit.gpu, t) for _, t in texts)
    files = {e.file for e in cited}
    for f in findings:
        if not (need_rank or need_node or need_gpu):
            break
        if f.role != "context" and not (need_node and f.node == culprit.node):
            continue  # any line of the node may name it (srun's "<host>: task 0: Exited"); ranks come from context
        ev = f.evidence[0]
        if not ((f.rank == culprit.rank and culprit.rank is not None) or ev.file in files):
            continue  # a line ties the culprit only from its rank or a cited file
        names_rank = (  # each asked only while it is needed
            need_rank
            and f.role == "context"
            and culprit.rank is not None
            and f.rank == culprit.rank
            and rank_named(culprit.rank, ev.file, ev.text)
        )
        names_node = need_node and culprit.node is not None and node_named(culprit.node, ev.file, ev.text)
        names_gpu = need_gpu and culprit.gpu is not None and gpu_named(culprit.gpu, ev.text)
        if names_rank or names_node or names_gpu:
            out.append(ev.id)
            need_rank = need_rank and not names_rank
            need_node = need_node and not names_node
            need_gpu = need_gpu and not names_gpu
    return out


def _when(t: datetime | None) -> str:
    return f" at {t:%H:%M:%S} UTC" if t is not None else ""


def _summary(c: Candidate, culprit: Culprit) -> str:
    return f"{load_catalogue().class_title(c.class_id)}{culprit_place(culprit)}{_when(c.time)}: {c.first.summary}"


def _compose(
    root: Candidate,
    others: list[Candidate],
    groups: list[Group],
    findings: list[Finding],
    topo: Topology,
    pic: Picture,
    last: dict[int, RankLast],
) -> Diagnosis:
    odd = root.ranks & pic.suspect_ranks
    if len(root.ranks) > 2 and len(odd) == 1:  # every rank reports it; the odd rank is the culprit
        r = odd.pop()
        root.lead = min(
            (f for f in root.findings if f.rank == r), key=lambda f: (f.evidence[0].file, f.evidence[0].line)
        )
        root.reasons.append(f"rank {r} {pic.suspects[r]}")
    culprit = Culprit() if root.class_id in WHOLE_JOB_STOPS else _culprit(root, topo, findings)
    first = root.first
    root_ids = [ev.id for ev in first.evidence]
    near = [
        f
        for f in root.findings
        if f is not first
        and f.evidence[0].file == first.evidence[0].file
        and 0 < abs(f.evidence[0].line - first.evidence[0].line) <= NEIGHBOUR_LINES
    ]
    for f in sorted(near, key=lambda f: f.evidence[0].line)[:2]:  # the same event, worded on the next lines
        root_ids.append(f.evidence[0].id)
    root_ids += [ev.id for ev in specific_lines(root.class_id, first, findings) if ev.id not in root_ids]
    for f in root.findings:  # one more exemplar from another source, if any
        if f is not first and f.evidence[0].file != first.evidence[0].file and len(root_ids) < 5:
            root_ids.append(f.evidence[0].id)
            break
    root_ids += [f.evidence[0].id for f in root.findings if "_smell" in f.fields][:2]  # the configuration behind it
    if root.inferred:  # each place the ranks were is its own evidence: its traceback
        root_ids += [ev.id for f in root.findings[:3] for ev in f.evidence if ev.id not in root_ids]
    registry = {ev.id: ev for f in [*root.findings, *findings] for ev in f.evidence}
    cited = [registry[i] for i in root_ids if i in registry]
    root_ids += [i for i in _support(culprit, root, findings, cited) if i not in root_ids]
    explained_nodes = root.nodes | ({culprit.node} if culprit.node else set())
    contributing: list[Claim] = []
    hypotheses: list[Hypothesis] = []
    for c in others:
        same_place = bool(c.nodes & explained_nodes) or bool(c.ranks & root.ranks)
        ct = own_time(c.first)
        later = ct is None or root.time is None or ct >= root.time - INHERITED_SLACK
        explained = any(p.startswith("explained by") for p in c.penalties)
        if explained or (same_place and later):
            contributing.append(_claim(c.class_id, c.first.summary + " (explained by the root cause)", c))
        else:
            why = "; ".join(c.penalties) or f"scored {c.score:.0f} vs {root.score:.0f}"
            hypotheses.append(
                Hypothesis(
                    class_id=c.class_id,
                    score=round(c.score, 1),
                    why_not=why,
                    evidence_ids=[c.first.evidence[0].id],
                )
            )
    suspect = peer_suspect(root, findings, topo)
    if suspect is not None:
        root.reasons.append(suspect[0])
        root_ids += [ev.id for ev in suspect[1] if ev.id not in root_ids]
    conf = _confidence(root, others, pic, culprit)
    root_ids = _distinct(root_ids, registry)
    return Diagnosis(
        root_class=root.class_id,
        summary=_summary(root, culprit),
        culprit=culprit,
        time=root.time,
        confidence=conf,
        root_evidence=root_ids,
        contributing=contributing[:10],
        symptoms=_symptoms(groups, exclude={root.class_id}),
        hypotheses=hypotheses[:6],
        timeline=_timeline(root, groups),
        reasoning=[*root.reasons, *(f"against: {p}" for p in root.penalties), *pic.notes],
    )


def _distinct(ids: list[str], registry: dict[str, Evidence]) -> list[str]:
    """Evidence ids without a second citation of the same span (two signatures that matched one line)."""
    seen: set[tuple[str, int, int | None]] = set()
    out: list[str] = []
    for i in ids:
        ev = registry.get(i)
        key = (ev.file, ev.line, ev.end_line) if ev is not None else (i, -1, None)
        if key not in seen:
            seen.add(key)
            out.append(i)
    return out


def _unknown(
    cands: list[Candidate], groups: list[Group], findings: list[Finding], topo: Topology, pic: Picture
) -> Diagnosis:
    hyps = [
        Hypothesis(
            class_id=c.class_id,
            score=round(c.score, 1),
            why_not="; ".join(c.penalties) or "evidence not decisive",
            evidence_ids=[c.first.evidence[0].id],
        )
        for c in cands[:6]
    ]
    reasons = list(pic.notes)
    if any(f.class_id == "unknown" and "kill" in f.signature for f in findings):
        reasons.append(
            "a process was SIGKILLed but no kernel or cgroup OOM line says why (could be OOM, scheduler, user)"
        )
        if not any(h.class_id == "host_oom_kill" for h in hyps):
            hyps.insert(0, Hypothesis(class_id="host_oom_kill", score=0.0, why_not="no OOM-killer line in the bundle"))
    if not cands:
        reasons.append("no line in the bundle names a cause; only symptoms were found")
    clue = cands[0].first.evidence[0].id if cands else None
    culprit = Culprit()
    root_ids = [clue] if clue else []
    if cands and (len(cands[0].nodes) == 1 or (not cands[0].nodes and len(cands[0].ranks) == 1)):
        culprit = _culprit(cands[0], topo, findings)  # where it happened is known even when why is not
        registry = {ev.id: ev for f in findings for ev in f.evidence}
        cited = [registry[i] for i in root_ids if i in registry]
        root_ids += [i for i in _support(culprit, cands[0], findings, cited) if i not in root_ids]
    return Diagnosis(
        root_class="unknown",
        summary="Root cause not established: "
        + ("the evidence is not decisive" if cands else "only symptoms were found")
        + (f" (first unexplained error{_when(cands[0].time)}: {cands[0].first.summary})" if cands else ""),
        culprit=culprit,
        time=None,
        confidence=0.2 if cands else 0.1,
        root_evidence=root_ids,
        contributing=[],
        symptoms=_symptoms(groups, exclude=set()),
        hypotheses=hyps,
        timeline=_timeline(None, groups),
        reasoning=reasons,
    )


def _confidence(root: Candidate, others: list[Candidate], pic: Picture, culprit: Culprit) -> float:
    second = max((c.score for c in others), default=0.0)
    conf = 0.5 + min(max(root.score - second, 0.0), 40.0) / 100.0
    if any(r.startswith("corroborated") for r in root.reasons):
        conf += 0.05
    if pic.suspects and (root.ranks & pic.suspect_ranks):
        conf += 0.05
    if root.generic:
        conf = min(conf, 0.6)
    if all(f.source == "telemetry" for f in root.findings):
        conf = min(conf, 0.7)
    if len(root.findings) == 1 and not any(r.startswith("corroborated") for r in root.reasons):
        conf = min(conf, 0.8)
    if root.penalties:
        conf = min(conf, 0.6)
    if root.inferred:
        conf = min(conf, 0.7)  # where the ranks were says they differed; no line says so
    if any(f.signature == "reduce.last_line" for f in root.findings):
        conf = min(conf, 0.7)  # inferred from what a rank did not print: it hung, or died without a word
    return round(min(calibrate(root, conf), 0.95), 2)


def _claim(class_id: str, summary: str, c: Candidate) -> Claim:
    return Claim(
        class_id=class_id,
        summary=summary,
        evidence_ids=[c.first.evidence[0].id],
        count=len(c.findings),
        ranks=sorted(c.ranks),
        nodes=sorted(c.nodes),
        first_time=c.time,
    )


def _symptoms(groups: list[Group], exclude: set[str]) -> list[Claim]:
    """Cascade and teardown groups, merged per class, biggest first."""
    by_class: dict[str, list[Group]] = defaultdict(list)
    for g in groups:
        if g.role in {"cascade", "teardown", "confirmation"} and g.class_id not in exclude:
            by_class[g.class_id].append(g)
    cat = load_catalogue()
    out: list[Claim] = []
    for cls, gs in by_class.items():
        ranks = sorted({r for g in gs for r in g.ranks})
        nodes = sorted({n for g in gs for n in g.nodes})
        count = sum(g.count for g in gs)
        firsts = [g.first_time for g in gs if g.first_time]
        lasts = [g.last_time for g in gs if g.last_time]
        who = _count(len(ranks), "rank") if ranks else _count(len(nodes), "node") if nodes else _count(count, "line")
        span = ""
        if firsts and lasts:
            span = f", {min(firsts):%H:%M:%S}–{max(lasts):%H:%M:%S}"
        what = cat.class_title(cls) if cls != "unknown" else f"“{gs[0].template[:90]}”"
        out.append(
            Claim(
                class_id=cls,
                summary=f"{who}: {what}{span}",
                evidence_ids=[gs[0].exemplar.id],
                count=count,
                ranks=ranks,
                nodes=nodes,
                first_time=min(firsts) if firsts else None,
                last_time=max(lasts) if lasts else None,
            )
        )
    out.sort(key=lambda c: (-c.count, c.class_id))
    return out


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _timeline(root: Candidate | None, groups: list[Group]) -> list[TimelineEntry]:
    entries: list[TimelineEntry] = []
    if root is not None:
        entries.append(
            TimelineEntry(
                time=root.time,
                evidence_id=root.first.evidence[0].id,
                role="root_candidate",
                class_id=root.class_id,
            )
        )
    seen = {e.evidence_id for e in entries}
    for g in groups:
        if g.exemplar.id in seen:
            continue
        seen.add(g.exemplar.id)
        entries.append(TimelineEntry(time=g.first_time, evidence_id=g.exemplar.id, role=g.role, class_id=g.class_id))
    timed = sorted((e for e in entries if e.time is not None), key=lambda e: e.time)  # type: ignore[arg-type, return-value]
    untimed = [e for e in entries if e.time is None]
    return (timed + untimed)[:MAX_TIMELINE]
