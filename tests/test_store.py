"""Tests for crashcart.store: round trips, runs, listing, search, atomicity, migrations, errors."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from sqlite_utils import Database

from crashcart.errors import IncidentNotFound, StoreError
from crashcart.models import (
    BundleFile,
    Citation,
    DiagnosisDocument,
    DocBundle,
    DocCitation,
    DocCulprit,
    DocHypothesis,
    DocRootCause,
    DocRunbook,
    DocRunbookStep,
    DocStats,
    DocSymptom,
    DocTimelineEntry,
    Evidence,
    Finding,
    Group,
)
from crashcart.settings import StoreSettings
from crashcart.store import MIGRATIONS, Migration, Store, migrate

T0 = datetime(2024, 5, 1, 2, 13, 7, tzinfo=UTC)
XID_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."
TIMEOUT_LINE = "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE)"


class Clock:
    """A clock that moves one minute per reading."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(minutes=1)
        return self.now


# --- factory ---------------------------------------------------------------------------------------


def make_evidence(text: str = XID_LINE, *, file: str = "nodes/gpu-node-017/dmesg.log", line: int = 1842) -> Evidence:
    return Evidence(id=f"e-{line}", file=file, line=line, text=text)


def make_document(
    *,
    incident_id: str = "inc-0001",
    sha: str = "a" * 64,
    job_id: str | None = "job-123456",
    root_class: str = "gpu_fallen_off_bus",
    summary: str = "GPU fell off the bus on gpu-node-017",
    node: str | None = "gpu-node-017",
    rank: int | None = 27,
    evidence_text: str = XID_LINE,
    engine: str = "offline",
) -> DiagnosisDocument:
    citation = DocCitation(file="nodes/gpu-node-017/dmesg.log", line=1842, text=evidence_text, verified=True)
    return DiagnosisDocument.model_validate(
        {
            "incident_id": incident_id,
            "job_id": job_id,
            "engine": engine,
            "bundle": DocBundle(sha256=sha, files=3, bytes=4096),
            "root_cause": DocRootCause.model_validate(
                {
                    "class": root_class,
                    "summary": summary,
                    "culprit": DocCulprit(node=node, rank=rank, gpu="0000:3b:00"),
                    "time": "2024-05-01T02:13:07+00:00",
                    "confidence": 0.9,
                    "citations": [citation],
                }
            ),
            "contributing": [],
            "symptoms": [
                DocSymptom.model_validate(
                    {
                        "class": "nccl_watchdog_timeout",
                        "summary": "511 ranks hit the NCCL watchdog",
                        "count": 511,
                        "ranks": [0, 1, 2],
                        "citations": [],
                    }
                )
            ],
            "hypotheses": [DocHypothesis.model_validate({"class": "ecc_error", "score": 0.2, "why_not": "none"})],
            "timeline": [
                DocTimelineEntry(time=None, file="nodes/gpu-node-017/dmesg.log", line=1842, text=XID_LINE, role="x")
            ],
            "runbook": DocRunbook(steps=[DocRunbookStep(id="drain", title="Drain", command="scontrol", risk="low")]),
            "stats": DocStats(files=3, lines=100, bytes=4096, findings=1, groups=1, seconds=0.5),
        }
    )


def make_finding(
    *,
    fid: str = "f1",
    class_id: str = "gpu_fallen_off_bus",
    summary: str = "Xid 79 on gpu-node-017",
    node: str | None = "gpu-node-017",
    text: str = XID_LINE,
    time: datetime | None = T0,
) -> Finding:
    return Finding(
        id=fid,
        class_id=class_id,
        signature="xid",
        role="root_candidate",
        severity="P0",
        summary=summary,
        time=time,
        rank=27,
        node=node,
        gpu="0000:3b:00",
        fields={"xid": "79"},
        evidence=[make_evidence(text)],
    )


