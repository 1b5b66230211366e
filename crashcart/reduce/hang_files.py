"""Hang evidence files in the offline reduce: the rank that did not arrive, from Flight Recorder dumps, stack dumps and
NCCL RAS reports (``crashcart.scan.hang_evidence``), and where each rank stopped.

Input: the candidates so far, the findings, the topology. ``add_file_candidates`` makes the files' verdict a candidate
(or the lead of the candidate of its class) whose reasons say what the files showed; a stronger root that names the
same rank (its crash, its Xid) stays the root and gets the files' reasoning as support. ``with_rank_stops`` adds the
last collective each rank entered (per process group) to the diagnosis, for the timeline. Pure.
"""

from __future__ import annotations

from collections import Counter

from crashcart.models import Diagnosis, Finding, RankStop, Topology
from crashcart.reduce.causal import Candidate
from crashcart.scan.hang_evidence.collectives import ranks_text

# a verdict's strength by its source: a dump entry is a fact about the collective, a stack a fact about the process
SCORES = {
    "hang.fr.mismatch": 80.0,
    "hang.fr.straggler": 76.0,
    "hang.fr.missing": 75.0,
    "hang.fr.not_started": 74.0,
    "hang.horovod.mismatch": 78.0,
    "hang.horovod.missing": 72.0,
    "hang.stack.minority": 70.0,
    "hang.stack.all_stuck": 58.0,  # every rank in one blocking wait: where the job hangs, nobody singled out
    "hang.ras.missing": 66.0,
    "hang.ras.behind": 65.0,
    "hang.ras.dead": 64.0,
}
ORDINARY_DISCOUNT = 8.0  # a stack's odd rank in ordinary code (no DataLoader, lock, I/O, generation): stuck or slow?
MECHANISM_MIN = 50.0  # another candidate naming the same rank at least this strong is the mechanism of the hang
MAX_REASONS = 6


def add_file_candidates(cands: list[Candidate], findings: list[Finding], topo: Topology) -> None:
    """The hang files' verdict as a candidate, competing with (or supporting) the others. Edits ``cands``."""
    mine = [f for f in findings if f.signature in SCORES]
    if not mine:
        return
    # the rank that is a culprit in the most groups (its own group's and the groups waiting on it) leads
    blamed = Counter(f.rank for f in mine if f.rank is not None)
    mine.sort(
        key=lambda f: (
            -SCORES[f.signature],
            -blamed[f.rank if f.rank is not None else -1],
            int(f.fields.get("culprits", "1")),  # of the lead rank's groups, the one that blames it alone
            f.rank if f.rank is not None else 1 << 30,
            f.id,
        )
    )
    lead = mine[0]
    reasons = list(dict.fromkeys(f.summary for f in mine))[:MAX_REASONS]
    reasons += [f.summary for f in findings if f.signature == "hang.fr.consistent"][:3]
    missing = _without_dump(findings, topo)
    if missing:
        reasons.append(f"no Flight Recorder dump for rank{'s' if len(missing) > 1 else ''} {ranks_text(missing)}")
    score = SCORES[lead.signature] + min(len({f.signature.split(".")[1] for f in mine}) - 1, 2) * 5.0
    if lead.fields.get("ordinary"):
        score -= ORDINARY_DISCOUNT
    related = [f for f in mine if f.rank == lead.rank or f.rank is None]
    mechanism = [
        c
        for c in cands
        if c.class_id != lead.class_id and c.score >= MECHANISM_MIN and lead.rank is not None and lead.rank in c.ranks
    ]
    if mechanism:
        best = max(mechanism, key=lambda c: c.score)
        best.reasons.extend(f"hang files agree: {r}" for r in reasons[:2])
        best.score = max(best.score, score + 1.0)
        return
    same = next((c for c in cands if c.class_id == lead.class_id), None)
    if same is None:
        same = Candidate(lead.class_id, [], [])
        cands.append(same)
    same.findings = [*related, *(f for f in same.findings if f not in related)]
    same.lead = lead
    same.score = max(same.score, score)
    same.reasons = [*reasons, *same.reasons]
    if lead.fields.get("ordinary"):
        same.penalties.append(
            "the odd rank is in ordinary code, not a blocking wait: one dump cannot tell stuck from slow"
        )


def _without_dump(findings: list[Finding], topo: Topology) -> list[int]:
    """Ranks the job has (topology, or the dumps' own count) that no Flight Recorder dump speaks for."""
    dumped = {f.rank for f in findings if f.signature == "hang.fr.stop" and f.rank is not None}
    if not dumped:
        return []
    expected = set(topo.ranks) | (set(range(topo.world_size)) if topo.world_size else set())
    for f in findings:
        if f.signature.startswith("hang.fr.") and f.fields.get("no_dump"):
            expected |= _expand(f.fields["no_dump"])
    return sorted(expected - dumped)


def _expand(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        if a.isdigit():
            out.update(range(int(a), int(b) + 1) if b.isdigit() else [int(a)])
    return out


def with_rank_stops(diag: Diagnosis, findings: list[Finding], topo: Topology) -> Diagnosis:
    """The diagnosis with where each rank stopped (its last Flight Recorder entry, per process group)."""
    stops = []
    for f in findings:
        if f.signature != "hang.fr.stop" or f.rank is None:
            continue
        node = f.node or (topo.ranks[f.rank].node if f.rank in topo.ranks else None)
        stops.append(
            RankStop(
                rank=f.rank,
                node=node,
                pg=f.fields.get("pg", "?"),
                pg_desc=f.fields.get("pg_desc", ""),
                seq=int(f.fields.get("seq", "-1")),
                op=f.fields.get("op", "?"),
                state=f.fields.get("state", "?"),
                behind=int(f.fields.get("behind", "0")),
                time=f.time,
                evidence_id=f.evidence[0].id,
            )
        )
    if not stops:
        return diag
    stops.sort(key=lambda s: (s.pg, s.rank))
    return diag.model_copy(update={"rank_stops": stops})
