"""Store stage: keeps every diagnosis run in one SQLite file (sqlite-utils, WAL) and reads it back.

Input: a ``DiagnosisDocument`` plus its files, findings, groups and citations; output:
``IncidentSummary`` / ``StoredIncident``. Does file I/O, sync (async callers use a thread).
The schema is brought up to date on open (``migrations``); sqlite3 errors become ``StoreError``.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from crashcart.errors import IncidentNotFound, RunbookError, StoreError
from crashcart.models import (
    BundleFile,
    Citation,
    DiagnosisDocument,
    DocRunbookStep,
    Finding,
    Group,
)
from crashcart.settings import StoreSettings

if TYPE_CHECKING:  # imported when a store is opened: commands that keep no store never load it
    from sqlite_utils import Database

from crashcart.store.migrations import MIGRATIONS, migrate, rollback
from crashcart.store.records import (
    DB_ERRORS,
    ApprovalEntry,
    Decision,
    IncidentSummary,
    RunbookPlan,
    StoredIncident,
    stamp,
    utcnow,
)
from crashcart.store.rows import child_model, child_row, search_body

BUSY_TIMEOUT_MS = 5_000
_M = TypeVar("_M", bound=BaseModel)

# --- the store -------------------------------------------------------------------------------------


def _open(path: Path, busy_timeout_ms: int) -> Database:
    from sqlite_utils import Database

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"open {path}: cannot create directory {path.parent} ({exc.strerror or exc}); "
            "set CRASHCART_DB to a path in a writable directory"
        ) from exc
    conn: sqlite3.Connection | None = None
    try:
        # check_same_thread=False: async callers use worker threads; Store serialises access itself.
        conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, check_same_thread=False)
        db = Database(conn, execute_plugins=False)
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        db.execute("PRAGMA foreign_keys = ON")
        db.enable_wal()
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        if getattr(exc, "sqlite_errorname", "") in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
            hint = "it is not a usable SQLite database; move it aside or set CRASHCART_DB to another file"
        else:
            hint = "check that CRASHCART_DB names a writable file"
        raise StoreError(f"open {path}: {exc}; {hint}") from exc
    return db


class Store:
    """Incidents, their runs and the evidence behind each run, in one SQLite file.

    Thread-safe (one lock around one connection); several ``Store`` objects or processes may share
    a file (WAL, busy timeout, writes take the write lock up front).
    """

    def __init__(
        self,
        settings: StoreSettings,
        *,
        clock: Callable[[], datetime] = utcnow,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    ) -> None:
        """Open (creating the file and its directory if needed) and bring the schema up to date.

        :raises StoreError: the directory cannot be created, the file is not a database, or a
            migration failed
        """
        self.path = settings.db_path
        self._clock = clock
        self._lock = threading.RLock()
        self._db = _open(self.path, busy_timeout_ms)
        try:
            migrate(self._db, MIGRATIONS)
        except StoreError:
            self._db.close()
            raise

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection. Further calls raise ``StoreError``."""
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._db.close()

    @contextlib.contextmanager
    def _transaction(self, operation: str, *, write: bool) -> Iterator[Database]:
        """One transaction (a consistent snapshot for reads); sqlite3 errors become StoreError."""
        with self._lock:
            conn = self._db.conn
            committed = False
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                yield self._db
                conn.execute("COMMIT")
                committed = True
            except DB_ERRORS as exc:
                raise StoreError(f"{operation}: {exc}") from exc
            finally:
                if not committed:
                    rollback(conn)

    def save(
        self,
        document: DiagnosisDocument,
        *,
        source: str,
        files: Sequence[BundleFile],
        findings: Sequence[Finding],
        groups: Sequence[Group],
        citations: Sequence[Citation],
    ) -> str:
        """Store one run, atomically. A bundle seen before (same sha256) gets a new run.

        :param source: where the bundle came from (a path, a Slack file, a job id); a path's bytes that are
            not UTF-8 (surrogate-escaped in a ``str`` from argv) are kept as ``\\xNN``
        :returns: the incident id: ``document.incident_id``, or the existing incident's id for a
            bundle seen before (the stored document then carries that id)
        :raises StoreError: nothing of this run was written
        """
        now = stamp(self._clock())
        root = document.root_cause
        latest = {
            "engine": document.engine,
            "root_class": root.class_,
            "summary": root.summary,
            "confidence": root.confidence,
            "culprit_node": root.culprit.node,
            "culprit_rank": root.culprit.rank,
            "culprit_gpu": root.culprit.gpu,
        }
        with self._transaction("save", write=True) as db:
            incidents = db.table("incidents")
            sha = document.bundle.sha256
            found = db.execute("SELECT id, runs, job_id FROM incidents WHERE bundle_sha256 = ?", [sha])
            existing = found.fetchone()
            if existing is not None:
                incident_id, runs, job_id = existing
                run = runs + 1
                updates = {"runs": run, "updated_at": now, "job_id": document.job_id or job_id}
                incidents.update(incident_id, {**updates, **latest})
            else:
                incident_id, run = document.incident_id, 1
                taken = db.execute("SELECT bundle_sha256 FROM incidents WHERE id = ?", [incident_id])
                other = taken.fetchone()
                if other is not None:
                    raise StoreError(
                        f"save: incident id {incident_id!r} already belongs to bundle {other[0]}",
                        incident_id=incident_id,
                    )
                incidents.insert(
                    {
                        "id": incident_id,
                        "bundle_sha256": sha,
                        "job_id": document.job_id,
                        "created_at": now,
                        "updated_at": now,
                        "runs": 1,
                        **latest,
                    }
                )
            if document.incident_id != incident_id:
                document = document.model_copy(update={"incident_id": incident_id})
            diagnosis_id = f"{incident_id}/{run}"
            db.table("diagnoses").insert(
                {
                    "id": diagnosis_id,
                    "incident_id": incident_id,
                    "run": run,
                    "created_at": now,
                    "engine": document.engine,
                    "source": printable(source),
                    "document": document.model_dump_json(by_alias=True),
                }
            )
            children: builtins.list[tuple[str, Sequence[BaseModel]]] = [
                ("files", files),
                ("findings", findings),
                ("groups", groups),
                ("citations", citations),
            ]
            for table, items in children:
                rows = (child_row(item, diagnosis_id, seq) for seq, item in enumerate(items))
                db.table(table).insert_all(rows)
            body = search_body(document, files, findings, groups, citations)
            db.table("search_text").insert({"diagnosis_id": diagnosis_id, "incident_id": incident_id, "body": body})
        return str(incident_id)

    def get(self, incident_id: str) -> StoredIncident:
        """The incident and its latest run. ``incident_id`` may be a unique prefix of an id.

        :raises IncidentNotFound: no incident has that id, or the prefix is ambiguous
        """
        with self._transaction("get", write=False) as db:
            resolved = _resolve(db, incident_id)
            summary = _summaries(db, "SELECT * FROM incidents WHERE id = ?", [resolved])[0]
            row = _latest_diagnosis(db, resolved)
            document = DiagnosisDocument.model_validate_json(row["document"])
            return StoredIncident(summary=summary, document=document, source=row["source"])

    def list(self, limit: int = 20) -> builtins.list[IncidentSummary]:
        """Incidents, most recently diagnosed first (a re-run moves an incident to the top)."""
        _check_limit(limit)
        with self._transaction("list", write=False) as db:
            return _summaries(db, "SELECT * FROM incidents ORDER BY updated_at DESC, rowid DESC LIMIT ?", [limit])

    def search(self, text: str, limit: int = 20) -> builtins.list[IncidentSummary]:
        """Full-text search over every run's ids, classes, nodes, summaries and evidence text.

        Each word must match (case-insensitive); ``gpu-node-017`` matches as a phrase. FTS query
        syntax is not interpreted. Best match first.
        """
        _check_limit(limit)
        query = _fts_query(text)
        if not query:
            return []
        sql = """
            WITH hits AS (
                SELECT search_text.incident_id AS incident_id, min(search_text_fts.rank) AS score
                FROM search_text_fts JOIN search_text ON search_text.rowid = search_text_fts.rowid
                WHERE search_text_fts MATCH :query
                GROUP BY search_text.incident_id
            )
            SELECT incidents.* FROM hits JOIN incidents ON incidents.id = hits.incident_id
            ORDER BY hits.score, incidents.updated_at DESC
            LIMIT :limit
        """
        with self._transaction("search", write=False) as db:
            return _summaries(db, sql, {"query": query, "limit": limit})

    def findings(self, incident_id: str) -> builtins.list[Finding]:
        """Findings of the latest run, in the order they were saved."""
        return self._children("findings", Finding, incident_id)

    def files(self, incident_id: str) -> builtins.list[BundleFile]:
        """Bundle files of the latest run, in the order they were saved."""
        return self._children("files", BundleFile, incident_id)

    def groups(self, incident_id: str) -> builtins.list[Group]:
        """Groups of the latest run, in the order they were saved."""
        return self._children("groups", Group, incident_id)

    def citations(self, incident_id: str) -> builtins.list[Citation]:
        """Citations of the latest run, in the order they were saved."""
        return self._children("citations", Citation, incident_id)

    def propose_runbook(
        self, incident_id: str, plan_hash: str, steps: Sequence[DocRunbookStep], *, user: str = "crashcart"
    ) -> str:
        """Record a plan (and a ``proposed`` event) unless it is already the incident's latest plan.

        :returns: the resolved incident id
        :raises IncidentNotFound: no such incident
        """
        with self._transaction("propose runbook", write=True) as db:
            resolved = _resolve(db, incident_id)
            latest = _latest_plan(db, resolved)
            if latest is not None and latest.plan_hash == plan_hash:
                return resolved
            version = 1 + (latest.version if latest is not None else 0)
            class_id = db.execute("SELECT root_class FROM incidents WHERE id = ?", [resolved]).fetchone()[0]
            runbook_id = f"{resolved}/rb{version}"
            now = stamp(self._clock())
            db.execute(
                "INSERT INTO runbooks (id, incident_id, version, plan_hash, class_id, steps, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [runbook_id, resolved, version, plan_hash, class_id, _steps_json(steps), now],
            )
            _append(db, runbook_id, resolved, plan_hash, Decision("proposed", user), now)
        return resolved

    def decide_runbook(
        self, incident_id: str, decide: Callable[[RunbookPlan, builtins.list[ApprovalEntry]], Decision]
    ) -> str:
        """Append the event ``decide(latest plan, its trail)`` returns, in one write transaction.

        :returns: the resolved incident id
        :raises RunbookError: the incident has no runbook
        """
        with self._transaction("decide runbook", write=True) as db:
            resolved = _resolve(db, incident_id)
            plan = _latest_plan(db, resolved)
            if plan is None:
                raise RunbookError(f"incident {resolved} has no proposed runbook", incident_id=resolved)
            trail = [e for e in _trail(db, resolved) if e.runbook_id == plan.id]
            decision = decide(plan, trail)
            _append(db, plan.id, resolved, plan.plan_hash, decision, stamp(self._clock()))
        return resolved

    def runbook(self, incident_id: str) -> tuple[RunbookPlan, builtins.list[ApprovalEntry]]:
        """The latest plan of an incident and the audit trail of all its plans, oldest event first.

        :raises IncidentNotFound: no such incident
        :raises RunbookError: the incident has no runbook
        """
        with self._transaction("runbook", write=False) as db:
            resolved = _resolve(db, incident_id)
            plan = _latest_plan(db, resolved)
            if plan is None:
                raise RunbookError(f"incident {resolved} has no proposed runbook", incident_id=resolved)
            return plan, _trail(db, resolved)

    def record_calls(self, incident_id: str, calls: Sequence[Mapping[str, object]]) -> None:
        """Append one run's model calls (role, model, prompt_hash, tokens, latency_s, cost_usd, status, …)."""
        if not calls:
            return
        at = stamp(self._clock())
        with self._transaction("record model calls", write=True) as db:
            db.table("model_calls").insert_all([{**c, "incident_id": incident_id, "at": at} for c in calls])

    def model_calls(self, incident_id: str) -> builtins.list[dict[str, object]]:
        with self._transaction("model calls", write=False) as db:
            resolved = _resolve(db, incident_id)
            return list(db.query("SELECT * FROM model_calls WHERE incident_id = ? ORDER BY seq", [resolved]))

    def cache_get(self, key: str) -> str | None:
        """A model answer stored under ``key`` (chunk content + model + prompt version + redaction policy)."""
        with self._transaction("read the answer cache", write=False) as db:
            rows = list(db.query("SELECT content FROM llm_cache WHERE key = ?", [key]))
            return str(rows[0]["content"]) if rows else None

    def cache_put(self, key: str, role: str, model: str, content: str) -> None:
        row = {"key": key, "role": role, "model": model, "content": content, "created_at": stamp(self._clock())}
        with self._transaction("write the answer cache", write=True) as db:
            db.table("llm_cache").upsert(row, pk="key")

    def _children(self, table: str, cls: type[_M], incident_id: str) -> builtins.list[_M]:
        with self._transaction(table, write=False) as db:
            diagnosis_id = _latest_diagnosis(db, _resolve(db, incident_id))["id"]
            rows = db.query(f'SELECT * FROM "{table}" WHERE diagnosis_id = ? ORDER BY seq', [diagnosis_id])
            return [child_model(cls, table, row) for row in rows]