def make_group(finding: Finding) -> Group:
    return Group(
        key="g1",
        class_id=finding.class_id,
        signature=finding.signature,
        role=finding.role,
        severity=finding.severity,
        template="NVRM: Xid (PCI:<*>): <*>",
        summary=finding.summary,
        count=1,
        ranks=[27],
        nodes=[finding.node] if finding.node else [],
        gpus=["0000:3b:00"],
        first_time=T0,
        last_time=T0 + timedelta(seconds=1),
        exemplar=finding.evidence[0],
        evidence=list(finding.evidence),
        common_fields={"xid": "79"},
        finding_ids=[finding.id],
    )


def make_citation(text: str = XID_LINE) -> Citation:
    return Citation(
        evidence_id="e-1842",
        file="nodes/gpu-node-017/dmesg.log",
        line=1842,
        text=text,
        verified=True,
        status="ok",
    )


def make_file(host: str = "gpu-node-017") -> BundleFile:
    return BundleFile(path=f"nodes/{host}/dmesg.log", kind="kernel_log", size=4096, lines=2000, host=host)


def save(
    store: Store,
    document: DiagnosisDocument,
    *,
    findings: list[Finding] | None = None,
    citations: list[Citation] | None = None,
    source: str = "bundle.tar.gz",
    host: str = "gpu-node-017",
) -> str:
    found = [make_finding(text=document.root_cause.citations[0].text)] if findings is None else findings
    return store.save(
        document,
        source=source,
        files=[make_file(host)],
        findings=found,
        groups=[make_group(f) for f in found[:1]],
        citations=[make_citation()] if citations is None else citations,
    )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "crashcart.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store(StoreSettings(db_path=db_path), clock=Clock()) as opened:
        yield opened


def count_rows(path: Path) -> dict[str, int]:
    tables = ["incidents", "diagnoses", "files", "findings", "groups", "citations", "search_text"]
    with sqlite3.connect(path) as conn:
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


# --- round trips -----------------------------------------------------------------------------------


def test_a_source_path_that_is_not_utf8_is_stored_escaped(store: Store) -> None:
    source = "/bundles/job-\udcff\udcfe.tar.gz"  # b"job-\xff\xfe" as Python hands a non-UTF-8 argv to a program
    incident_id = save(store, make_document(), source=source)
    assert store.get(incident_id).source == "/bundles/job-\\xff\\xfe.tar.gz"


def test_save_then_get_round_trips(store: Store) -> None:
    document = make_document()
    finding = make_finding()
    incident_id = store.save(
        document,
        source="/bundles/job-123456.tar.gz",
        files=[make_file()],
        findings=[finding],
        groups=[make_group(finding)],
        citations=[make_citation()],
    )

    stored = store.get(incident_id)

    assert incident_id == "inc-0001"
    assert stored.document == document
    assert stored.source == "/bundles/job-123456.tar.gz"
    summary = stored.summary
    assert (summary.id, summary.job_id, summary.bundle_sha256, summary.runs) == (
        "inc-0001",
        "job-123456",
        "a" * 64,
        1,
    )
    assert (summary.engine, summary.root_class, summary.confidence) == ("offline", "gpu_fallen_off_bus", 0.9)
    assert (summary.culprit_node, summary.culprit_rank) == ("gpu-node-017", 27)
    assert summary.created_at == summary.updated_at == T0 + timedelta(minutes=1)
    assert store.findings(incident_id) == [finding]
    assert store.files(incident_id) == [make_file()]
    assert store.groups(incident_id) == [make_group(finding)]
    assert store.citations(incident_id) == [make_citation()]


def test_timestamps_are_stored_as_iso_utc_text(store: Store, db_path: Path) -> None:
    finding = make_finding(time=datetime(2024, 5, 1, 4, 13, 7, tzinfo=timezone(timedelta(hours=2))))
    save(store, make_document(), findings=[finding])

    with sqlite3.connect(db_path) as conn:
        created, updated = conn.execute("SELECT created_at, updated_at FROM incidents").fetchone()
        (finding_time,) = conn.execute("SELECT time FROM findings").fetchone()
    assert created == updated == "2024-05-01T02:14:07.000000+00:00"
    assert finding_time == "2024-05-01T02:13:07.000000+00:00"
    assert store.findings("inc-0001")[0].time == finding.time


