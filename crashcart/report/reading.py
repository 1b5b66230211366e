"""Report stage: how the report reads a diagnosis: which times it trusts, what each group is, the impact.

Input: the diagnosis's claims and the findings behind them. Output: a ``Reading`` (trusted times per
evidence id and per symptom class, a kind per claim) and the ``DocImpact`` figures. A time is trusted only
when it was printed on the line itself: a time the scan inherited from an earlier line (``fields["_time"]``)
orders lines but is never shown as when something happened. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from crashcart.catalogue import load_catalogue
from crashcart.models import Claim, DiagnosisDocument, DocImpact, Finding, RankLast, ReportKind, TimeSource, Topology
from crashcart.text.clock import to_iso

SYMPTOM_ROLES = {"cascade", "teardown", "confirmation"}
NOT_A_FAILURE = {"unknown", "no_failure"}
# a process stopped by the launcher (SIGTERM), aborted by the NCCL watchdog or an uncaught error (SIGABRT,
# std::terminate): how a job shuts down after its failure, not a fault of its own
_TEARDOWN_LINE = re.compile(
    r"terminate called (?:after throwing|without an active exception)|SIGTERM|SIGABRT|\bSignal (?:6|15)\b"
    r"|exit ?code\s*[:=]?\s*-(?:6|15)\b|closing signal|killed by signal: Terminated",
    re.IGNORECASE,
)
_EXPLAINED = " (explained by the root cause)"
_STEP_FIELDS = ("step", "iteration")


NOTHING_FOUND = (
    "found no error, crash, timeout or hardware fault line in them. If the job did fail, the logs that show it "
    "are probably not in the bundle: add the rank logs (stdout/stderr), the kernel log (dmesg) of each node and "
    "the scheduler's output."
)


def nothing_found(doc: DiagnosisDocument) -> bool:
    """No failure line at all: no root cause, nothing explained, no hypothesis."""
    return doc.root_cause.class_ in NOT_A_FAILURE and not (doc.symptoms or doc.contributing or doc.hypotheses)


def own_time(f: Finding) -> datetime | None:
    """The finding's time when its own line printed it; None when it was inherited or estimated."""
    return f.time if f.time is not None and "_time" not in f.fields else None


def time_source(f: Finding | None) -> TimeSource:
    if f is None or f.time is None:
        return "none"
    note = f.fields.get("_time")
    if note is None:
        return "line"
    return "estimated" if note.startswith("estimated") else "inherited"


_CHOSEN: dict[str, tuple[object, list[int]]] = {}  # kind -> (the catalogue, its signatures of that kind)


def _progress_signatures() -> list[int]:
    cat = load_catalogue()
    chosen = _CHOSEN.get("progress")
    if chosen is not None and chosen[0] is cat:  # asked once per rank: worked out once per catalogue
        return chosen[1]
    out = [
        i
        for i, s in enumerate(cat.signatures)
        if s.role == "context" and set(_STEP_FIELDS) & set(re.findall(r"\(\?P<(\w+)>", s.pattern))
    ]
    _CHOSEN["progress"] = (cat, out)
    return out


def is_progress_line(text: str) -> bool:
    """True when the catalogue reads this line as training progress (a step or an iteration)."""
    cat = load_catalogue()
    return any(cat.extract(i, text) is not None for i in _progress_signatures())


def _benign_signatures() -> list[int]:
    """Catalogue signatures that describe information lines the catalogue itself calls benign."""
    cat = load_catalogue()
    chosen = _CHOSEN.get("benign")
    if chosen is not None and chosen[0] is cat:
        return chosen[1]
    out = [i for i, s in enumerate(cat.signatures) if s.role == "context" and "benign" in s.summary.lower()]
    _CHOSEN["benign"] = (cat, out)
    return out


def is_benign_line(text: str) -> bool:
    """True when the catalogue knows this line as a benign message (e.g. NCCL's optional plugin not found)."""
    cat = load_catalogue()
    first = text.split("\n")[0]
    return any(cat.extract(i, first) is not None for i in _benign_signatures())


