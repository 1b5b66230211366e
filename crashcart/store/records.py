"""What the store hands back: incidents, runbook plans and audit-trail entries, and the time stamps it writes."""

from __future__ import annotations

import builtins
import sqlite3
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from crashcart.models import (
    DiagnosisDocument,
    DocRunbookStep,
)

if TYPE_CHECKING:  # imported when a store is opened: commands that keep no store never load it
    pass

# What a statement or a row conversion can raise: sqlite3 itself, pydantic serialisation and
# validation (ValueError subclasses, as is UnicodeEncodeError for lone surrogates), and
# OverflowError for an int that does not fit SQLite's 64-bit INTEGER.
DB_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, ValueError, OverflowError)


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(value: datetime) -> str:
    """ISO-8601 text. Aware times are stored in UTC (fixed width, so they sort as text).

    A naive time (a log clock of unknown zone) is kept naive rather than guessed into UTC.
    """
    if value.tzinfo is None:
        return value.isoformat()
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def stamp(value: datetime) -> str:
    """Our own timestamps: always UTC; a naive clock reading is taken to be UTC already."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return iso(value)


class IncidentSummary(BaseModel):
    """One row of ``incidents``: a distinct bundle and the headline of its latest run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    job_id: str | None
    bundle_sha256: str
    created_at: datetime
    updated_at: datetime
    runs: int
    engine: str
    root_class: str
    summary: str
    confidence: float
    culprit_node: str | None
    culprit_rank: int | None


class StoredIncident(BaseModel):
    """An incident with the document of its latest run and where that run came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    summary: IncidentSummary
    document: DiagnosisDocument
    source: str


RunbookEvent = Literal["proposed", "approved", "rejected", "refused"]


class RunbookPlan(BaseModel):
    """One proposed runbook plan of an incident (``runbooks`` row; never changed once written)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    incident_id: str
    version: int
    plan_hash: str
    class_id: str
    steps: builtins.list[DocRunbookStep]
    created_at: datetime


class ApprovalEntry(BaseModel):
    """One event of the append-only ``approvals`` audit trail."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int
    incident_id: str
    runbook_id: str
    plan_hash: str
    event: RunbookEvent
    user: str
    at: datetime
    reason: str | None = None
    detail: str | None = None


class Decision(NamedTuple):
    """What ``Store.decide_runbook``'s policy callback wants appended to the trail."""

    event: RunbookEvent
    user: str
    reason: str | None = None
    detail: str | None = None
