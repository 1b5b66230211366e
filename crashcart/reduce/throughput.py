"""Throughput per rank and over time: the slow GPU, rank or node (TAXONOMY class 35, ``straggler_fail_slow``).

Input: findings with the throughput facts of ``progress.iteration_time`` (Megatron's iteration line: iteration time,
TFLOP/s per GPU, Megatron-DeepSpeed's samples per second and TFLOPs), ``progress.throughput``,
``progress.rank_throughput`` (DeepSpeed's ThroughputTimer, torchtitan's tps/tflops, HF Trainer's samples per second)
and ``progress.tqdm`` (a bar's rate); topology. Output: scored ``Candidate``s:

- *slow rank*: the same measure printed by several ranks (or nodes, or logs), one of them clearly slower than all
  the others while those agree -> that rank (all ranks of one node slow: that node);
- *throughput drop*: one log's series that steps down (iteration time up) and stays down to its end;
- *socket fallback*: NCCL on one node fell back to TCP sockets while the job's other nodes use InfiniBand;
- *Megatron's straggler detector*: the same rank slowest by far in its last reports (``megatron.straggler_report``).

Every value is turned into "seconds per unit of work" so that higher is slower. Pure.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import median

from crashcart.models import Finding, Topology
from crashcart.reduce.causal import Candidate

SLOW = "straggler_fail_slow"
BASE_SLOW = 40.0  # a throughput drop or a slow rank
OTHER_ERROR_DISCOUNT = 12.0  # the job also failed with an error of its own: the slowness is a lead, not the cause
SLOWER = 1.25  # a rank this much slower than the median of the others ...
AGREE = 1.12  # ... while the others agree within this spread
MIN_KEYS = 3  # ranks (or nodes, or logs) needed to say which one is not like the others
RECENT = 5  # values per rank: its latest, where a straggler shows
STEP_UP = 1.04  # iteration time up by 4 % or more ...
MIN_SIDE = 2  # ... over at least two iterations on each side of the change

# (signature, field, unit): "s" is seconds per unit already (higher is slower), "ms" milliseconds, "rate" per second
_MEASURES: tuple[tuple[str, str, str, str], ...] = (
    ("progress.iteration_time", "iter_time", "time", "iteration time"),
    ("progress.iteration_time", "gpu_tflops", "rate", "TFLOP/s per GPU"),
    ("progress.iteration_time", "samples_per_s", "rate", "samples per second"),
    ("progress.iteration_time", "tflops", "rate", "TFLOPs"),
    ("progress.throughput", "samples_per_s", "rate", "samples per second"),
    ("progress.throughput", "tflops", "rate", "TFLOPs"),
    ("progress.rank_throughput", "ds_samples_per_s", "rate", "samples per second"),
    ("progress.rank_throughput", "tps", "rate", "tokens per second"),
    ("progress.rank_throughput", "tt_tflops", "rate", "TFLOPs"),
    ("progress.rank_throughput", "hf_samples_per_s", "rate", "samples per second"),
)
_MEASURED = frozenset(sig for sig, _, _, _ in _MEASURES) | {"progress.tqdm"}  # signatures points() reads
_BY_SIGNATURE = {sig: tuple((f, k, m) for s, f, k, m in _MEASURES if s == sig) for sig in _MEASURED}


@dataclass(frozen=True)
class Point:
    finding: Finding
    cost: float  # seconds per unit of work: higher is slower
    measure: str


def _float(v: str) -> float | None:
    if not v:  # most fields are absent
        return None
    try:
        x = float(v.replace(",", ""))
    except ValueError:
        return None
    return x if x > 0 else None


def points(f: Finding) -> list[Point]:
    """The throughput values a finding carries, each as a cost (higher is slower)."""
    out: list[Point] = []
    measures = _BY_SIGNATURE.get(f.signature)
    if measures is None:  # most findings: not a throughput line
        return out
    for field, kind, measure in measures:
        if not (v := _float(f.fields.get(field, ""))):
            continue
        if kind == "time":
            out.append(Point(f, v / 1000.0 if f.fields.get("unit") == "ms" else v, measure))
        else:
            out.append(Point(f, 1.0 / v, measure))
    if f.signature == "progress.tqdm" and (v := _float(f.fields.get("rate", ""))):
        unit = f.fields.get("rate_unit", "").strip()
        cost = v if unit.startswith("s/") else 1.0 / v
        out.append(Point(f, cost, "progress-bar rate " + (f.fields.get("total") or "")))
    return out


def _key(f: Finding) -> tuple[str, str] | None:
    if f.rank is not None:
        return "rank", str(f.rank)
    if f.node:
        return "node", f.node
    return "log", f.evidence[0].file


# ---------------------------------------------------------------------------------------------
# One rank slower than the others


def slow_rank(findings: list[Finding], topo: Topology) -> Candidate | None:
    """One rank (or node, or log) clearly slower than the others on the same measure."""
    by_measure: dict[str, dict[tuple[str, str], list[Point]]] = defaultdict(lambda: defaultdict(list))
    for f in findings:
        pts = points(f)
        if not pts:
            continue
        key = _key(f)
        if key is None:
            continue
        for p in pts:
            by_measure[p.measure][key].append(p)
    best: tuple[float, Candidate] | None = None
    for measure, per_key in sorted(by_measure.items()):
        if len({k[0] for k in per_key}) != 1:
            continue  # ranks mixed with logs: not one population
        found = _odd_one(per_key) or _odd_one(_by_node(per_key, topo))  # one rank, or all ranks of one node
        if found is None:
            continue
        key, ratio, pts = found
        c = _slow_candidate(measure, key, ratio, pts, topo)
        if best is None or ratio > best[0]:
            best = (ratio, c)
    return best[1] if best is not None else None


def _by_node(per_key: dict[tuple[str, str], list[Point]], topo: Topology) -> dict[tuple[str, str], list[Point]]:
    """The ranks' points pooled per node (empty unless every rank's node is known)."""
    out: dict[tuple[str, str], list[Point]] = defaultdict(list)
    for (kind, name), pts in per_key.items():
        node = topo.ranks[int(name)].node if kind == "rank" and name.isdigit() and int(name) in topo.ranks else None
        if node is None:
            return {}
        out[("node", node)].extend(pts)
    return out


def _odd_one(per_key: dict[tuple[str, str], list[Point]]) -> tuple[tuple[str, str], float, list[Point]] | None:
    if len(per_key) < MIN_KEYS:
        return None
    recent = {}
    for k, pts in per_key.items():
        pts.sort(key=lambda p: (p.finding.evidence[0].file, p.finding.evidence[0].line))
        recent[k] = median(p.cost for p in pts[-RECENT:])
    worst = max(recent, key=lambda k: (recent[k], k))
    others = [v for k, v in recent.items() if k != worst]
    if max(others) > AGREE * min(others):
        return None  # the others disagree among themselves: no single odd one
    ratio = recent[worst] / median(others)
    if ratio < SLOWER:
        return None
    return worst, ratio, per_key[worst]


def _slow_candidate(measure: str, key: tuple[str, str], ratio: float, pts: list[Point], topo: Topology) -> Candidate:
    kind, name = key
    who = f"{kind} {name}"
    if kind == "rank" and name.isdigit() and int(name) in topo.ranks and (node := topo.ranks[int(name)].node):
        who += f" on {node}"
    last = pts[-1].finding
    summary = f"{who} is {(ratio - 1) * 100:.0f} % slower than the others ({measure})"
    lead = last.model_copy(update={"class_id": SLOW, "role": "root_candidate", "severity": "P1", "summary": summary})
    c = Candidate(SLOW, [lead], [])
    c.lead = lead
    c.score = BASE_SLOW
    c.reasons.append(f"{summary}, while the others agree: one slow GPU, link or node holds back every synchronous step")
    c.penalties.append("inferred from throughput numbers, not from a line that names a fault")
    return c


# ---------------------------------------------------------------------------------------------
# A drop over time


def throughput_drop(findings: list[Finding]) -> Candidate | None:
    """Iteration times of one log that step up and stay up to its end (a GPU or node that turned slow)."""
    series: dict[tuple[str, int | None, str], list[tuple[int, float, Finding]]] = defaultdict(list)
    for f in findings:
        for p in points(f):
            if p.measure.startswith("progress-bar"):
                continue  # a bar's rate is a moving average over its own work, not one iteration's
            series[(f.evidence[0].file, f.rank, p.measure)].append((f.evidence[0].line, p.cost, f))
    best: tuple[float, list[Finding], float, float, str] | None = None
    for (_, _, measure), pts in sorted(series.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1, kv[0][2])):
        pts.sort(key=lambda p: p[0])
        if _batch_changes(pts):
            continue  # a batch-size ramp-up makes iterations longer by design
        values = [p[1] for p in pts]
        found = step_up(values)
        if found is None:
            continue
        k, ratio = found
        if best is None or ratio > best[0]:
            best = (ratio, [pts[k][2], pts[-1][2]], median(values[:k]), median(values[k:]), measure)
    if best is None:
        return None
    ratio, cited, before, after, measure = best
    if measure == "iteration time":
        what = f"iterations slowed from {before:.3g} s to {after:.3g} s ({(ratio - 1) * 100:.0f} % slower)"
    else:
        what = f"{measure} fell from {1 / before:.3g} to {1 / after:.3g} ({(1 - 1 / ratio) * 100:.0f} % lower)"
    lead = _as_root(cited[0], what)
    rest = [_as_root(f, "still slow at the end of the log") for f in cited[1:] if f.id != cited[0].id]
    c = Candidate(SLOW, [lead, *rest], [])
    c.lead = lead
    c.score = BASE_SLOW
    c.reasons.append(
        f"{measure} stepped {(ratio - 1) * 100:.0f} % worse and stayed there: one slow GPU, link or node holds back "
        "every synchronous step"
    )
    c.penalties.append("the log does not say which GPU or node is slow")
    return c


def _as_root(f: Finding, summary: str) -> Finding:
    return f.model_copy(update={"class_id": SLOW, "role": "root_candidate", "severity": "P1", "summary": summary})


def step_up(values: list[float]) -> tuple[int, float] | None:
    """The first index after which a series stays up (every later value above all but a tenth of the earlier ones,
    the medians at least ``STEP_UP`` apart) and the ratio of the medians after and before, or None."""
    n = len(values)
    for k in range(MIN_SIDE, n - MIN_SIDE + 1):
        pre, post = values[:k], values[k:]
        base = median(pre)
        ratio = median(post) / base
        if ratio < STEP_UP or min(post) < base * (1 + (STEP_UP - 1) / 2):
            continue
        above = sum(1 for v in pre if v >= min(post))
        if above * 10 > len(pre):
            continue
        return k, ratio  # the first point after which the series stays up
    return None


def _batch_changes(pts: list[tuple[int, float, Finding]]) -> bool:
    sizes = {p[2].fields.get("batch") for p in pts} - {None, ""}
    return len(sizes) > 1


# ---------------------------------------------------------------------------------------------
# A node on sockets among nodes on InfiniBand


def _host(f: Finding) -> str | None:
    return f.node or f.fields.get("host") or None


def socket_fallback(findings: list[Finding]) -> Candidate | None:
    """Nodes where NCCL fell back to TCP sockets while the job's other nodes use InfiniBand (NCCL's "NET/IB :
    Using [0]mlx5_0:1/IB ..."): every collective through them runs at socket speed. On a cluster without IB
    every node prints the fallback, and that is no fault."""
    ib = {
        h
        for f in findings
        if f.signature == "nccl.interface_in_use" and f.fields.get("via") == "NET/IB"
        for h in [_host(f)]
        if h
    }
    fell: dict[str, Finding] = {}
    fallbacks = [f for f in findings if f.signature == "nccl.socket_fallback"]
    for f in sorted(fallbacks, key=lambda f: (f.evidence[0].file, f.evidence[0].line)):
        if (h := _host(f)) and h not in ib:
            fell.setdefault(h, f)
    if not ib or not fell or len(fell) > max(1, len(ib) // 3):
        return None
    nodes = ", ".join(sorted(fell))
    summary = f"NCCL on {nodes} fell back to TCP sockets while {len(ib)} other node(s) use InfiniBand"
    cited = [_as_root(f, summary) for _, f in sorted(fell.items())]
    c = Candidate(SLOW, cited, [])
    c.lead = cited[0]
    c.score = BASE_SLOW
    c.reasons.append(summary + ": every collective through that node runs at socket speed (check its IB devices)")
    c.penalties.append("slowness inferred from the transport NCCL chose, not measured")
    return c


# ---------------------------------------------------------------------------------------------
# Megatron's straggler detector


REPORTS = 3  # the last reports of Megatron's StragglerDetector looked at (two at least, the latest among them)
RTT_SLOWER = 1.25  # the slowest rank's round trip this much over the fastest's, in each of them


def megatron_straggler(findings: list[Finding]) -> Candidate | None:
    """Megatron's StragglerDetector (megatron/core/utils.py) reports, at every log interval, the fastest and the
    slowest rank's round-trip time (``MnRtt/Rnk``, ``MxRtt/Rnk``): the same rank slowest by a wide margin in each
    of the last reports is a straggler."""
    reports = sorted(
        (f for f in findings if f.signature == "megatron.straggler_report"),
        key=lambda f: (f.evidence[0].file, f.evidence[0].line),
    )
    run: list[tuple[Finding, float]] = []  # the latest reports, back to the first that is not slow or names another
    for f in reversed(reports):
        lo, hi = _float(f.fields.get("min_rtt", "")), _float(f.fields.get("max_rtt", ""))
        rank = f.fields.get("max_rank", "")
        if lo is None or hi is None or hi < RTT_SLOWER * lo or (run and rank != run[0][0].fields.get("max_rank")):
            break
        run.append((f, hi / lo))
        if len(run) == REPORTS:
            break
    if len(run) < 2 or not (rank := run[0][0].fields.get("max_rank", "")).isdigit():
        return None
    reports = [f for f, _ in reversed(run)]
    ratios = [r for _, r in run]
    last = reports[-1]
    summary = (
        f"rank {rank} is the slowest in the last {len(reports)} straggler reports, its round trip "
        f"{min(ratios):.1f}-{max(ratios):.1f}x the fastest rank's (Megatron's straggler detector)"
    )
    lead = last.model_copy(
        update={"class_id": SLOW, "role": "root_candidate", "severity": "P1", "summary": summary, "rank": int(rank)}
    )
    c = Candidate(SLOW, [lead], [])
    c.lead = lead
    c.score = BASE_SLOW + 4.0  # measured per rank by the job itself
    c.reasons.append(summary + ": one slow GPU or link holds back every synchronous step")
    return c


def slow_candidates(findings: list[Finding], topo: Topology, other_errors: bool) -> list[Candidate]:
    """The slow-rank, throughput-drop, socket-fallback and Megatron straggler-report candidates; weaker when the job
    also failed with an error of its own."""
    measured = [f for f in findings if f.signature in _MEASURED]  # the only findings the first two read
    found = (
        slow_rank(measured, topo),
        throughput_drop(measured),
        socket_fallback(findings),
        megatron_straggler(findings),
    )
    out = [c for c in found if c is not None]
    for c in out:
        if other_errors:
            c.score -= OTHER_ERROR_DISCOUNT
            c.penalties.append("the job also failed with an error of its own")
    return out
