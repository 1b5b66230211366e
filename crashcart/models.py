"""The data that flows between stages: every pydantic model that crosses a stage boundary.

No logic lives here beyond field validation (and ``_Shared``'s memory layout). Evidence is the spine: only
CrashCart code creates it (ingest and scan), models may only point at it, and ``verify`` re-reads the bundle to
check it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["root_candidate", "cascade", "teardown", "confirmation", "context"]
Severity = Literal["P0", "P1", "P2", "P3", "info"]
FileKind = Literal[
    "rank_log",  # one rank's stdout/stderr
    "combined_log",  # several ranks in one file (srun -l, [rankN]: prefixes, torchrun --tee)
    "kernel_log",  # dmesg, kern.log, journal, syslog
    "scheduler",  # sacct, scontrol, slurm job output, k8s events
    "config",  # yaml/json/toml job configuration
    "telemetry",  # DCGM CSV, Prometheus range-query JSON
    "dashboard",  # png/jpg
    "manifest",  # manifest.json / crashcart.yaml at the root
    "log",  # a log whose role we could not tell (still scanned)
    "hang_evidence",  # Flight Recorder dump, stack dump (py-spy, gdb, faulthandler), NCCL RAS report: note says which
    "other",  # not scanned
]
ClockKind = Literal["absolute", "no_year", "boot_relative", "none"]
Source = Literal["rule", "llm", "telemetry"]
CitationStatus = Literal["ok", "unknown_id", "missing_file", "line_out_of_range", "text_mismatch", "file_changed"]
Confidence = float


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Shared(_Frozen):
    """A frozen model made by the hundred thousand (findings, evidence): the set of the names its fields were
    given by (pydantic's ``__pydantic_fields_set__``, one per instance: 728 bytes for a finding's 13, 216 for an
    evidence's) is one set shared by every instance given the same names. Only a model's ``__setattr__`` adds to
    that set, and a frozen model refuses it; ``model_copy`` copies the set before it adds an update's names, then
    shares the result. At 10,000 rank files (220 k findings) about a fifth of the peak resident set."""

    def model_post_init(self, context: Any, /) -> None:
        _share_fields_set(self)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copied = super().model_copy(update=update, deep=deep)
        _share_fields_set(copied)
        return copied


_FIELDS_SETS: dict[type, list[set[str]]] = {}  # per class: the distinct sets of field names given, shared


def _share_fields_set(model: BaseModel) -> None:
    own = model.__pydantic_fields_set__
    known = _FIELDS_SETS.setdefault(type(model), [])
    for shared in known:  # a class is given a few sets of names: a finding one or two, an evidence two to four
        if shared is own:
            return
        if shared == own:
            object.__setattr__(model, "__pydantic_fields_set__", shared)
            return
    if len(known) < 64:
        known.append(own)


class Evidence(_Shared):
    """One exact place in the bundle: ``file`` (POSIX, bundle-relative), 1-based ``line``..``end_line``.

    ``text`` is the canonical text of those lines (see ``bundle.canonical_line``), joined by ``\\n``.
    """

    id: str
    file: str
    line: int = Field(ge=1)
    end_line: int | None = None
    text: str
    locator: str | None = None  # an entry inside a structured file (``entries[7]`` of a Flight Recorder dump)


class BundleFile(_Frozen):
    """One file of an ingested bundle, with what ingest learned about it."""

    path: str
    kind: FileKind
    size: int
    lines: int = 0
    host: str | None = None
    rank: int | None = None
    clock: ClockKind = "none"
    compressed: bool = False
    note: str | None = None  # e.g. "invalid UTF-8 replaced", "3 lines longer than 65536 bytes truncated"


class SkippedFile(_Frozen):
    """A member of the bundle we did not analyse, and why."""

    path: str
    reason: str


class Finding(_Shared):
    """One observation from a signature, a generic detector, telemetry or a model."""

    id: str
    class_id: str  # TAXONOMY id, or "unknown" for generic detectors
    signature: str  # catalogue id, e.g. "xid", "nccl.watchdog_timeout", "generic.traceback"
    role: Role
    severity: Severity
    summary: str
    time: datetime | None = None
    rank: int | None = None
    node: str | None = None
    gpu: str | None = None
    fields: dict[str, str] = Field(default_factory=dict)
    evidence: list[Evidence] = Field(min_length=1)
    source: Source = "rule"


class Group(_Frozen):
    """Findings that share a class, signature and masked template, merged across ranks and nodes."""

    key: str
    class_id: str
    signature: str
    role: Role
    severity: Severity
    template: str
    summary: str
    count: int
    ranks: list[int]
    nodes: list[str]
    gpus: list[str]
    first_time: datetime | None
    last_time: datetime | None
    exemplar: Evidence  # the earliest occurrence
    evidence: list[Evidence]  # a bounded sample, earliest first (exemplar included)
    common_fields: dict[str, str]  # field values identical in every finding of the group
    finding_ids: list[str]


class RankInfo(_Frozen):
    rank: int
    node: str | None = None
    local_rank: int | None = None
    gpu: str | None = None  # canonical PCI id ("0000:3b:00") when known, else a device index
    files: list[str] = Field(default_factory=list)


class Topology(_Frozen):
    """What the bundle says about the job's shape: rank -> node -> GPU."""

    world_size: int | None = None
    ranks: dict[int, RankInfo] = Field(default_factory=dict)
    nodes: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)  # how it was inferred, for the report


