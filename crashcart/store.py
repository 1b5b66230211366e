"""Store stage: keeps every diagnosis run in one SQLite file (sqlite-utils, WAL) and reads it back.

Input: a ``DiagnosisDocument`` plus its files, findings, groups and citations; output:
``IncidentSummary`` / ``StoredIncident``. Does file I/O, sync (async callers use a thread).
Schema steps are ``MIGRATIONS``, recorded in ``schema_migrations``; sqlite3 errors become ``StoreError``.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict

from crashcart.errors import IncidentNotFound, RunbookError, StoreError
from crashcart.models import (
    BundleFile,
    Citation,
    DiagnosisDocument,
    DocContributing,
    DocRunbookStep,
    DocSymptom,
    Finding,
    Group,
)
from crashcart.settings import StoreSettings

if TYPE_CHECKING:  # imported when a store is opened: commands that keep no store never load it
    from sqlite_utils import Database

BUSY_TIMEOUT_MS = 5_000
# What a statement or a row conversion can raise: sqlite3 itself, pydantic serialisation and
# validation (ValueError subclasses, as is UnicodeEncodeError for lone surrogates), and
# OverflowError for an int that does not fit SQLite's 64-bit INTEGER.
_DB_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, ValueError, OverflowError)

_M = TypeVar("_M", bound=BaseModel)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _iso(value: datetime) -> str:
    """ISO-8601 text. Aware times are stored in UTC (fixed width, so they sort as text).

    A naive time (a log clock of unknown zone) is kept naive rather than guessed into UTC.
    """
    if value.tzinfo is None:
        return value.isoformat()
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _stamp(value: datetime) -> str:
    """Our own timestamps: always UTC; a naive clock reading is taken to be UTC already."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return _iso(value)


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


# --- migrations ------------------------------------------------------------------------------------


class Migration(NamedTuple):
    """One schema step. Never edit a released step: append a new one with the next version."""

    version: int
    name: str
    apply: Callable[[Database], None]


def _child(columns: dict[str, type]) -> dict[str, type]:
    """Columns of a per-run table: rows belong to a diagnosis and keep their input order."""
    return {"diagnosis_id": str, "seq": int, **columns}


_CHILD_FK = [("diagnosis_id", "diagnoses", "id")]


def _v1_initial(db: Database) -> None:
    db.table("incidents").create(
        {
            "id": str,
            "bundle_sha256": str,
            "job_id": str,
            "created_at": str,
            "updated_at": str,
            "runs": int,
            "engine": str,
            "root_class": str,
            "summary": str,
            "confidence": float,
            "culprit_node": str,
            "culprit_rank": int,
            "culprit_gpu": str,
        },
        pk="id",
        not_null=["bundle_sha256", "created_at", "updated_at", "runs", "engine", "root_class", "summary"],
    )
    db.table("incidents").create_index(["bundle_sha256"], unique=True)
    db.table("diagnoses").create(
        {
            "id": str,
            "incident_id": str,
            "run": int,
            "created_at": str,
            "engine": str,
            "source": str,
            "document": str,
        },
        pk="id",
        foreign_keys=[("incident_id", "incidents", "id")],
        not_null=["incident_id", "run", "created_at", "engine", "source", "document"],
    )
    db.table("diagnoses").create_index(["incident_id", "run"], unique=True)
    child_not_null = ["diagnosis_id", "seq"]
    db.table("files").create(
        _child(
            {
                "path": str,
                "kind": str,
                "size": int,
                "lines": int,
                "host": str,
                "rank": int,
                "clock": str,
                "compressed": int,
                "note": str,
            }
        ),
        pk=("diagnosis_id", "seq"),
        foreign_keys=_CHILD_FK,
        not_null=[*child_not_null, "path", "kind", "size"],
    )
    db.table("findings").create(
        _child(
            {
                "id": str,
                "class_id": str,
                "signature": str,
                "role": str,
                "severity": str,
                "summary": str,
                "time": str,
                "rank": int,
                "node": str,
                "gpu": str,
                "fields": str,  # JSON object
                "evidence": str,  # JSON list of Evidence
                "source": str,
            }
        ),
        pk=("diagnosis_id", "seq"),
        foreign_keys=_CHILD_FK,
        not_null=[*child_not_null, "id", "class_id", "signature", "role", "severity", "summary", "evidence"],
    )
    db.table("groups").create(
        _child(
            {
                "key": str,
                "class_id": str,
                "signature": str,
                "role": str,
                "severity": str,
                "template": str,
                "summary": str,
                "count": int,
                "ranks": str,  # JSON lists / objects from here on
                "nodes": str,
                "gpus": str,
                "first_time": str,
                "last_time": str,
                "exemplar": str,
                "evidence": str,
                "common_fields": str,
                "finding_ids": str,
            }
        ),
        pk=("diagnosis_id", "seq"),
        foreign_keys=_CHILD_FK,
        not_null=[*child_not_null, "key", "class_id", "summary", "count", "exemplar"],
    )
    db.table("citations").create(
        _child(
            {
                "evidence_id": str,
                "file": str,
                "line": int,
                "end_line": int,
                "text": str,
                "verified": int,
                "status": str,
            }
        ),
        pk=("diagnosis_id", "seq"),
        foreign_keys=_CHILD_FK,
        not_null=[*child_not_null, "file", "line", "text", "verified", "status"],
    )
    # One searchable body per run, indexed by FTS5 (external content, kept in sync by triggers).
    db.table("search_text").create(
        {"diagnosis_id": str, "incident_id": str, "body": str},
        pk="diagnosis_id",
        foreign_keys=[("diagnosis_id", "diagnoses", "id"), ("incident_id", "incidents", "id")],
        not_null=["incident_id", "body"],
    )
    db.table("search_text").enable_fts(["body"], create_triggers=True)


