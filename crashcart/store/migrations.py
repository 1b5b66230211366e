"""Schema migrations: one mechanism, a named set of numbered steps per owner.

The core's steps are ``MIGRATIONS`` (recorded in ``schema_migrations``); another owner of tables in the same
file (the Slack bot's job queue) passes its own steps and name to ``migrate`` and gets its own record table
(``<owner>_schema_migrations``). Each call applies the missing steps in one transaction.
"""

from __future__ import annotations

import builtins
import contextlib
import re
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from crashcart.errors import StoreError

if TYPE_CHECKING:  # imported when a store is opened: commands that keep no store never load it
    from sqlite_utils import Database

from crashcart.store.records import DB_ERRORS, stamp, utcnow

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


def _v5_citation_locators(db: Database) -> None:
    """Citations of an entry inside a structured file (a Flight Recorder dump's ``entries[7]``) keep its locator."""
    db.execute("ALTER TABLE citations ADD COLUMN locator TEXT")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _v1_initial),
    Migration(2, "index list order and search lookups", _v2_indexes),
    Migration(3, "runbooks and the approvals audit trail", _v3_runbooks),
    Migration(4, "model calls and the model answer cache", _v4_model_calls),
    Migration(5, "citation locators", _v5_citation_locators),
)


CORE = "crashcart"
_OWNER = re.compile(r"[a-z][a-z0-9_]{0,30}")


def record_table(owner: str) -> str:
    """Where an owner's applied steps are recorded (the core's table keeps its historical name)."""
    if not _OWNER.fullmatch(owner):
        raise ValueError(f"migration owner must be a short lowercase name, got {owner!r}")
    return "schema_migrations" if owner == CORE else f"{owner}_schema_migrations"


def migrate(db: Database, steps: Sequence[Migration] = MIGRATIONS, *, owner: str = CORE) -> builtins.list[int]:
    """Apply ``owner``'s steps not yet recorded, in order, in one transaction.

    :param db: an open database (not inside a transaction)
    :param steps: migrations in strictly increasing version order
    :param owner: whose tables these steps make (``crashcart``, or another package sharing the file)
    :returns: the versions applied now (empty when the schema was already current)
    :raises StoreError: a step failed (nothing of this call is kept) or the file is newer than ``steps``
    """
    versions = [step.version for step in steps]
    if versions != sorted(set(versions)):
        raise ValueError("migration versions must be unique and increasing")
    conn = db.conn
    applied: builtins.list[int] = []
    table = record_table(owner)
    current = table
    committed = False
    try:
        conn.execute("BEGIN IMMEDIATE")  # take the write lock first: two openers never both migrate
        db.table(table).create(
            {"version": int, "name": str, "applied_at": str},
            pk="version",
            not_null=["name", "applied_at"],
            if_not_exists=True,
        )
        done = {row[0] for row in conn.execute(f"SELECT version FROM {table}")}
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
                f"INSERT INTO {table} (version, name, applied_at) VALUES (?, ?, ?)",
                (step.version, step.name, stamp(utcnow())),
            )
            applied.append(step.version)
        conn.execute("COMMIT")
        committed = True
    except DB_ERRORS as exc:
        raise StoreError(f"migrate to {current}: {exc}") from exc
    finally:
        if not committed:
            rollback(conn)
    return applied


def rollback(conn: sqlite3.Connection) -> None:
    # The error being raised says more than a failed rollback would (e.g. on a closed connection).
    with contextlib.suppress(sqlite3.Error):
        if conn.in_transaction:
            conn.execute("ROLLBACK")