class Citation(_Frozen):
    evidence_id: str
    file: str
    line: int
    end_line: int | None = None
    text: str
    verified: bool
    status: CitationStatus
    locator: str | None = None


class Claim(_Frozen):
    """A statement of the diagnosis and the evidence it rests on."""

    class_id: str
    summary: str
    evidence_ids: list[str]
    count: int = 0
    ranks: list[int] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)
    first_time: datetime | None = None
    last_time: datetime | None = None


class Culprit(_Frozen):
    node: str | None = None
    rank: int | None = None
    gpu: str | None = None


# Root classes that stop the whole job by policy (a time limit, preemption, a cancel, a closed terminal): no node,
# rank or GPU is at fault, so none is named as the culprit (the node a Slurm line names is where the step ran).
WHOLE_JOB_STOPS = frozenset({"scheduler_preemption_or_timelimit"})


class Hypothesis(_Frozen):
    class_id: str
    score: float
    why_not: str
    evidence_ids: list[str] = Field(default_factory=list)


class TimelineEntry(_Frozen):
    time: datetime | None
    evidence_id: str
    role: Role
    class_id: str


class RankStop(_Frozen):
    """Where one rank stopped in one process group: the last collective it entered (hang evidence files)."""

    rank: int
    node: str | None = None
    pg: str
    pg_desc: str = ""
    seq: int
    op: str
    state: str
    behind: int = 0  # collectives behind the furthest rank of the group
    time: datetime | None = None
    evidence_id: str


class Diagnosis(_Frozen):
    """The reduce stage's answer, citing evidence ids only."""

    root_class: str  # TAXONOMY id or "unknown"
    summary: str
    culprit: Culprit
    time: datetime | None
    confidence: float = Field(ge=0.0, le=1.0)
    root_evidence: list[str]
    contributing: list[Claim]
    symptoms: list[Claim]
    hypotheses: list[Hypothesis]
    timeline: list[TimelineEntry]
    reasoning: list[str]  # short deterministic notes on why this answer (shown in the report)
    partial: bool = False
    unconfirmed: bool = False  # the root rests on model findings alone: the runbook only investigates
    rank_stops: list[RankStop] = Field(default_factory=list)


class FileCoverage(_Frozen):
    files: int
    lines: int
    bytes: int
    skipped: list[SkippedFile]
    unaligned_clocks: list[str]  # files whose times could not be put on the common clock


class ScanStats(_Frozen):
    files: int
    lines: int
    bytes: int
    findings: int
    matcher: str  # "hyperscan" or "re"


# --- diagnosis.json (DESIGN §4.2, contract: fields may be added, never removed or renamed) ---------

SCHEMA = "crashcart.diagnosis/v1"


ReportKind = Literal["contributing", "symptom", "teardown", "benign"]
# where a time in the document came from: its own line, an earlier line (inherited), an earlier line plus the
# watchdog's ran_ms (estimated), or nowhere; ``time_trusted`` says whether the report stands behind it
TimeSource = Literal["line", "inherited", "estimated", "none"]


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class DocCitation(_Doc):
    file: str
    line: int
    text: str
    verified: bool
    end_line: int | None = None
    status: CitationStatus = "ok"
    locator: str | None = None  # the entry inside a structured file (a Flight Recorder dump's ``entries[7]``)


class DocCulprit(_Doc):
    node: str | None = None
    rank: int | None = None
    gpu: str | None = None


class DocRootCause(_Doc):
    class_: str = Field(alias="class")
    summary: str
    culprit: DocCulprit
    time: str | None
    confidence: float
    citations: list[DocCitation]
    severity: str | None = None
    time_source: TimeSource = "line"
    time_trusted: bool = True


