"""Causal signals for the offline reduce: the watchdog picture, odd ranks, and candidate scores.

Input: groups, findings, topology, each rank's last line. Output: ``Picture`` (cascade timing and
the ranks that are not like the others) and scored ``Candidate``s, following TAXONOMY.md §1: look
back by the timeout, find the odd rank, hardware beats software, teardown never wins. Pure.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from crashcart.catalogue import TERMINATE_WHAT_LINES, load_catalogue
from crashcart.models import Culprit, Finding, Group, RankLast, Topology
from crashcart.reduce.desync import odd_fingerprints, odd_sites, odd_sizes
from crashcart.text import prefix

SEVERITY_WEIGHT = {"P0": 50.0, "P1": 38.0, "P2": 38.0, "P3": 32.0, "info": 8.0}
GENERIC_WEIGHT = {"unknown": 8.0, "python_exception_rank_crash": 34.0}
WATCHDOG_CLASSES = {"nccl_watchdog_timeout"}  # every backend's "a collective did not complete" (NCCL, gloo)
PEER_CLASSES = {"nccl_remote_peer_failure"}  # "my peer went away" (NCCL remote error, gloo closed/reset)
RECOVERY_GAP = timedelta(minutes=2)
SLOW_CLASSES = frozenset(  # where a rank is expected to keep running after the cause
    {
        "gpu_thermal_power_throttling",
        "straggler_fail_slow",
        "loss_spike_divergence",
        "fp16_loss_scale_overflow",
        "nan_inf_loss_or_grad",
        "silent_data_corruption_suspect",
        "ib_port_error_link_flap",
        "pcie_aer_error",
    }
)
CONFIRMATION_DISCOUNT = 8.0
RECOVERED_CAP = 15.0
HARDWARE_WINDOW = timedelta(minutes=30)
SLACK = timedelta(seconds=10)  # a root and the first symptoms often share a second
INHERITED_SLACK = timedelta(minutes=2)  # a time taken from an earlier line is only a lower bound


@dataclass
class Picture:
    first_cascade: datetime | None = None
    cascade_time_inherited: bool = False  # only lower bounds: lines without a clock of their own
    lookback_start: datetime | None = None  # when the timed-out collective started (rule 1)
    timeout_ms: int | None = None
    timed_out: set[int] = field(default_factory=set)
    suspects: dict[int, str] = field(default_factory=dict)  # rank -> why it is not like the others
    suspect_kind: str | None = None  # "missing", "lagging", "desync"
    suspects_inferred: bool = False  # read from where ranks were, not from a line that says they differ
    notes: list[str] = field(default_factory=list)

    @property
    def suspect_ranks(self) -> set[int]:
        return set(self.suspects)


@dataclass
class Candidate:
    class_id: str
    findings: list[Finding]
    groups: list[Group]
    score: float = 0.0
    reasons: list[str] = field(default_factory=list)
    penalties: list[str] = field(default_factory=list)
    lead: Finding | None = None  # the finding that speaks for the candidate, when not simply the first
    where: Culprit | None = None  # the place the evidence as a whole names, over the first finding's (host.py)
    inferred: bool = False  # read from where ranks were (their call sites), not from a line that says so
    class_severity: str = field(init=False)  # the taxonomy's severity of the class (facts speak for the class)

    def __post_init__(self) -> None:
        info = load_catalogue().classes.get(self.class_id)
        self.class_severity = info.severity if info is not None else "info"

    @property
    def first(self) -> Finding:
        if self.lead is not None:
            return self.lead
        timed = [f for f in self.findings if f.time is not None]
        if timed:
            return min(timed, key=lambda f: (f.time, f.evidence[0].file, f.evidence[0].line))
        return min(self.findings, key=lambda f: (f.evidence[0].file, f.evidence[0].line))

    @property
    def time(self) -> datetime | None:
        return self.first.time

    @property
    def nodes(self) -> set[str]:
        return {f.node for f in self.findings if f.node}

    @property
    def ranks(self) -> set[int]:
        return {f.rank for f in self.findings if f.rank is not None}

    @property
    def severity(self) -> str:
        if self.first.role != "context":
            return self.first.severity
        return self.class_severity

    @property
    def generic(self) -> bool:
        return self.class_id == "unknown" or all(f.signature.startswith("generic.") for f in self.findings)


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def own_time(f: Finding) -> datetime | None:
    """The finding's time when its own line carries it (not inherited from an earlier line)."""
    return f.time if "_time" not in f.fields else None