def test_naive_log_times_stay_naive(store: Store) -> None:
    finding = make_finding(time=datetime(2024, 5, 1, 2, 13, 7, 5))  # a log clock of unknown zone
    save(store, make_document(), findings=[finding])
    assert store.findings("inc-0001") == [finding]


words = st.text(max_size=30)
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
finite = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def documents(draw: st.DrawFn) -> DiagnosisDocument:
    def citation() -> DocCitation:
        return DocCitation(file=draw(words), line=draw(ints), text=draw(words), verified=draw(st.booleans()))

    return DiagnosisDocument.model_validate(
        {
            "incident_id": "placeholder",
            "job_id": draw(st.none() | words),
            "engine": draw(st.sampled_from(["offline", "llm"])),
            "bundle": DocBundle(sha256="placeholder", files=draw(ints), bytes=draw(ints)),
            "root_cause": {
                "class": draw(words),
                "summary": draw(words),
                "culprit": DocCulprit(node=draw(st.none() | words), rank=draw(st.none() | ints), gpu=draw(words)),
                "time": draw(st.none() | words),
                "confidence": draw(finite),
                "citations": [citation() for _ in range(draw(st.integers(0, 3)))],
            },
            "contributing": [{"class": draw(words), "summary": draw(words), "citations": [citation()]}],
            "symptoms": [
                {
                    "class": draw(words),
                    "summary": draw(words),
                    "count": draw(ints),
                    "ranks": draw(st.lists(ints, max_size=4)),
                    "citations": [],
                    "nodes": draw(st.lists(words, max_size=3)),
                }
            ],
            "hypotheses": [{"class": draw(words), "score": draw(finite), "why_not": draw(words)}],
            "timeline": [
                {
                    "time": draw(st.none() | words),
                    "file": draw(words),
                    "line": draw(ints),
                    "text": draw(words),
                    "role": "x",
                }
            ],
            "runbook": {"steps": [{"id": draw(words), "title": draw(words), "command": draw(words), "risk": "high"}]},
            "stats": DocStats(
                files=draw(ints),
                lines=draw(ints),
                bytes=draw(ints),
                findings=0,
                groups=0,
                seconds=draw(finite),
            ),
            "topology": draw(st.dictionaries(words, st.dictionaries(words, st.none() | words | ints), max_size=2)),
            "reasoning": draw(st.lists(words, max_size=3)),
        }
    )


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with Store(StoreSettings(db_path=tmp_path_factory.mktemp("hyp") / "crashcart.db")) as opened:
        yield opened


_serial = iter(range(10**9))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    document=documents(),
    # allow_imaginary=False: a wall time in a DST gap never compares equal across zones (PEP 495), and no
    # log prints one
    times=st.lists(st.none() | st.datetimes(timezones=st.none() | st.timezones(), allow_imaginary=False), max_size=3),
)
def test_any_document_survives_a_round_trip(
    shared_store: Store, document: DiagnosisDocument, times: list[datetime | None]
) -> None:
    n = next(_serial)
    document = document.model_copy(
        update={
            "incident_id": f"hyp-{n}",
            "bundle": document.bundle.model_copy(update={"sha256": f"{n:064x}"}),
        }
    )
    found = [make_finding(fid=f"f{i}", text=document.root_cause.summary, time=t) for i, t in enumerate(times)]

    incident_id = save(shared_store, document, findings=found)
    # compared as instants: a wall time a zone repeats (fold) never equals a time of another zone (PEP 495), so
    # an aware time is compared in UTC, where the store keeps it
    found = [f.model_copy(update={"time": _utc(f.time)}) for f in found]

    assert shared_store.get(incident_id).document == document
    assert shared_store.findings(incident_id) == found


def _utc(t: datetime | None) -> datetime | None:
    return t.astimezone(UTC) if t is not None and t.tzinfo is not None else t