class DocContributing(_Doc):
    class_: str = Field(alias="class")
    summary: str
    citations: list[DocCitation]
    kind: ReportKind = "contributing"  # what the report reads it as (contributing, symptom, teardown, benign)


class DocSymptom(_Doc):
    class_: str = Field(alias="class")
    summary: str
    count: int
    ranks: list[int]
    citations: list[DocCitation]
    nodes: list[str] = Field(default_factory=list)
    first_time: str | None = None  # from lines with a clock of their own (never a time inherited from above)
    last_time: str | None = None
    kind: ReportKind = "symptom"
    untimed: int = 0  # lines of this group with no clock of their own


class DocHypothesis(_Doc):
    class_: str = Field(alias="class")
    score: float
    why_not: str


class DocTimelineEntry(_Doc):
    time: str | None
    file: str
    line: int
    text: str
    role: str
    class_: str | None = Field(default=None, alias="class")
    time_source: TimeSource = "line"
    time_trusted: bool = True


class DocImpact(_Doc):
    """Impact figures, from lines with a clock of their own only (definitions: README, postmortem).

    ``fault``: the root cause's own line. ``incident_start``: the earliest of the fault and the lines it
    explains. ``detected``: the first symptom at or after the fault. ``end``: the last failure line.
    ``gpu_hours_lost``: every GPU of the job from the fault (else detection) to the end."""

    incident_start: str | None = None
    fault: str | None = None
    detected: str | None = None
    end: str | None = None
    gpus: int | None = None
    gpu_hours_lost: float | None = None
    last_progress: str | None = None  # the last training-progress line seen (time)
    last_step: int | None = None
    notes: list[str] = Field(default_factory=list)


class DocRunbookStep(_Doc):
    id: str
    title: str
    command: str
    risk: Literal["low", "medium", "high"]
    rationale: str | None = None
    reversible: bool | None = None


class DocRunbook(_Doc):
    steps: list[DocRunbookStep]


class DocBundle(_Doc):
    sha256: str
    files: int
    bytes: int


class DocLLMStats(_Doc):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    status: Literal["off", "ok", "partial", "unavailable"] = "off"
    cached_calls: int = 0  # answered from the cache or a replay file, at no cost
    failed_calls: int = 0
    chunks: int = 0  # swarm chunks of log windows
    chunks_scanned: int = 0  # chunks that got a valid answer (coverage)
    chunks_skipped_budget: int = 0
    model_findings: int = 0
    answers_dropped: int = 0  # model answers that pointed at lines not shown or misquoted
    reduced_by_model: bool = False
    models: dict[str, str] = Field(default_factory=dict)


class DocStats(_Doc):
    files: int
    lines: int
    bytes: int
    findings: int
    groups: int
    seconds: float
    llm: DocLLMStats = Field(default_factory=DocLLMStats)
    citations_dropped: int = 0
    skipped_files: list[SkippedFile] = Field(default_factory=list)
    unaligned_clocks: list[str] = Field(default_factory=list)
    matcher: str | None = None


class DocRankStop(_Doc):
    """Where one rank stopped in one process group (Flight Recorder): the last collective it entered."""

    rank: int
    node: str | None = None
    pg: str
    pg_desc: str = ""
    seq: int
    op: str
    state: str
    behind: int = 0
    time: str | None = None
    citation: DocCitation


class DiagnosisDocument(_Doc):
    """``diagnosis.json``. Serialise with ``model_dump(mode="json", by_alias=True)``."""

    schema_: str = Field(default=SCHEMA, alias="schema")
    incident_id: str
    job_id: str | None
    engine: Literal["offline", "llm"]
    bundle: DocBundle
    root_cause: DocRootCause
    contributing: list[DocContributing]
    symptoms: list[DocSymptom]
    hypotheses: list[DocHypothesis]
    timeline: list[DocTimelineEntry]
    runbook: DocRunbook
    stats: DocStats
    topology: dict[str, dict[str, str | int | None]] = Field(default_factory=dict)
    reasoning: list[str] = Field(default_factory=list)
    partial: bool = False
    impact: DocImpact = Field(default_factory=DocImpact)
    rank_stops: list[DocRankStop] = Field(default_factory=list)  # hang evidence: the last collective per rank


@dataclass
class RankLast:
    """The last line a rank wrote, and the last time it showed."""

    evidence: Evidence | None
    time: datetime | None