def picture(findings: list[Finding], topo: Topology) -> Picture:
    """The cascade: when symptoms started, what the timeout says, and which ranks are odd."""
    pic = Picture()
    own: list[datetime] = []
    inherited: list[datetime] = []
    wd: list[Finding] = []
    peers: list[Finding] = []
    desync: list[Finding] = []
    for f in findings:  # one pass over the findings for every list below
        if f.role == "cascade" and f.time is not None:
            inherited.append(f.time)
            if "_time" not in f.fields:
                own.append(f.time)
        if f.class_id in WATCHDOG_CLASSES:
            wd.append(f)
        if f.class_id in PEER_CLASSES and f.role == "cascade":
            peers.append(f)
        if f.class_id == "collective_mismatch_desync":
            desync.append(f)
    pic.first_cascade = min(own) if own else min(inherited) if inherited else None
    pic.cascade_time_inherited = not own
    pic.timed_out = {f.rank for f in wd if f.rank is not None}
    ran = [_int(f.fields.get("ran_ms")) or _int(f.fields.get("timeout_ms")) for f in wd]
    ran_ms = [r for r in ran if r]
    timed_wd = [f.time for f in wd if f.time is not None]
    if ran_ms and timed_wd:
        pic.timeout_ms = Counter(ran_ms).most_common(1)[0][0]
        pic.lookback_start = min(timed_wd) - timedelta(milliseconds=pic.timeout_ms)
        pic.notes.append(
            f"watchdog fired after {pic.timeout_ms / 1000:.0f} s, so the collective started near "
            f"{pic.lookback_start:%H:%M:%S}; looked there first"
        )
    if not wd and not peers and not desync:
        return pic
    known = set(topo.ranks)
    world = topo.world_size or (max(known) + 1 if known else 0)
    if wd and world and len(pic.timed_out) >= max(1, world // 2) and len(pic.timed_out) < world:
        missing = {r for r in range(world) if r not in pic.timed_out}
        if missing and len(missing) <= max(1, world // 4):
            pic.suspects = {r: "did not arrive at the collective the others timed out in" for r in sorted(missing)}
            pic.suspect_kind = "missing"
    lost_peer = {f.rank for f in peers if f.rank is not None}
    if not pic.suspects and world and lost_peer and len(lost_peer) >= max(1, world // 2):
        gone = {r for r in range(world) if r not in lost_peer}
        if gone and len(gone) <= max(1, world // 4):  # the peer the others lost is the one that went away
            pic.suspects = {r: "is the peer the other ranks lost their connection to" for r in sorted(gone)}
            pic.suspect_kind = "peer"
    seqs = _per_rank(wd, "seq")
    dones = _per_rank(wd, "done")
    ops = {f.rank: f.fields["op"] for f in [*wd, *desync] if f.rank is not None and f.fields.get("op")}
    if len(set(ops.values())) > 1:
        common, _ = Counter(ops.values()).most_common(1)[0]
        odd = {r: f"waits in {op} while the others wait in {common}" for r, op in ops.items() if op != common}
        if odd and len(odd) < len(ops):
            pic.suspects.update(odd)
            pic.suspect_kind = "desync"
    if pic.suspect_kind != "desync" and (odd := odd_sizes(wd) or odd_fingerprints(desync)):
        pic.suspects.update(odd)
        pic.suspect_kind = "desync"
    if pic.suspect_kind != "desync" and (odd := odd_sites(wd)):
        pic.suspects.update(odd)
        pic.suspect_kind, pic.suspects_inferred = "desync", True
    for name, values in (("last completed work", dones), ("SeqNum", seqs)):
        if len(set(values.values())) > 1 and pic.suspect_kind != "desync":
            usual, _ = Counter(values.values()).most_common(1)[0]
            low = {r: f"{name} {v} behind the others' {usual}" for r, v in values.items() if v < usual}
            if low and len(low) < len(values) / 2:
                pic.suspects.update(low)
                pic.suspect_kind = pic.suspect_kind or "lagging"
    return pic


def _per_rank(findings: list[Finding], key: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for f in findings:
        v = _int(f.fields.get(key))
        if f.rank is not None and v is not None:
            out[f.rank] = min(v, out.get(f.rank, v))
    return out


SEVERITY_ORDER = {"P0": 4, "P1": 3, "P2": 3, "P3": 2, "info": 1}

# The abort a process performs on itself after a collective failed: ProcessGroupNCCL's watchdog rethrows the
# timeout/NCCL error on its own thread (c10d ProcessGroupNCCL.cpp, "To avoid data inconsistency, we are taking
# the entire process down."), so libstdc++ prints "terminate called after throwing an instance of ...",
# then "what(): <the watchdog message>", the shell "Aborted (core dumped)", torchrun "exitcode -6 (SIGABRT)".
ABORT_SIGNATURES = frozenset(
    {
        "native.terminate_called",
        "native.abort",
        "native.sigabrt_received",
        "torchrun.exitcode_abort",
        "native.fatal_python_error",
        "native.glog_failure_signal",
        "nccl.terminate_dist_error",
    }
)
COLLECTIVE_SYMPTOMS = WATCHDOG_CLASSES | PEER_CLASSES | {"nccl_watchdog_stuck_heartbeat"}
ABORT_BEFORE = 40  # lines: how far above an abort its collective failure may be printed
ABORT_AFTER = TERMINATE_WHAT_LINES  # lines: "what():" follows "terminate called"


def _is_abort(f: Finding) -> bool:
    if f.signature not in ABORT_SIGNATURES:
        return False
    reason = f.fields.get("reason", "")
    return f.signature not in {"native.fatal_python_error", "native.glog_failure_signal"} or reason in {
        "Aborted",
        "SIGABRT",
        "",
    }


# rules, Python 3.11's caret lines under a traceback frame, torchrun's "[2]:" failure index: no words, no error
_SEPARATOR = re.compile(r"[^A-Za-z]*")
SUMMARY_SPAN = 120  # lines: torchrun's error summary after its "Root Cause"/ChildFailedError line


def _summary_reprints(findings: list[Finding]) -> dict[str, str]:
    """Generic findings inside torchrun's failure summary that copy a worker's error shown elsewhere
    (torch/distributed/elastic/multiprocessing/errors: the summary prints each failure's error_file
    traceback), and generic "exceptions" whose line is only a separator rule."""
    heads: dict[str, list[int]] = defaultdict(list)
    for f in findings:
        if f.signature in {"torchrun.root_cause", "torchrun.child_failed_error"}:
            heads[f.evidence[0].file].append(f.evidence[0].line)
    out: dict[str, str] = {}
    for f in findings:
        if f.signature.startswith("generic.") and _SEPARATOR.fullmatch(_last_text(f)):
            out[f.id] = "a separator line, not an error"
    if not heads:  # no failure summary in the bundle
        return out
    inside: list[Finding] = []
    outside: list[Finding] = []
    for f in findings:
        ev = f.evidence[0]
        end = ev.end_line or ev.line
        near = heads.get(ev.file)
        if near and any(0 < ev.line - h <= SUMMARY_SPAN or 0 < end - h <= SUMMARY_SPAN for h in near):
            inside.append(f)
        elif f.role != "context":
            outside.append(f)
    inside = [f for f in inside if f.role != "context" and not f.signature.startswith("torchrun.")]
    if not inside:  # no summary holds an error: what the others say is not needed
        return out
    elsewhere: set[str] = set()
    for f in outside:
        elsewhere.add(_last_text(f))
        if f.fields.get("message"):
            elsewhere.add(f.fields["message"].strip())
    said = elsewhere - {""}
    for f in inside:
        if _last_text(f) in elsewhere or f.fields.get("message", "").strip() in said:
            out.setdefault(f.id, "torchrun's failure summary re-printing a worker's error")
    return out


def _last_text(f: Finding) -> str:
    """The finding's last line without launcher prefixes and surrounding blanks."""
    return prefix.view(f.evidence[-1].text.rsplit("\n", 1)[-1]).rest.strip()


def _what_lines(findings: list[Finding]) -> dict[str, set[int]]:
    """File -> lines of specific root-candidate errors: libstdc++'s ``__verbose_terminate_handler``
    (vterminate.cc) prints "terminate called after throwing an instance of 'T'" and then the exception's
    own ``what()`` on the next line, so an error found there is what the process died of."""
    out: dict[str, set[int]] = defaultdict(set)
    for f in findings:
        if f.role == "root_candidate" and f.class_id not in _NOT_CARRIED and not f.signature.startswith("generic."):
            out[f.evidence[0].file].add(f.evidence[0].line)
    return out


_NOT_CARRIED = frozenset({"native_crash_segfault_abort", "unknown", "python_exception_rank_crash"})


def teardown_aborts(findings: list[Finding]) -> dict[str, str]:
    """Finding id -> why: aborts that are a collective failure taking its own process down (TAXONOMY §1
    rule 5). A rank's abort after its own watchdog timeout or peer loss is a consequence, never a root."""
    symptoms: dict[str, list[tuple[int, int | None]]] = defaultdict(list)
    symptom_ranks: set[int] = set()
    for f in findings:
        if f.class_id in COLLECTIVE_SYMPTOMS and f.role in {"cascade", "root_candidate"}:
            symptoms[f.evidence[0].file].append((f.evidence[0].line, f.rank))
            if f.rank is not None:
                symptom_ranks.add(f.rank)
    out: dict[str, str] = _summary_reprints(findings)
    carried = _what_lines(findings)
    for f in findings:
        if f.signature not in ABORT_SIGNATURES or not _is_abort(f):
            continue
        ev = f.evidence[0]
        if f.signature == "native.terminate_called" and any(0 < n - ev.line <= ABORT_AFTER for n in carried[ev.file]):
            out[f.id] = "the C++ terminate handler printing the error its what() line names"
            continue
        near = [
            (n, r)
            for n, r in symptoms.get(ev.file, [])
            if -ABORT_BEFORE <= n - ev.line <= ABORT_AFTER and (r is None or f.rank is None or r == f.rank)
        ]
        if near:
            out[f.id] = "the process aborting itself after its collective failed (printed next to it)"
        elif f.rank is not None and f.rank in symptom_ranks and f.signature.startswith(("torchrun.", "native.sig")):
            out[f.id] = f"rank {f.rank} reported a collective failure before it aborted"
    return out


def candidates(groups: list[Group], findings: list[Finding]) -> list[Candidate]:
    """Root-candidate groups merged by class (the same fault worded twice is one candidate).

    Within a class only the strongest findings (severity, then signature priority) speak for it, so a
    benign early warning of the same class (an fp16 overflow skip) does not stand in for the fatal one.
    """
    cat = load_catalogue()
    consequence = teardown_aborts(findings)
    by_id = {f.id: f for f in findings if f.id not in consequence}
    by_class: dict[str, Candidate] = {}
    for g in groups:
        if g.role not in {"root_candidate", "confirmation"} and g.class_id != "nccl_watchdog_stuck_heartbeat":
            continue
        members = [by_id[i] for i in g.finding_ids if i in by_id]
        if not members:
            continue  # every line of the group is teardown
        c = by_class.setdefault(g.class_id, Candidate(g.class_id, [], []))
        c.groups.append(g)
        c.findings.extend(members)

    def strength(f: Finding) -> tuple[int, int]:
        idx = cat.index.get(f.signature)
        return SEVERITY_ORDER.get(f.severity, 0), cat.signatures[idx].priority if idx is not None else 50

    for c in by_class.values():
        top = max(strength(f) for f in c.findings)
        c.findings = [f for f in c.findings if strength(f) == top]
    return list(by_class.values())


def score(
    c: Candidate,
    pic: Picture,
    topo: Topology,
    findings: list[Finding],
    last: dict[int, RankLast],
    earliest: datetime | None,
) -> None:
    """Set ``c.score`` with the reasons; deterministic and explainable."""
    base = GENERIC_WEIGHT.get(c.class_id) if c.generic else None
    c.score = base if base is not None else SEVERITY_WEIGHT.get(c.severity, 8.0)
    c.reasons.append(f"{c.severity} class")
    if all(f.role == "confirmation" for f in c.findings):
        c.score -= CONFIRMATION_DISCOUNT
        c.reasons.append("usually confirms another cause")
    n_nodes = len(topo.nodes) or 1
    world = topo.world_size or 0
    nodes, ranks, t = c.nodes, c.ranks, c.time
    if nodes and n_nodes >= 2 and len(nodes) <= max(1, n_nodes // 3):
        c.score += 12
        c.reasons.append(f"specific to {', '.join(sorted(nodes))}")
    if world > 2 and len(ranks) >= 0.75 * world:
        c.score -= 8
        c.penalties.append(f"seen on {len(ranks)} of {world} ranks")
    suspect_nodes = {topo.ranks[r].node for r in pic.suspects if r in topo.ranks and topo.ranks[r].node}
    # a node's event points at the odd rank only when that rank's node is not every node of the job
    singles_out = suspect_nodes and not set(topo.nodes) <= suspect_nodes
    if ranks & pic.suspect_ranks or (not ranks and nodes and singles_out and nodes <= suspect_nodes):
        c.score += 25
        c.reasons.append("on the rank that is not like the others")
    if t is not None and pic.first_cascade is not None:
        inherited = "_time" in c.first.fields or pic.cascade_time_inherited
        if t <= pic.first_cascade + (INHERITED_SLACK if inherited else SLACK):
            c.score += 8
            c.reasons.append("before the first symptom")
        else:
            c.score -= 30
            c.penalties.append(f"after the first symptom ({pic.first_cascade:%H:%M:%S})")
    if t is not None and pic.lookback_start is not None and pic.timeout_ms:
        margin = timedelta(milliseconds=max(120_000, pic.timeout_ms // 10))
        if abs(t - pic.lookback_start) <= margin:
            c.score += 10
            c.reasons.append("when the timed-out collective started")
    if t is not None and earliest is not None and t == earliest and "_time" not in c.first.fields:
        c.score += 6
        c.reasons.append("earliest candidate")
    if _downstream(c, findings):
        c.score -= 35
        c.penalties.append("printed after its own rank already reported a symptom")
    kinds = _corroborating_kinds(c, findings)
    if len(kinds) > 1:
        c.score += 4 * (len(kinds) - 1)
        c.reasons.append("corroborated by " + ", ".join(sorted(kinds)))
    from_rank_logs = all(_source_of(f) == "rank logs" for f in c.findings) and c.class_id not in SLOW_CLASSES
    if t is not None and ranks and from_rank_logs:
        alive = [r for r in ranks if (rl := last.get(r)) and rl.time and rl.time - t > RECOVERY_GAP]
        if alive and len(alive) == len(ranks) and c.severity != "P0":
            c.score = min(c.score - 60, RECOVERED_CAP)  # a recovered error explains no failure
            c.penalties.append("the rank kept running long after it (recovered)")


def _downstream(c: Candidate, findings: list[Finding]) -> bool:
    """Most findings of ``c`` come after a symptom line of the same rank in the same file."""
    first_symptom: dict[tuple[str, int | None], int] = {}
    own = {f.id for f in c.findings}
    for f in findings:
        if f.role not in {"cascade", "teardown"}:
            continue
        if f.class_id == "torchelastic_childfailed_summary" or f.signature.startswith("torchrun."):
            continue  # the launcher's lines about a rank are not the rank reporting a symptom
        if f.id not in own and f.rank is not None:
            key = (f.evidence[0].file, f.rank)
            first_symptom[key] = min(first_symptom.get(key, f.evidence[0].line), f.evidence[0].line)
    after = 0
    for f in c.findings:
        line = first_symptom.get((f.evidence[0].file, f.rank))
        if line is not None and line < f.evidence[0].line:
            after += 1
    return bool(c.findings) and after >= 0.75 * len(c.findings)


def _corroborating_kinds(c: Candidate, findings: list[Finding]) -> set[str]:
    """Sources (kernel/rank/scheduler/telemetry) with non-context findings on the candidate's node(s)."""
    nodes = c.nodes
    if not nodes:
        return set()
    kinds: set[str] = set()
    for f in findings:
        if f.role == "context" or f.node not in nodes:
            continue
        kinds.add(_source_of(f))
    return kinds


def _source_of(f: Finding) -> str:
    if f.source == "telemetry":
        return "telemetry"
    if f.signature.startswith(("kernel.", "xid", "dmesg")) or f.class_id in {
        "gpu_fallen_off_bus",
        "gpu_memory_ecc_uncorrectable",
        "pcie_aer_error",
        "host_oom_kill",
    }:
        return "kernel"
    if f.signature.startswith(("slurm.", "sacct.", "k8s.", "scheduler.")):
        return "scheduler"
    return "rank logs"


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:4])


def versions(findings: list[Finding]) -> tuple[str, dict[str, str], list[Finding]] | None:
    """A version that differs across hosts of one job (TAXONOMY class 36 rule), if any.

    The odd host is the one in the minority; on a tie, the one with the older version (a node that
    missed an upgrade is the usual story).
    """
    keys = ("nccl_version", "driver_version", "cuda_driver_version", "cuda_version")
    hosts: dict[str, dict[str, dict[str, Finding]]] = {key: defaultdict(dict) for key in keys}
    for f in findings:  # one pass for every key
        if f.role != "context" or not f.node:
            continue
        for key in keys:
            if v := f.fields.get(key):
                hosts[key][f.node].setdefault(v, f)
    for key in keys:
        per_host = hosts[key]
        single = {h: next(iter(vs)) for h, vs in per_host.items() if len(vs) == 1}
        values = Counter(single.values())
        if len(values) > 1 and len(per_host) > 1:
            common = max(values, key=lambda v: (values[v], _version_key(v)))
            odd = {h: v for h, v in single.items() if v != common}
            evidence = [per_host[h][v] for h, v in sorted(odd.items())]
            normal = next(f for vs in per_host.values() for v, f in vs.items() if v == common)
            return key, odd, [*evidence, normal]
    return None