def _steps_json(steps: Sequence[DocRunbookStep]) -> str:
    return json.dumps([s.model_dump(mode="json") for s in steps], ensure_ascii=False)


def _latest_plan(db: Database, incident_id: str) -> RunbookPlan | None:
    rows = db.query("SELECT * FROM runbooks WHERE incident_id = ? ORDER BY version DESC LIMIT 1", [incident_id])
    for row in rows:
        return RunbookPlan.model_validate({**row, "steps": json.loads(row["steps"])})
    return None


def _trail(db: Database, incident_id: str) -> builtins.list[ApprovalEntry]:
    rows = db.query("SELECT * FROM approvals WHERE incident_id = ? ORDER BY seq", [incident_id])
    return [ApprovalEntry.model_validate(row) for row in rows]


def _append(db: Database, runbook_id: str, incident_id: str, plan_hash: str, d: Decision, at: str) -> None:
    db.execute(
        'INSERT INTO approvals (incident_id, runbook_id, plan_hash, event, "user", at, reason, detail) '
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [incident_id, runbook_id, plan_hash, d.event, d.user, at, d.reason, d.detail],
    )


def _fts_query(text: str) -> str:
    """Each whitespace-separated word as an FTS5 string (all must match); no operators survive."""
    return " ".join('"' + word.replace('"', '""') + '"' for word in text.split())


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")


