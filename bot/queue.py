"""Durable job queue and dedupe tables, in the store's SQLite file (tables prefixed ``bot_``, created by the
bot's own migration set through the store's ``migrate``).

A job is one analysis asked for in Slack: an uploaded bundle or a job id. Each step that posts to
Slack records what it posted (``status_ts``, ``diagnosis_ts``, ``files_done``, ``runbook_ts``), so a
bot restarted mid-job skips the steps it finished (at least once: a crash between a post and its record
repeats that post). Sync (sqlite3, WAL); async callers use a thread.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from sqlite_utils import Database

from crashcart.store import Migration, migrate

JobKind = Literal["upload", "job"]
JobState = Literal["queued", "running", "done", "failed", "ignored"]
PENDING: tuple[JobState, ...] = ("queued", "running")
EVENT_TTL = timedelta(days=2)  # Slack retries arrive within minutes; keep event ids well past that

_V1_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS bot_jobs (
        id TEXT PRIMARY KEY,
        dedupe_key TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        channel TEXT NOT NULL,
        thread_ts TEXT,
        user TEXT,
        source TEXT NOT NULL,
        name TEXT,
        size INTEGER,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        status_ts TEXT,
        diagnosis_ts TEXT,
        files_done INTEGER NOT NULL DEFAULT 0,
        runbook_ts TEXT,
        incident_id TEXT,
        error TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS bot_jobs_state ON bot_jobs (state, created_at)",
    "CREATE TABLE IF NOT EXISTS bot_events (event_id TEXT PRIMARY KEY, seen_at TEXT NOT NULL)",
)


def _v1_jobs_and_events(db: Database) -> None:
    # IF NOT EXISTS: files written before the bot's tables had migrations already hold them
    for statement in _V1_SCHEMA:
        db.execute(statement)


def _v2_explicit(db: Database) -> None:
    # 1 when someone asked for this analysis (a mention, the shortcut, a command, Re-run): single logs
    # and unsupported files get an answer only then
    db.execute("ALTER TABLE bot_jobs ADD COLUMN explicit INTEGER NOT NULL DEFAULT 0")


# The bot's own migration set in the store's mechanism (recorded in bot_schema_migrations).
MIGRATIONS = (
    Migration(1, "jobs and seen event ids", _v1_jobs_and_events),
    Migration(2, "jobs someone asked for", _v2_explicit),
)


@dataclass(frozen=True)
class Job:
    """One row of ``bot_jobs``. ``thread_ts`` is None for a slash command: the status message starts the thread."""

    id: str
    dedupe_key: str
    kind: JobKind
    channel: str
    thread_ts: str | None
    user: str | None
    source: str  # the Slack file id (upload) or the scheduler's job id (job)
    name: str | None
    size: int | None
    state: JobState
    attempts: int
    status_ts: str | None
    diagnosis_ts: str | None
    files_done: bool
    runbook_ts: str | None
    incident_id: str | None
    error: str | None
    created_at: str
    updated_at: str
    explicit: bool = False

    @property
    def thread(self) -> str | None:
        """Where replies go: the upload's thread, or the status message a command started."""
        return self.thread_ts or self.status_ts


_COLUMNS = tuple(f.name for f in fields(Job))
_MUTABLE = frozenset(_COLUMNS) - {"id", "dedupe_key", "kind", "channel", "source", "created_at", "explicit"}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _row(row: sqlite3.Row) -> Job:
    data: dict[str, Any] = {k: row[k] for k in _COLUMNS}
    data["files_done"] = bool(data["files_done"])
    data["explicit"] = bool(data["explicit"])
    return Job(**data)