def test_tables_have_a_column_for_every_model_field(store: Store, db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        tables: list[tuple[str, type[BaseModel]]] = [
            ("files", BundleFile),
            ("findings", Finding),
            ("groups", Group),
            ("citations", Citation),
        ]
        for table, model in tables:
            columns = {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}
            assert set(model.model_fields) <= columns, table


# --- runs, listing, lookup -------------------------------------------------------------------------


def test_same_bundle_twice_is_one_incident_with_two_runs(store: Store, db_path: Path) -> None:
    first_finding = make_finding(fid="first")
    first_id = save(store, make_document(), findings=[first_finding])
    second_doc = make_document(incident_id="inc-9999", summary="second look", root_class="xid_79", job_id=None)
    second_finding = make_finding(fid="second", summary="second look")

    second_id = save(store, second_doc, findings=[second_finding], source="slack")

    assert second_id == first_id == "inc-0001"
    stored = store.get(first_id)
    assert stored.summary.runs == 2
    assert stored.summary.created_at == T0 + timedelta(minutes=1)
    assert stored.summary.updated_at == T0 + timedelta(minutes=2)
    assert (stored.summary.summary, stored.summary.root_class) == ("second look", "xid_79")
    assert stored.summary.job_id == "job-123456"  # the later run did not know it; the incident keeps it
    assert stored.document == second_doc.model_copy(update={"incident_id": "inc-0001"})
    assert stored.source == "slack"
    assert store.findings(first_id) == [second_finding]
    assert count_rows(db_path) == {
        "incidents": 1,
        "diagnoses": 2,
        "files": 2,
        "findings": 2,
        "groups": 2,
        "citations": 2,
        "search_text": 2,
    }
    with sqlite3.connect(db_path) as conn:
        first_rows = conn.execute("SELECT id FROM findings WHERE diagnosis_id = 'inc-0001/1'").fetchall()
    assert first_rows == [("first",)]


def test_an_incident_id_reused_for_another_bundle_is_refused(store: Store) -> None:
    save(store, make_document())
    with pytest.raises(StoreError, match="already belongs to bundle"):
        save(store, make_document(sha="b" * 64))
    assert store.get("inc-0001").summary.bundle_sha256 == "a" * 64


def test_list_is_newest_first_and_a_rerun_moves_to_the_top(store: Store) -> None:
    for n in range(3):
        save(store, make_document(incident_id=f"inc-{n}", sha=f"{n:064x}"))
    assert [s.id for s in store.list()] == ["inc-2", "inc-1", "inc-0"]
    assert [s.id for s in store.list(limit=2)] == ["inc-2", "inc-1"]

    save(store, make_document(incident_id="inc-0", sha=f"{0:064x}"))

    assert [s.id for s in store.list()] == ["inc-0", "inc-2", "inc-1"]
    with pytest.raises(ValueError):
        store.list(limit=0)


def test_list_of_an_empty_store_is_empty(store: Store) -> None:
    assert store.list() == []


def test_get_accepts_a_unique_prefix(store: Store) -> None:
    save(store, make_document(incident_id="abc123", sha="1" * 64))
    save(store, make_document(incident_id="abd456", sha="2" * 64))

    assert store.get("abc").summary.id == "abc123"
    assert store.get("abd4").summary.id == "abd456"
    assert store.findings("abc")[0].id == "f1"


@pytest.mark.parametrize(
    "wanted", ["ab", "zzz", "", "ABC123", "abc123x"], ids=["ambiguous", "unknown", "empty", "case", "longer"]
)
def test_get_unknown_or_ambiguous_id_raises_incident_not_found(store: Store, wanted: str) -> None:
    save(store, make_document(incident_id="abc123", sha="1" * 64))
    save(store, make_document(incident_id="abd456", sha="2" * 64))
    with pytest.raises(IncidentNotFound) as info:
        store.get(wanted)
    assert info.value.incident_id == wanted
    with pytest.raises(IncidentNotFound):
        store.findings(wanted)


# --- search ----------------------------------------------------------------------------------------


@pytest.fixture
def two_incidents(store: Store) -> Store:
    save(store, make_document())
    other = make_document(
        incident_id="inc-0002",
        sha="b" * 64,
        job_id="job-777",
        root_class="nccl_watchdog_timeout",
        summary="collective timeout everywhere",
        node="gpu-node-003",
        evidence_text=TIMEOUT_LINE,
    )
    finding = make_finding(
        class_id="nccl_watchdog_timeout",
        summary="watchdog fired on rank 3",
        node="gpu-node-003",
        text=TIMEOUT_LINE,
    )
    save(store, other, findings=[finding], citations=[make_citation(TIMEOUT_LINE)], host="gpu-node-003")
    return store


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("gpu-node-017", ["inc-0001"]),
        ("gpu_fallen_off_bus", ["inc-0001"]),
        ("fallen off the bus", ["inc-0001"]),
        ("PCI:0000:3b:00", ["inc-0001"]),
        ("job-123456", ["inc-0001"]),
        ("gpu-node-003", ["inc-0002"]),
        ("WorkNCCL ALLREDUCE", ["inc-0002"]),
        ("watchdog fired", ["inc-0002"]),
        ("job-777", ["inc-0002"]),
        ("inc-0002", ["inc-0002"]),
        ("no-such-node", []),
        ("   ", []),
        ('NOT "unbalanced (*', []),
    ],
    ids=[
        "node",
        "class",
        "evidence",
        "evidence-punct",
        "job",
        "other-node",
        "other-evidence",
        "finding-summary",
        "other-job",
        "incident-id",
        "miss",
        "blank",
        "fts-syntax",
    ],
)
def test_search_finds_incidents(two_incidents: Store, query: str, expected: list[str]) -> None:
    assert [s.id for s in two_incidents.search(query)] == expected


