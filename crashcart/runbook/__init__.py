"""Runbook: the dry-run plan drawn from the action catalogue, its approval workflow, and its rendering.

``plan`` turns a diagnosis into steps (catalogue text with validated parameters only) and a plan hash;
``workflow`` proposes, approves and rejects a plan in the store with an append-only audit trail
(``propose_runbook`` is the pipeline's verb); ``render`` writes ``runbook.md`` and ``runbook.json``.
CrashCart never executes a runbook.
"""

from crashcart.runbook.plan import build_runbook, plan_hash
from crashcart.runbook.render import render_runbook_md, runbook_json
from crashcart.runbook.workflow import RunbookRecord, approve, get, propose, record_refusal, reject

propose_runbook = propose

__all__ = [
    "RunbookRecord",
    "approve",
    "build_runbook",
    "get",
    "plan_hash",
    "propose",
    "propose_runbook",
    "record_refusal",
    "reject",
    "render_runbook_md",
    "runbook_json",
]
