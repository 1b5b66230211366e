"""Report stage: a verified diagnosis -> the ``diagnosis.json`` document (DESIGN §4.2).

Input: ``Verified``, groups, topology, scan statistics. Output: ``DiagnosisDocument``. Only
citations that verified are marked ``verified: true``; the rest keep their failure status. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from crashcart.catalogue import load_catalogue
from crashcart.models import (
    Citation,
    DiagnosisDocument,
    DocBundle,
    DocCitation,
    DocContributing,
    DocCulprit,
    DocHypothesis,
    DocLLMStats,
    DocRootCause,
    DocRunbook,
    DocStats,
    DocSymptom,
    DocTimelineEntry,
    Finding,
    RankLast,
    SkippedFile,
    TimeSource,
    Topology,
)
from crashcart.report.rank_stops import doc_rank_stop
from crashcart.report.reading import ImpactInput, Reading, impact, own_time
from crashcart.runbook.plan import build_runbook
from crashcart.text.clock import to_iso
from crashcart.verify import Verified


@dataclass(frozen=True)
class RunFacts:
    incident_id: str
    job_id: str | None
    engine: str
    sha256: str
    files: int
    bytes: int
    lines: int
    findings: int
    groups: int
    seconds: float
    skipped: list[SkippedFile]
    unaligned: list[str]
    matcher: str
    scheduler: str | None = None
    llm: DocLLMStats | None = None


def llm_summary(llm: DocLLMStats) -> str | None:
    """One line on what the models did: calls, tokens, cost, coverage, and what went wrong."""
    if llm.status == "off":
        return None
    parts = [
        f"models: {llm.calls} call(s), {llm.prompt_tokens + llm.completion_tokens:,} tokens, ${llm.cost_usd:.4f}",
        f"{llm.cached_calls} from cache",
        f"swarm read {llm.chunks_scanned} of {llm.chunks} chunk(s)",
        f"{llm.model_findings} model finding(s)",
    ]
    if llm.answers_dropped:
        parts.append(f"{llm.answers_dropped} answer(s) dropped (not shown to the model or misquoted)")
    if llm.chunks_skipped_budget:
        parts.append(f"{llm.chunks_skipped_budget} chunk(s) skipped: budget reached")
    verdict = {
        "ok": "diagnosis written by the reduce model" if llm.reduced_by_model else "deterministic diagnosis kept",
        "partial": "PARTIAL" + ("" if llm.reduced_by_model else "; deterministic diagnosis kept"),
        "unavailable": "MODEL UNAVAILABLE: the deterministic engine answered",
    }[llm.status]
    return "; ".join([*parts, verdict])


def _cite(c: Citation) -> DocCitation:
    return DocCitation(
        file=c.file,
        line=c.line,
        end_line=c.end_line,
        text=c.text,
        verified=c.verified,
        status=c.status,
        locator=c.locator,
    )


def build_document(
    v: Verified,
    topo: Topology,
    facts: RunFacts,
    findings: Sequence[Finding] = (),
    last: Mapping[int, RankLast] | None = None,
) -> DiagnosisDocument:
    """The ``diagnosis.json`` document, with the runbook drawn from the action catalogue.

    :param findings: the findings behind the diagnosis; with them, times a line inherited from an earlier
        line are marked as such and left out of symptom spans and the impact figures
    :param last: each rank's last line (``locate``): a time inherited from a rank's last progress line is trusted
    """
    doc = _document(v, topo, facts, Reading.of(v.diagnosis.root_class, findings, last))
    basis = doc
    if v.diagnosis.unconfirmed:  # a model-only root never selects a remediation
        basis = doc.model_copy(update={"root_cause": doc.root_cause.model_copy(update={"class_": "unknown"})})
    return doc.model_copy(update={"runbook": build_runbook(basis, scheduler=facts.scheduler)})


def _root_time(d_time: datetime | None, ids: list[str], reading: Reading) -> tuple[datetime | None, TimeSource]:
    """The root cause's trusted time (None when no line of its own backs it) and where the engine's came from."""
    if d_time is None:
        return None, "none"
    if not reading.by_evidence:
        return d_time, "line"
    mine = [reading.by_evidence[i] for i in ids if i in reading.by_evidence]
    if any(own_time(f) == d_time for f in mine):
        return d_time, "line"
    trusted = [t for f in mine if f.class_id == reading.root_class and (t := reading.trusted_time(f)) is not None]
    source: TimeSource = next((reading.source(i)[0] for i in ids if i in reading.by_evidence), "none")
    return (min(trusted) if trusted else None), source


def _document(v: Verified, topo: Topology, facts: RunFacts, reading: Reading) -> DiagnosisDocument:
    d = v.diagnosis
    cites = v.citations
    root_time, root_source = _root_time(d.time, d.root_evidence, reading)
    spans = {c.class_id: reading.span(c) for c in d.symptoms}
    kinds = {c.class_id: reading.kind(c, contributing=False) for c in d.symptoms}
    contributing = [(c, reading.kind(c, contributing=True)) for c in d.contributing]
    explained = [(kinds[c.class_id], spans[c.class_id]) for c in d.symptoms]
    for c, kind in contributing:
        explained.append((kind, reading.own_span(c)))

    def many(ids: list[str]) -> list[DocCitation]:
        return [_cite(cites[i]) for i in ids if i in cites]

    severity = None
    if d.root_class != "unknown":
        info = load_catalogue().classes.get(d.root_class)
        severity = info.severity if info else None
    return DiagnosisDocument.model_validate(
        {
            "incident_id": facts.incident_id,
            "job_id": facts.job_id,
            "engine": facts.engine,
            "bundle": DocBundle(sha256=facts.sha256, files=facts.files, bytes=facts.bytes),
            "root_cause": DocRootCause.model_validate(
                {
                    "class": d.root_class,
                    "summary": d.summary,
                    "culprit": DocCulprit(node=d.culprit.node, rank=d.culprit.rank, gpu=d.culprit.gpu),
                    "time": to_iso(d.time),
                    "confidence": d.confidence,
                    "citations": many(d.root_evidence),
                    "severity": severity,
                    "time_source": root_source,
                    "time_trusted": root_time is not None and root_time == d.time,
                }
            ),
            "contributing": [
                DocContributing.model_validate(
                    {"class": c.class_id, "summary": c.summary, "citations": many(c.evidence_ids), "kind": kind}
                )
                for c, kind in contributing
            ],
            "symptoms": [
                DocSymptom.model_validate(
                    {
                        "class": c.class_id,
                        "summary": c.summary,
                        "count": c.count,
                        "ranks": c.ranks,
                        "nodes": c.nodes,
                        "first_time": to_iso(spans[c.class_id].first),
                        "last_time": to_iso(spans[c.class_id].last),
                        "citations": many(c.evidence_ids),
                        "kind": kinds[c.class_id],
                        "untimed": spans[c.class_id].untimed,
                    }
                )
                for c in d.symptoms
            ],
            "hypotheses": [
                DocHypothesis.model_validate({"class": h.class_id, "score": h.score, "why_not": h.why_not})
                for h in d.hypotheses
            ],
            "timeline": [
                DocTimelineEntry.model_validate(
                    {
                        "time": to_iso(t.time),
                        "file": cites[t.evidence_id].file,
                        "line": cites[t.evidence_id].line,
                        "text": cites[t.evidence_id].text.split("\n")[0],
                        "role": t.role,
                        "class": t.class_id,
                        "time_source": reading.source(t.evidence_id)[0] if t.time is not None else "none",
                        "time_trusted": t.time is not None and reading.source(t.evidence_id)[1],
                    }
                )
                for t in d.timeline
                if t.evidence_id in cites and cites[t.evidence_id].verified
            ],
            "runbook": DocRunbook(steps=[]),
            "stats": DocStats(
                files=facts.files,
                lines=facts.lines,
                bytes=facts.bytes,
                findings=facts.findings,
                groups=facts.groups,
                seconds=round(facts.seconds, 3),
                citations_dropped=v.citations_dropped,
                skipped_files=facts.skipped,
                unaligned_clocks=facts.unaligned,
                matcher=facts.matcher,
                llm=facts.llm or DocLLMStats(),
            ),
            "topology": {
                str(r): {"node": i.node, "gpu": i.gpu, "local_rank": i.local_rank}
                for r, i in sorted(topo.ranks.items())
            },
            "reasoning": [*d.reasoning, *v.notes],
            "partial": d.partial,
            "impact": impact(ImpactInput(d.root_class, root_time, d.time, explained, topo, reading.findings)),
            "rank_stops": [
                doc_rank_stop(s, _cite(cites[s.evidence_id])) for s in d.rank_stops if s.evidence_id in cites
            ],
        }
    )