def _resolve(db: Database, incident_id: str) -> str:
    if db.execute("SELECT 1 FROM incidents WHERE id = ?", [incident_id]).fetchone():
        return incident_id
    if incident_id:
        rows = db.execute(
            "SELECT id FROM incidents WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT 3",
            [len(incident_id), incident_id],
        ).fetchall()
        if len(rows) == 1:
            return str(rows[0][0])
        if rows:
            raise IncidentNotFound(
                f"id prefix {incident_id!r} is ambiguous: matches {', '.join(r[0] for r in rows)}...",
                incident_id=incident_id,
            )
    raise IncidentNotFound(f"no incident with id or id prefix {incident_id!r}", incident_id=incident_id)


def _latest_diagnosis(db: Database, incident_id: str) -> dict[str, Any]:
    rows = db.query(
        "SELECT id, source, document FROM diagnoses WHERE incident_id = ? ORDER BY run DESC LIMIT 1",
        [incident_id],
    )
    for row in rows:
        return row
    raise StoreError(f"get: incident {incident_id!r} has no stored run", incident_id=incident_id)


def _summaries(db: Database, sql: str, params: Sequence[Any] | dict[str, Any]) -> builtins.list[IncidentSummary]:
    fields = IncidentSummary.model_fields
    return [IncidentSummary.model_validate({name: row[name] for name in fields}) for row in db.query(sql, params)]


def printable(text: str) -> str:
    """``text`` with the bytes Python surrogate-escaped (a non-UTF-8 file name from argv or the file system)
    written as ``\\xNN``: SQLite stores UTF-8 only, and refusing the run for its path would lose it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text