@dataclass
class Span:
    first: datetime | None = None
    last: datetime | None = None
    untimed: int = 0
    times: list[datetime] = field(default_factory=list)

    def add(self, t: datetime | None) -> None:
        if t is None:
            self.untimed += 1
            return
        self.times.append(t)
        self.first = t if self.first is None or t < self.first else self.first
        self.last = t if self.last is None or t > self.last else self.last


@dataclass
class Reading:
    """What the report trusts and how it names each group."""

    root_class: str
    by_evidence: dict[str, Finding] = field(default_factory=dict)
    by_class: dict[str, list[Finding]] = field(default_factory=dict)  # symptom-role findings per class
    findings: list[Finding] = field(default_factory=list)
    last_progress: dict[int, datetime] = field(default_factory=dict)  # rank -> its last line, when progress

    @classmethod
    def of(cls, root_class: str, findings: Iterable[Finding], last: Mapping[int, RankLast] | None = None) -> Reading:
        r = cls(root_class, findings=list(findings))
        for rank, rl in (last or {}).items():
            if rl.evidence is not None and rl.time is not None and is_progress_line(rl.evidence.text):
                r.last_progress[rank] = rl.time
        for f in r.findings:
            for ev in f.evidence:
                r.by_evidence.setdefault(ev.id, f)
            if f.role in SYMPTOM_ROLES:
                r.by_class.setdefault(f.class_id, []).append(f)
        return r

    def trusted_time(self, f: Finding) -> datetime | None:
        """The finding's time when the report can stand behind it: printed on its own line; or, for a line
        without a clock, worked out from the rank's last training-progress line just before it (the root
        cause's own line inherits its time, a watchdog line adds its ``ran_ms``), since the rank was stepping
        until then. Any other inherited time may be hours old (a launch banner) and is not trusted."""
        if f.time is None:
            return None
        note = f.fields.get("_time")
        if note is None:
            return f.time
        step = self.last_progress.get(f.rank) if f.rank is not None else None
        if step is None:
            return None
        if note.startswith("estimated"):
            ran = f.fields.get("ran_ms", "")
            return f.time if ran.isdigit() and f.time - timedelta(milliseconds=int(ran)) == step else None
        return f.time if f.class_id == self.root_class and f.time == step else None

    def source(self, evidence_id: str) -> tuple[TimeSource, bool]:
        """Where a cited line's time came from, and whether it is trusted."""
        if not self.by_evidence:
            return "line", True
        f = self.by_evidence.get(evidence_id)
        return time_source(f), f is not None and self.trusted_time(f) is not None

    def trusted(self, evidence_id: str, fallback: datetime | None) -> datetime | None:
        """The trusted time of a cited line (``fallback`` when the findings are not known)."""
        if not self.by_evidence:
            return fallback
        f = self.by_evidence.get(evidence_id)
        return self.trusted_time(f) if f is not None else None

    def span(self, claim: Claim) -> Span:
        """First and last trusted times of a symptom class, and how many of its lines have no clock."""
        members = self.by_class.get(claim.class_id)
        if not members:  # findings not known (a stored document): keep what the claim says
            return Span(claim.first_time, claim.last_time)
        s = Span()
        for f in members:
            s.add(self.trusted_time(f))
        return s

    def own_span(self, claim: Claim) -> Span:
        """Trusted times of the lines a claim cites (a contributing factor's own lines)."""
        if not self.by_evidence:
            return Span(claim.first_time, claim.last_time or claim.first_time)
        s = Span()
        for i in claim.evidence_ids:
            if i in self.by_evidence:
                s.add(self.trusted_time(self.by_evidence[i]))
        return s

    def _teardown(self, f: Finding) -> bool:
        if f.role == "teardown":
            return True
        if f.class_id == self.root_class:
            return False
        return f.class_id in {"native_crash_segfault_abort", "unknown"} and bool(
            _TEARDOWN_LINE.search(f.evidence[0].text)
        )

    def kind(self, claim: Claim, *, contributing: bool) -> ReportKind:
        """contributing, symptom, teardown or benign, from the claim's lines (not only from its list)."""
        texts = [self.by_evidence[i].evidence[0].text for i in claim.evidence_ids if i in self.by_evidence]
        if claim.class_id == "unknown" and texts and all(is_benign_line(t) for t in texts):
            return "benign"
        members = (
            [self.by_evidence[i] for i in claim.evidence_ids if i in self.by_evidence]
            if contributing
            else self.by_class.get(claim.class_id, [])
        )
        if members and all(self._teardown(f) for f in members):
            return "teardown"
        if contributing and not claim.summary.endswith(_EXPLAINED):
            return "contributing"
        return "symptom"