class JobQueue:
    """Jobs and seen event ids. Thread-safe: one lock around one connection."""

    def __init__(self, db_path: Path, *, busy_timeout_ms: int = 5_000) -> None:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            db_path, timeout=busy_timeout_ms / 1000, check_same_thread=False, isolation_level=None
        )
        self._conn.row_factory = sqlite3.Row
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        migrate(Database(self._conn), MIGRATIONS, owner="bot")

    def close(self) -> None:
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._conn.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def enqueue(
        self,
        *,
        dedupe_key: str,
        kind: JobKind,
        channel: str,
        thread_ts: str | None,
        user: str | None,
        source: str,
        name: str | None = None,
        size: int | None = None,
        event_id: str | None = None,
        explicit: bool = False,
    ) -> Job | None:
        """Record a new job, or return None when this event or this dedupe key was seen before.

        The event id and the job are written in one transaction, so a delivery that failed before
        it was recorded is still handled by Slack's retry, and a recorded one never runs twice.
        """
        now = _now()
        with self._write() as conn:
            if event_id is not None:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO bot_events (event_id, seen_at) VALUES (?, ?)", (event_id, now)
                )
                if cur.rowcount == 0:
                    return None
                cutoff = (datetime.now(UTC) - EVENT_TTL).isoformat(timespec="microseconds")
                conn.execute("DELETE FROM bot_events WHERE seen_at < ?", (cutoff,))
            job_id = f"bj-{uuid.uuid4().hex[:12]}"
            cur = conn.execute(
                "INSERT OR IGNORE INTO bot_jobs (id, dedupe_key, kind, channel, thread_ts, user, source, name,"
                " size, state, created_at, updated_at, explicit) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
                (job_id, dedupe_key, kind, channel, thread_ts, user, source, name, size, now, now, int(explicit)),
            )
            if cur.rowcount == 0:
                return None
            return _row(conn.execute("SELECT * FROM bot_jobs WHERE id = ?", (job_id,)).fetchone())

    def seen(self, event_id: str) -> bool:
        """Mark an event id as handled; True when it had been handled before."""
        with self._write() as conn:
            cur = conn.execute("INSERT OR IGNORE INTO bot_events (event_id, seen_at) VALUES (?, ?)", (event_id, _now()))
            return cur.rowcount == 0

    def get(self, job_id: str) -> Job:
        with self._lock:
            row = self._conn.execute("SELECT * FROM bot_jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise KeyError(job_id)
        return _row(row)

    def pending(self) -> list[Job]:
        """Jobs that were queued or running when the bot last stopped, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM bot_jobs WHERE state IN ('queued', 'running') ORDER BY created_at, id"
            ).fetchall()
        return [_row(r) for r in rows]

    def jobs(self) -> list[Job]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM bot_jobs ORDER BY created_at, id").fetchall()
        return [_row(r) for r in rows]

    def find(self, dedupe_key: str) -> Job | None:
        """The job recorded under ``dedupe_key`` (the first analysis of a file in a channel), if any."""
        with self._lock:
            row = self._conn.execute("SELECT * FROM bot_jobs WHERE dedupe_key = ?", (dedupe_key,)).fetchone()
        return None if row is None else _row(row)

    def runbook_posts(self, incident_id: str) -> list[Job]:
        """Every job whose thread shows this incident's runbook (one bundle uploaded twice: two threads)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM bot_jobs WHERE incident_id = ? AND runbook_ts IS NOT NULL ORDER BY created_at, id",
                (incident_id,),
            ).fetchall()
        return [_row(r) for r in rows]

    def with_incidents(self, channels: frozenset[str]) -> list[Job]:
        """Jobs in ``channels`` that produced an incident, most recently updated first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM bot_jobs WHERE incident_id IS NOT NULL ORDER BY updated_at DESC, id"
            ).fetchall()
        return [j for j in map(_row, rows) if j.channel in channels]

    def incidents_in(self, channel: str) -> list[str]:
        """Incident ids the bot's jobs in ``channel`` produced, most recently updated first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT incident_id, max(updated_at) AS at FROM bot_jobs WHERE channel = ? AND incident_id IS NOT NULL"
                " GROUP BY incident_id ORDER BY at DESC",
                (channel,),
            ).fetchall()
        return [str(r["incident_id"]) for r in rows]

    def update(self, job_id: str, **changes: str | int | bool | None) -> Job:
        """Set columns of one job (only the mutable ones) and return it."""
        bad = set(changes) - _MUTABLE
        if bad:
            raise ValueError(f"not updatable: {sorted(bad)}")
        values = {k: int(v) if isinstance(v, bool) else v for k, v in changes.items()}
        values["updated_at"] = _now()
        assignments = ", ".join(f"{k} = ?" for k in values)
        with self._write() as conn:
            conn.execute(f"UPDATE bot_jobs SET {assignments} WHERE id = ?", (*values.values(), job_id))
        return self.get(job_id)

    def start(self, job_id: str) -> Job:
        """Mark a job running and count the attempt."""
        with self._write() as conn:
            conn.execute(
                "UPDATE bot_jobs SET state = 'running', attempts = attempts + 1, updated_at = ? WHERE id = ?",
                (_now(), job_id),
            )
        return self.get(job_id)
