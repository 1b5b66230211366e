"""Runbook approval workflow: proposed -> approved | rejected, with who, when, why and which plan (by hash).

Input: a ``Store`` and a ``DocRunbook``; output: ``RunbookRecord`` with the append-only audit trail. Every
decision is one store transaction; refused attempts (wrong hash, not an approver, already decided) are
recorded too, then raise ``RunbookError``. Nothing here executes a step. Sync, does I/O through the store.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from crashcart.errors import RunbookError
from crashcart.models import DocRunbook, DocRunbookStep
from crashcart.runbook.plan import plan_hash as compute_plan_hash
from crashcart.store import ApprovalEntry, Decision, RunbookPlan, Store

__all__ = ["ApprovalEntry", "RunbookRecord", "RunbookState", "approve", "get", "propose", "record_refusal", "reject"]

RunbookState = Literal["proposed", "approved", "rejected"]
MAX_USER, MAX_REASON = 200, 2000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HEX = re.compile(r"[^0-9a-f]")


class RunbookRecord(BaseModel):
    """The incident's current plan, its state and the audit trail of every plan the incident had."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    incident_id: str
    version: int
    plan_hash: str
    class_id: str
    steps: list[DocRunbookStep]
    state: RunbookState
    proposed_at: datetime
    decided_by: str | None = None
    decided_at: datetime | None = None
    reason: str | None = None
    trail: list[ApprovalEntry]

    @property
    def runbook(self) -> DocRunbook:
        """The stored plan as the document's runbook model."""
        return DocRunbook(steps=self.steps)


def _record(plan: RunbookPlan, trail: list[ApprovalEntry]) -> RunbookRecord:
    decided = _decision(plan, trail)
    return RunbookRecord(
        incident_id=plan.incident_id,
        version=plan.version,
        plan_hash=plan.plan_hash,
        class_id=plan.class_id,
        steps=plan.steps,
        state="proposed" if decided is None else "approved" if decided.event == "approved" else "rejected",
        proposed_at=plan.created_at,
        decided_by=decided.user if decided else None,
        decided_at=decided.at if decided else None,
        reason=decided.reason if decided else None,
        trail=trail,
    )


def _decision(plan: RunbookPlan, trail: Sequence[ApprovalEntry]) -> ApprovalEntry | None:
    return next((e for e in trail if e.runbook_id == plan.id and e.event in ("approved", "rejected")), None)


def _clean(value: str, what: str, limit: int, incident_id: str) -> str:
    text = " ".join(_CONTROL.sub(" ", value).split())
    if not text:
        raise RunbookError(f"{what} is required", incident_id=incident_id)
    if len(text) > limit:
        raise RunbookError(f"{what} is longer than {limit} characters", incident_id=incident_id)
    return text


def get(store: Store, incident_id: str) -> RunbookRecord:
    """The incident's latest plan, its state and the whole trail (``incident_id`` may be a unique prefix).

    :raises IncidentNotFound: no such incident
    :raises RunbookError: no runbook was proposed for it
    """
    plan, trail = store.runbook(incident_id)
    return _record(plan, trail)


def propose(store: Store, incident_id: str, runbook: DocRunbook) -> RunbookRecord:
    """Store ``runbook`` as the incident's plan to approve. The same plan again changes nothing (an
    approval stays valid); a different plan (a re-diagnosis) becomes a new ``proposed`` version and the
    earlier trail is kept.
    """
    resolved = store.propose_runbook(incident_id, compute_plan_hash(runbook), runbook.steps)
    return get(store, resolved)


def _decide(
    store: Store,
    incident_id: str,
    user: str,
    want: Literal["approved", "rejected"],
    *,
    reason: str | None,
    plan_hash: str | None,
    approvers: list[str] | None,
) -> RunbookRecord:
    who = _clean(user, "user", MAX_USER, incident_id)
    allowed = {a.strip() for a in approvers or [] if a.strip()}
    refusal: list[str] = []
    earlier: set[str] = set()  # hashes of this incident's earlier plans: a stale hash, not a wrong one
    if plan_hash is not None:
        _, every = store.runbook(incident_id)
        earlier = {e.plan_hash for e in every}

    def decide(plan: RunbookPlan, trail: list[ApprovalEntry]) -> Decision:
        done = _decision(plan, trail)
        if allowed and who not in allowed:
            refusal.append(f"{who} is not an approver of runbooks")
        elif plan_hash is not None and plan_hash.strip().lower() != plan.plan_hash:
            given = plan_hash.strip().lower()
            shown = _HEX.sub("", given)[:16] or "?"
            if given in earlier:
                refusal.append(f"the plan changed since it was shown (shown {shown}, current {plan.plan_hash[:16]})")
            else:
                refusal.append(
                    f"{shown} is not the hash of this incident's plan (current {plan.plan_hash[:16]}); "
                    "copy it from crashcart runbook ID"
                )
        elif done is not None:
            when = f"{done.at:%Y-%m-%d %H:%M} UTC"
            refusal.append(f"plan v{plan.version} was already {done.event} by {done.user} at {when}")
        if refusal:
            action = "approval" if want == "approved" else "rejection"
            return Decision("refused", who, reason, f"{action} refused: {refusal[0]}")
        return Decision(want, who, reason)

    resolved = store.decide_runbook(incident_id, decide)
    if refusal:
        raise RunbookError(refusal[0], incident_id=resolved)
    return get(store, resolved)


def approve(
    store: Store,
    incident_id: str,
    user: str,
    plan_hash: str | None = None,
    approvers: list[str] | None = None,
) -> RunbookRecord:
    """Approve the incident's current plan as ``user``.

    :param plan_hash: the hash of the plan the user was shown; refused when the current plan differs
    :param approvers: when non-empty, only these users may decide
    :raises RunbookError: refused (recorded in the trail): not an approver, the plan changed, or the plan
        was already approved or rejected; or no runbook / empty user (not recorded)
    """
    return _decide(store, incident_id, user, "approved", reason=None, plan_hash=plan_hash, approvers=approvers)


def reject(
    store: Store,
    incident_id: str,
    user: str,
    reason: str,
    plan_hash: str | None = None,
    approvers: list[str] | None = None,
) -> RunbookRecord:
    """Reject the incident's current plan as ``user``; ``reason`` is required.

    :raises RunbookError: as ``approve``, and when the reason is empty (not recorded)
    """
    why = _clean(reason, "a reason for the rejection", MAX_REASON, incident_id)
    return _decide(store, incident_id, user, "rejected", reason=why, plan_hash=plan_hash, approvers=approvers)


def record_refusal(store: Store, incident_id: str, user: str, detail: str) -> RunbookRecord:
    """Record that ``user`` was refused a decision for a reason found outside this module (the Slack bot:
    not in the approver group, membership could not be checked); the plan's state does not change.

    :param detail: why, for the trail (e.g. "approval refused: U1 is not an approver of runbooks")
    :raises RunbookError: no runbook, or an empty user or detail (not recorded)
    """
    who = _clean(user, "user", MAX_USER, incident_id)
    why = _clean(detail, "the refusal's detail", MAX_REASON, incident_id)
    resolved = store.decide_runbook(incident_id, lambda _plan, _trail: Decision("refused", who, None, why))
    return get(store, resolved)