def _v2_indexes(db: Database) -> None:
    db.table("incidents").create_index(["updated_at"])
    db.table("search_text").create_index(["incident_id"])


_V3_RUNBOOKS = [
    """CREATE TABLE runbooks (
        id TEXT PRIMARY KEY,
        incident_id TEXT NOT NULL REFERENCES incidents(id),
        version INTEGER NOT NULL,
        plan_hash TEXT NOT NULL,
        class_id TEXT NOT NULL,
        steps TEXT NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (incident_id, version)
    )""",
    """CREATE TABLE approvals (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        incident_id TEXT NOT NULL REFERENCES incidents(id),
        runbook_id TEXT NOT NULL REFERENCES runbooks(id),
        plan_hash TEXT NOT NULL,
        event TEXT NOT NULL CHECK (event IN ('proposed', 'approved', 'rejected', 'refused')),
        "user" TEXT NOT NULL CHECK (length(trim("user")) > 0),
        at TEXT NOT NULL,
        reason TEXT,
        detail TEXT,
        CHECK (event != 'rejected' OR length(trim(coalesce(reason, ''))) > 0)
    )""",
    "CREATE INDEX idx_approvals_incident_seq ON approvals (incident_id, seq)",
    *(
        f"CREATE TRIGGER {table}_append_only_{op.lower()} BEFORE {op} ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
        for table in ("runbooks", "approvals")
        for op in ("UPDATE", "DELETE")
    ),
]


def _v3_runbooks(db: Database) -> None:
    """Runbook plans (one row per proposed plan) and the append-only approvals audit trail."""
    for statement in _V3_RUNBOOKS:  # one by one: executescript would commit the migration's transaction
        db.execute(statement)


_V4_MODEL_CALLS = [
    """CREATE TABLE model_calls (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        incident_id TEXT NOT NULL,
        role TEXT NOT NULL,
        model TEXT NOT NULL,
        prompt_hash TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        latency_s REAL NOT NULL,
        cost_usd REAL NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        error TEXT,
        at TEXT NOT NULL
    )""",
    "CREATE INDEX idx_model_calls_incident ON model_calls (incident_id, seq)",
    """CREATE TABLE llm_cache (
        key TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        model TEXT NOT NULL,
        content TEXT NOT NULL,
        created_at TEXT NOT NULL
    )""",
]


def _v4_model_calls(db: Database) -> None:
    """Every model call (role, model, prompt hash, tokens, latency, cost, status) and the answer cache."""
    for statement in _V4_MODEL_CALLS:
        db.execute(statement)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _v1_initial),
    Migration(2, "index list order and search lookups", _v2_indexes),
    Migration(3, "runbooks and the approvals audit trail", _v3_runbooks),
    Migration(4, "model calls and the model answer cache", _v4_model_calls),
)


def migrate(db: Database, steps: Sequence[Migration] = MIGRATIONS) -> builtins.list[int]:
    """Apply the steps not yet in ``schema_migrations``, in order, in one transaction.

    :param db: an open database (not inside a transaction)
    :param steps: migrations in strictly increasing version order
    :returns: the versions applied now (empty when the schema was already current)
    :raises StoreError: a step failed (nothing of this call is kept) or the file is newer than ``steps``
    """
    versions = [step.version for step in steps]
    if versions != sorted(set(versions)):
        raise ValueError("migration versions must be unique and increasing")
    conn = db.conn
    applied: builtins.list[int] = []
    current = "schema_migrations"
    committed = False
    try:
        conn.execute("BEGIN IMMEDIATE")  # take the write lock first: two openers never both migrate
        db.table("schema_migrations").create(
            {"version": int, "name": str, "applied_at": str},
            pk="version",
            not_null=["name", "applied_at"],
            if_not_exists=True,
        )
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        if done and versions and max(done) > versions[-1]:
            raise StoreError(
                f"migrate: database schema version {max(done)} is newer than this CrashCart knows "
                f"({versions[-1]}); upgrade crashcart or use another CRASHCART_DB"
            )
        for step in steps:
            if step.version in done:
                continue
            current = f"version {step.version} ({step.name})"
            step.apply(db)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (step.version, step.name, _stamp(_utcnow())),
            )
            applied.append(step.version)
        conn.execute("COMMIT")
        committed = True
    except _DB_ERRORS as exc:
        raise StoreError(f"migrate to {current}: {exc}") from exc
    finally:
        if not committed:
            _rollback(conn)
    return applied