def plain_summary(summary: str) -> str:
    """A claim's summary without the engine's "(explained by the root cause)" tail (its group says so)."""
    return summary.removesuffix(_EXPLAINED)


@dataclass
class ImpactInput:
    root_class: str
    root_time: datetime | None  # trusted
    root_floor: datetime | None  # the engine's root time, trusted or not: nothing it explains comes before it
    explained: list[tuple[ReportKind, Span]]  # every symptom / contributing group with its trusted span
    topology: Topology
    findings: Sequence[Finding]


def impact(x: ImpactInput) -> DocImpact:
    """The impact figures, as README and the postmortem define them (trusted times only)."""
    notes: list[str] = []
    failed = x.root_class not in NOT_A_FAILURE
    fault = x.root_time if failed else None
    floor = (fault or x.root_floor) if failed else None

    def times(kinds: set[str]) -> list[datetime]:
        return [t for k, s in x.explained if k in kinds for t in (s.times or [u for u in (s.first, s.last) if u])]

    seen = times({"symptom", "teardown"})
    early = [t for t in seen if floor is not None and t < floor]
    detected = min((t for t in seen if floor is None or t >= floor), default=None)
    later = [t for t in times({"symptom", "teardown", "contributing"}) if floor is None or t >= floor]
    start = fault or detected
    end = max([*later, *([fault] if fault else [])], default=None)
    if early:
        notes.append(
            f"{len(early)} line(s) listed as explained by the root cause are stamped before it and were left out: "
            "their source's clock may differ, or they are older, unrelated warnings"
        )
    if fault is None and failed:
        notes.append("the root cause's line carries no clock of its own, so the fault time is unknown")
    gpus = _gpus(x.topology)
    since = fault or detected
    lost = None
    if gpus and since and end and end > since:
        lost = round(gpus * (end - since).total_seconds() / 3600, 2)
    elif since is not None and (end is None or end <= since):
        notes.append("no failure line after the fault carries a clock CrashCart trusts, so the end is not known")
        end = None
    last_t, last_step = _last_progress(x.findings, since)
    return DocImpact(
        incident_start=to_iso(start),
        fault=to_iso(fault),
        detected=to_iso(detected),
        end=to_iso(end),
        gpus=gpus,
        gpu_hours_lost=lost,
        last_progress=to_iso(last_t),
        last_step=last_step,
        notes=notes,
    )


def _gpus(topo: Topology) -> int | None:
    """The job's GPUs: one per rank, when every rank's GPU is known."""
    ranks = topo.ranks
    if ranks and all(i.gpu for i in ranks.values()):
        return len({(i.node, i.gpu) for i in ranks.values()})
    return None


def _last_progress(findings: Sequence[Finding], before: datetime | None) -> tuple[datetime | None, int | None]:
    """The last training-progress line (a step or iteration) with its own clock, at or before ``before``."""
    best: tuple[datetime, int] | None = None
    for f in findings:
        if f.role != "context":
            continue
        t = own_time(f)
        if t is None or (before is not None and t > before):
            continue
        value = next((f.fields[k] for k in _STEP_FIELDS if f.fields.get(k, "").isdigit()), None)
        if value is None:
            continue
        if best is None or t > best[0]:
            best = (t, int(value))
    return (best[0], best[1]) if best else (None, None)