def test_search_lists_an_incident_once_and_respects_limit(two_incidents: Store) -> None:
    save(two_incidents, make_document(summary="again"))  # a second run of inc-0001
    assert [s.id for s in two_incidents.search("gpu")] in (["inc-0001", "inc-0002"], ["inc-0002", "inc-0001"])
    assert len(two_incidents.search("gpu", limit=1)) == 1
    assert two_incidents.search("again")[0].runs == 2


# --- atomicity -------------------------------------------------------------------------------------


def unserialisable_finding() -> Finding:
    # Validation is bypassed, as a buggy producer could; serialising it fails midway through save.
    good = make_finding(fid="ok")
    return Finding.model_construct(**{**dict(good), "id": "bad", "fields": {"xid": object()}})


@pytest.mark.parametrize(
    ("findings", "citations"),
    [
        ([make_finding(fid="ok"), unserialisable_finding()], [make_citation()]),
        (
            [make_finding()],
            [make_citation(), make_citation("lone surrogate \udce2 from a surrogateescape decode")],
        ),
    ],
    ids=["finding-json-fails", "last-citation-cannot-be-encoded"],
)
def test_a_failed_save_writes_nothing(
    store: Store, db_path: Path, findings: list[Finding], citations: list[Citation]
) -> None:
    save(store, make_document())
    before = count_rows(db_path)
    kept = store.get("inc-0001")

    with pytest.raises(StoreError, match=r"^save: ") as info:
        save(store, make_document(incident_id="inc-0002", sha="b" * 64), findings=findings, citations=citations)
    with pytest.raises(StoreError):  # a failed re-run of a known bundle leaves it alone too
        save(store, make_document(summary="rerun"), findings=findings, citations=citations)

    assert info.value.__cause__ is not None
    assert count_rows(db_path) == before
    assert store.get("inc-0001") == kept
    with pytest.raises(IncidentNotFound):
        store.get("inc-0002")
    assert save(store, make_document(incident_id="inc-0003", sha="c" * 64)) == "inc-0003"  # still usable


def test_an_int_too_big_for_sqlite_is_a_store_error(store: Store) -> None:
    with pytest.raises(StoreError, match=r"^save: "):
        save(store, make_document(rank=2**70))
    assert store.list() == []


# --- migrations ------------------------------------------------------------------------------------


