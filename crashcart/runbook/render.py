"""Runbook rendering: a plan and its approval record as Markdown (``runbook.md``) and ``runbook.json``."""

from __future__ import annotations

from typing import Any

from crashcart.catalogue import load_catalogue
from crashcart.models import DiagnosisDocument, DocRunbook
from crashcart.runbook.plan import (
    DRY_RUN,
    JOB_ID,
    RUNBOOK_SCHEMA,
    load_actions,
    plan_hash,
    plan_steps,
    runbook_params,
)
from crashcart.runbook.workflow import RunbookRecord


def _headline(doc: DiagnosisDocument) -> str:
    root = doc.root_cause
    title = load_catalogue().class_title(root.class_) if root.class_ in load_actions().classes else "Unclassified"
    params = runbook_params(doc)
    labels = {"node": "node `{}`", "rank": "rank {}", "gpu": "GPU `{}`"}
    culprit = ", ".join(f.format(params[k]) for k, f in labels.items() if k in params) or "no culprit named"
    return f"{title} — {culprit} (confidence {root.confidence:.0%})"


def render_runbook_md(
    doc: DiagnosisDocument, runbook: DocRunbook, *, record: RunbookRecord | None = None, scheduler: str | None = None
) -> str:
    """Markdown for ``runbook.md``: the dry-run banner, then numbered steps with risk and fenced commands.

    :param record: the stored approval state and trail, when the runbook was proposed in the store
    :param scheduler: as given to ``build_runbook`` (to list the steps left out, and why)
    """
    digest = plan_hash(runbook)
    state = record.state if record is not None else "proposed (not stored)"
    lines = [
        f"# Runbook for incident {doc.incident_id}",
        "",
        f"> **{DRY_RUN}**",
        "",
        f"**Diagnosis:** {_headline(doc)}  ",
        f"**Plan:** `sha256:{digest}` ({len(runbook.steps)} steps) — state: **{state}**",
        "",
    ]
    if record is not None and record.state == "proposed" and JOB_ID.fullmatch(record.incident_id):
        approve = f"crashcart approve {record.incident_id} --as YOU --plan {record.plan_hash}"
        lines += [f"To approve exactly this plan: `{approve}` (or `crashcart reject … --reason …`).", ""]
    if record is not None and record.plan_hash != digest:
        lines += ["> **Warning:** this plan differs from the stored one; approvals apply to the stored plan.", ""]
    if not runbook.steps:
        lines += ["No catalogue step applies: nothing to run.", ""]
    for n, step in enumerate(runbook.steps, 1):
        undo = "yes" if step.reversible else "no" if step.reversible is False else "unknown"
        lines += [f"## {n}. {step.title}", "", f"Risk: **{step.risk}** · Reversible: **{undo}**", ""]
        if step.rationale:
            lines += [f"Why: {step.rationale}", ""]
        lines += ["```bash", step.command, "```", ""]
    planned, omitted = plan_steps(doc, scheduler)
    if omitted and planned == runbook.steps:
        lines += ["## Left out", ""]
        lines += [f"- `{o.step_id}`: {o.reason}" for o in omitted]
        lines.append("")
    if record is not None:
        lines += ["## Approval trail", ""]
        for e in record.trail:
            who = f" by {e.user}" if e.user else ""
            why = f" — {e.reason}" if e.reason else ""
            detail = f" ({e.detail})" if e.detail else ""
            lines.append(f"- {e.at:%Y-%m-%d %H:%M:%S} UTC: {e.event}{who}, plan `{e.plan_hash[:16]}`{why}{detail}")
        lines.append("")
    return "\n".join(lines)


def runbook_json(doc: DiagnosisDocument, runbook: DocRunbook, *, record: RunbookRecord | None = None) -> dict[str, Any]:
    """The ``runbook.json`` object: incident, class, plan hash, steps, approval state (and trail)."""
    out: dict[str, Any] = {
        "schema": RUNBOOK_SCHEMA,
        "dry_run": True,
        "incident_id": doc.incident_id,
        "job_id": doc.job_id,
        "class": doc.root_cause.class_,
        "plan_hash": plan_hash(runbook),
        "state": record.state if record is not None else "proposed",
        "stored": record is not None,
        "steps": [s.model_dump(mode="json") for s in runbook.steps],
    }
    if record is not None:
        out |= {
            "version": record.version,
            "stored_plan_hash": record.plan_hash,
            "decided_by": record.decided_by,
            "decided_at": record.decided_at.isoformat() if record.decided_at else None,
            "reason": record.reason,
            "trail": [e.model_dump(mode="json") for e in record.trail],
        }
    return out