def _rollback(conn: sqlite3.Connection) -> None:
    # The error being raised says more than a failed rollback would (e.g. on a closed connection).
    with contextlib.suppress(sqlite3.Error):
        if conn.in_transaction:
            conn.execute("ROLLBACK")


# --- rows <-> models -------------------------------------------------------------------------------

_JSON_COLUMNS: dict[str, frozenset[str]] = {
    "files": frozenset(),
    "findings": frozenset({"fields", "evidence"}),
    "groups": frozenset({"ranks", "nodes", "gpus", "exemplar", "evidence", "common_fields", "finding_ids"}),
    "citations": frozenset(),
}


def _child_row(model: BaseModel, diagnosis_id: str, seq: int) -> dict[str, Any]:
    row: dict[str, Any] = {"diagnosis_id": diagnosis_id, "seq": seq}
    data = model.model_dump(mode="json", warnings="error")
    for name, value in data.items():
        raw = getattr(model, name)
        if isinstance(raw, datetime):
            row[name] = _iso(raw)
        elif isinstance(value, dict | builtins.list):
            row[name] = json.dumps(value, ensure_ascii=False)
        else:
            row[name] = value
    return row


def _child_model(cls: type[_M], table: str, row: dict[str, Any]) -> _M:
    json_columns = _JSON_COLUMNS[table]
    data = {
        name: json.loads(value) if name in json_columns and value is not None else value
        for name, value in row.items()
        if name not in ("diagnosis_id", "seq")
    }
    return cls.model_validate(data)


def _search_body(
    document: DiagnosisDocument,
    files: Sequence[BundleFile],
    findings: Sequence[Finding],
    groups: Sequence[Group],
    citations: Sequence[Citation],
) -> str:
    """Everything a person may type to find this run: ids, classes, nodes, summaries, evidence text."""
    root = document.root_cause
    parts: builtins.list[str | None] = [
        document.incident_id,
        document.job_id,
        root.class_,
        root.summary,
        root.culprit.node,
        root.culprit.gpu,
        None if root.culprit.rank is None else str(root.culprit.rank),
    ]
    parts += [c.text for c in root.citations]
    claims: builtins.list[DocContributing | DocSymptom] = [*document.contributing, *document.symptoms]
    for claim in claims:
        parts += [claim.class_, claim.summary, *(c.text for c in claim.citations)]
    for symptom in document.symptoms:
        parts += symptom.nodes
    parts += [h.class_ for h in document.hypotheses]
    parts += [f.host for f in files]
    for finding in findings:
        parts += [finding.class_id, finding.signature, finding.summary, finding.node, finding.gpu]
        parts += [e.text for e in finding.evidence]
    for group in groups:
        parts += [group.class_id, group.summary, *group.nodes]
    parts += [c.text for c in citations]
    return "\n".join(dict.fromkeys(p for p in parts if p))


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
        clock: Callable[[], datetime] = _utcnow,
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
            except _DB_ERRORS as exc:
                raise StoreError(f"{operation}: {exc}") from exc
            finally:
                if not committed:
                    _rollback(conn)

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

        :param source: where the bundle came from (a path, a Slack file, a job id)
        :returns: the incident id: ``document.incident_id``, or the existing incident's id for a
            bundle seen before (the stored document then carries that id)
        :raises StoreError: nothing of this run was written
        """
        now = _stamp(self._clock())
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
                    "source": source,
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
                rows = (_child_row(item, diagnosis_id, seq) for seq, item in enumerate(items))
                db.table(table).insert_all(rows)
            body = _search_body(document, files, findings, groups, citations)
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
            now = _stamp(self._clock())
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
            _append(db, plan.id, resolved, plan.plan_hash, decision, _stamp(self._clock()))
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
        at = _stamp(self._clock())
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
        row = {"key": key, "role": role, "model": model, "content": content, "created_at": _stamp(self._clock())}
        with self._transaction("write the answer cache", write=True) as db:
            db.table("llm_cache").upsert(row, pk="key")

    def _children(self, table: str, cls: type[_M], incident_id: str) -> builtins.list[_M]:
        with self._transaction(table, write=False) as db:
            diagnosis_id = _latest_diagnosis(db, _resolve(db, incident_id))["id"]
            rows = db.query(f'SELECT * FROM "{table}" WHERE diagnosis_id = ? ORDER BY seq', [diagnosis_id])
            return [_child_model(cls, table, row) for row in rows]


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