def versions(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def index_names(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}


ALL = [m.version for m in MIGRATIONS]


def test_opening_a_version_1_database_migrates_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = Database(path)
    assert migrate(old, MIGRATIONS[:1]) == [1]
    old.close()
    assert versions(path) == [1]
    assert "idx_incidents_updated_at" not in index_names(path)

    with Store(StoreSettings(db_path=path)) as store:
        save(store, make_document())

    assert versions(path) == ALL
    assert "idx_incidents_updated_at" in index_names(path)
    with Store(StoreSettings(db_path=path)) as again:  # idempotent
        assert again.get("inc-0001").summary.runs == 1
    assert versions(path) == ALL


def test_migrate_reports_what_it_applied(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.db")
    assert migrate(db) == ALL
    assert migrate(db) == []
    db.close()


def test_a_failing_migration_leaves_the_schema_as_it_was(db_path: Path) -> None:
    Store(StoreSettings(db_path=db_path)).close()

    def broken(db: Database) -> None:
        db.table("future").create({"id": str}, pk="id")
        db.execute("INSERT INTO no_such_table VALUES (1)")

    db = Database(db_path)
    nxt = len(ALL) + 1
    with pytest.raises(StoreError, match=rf"migrate to version {nxt} \(future\)"):
        migrate(db, [*MIGRATIONS, Migration(nxt, "future", broken)])
    assert not db.table("future").exists()
    db.close()
    assert versions(db_path) == ALL


def test_a_database_newer_than_the_code_is_refused(db_path: Path) -> None:
    Store(StoreSettings(db_path=db_path)).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (99, 'future', '2030-01-01T00:00:00+00:00')")
    with pytest.raises(StoreError, match="newer"):
        Store(StoreSettings(db_path=db_path))


# --- opening, pragmas, errors ----------------------------------------------------------------------


def test_open_creates_the_directory_and_uses_wal_and_foreign_keys(store: Store, db_path: Path) -> None:
    assert db_path.is_file()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert store._db.execute("PRAGMA busy_timeout").fetchone()[0] == 5000


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "crashcart.db"
    path.write_bytes(b"this is not a database\n" * 200)
    with pytest.raises(StoreError) as info:
        Store(StoreSettings(db_path=path))
    assert "\n" not in info.value.detail
    assert str(path) in info.value.detail
    assert "not a usable SQLite database" in info.value.detail
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


def test_a_parent_that_cannot_be_created_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(StoreError) as info:
        Store(StoreSettings(db_path=blocker / "sub" / "crashcart.db"))
    assert "\n" not in info.value.detail
    assert "cannot create directory" in info.value.detail
    assert "CRASHCART_DB" in info.value.detail


def test_a_directory_as_the_database_path_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="CRASHCART_DB"):
        Store(StoreSettings(db_path=tmp_path))


def test_a_closed_store_raises_store_error(db_path: Path) -> None:
    store = Store(StoreSettings(db_path=db_path))
    store.close()
    store.close()
    with pytest.raises(StoreError, match=r"^list: "):
        store.list()


# --- concurrency -----------------------------------------------------------------------------------


def test_two_stores_on_one_file_both_save(db_path: Path) -> None:
    first = Store(StoreSettings(db_path=db_path))
    second = Store(StoreSettings(db_path=db_path))
    errors: list[BaseException] = []

    def work(store: Store, prefix: str) -> None:
        try:
            for n in range(15):
                save(store, make_document(incident_id=f"{prefix}-{n}", sha=f"{prefix}{n:062x}"))
                save(store, make_document(incident_id=f"{prefix}-shared", sha="f" * 64))
        except StoreError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s, p)) for s, p in [(first, "aa"), (second, "bb")]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    for store in (first, second):
        assert len(store.list(limit=100)) == 31
        assert store.get("aa-14").summary.id == "aa-14"
        assert store.get("bb-14").summary.id == "bb-14"
    shared = [s for s in first.list(limit=100) if s.bundle_sha256 == "f" * 64]
    assert len(shared) == 1 and shared[0].runs == 30
    first.close()
    second.close()


def test_a_store_can_be_used_from_another_thread(store: Store) -> None:
    save(store, make_document())
    seen: list[str] = []
    thread = threading.Thread(target=lambda: seen.append(store.get("inc-0001").summary.id))
    thread.start()
    thread.join()
    assert seen == ["inc-0001"]
