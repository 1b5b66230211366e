"""Cross-rank reasoning over Flight Recorder dumps, per process group.

For each PG: where each rank stopped (the last collective it entered), then the first of:

- *mismatch*: at one ``collective_seq_id`` some ranks entered another ``profiling_name``, ``input_sizes`` or dtypes
  than the rest (the minority is the culprit) -> ``collective_mismatch_desync``;
- *straggler*: one rank entered most of the recent collectives last, well after the others, or is two or more
  collectives behind -> ``straggler_fail_slow``;
- *missing*: ranks that never entered the collective the others wait in (their dump ends one
  ``collective_seq_id`` early) or, with NCCL states, enqueued it but never started it -> ``rank_hang_or_missing_rank``;
- otherwise the PG is consistent (every rank stopped at the same collective): not the stuck one.

Ranks the job has but no dump speaks for are named. Pure.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from statistics import median
from typing import Literal

from crashcart.scan.hang_evidence.fr import Dump, Entry

Kind = Literal["ok", "missing", "mismatch", "straggler", "not_started"]
RECENT = 8  # collectives looked at for arrival order (the most recent ones every rank entered)
LATE_SHARE = 0.75  # a straggler enters at least this share of them last
LATE_MIN_NS = 200_000_000  # ... by a median of at least 0.2 s
LATE_FACTOR = 5.0  # ... and at least this many times the other ranks' median lag

KIND_CLASS: dict[Kind, str] = {
    "missing": "rank_hang_or_missing_rank",
    "not_started": "rank_hang_or_missing_rank",
    "mismatch": "collective_mismatch_desync",
    "straggler": "straggler_fail_slow",
    "ok": "rank_hang_or_missing_rank",
}


@dataclass(frozen=True)
class Stop:
    """Where one rank stopped in one PG."""

    rank: int
    dump: Dump
    entry: Entry | None  # its last collective in the PG; None: it entered none
    behind: int  # collectives behind the furthest rank of the PG


@dataclass
class Verdict:
    pg: str
    desc: str
    kind: Kind
    culprits: list[int]
    others: list[int]  # the ranks that did enter (or agree)
    seq: int | None
    op: str | None
    summary: str
    evidence: list[tuple[Dump, Entry]] = field(default_factory=list)
    time_ns: int | None = None
    stops: list[Stop] = field(default_factory=list)


def ranks_text(ranks: list[int] | set[int]) -> str:
    """``0-2, 4-7`` for [0, 1, 2, 4, 5, 6, 7]."""
    out: list[str] = []
    rs = sorted(ranks)
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}" if j > i + 1 else f"{rs[i]}, {rs[j]}")
        i = j + 1
    return ", ".join(out)


def _word(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ranks_text(ranks)


def _op(e: Entry) -> str:
    """``ALLREDUCE`` for ``nccl:all_reduce``, as c10d names OpTypes."""
    return e.op.split(":", 1)[-1].upper().replace("ALL_", "ALL")


def analyse(dumps: list[Dump]) -> list[Verdict]:
    """One verdict per process group seen in the dumps (dumps without a rank are ignored)."""
    by_rank = {d.rank: d for d in sorted(dumps, key=lambda d: (d.form != "pickle", d.path)) if d.rank is not None}
    pgs: dict[str, str] = {}
    for d in by_rank.values():
        for e in d.entries:
            if not e.p2p:
                pgs.setdefault(e.pg, e.pg_desc)
    out = []
    for pg in sorted(pgs, key=lambda p: (not p.isdigit(), int(p) if p.isdigit() else 0, p)):
        members = _members(pg, by_rank)
        v = _verdict(pg, pgs[pg], {r: by_rank[r] for r in members if r in by_rank})
        if v is not None:
            out.append(v)
    return out


def _members(pg: str, by_rank: dict[int, Dump]) -> list[int]:
    """The PG's ranks: its ``pg_config`` ranks where a dump lists them, else the ranks with entries in it (every
    dumped rank for PG 0, the default group)."""
    listed: set[int] = set()
    for d in by_rank.values():
        listed.update(d.pg_ranks.get(pg, []))
    if listed:
        return sorted(listed)
    if pg == "0":
        return sorted(by_rank)
    return sorted(r for r, d in by_rank.items() if any(e.pg == pg and not e.p2p for e in d.entries))


def _verdict(pg: str, desc: str, dumps: dict[int, Dump]) -> Verdict | None:
    seqs: dict[int, dict[int, Entry]] = {}
    for r, d in dumps.items():
        seqs[r] = {e.seq: e for e in d.entries if e.pg == pg and not e.p2p}
    stops_top = {r: max(s) if s else None for r, s in seqs.items()}
    tops = [t for t in stops_top.values() if t is not None]
    if not tops:
        return None
    top = max(tops)
    stops = [
        Stop(r, dumps[r], seqs[r][t] if t is not None else None, top - t if t is not None else top)
        for r, t in sorted(stops_top.items())
    ]
    name = f"PG {pg}" + (f" ({desc})" if desc and desc != "undefined" else "")
    v = _mismatch(pg, desc, name, seqs, dumps) or _straggler(pg, desc, name, seqs, dumps, top)
    v = v or _missing(pg, desc, name, seqs, dumps, top) or _not_started(pg, desc, name, seqs, dumps, top)
    if v is None:
        e = next(s for s in stops if s.entry is not None).entry
        assert e is not None
        v = Verdict(
            pg,
            desc,
            "ok",
            [],
            sorted(dumps),
            top,
            _op(e),
            f"{name}: {_word(sorted(dumps))} all last entered "
            f"{_op(e)} collective_seq_id {top}; this group is not the stuck one",
        )
        v.evidence = [(dumps[s.rank], s.entry) for s in stops[:1] if s.entry is not None]
    v.stops = stops
    return v


def _signature(e: Entry) -> tuple[str, str, str]:
    return e.op, e.sizes, e.dtypes


def _mismatch(
    pg: str, desc: str, name: str, seqs: dict[int, dict[int, Entry]], dumps: dict[int, Dump]
) -> Verdict | None:
    common = sorted(set.union(*(set(s) for s in seqs.values())))
    for seq in common:
        at = {r: s[seq] for r, s in seqs.items() if seq in s}
        if len(at) < 2:
            continue
        counts = Counter(_signature(e) for e in at.values())
        if len(counts) < 2:
            continue
        (major, n), (_, m) = counts.most_common(2)
        if n == m:  # no majority: every side is suspect
            culprits = sorted(at)
            others: list[int] = []
        else:
            culprits = sorted(r for r, e in at.items() if _signature(e) != major)
            others = sorted(r for r, e in at.items() if _signature(e) == major)
        c0 = at[culprits[0]]
        ref = at[others[0]] if others else at[culprits[-1]]
        what = "profiling_name" if c0.op != ref.op else "input_sizes" if c0.sizes != ref.sizes else "input_dtypes"
        theirs = f"{_op(ref)} input_sizes {ref.sizes}" if others else "something else"
        summary = (
            f"{_word(culprits)} entered {_op(c0)} input_sizes {c0.sizes} at collective_seq_id {seq} of {name}, "
            f"where {_word(others) if others else 'the other rank'} entered {theirs} (different {what})"
        )
        v = Verdict(pg, desc, "mismatch", culprits, others, seq, _op(c0), summary)
        v.evidence = [(dumps[culprits[0]], c0), (dumps[others[0] if others else culprits[-1]], ref)]
        v.time_ns = ref.time_ns
        return v
    return None


def _straggler(
    pg: str, desc: str, name: str, seqs: dict[int, dict[int, Entry]], dumps: dict[int, Dump], top: int
) -> Verdict | None:
    if len(seqs) < 2:
        return None
    full = sorted(set.intersection(*(set(s) for s in seqs.values())))[-RECENT:]
    lags: dict[int, list[int]] = defaultdict(list)
    last_in: Counter[int] = Counter()
    for seq in full:
        times = {r: s[seq].time_ns for r, s in seqs.items()}
        if any(t is None for t in times.values()):
            continue
        first = min(t for t in times.values() if t is not None)
        for r, t in times.items():
            lags[r].append((t or 0) - first)
        last_in[max(times, key=lambda r: times[r] or 0)] += 1
    behind = {r: top - max(s) for r, s in seqs.items() if s}
    far = sorted(r for r, b in behind.items() if b >= 2)
    culprit: int | None = None
    why = ""
    if last_in and full:
        r, n = last_in.most_common(1)[0]
        mine = median(lags[r])
        rest = [median(v) for k, v in lags.items() if k != r] or [0]
        if n >= LATE_SHARE * len(full) and len(full) >= 4 and mine >= LATE_MIN_NS and mine >= LATE_FACTOR * max(rest):
            culprit = r
            why = (
                f"rank {r} entered {n} of the last {len(full)} collectives of {name} last, a median "
                f"{mine / 1e9:.2f} s after the first rank (the others {max(rest) / 1e9:.2f} s)"
            )
    if culprit is None and len(far) == 1 and len(behind) > 2:
        culprit = far[0]
        why = ""
    if culprit is None:
        return None
    mine_top = max(seqs[culprit]) if seqs[culprit] else None
    ahead = sorted(r for r in seqs if r != culprit)
    b = behind.get(culprit, 0)
    tail = (
        f"; it is {b} collective{'s' if b != 1 else ''} behind (last entered collective_seq_id {mine_top}, "
        f"{_word(ahead)} reached {top})"
        if b
        else ""
    )
    if not why:
        why = f"rank {culprit} is {b} collectives behind in {name}"
        tail = f" (last entered collective_seq_id {mine_top}; {_word(ahead)} reached {top})"
    own = seqs[culprit][mine_top] if mine_top is not None else None
    v = Verdict(pg, desc, "straggler", [culprit], ahead, mine_top, _op(own) if own else None, why + tail)
    if own is not None:
        v.evidence.append((dumps[culprit], own))
    wait = _waiting_entry(seqs, dumps, ahead, (mine_top or 0) + 1)
    if wait is not None:
        v.evidence.append(wait)
        v.time_ns = wait[1].time_ns
    return v


def _waiting_entry(
    seqs: dict[int, dict[int, Entry]], dumps: dict[int, Dump], ranks: list[int], seq: int
) -> tuple[Dump, Entry] | None:
    for r in ranks:
        if seq in seqs[r]:
            return dumps[r], seqs[r][seq]
    return None


def _missing(
    pg: str, desc: str, name: str, seqs: dict[int, dict[int, Entry]], dumps: dict[int, Dump], top: int
) -> Verdict | None:
    entered = sorted(r for r, s in seqs.items() if top in s)
    absent = sorted(r for r in seqs if top not in seqs[r])
    if not absent or not entered:
        return None
    ref = seqs[entered[0]][top]
    summary = f"{_word(absent)} never entered {_op(ref)} collective_seq_id {top} of {name}; {_word(entered)} did"
    lasts = {r: max(seqs[r]) if seqs[r] else None for r in absent}
    if any(t is None for t in lasts.values()):
        summary += (
            " (" + ", ".join(f"rank {r} entered no collective of it" for r, t in lasts.items() if t is None) + ")"
        )
    v = Verdict(pg, desc, "missing", absent, entered, top, _op(ref), summary)
    for r in absent[:3]:
        t = lasts[r]
        if t is not None:
            v.evidence.append((dumps[r], seqs[r][t]))
    v.evidence.append((dumps[entered[0]], ref))
    v.time_ns = ref.time_ns
    return v


def _not_started(
    pg: str, desc: str, name: str, seqs: dict[int, dict[int, Entry]], dumps: dict[int, Dump], top: int
) -> Verdict | None:
    """NCCL states: every rank enqueued the last collective, some never started it (their GPU never got there)."""
    at = {r: s[top] for r, s in seqs.items() if top in s}
    started = sorted(r for r, e in at.items() if e.state in {"started", "completed"})
    waiting = sorted(r for r, e in at.items() if e.state == "scheduled")
    if not started or not waiting or len(waiting) >= len(started) + len(waiting):
        return None
    if len(waiting) > len(started):
        return None
    ref = at[started[0]]
    summary = (
        f"{_word(waiting)} enqueued but never started {_op(ref)} collective_seq_id {top} of {name} (state "
        f"scheduled); {_word(started)} started it"
    )
    v = Verdict(pg, desc, "not_started", waiting, started, top, _op(ref), summary)
    v.evidence = [(dumps[waiting[0]], at[waiting[0]]), (dumps[started[0]], ref)]
    v.time_ns = ref.time_ns
    return v
