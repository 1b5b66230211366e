"""Hang evidence files (issue 18): Flight Recorder dumps, stack dumps, NCCL RAS reports.

tests/data/flight_recorder holds real dumps torch 2.13 (gloo, CPU) wrote here: 4 ranks, PG 0 (default_pg) and PG 1
(ranks 0-1); rank 3 never entered the all_reduce with collective_seq_id 7 of PG 0. Ranks 0-1 are the JSON form,
ranks 2-3 the pickle form. The rest is built in the tests, in the formats the tools print.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from crashcart.ingest.bundle import open_bundle
from crashcart.ingest.hang_kinds import kind_of
from crashcart.pipeline import diagnose
from crashcart.scan.findings import IdSource
from crashcart.scan.hang_evidence import collectives, fr, ras, scan_hang_evidence, stacks
from crashcart.scan.hang_evidence.safe_pickle import BadPickle, UnsafePickle, load_plain
from crashcart.settings import Settings
from crashcart.verify import check

DATA = Path(__file__).parent / "data" / "flight_recorder"


def _entry(seq: int, op: str = "nccl:all_reduce", pg: str = "0", sizes: Any = None, t: int = 0) -> dict[str, Any]:
    return {
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "record_id": seq,
        "pg_id": int(pg),
        "process_group": [pg, "default_pg" if pg == "0" else "tp"],
        "profiling_name": op,
        "input_sizes": sizes or [[1024]],
        "input_dtypes": ["Float"],
        "output_sizes": sizes or [[1024]],
        "state": "scheduled",
        "timeout_ms": 600000,
        "is_p2p": False,
        "retired": False,
        "time_created_ns": 1_796_160_000_000_000_000 + t,
    }


def _dump(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"version": "2.10", "pg_config": {}, "pg_status": {}, "comm_lib_version": "", "entries": entries}


def _write(path: Path, dump: dict[str, Any], form: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if form == "json":
        path.write_text(json.dumps(dump, separators=(",", ":")))
    else:
        path.write_bytes(pickle.dumps(dump, protocol=2))


def _load(path: Path) -> fr.Dump:
    form = "pickle" if path.read_bytes()[:1] == b"\x80" else "json"
    return fr.load(path, path.name, form)  # type: ignore[arg-type]


# --- the plain pickle loader ----------------------------------------------------------------------------------------


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    data = pickle.dumps({"version": "2.10", "entries": [_RunsCode(marker)], "pg_config": {}})
    with pytest.raises(UnsafePickle, match=r"refused: the pickle asks for (posix|os)\.system"):
        load_plain(data)
    assert not marker.exists()


def test_plain_data_loads_and_cut_pickles_are_bad() -> None:
    data = pickle.dumps(_dump([_entry(1)]), protocol=2)
    assert load_plain(data)["entries"][0]["collective_seq_id"] == 1
    with pytest.raises(BadPickle, match="truncated"):
        load_plain(data[: len(data) // 2])


def test_real_torch_dumps_parse_in_both_forms() -> None:
    d0, d3 = _load(DATA / "comm_lib_trace_rank_0"), _load(DATA / "comm_lib_trace_rank_3")
    assert (d0.form, d0.rank, d3.form, d3.rank) == ("json", 0, "pickle", 3)
    assert [e.seq for e in d0.entries if e.pg == "0"] == [1, 2, 3, 4, 5, 6, 7]
    assert [e.seq for e in d3.entries if e.pg == "0"] == [1, 2, 3, 4, 5, 6]
    assert {e.state for e in d0.entries} == {"scheduled"}  # gloo
    assert d3.entries[0].frame is not None and "gen.py" in d3.entries[0].frame  # the pickle keeps the stacks


def test_content_not_name_says_what_a_file_is() -> None:
    assert kind_of((DATA / "comm_lib_trace_rank_2").read_bytes()[:65536]) == "Flight Recorder dump (pickle)"
    assert kind_of((DATA / "comm_lib_trace_rank_0").read_bytes()[:65536]) == "Flight Recorder dump (JSON)"
    assert kind_of(b'{"model": {"layers": 4}}') is None
    assert kind_of(b"step 1 loss 2.3\n") is None


# --- reasoning per process group ------------------------------------------------------------------------------------


def test_missing_rank_named_with_the_ranks_that_did(tmp_path: Path) -> None:
    dumps = []
    for r in range(8):
        entries = [_entry(s, t=s * 10**9) for s in range(1, 58 if r == 3 else 59)]
        _write(tmp_path / f"comm_lib_trace_rank_{r}", _dump(entries), "json")
        dumps.append(_load(tmp_path / f"comm_lib_trace_rank_{r}"))
    (v,) = collectives.analyse(dumps)
    assert v.kind == "missing" and v.culprits == [3]
    assert v.summary == ("rank 3 never entered ALLREDUCE collective_seq_id 58 of PG 0 (default_pg); ranks 0-2, 4-7 did")
    assert [s.behind for s in v.stops] == [0, 0, 0, 1, 0, 0, 0, 0]


def test_mismatch_is_the_same_sequence_number_with_another_size(tmp_path: Path) -> None:
    dumps = []
    for r in range(4):
        last = _entry(9, sizes=[[3]] if r == 2 else [[2]])
        _write(tmp_path / f"fr_{r}.pkl", _dump([_entry(s) for s in range(1, 9)] + [last]), "pickle")
        dumps.append(_load(tmp_path / f"fr_{r}.pkl"))
    (v,) = collectives.analyse(dumps)
    assert (v.kind, v.culprits, v.seq) == ("mismatch", [2], 9)
    assert "input_sizes [[3]]" in v.summary and "ranks 0, 1, 3 entered ALLREDUCE input_sizes [[2]]" in v.summary


def test_a_rank_that_enters_every_collective_late_is_a_straggler(tmp_path: Path) -> None:
    dumps = []
    for r in range(4):
        entries = [
            _entry(s, t=s * 10**9 + (s * 300_000_000 if r == 1 else r * 1000)) for s in range(1, 12 if r == 1 else 13)
        ]
        _write(tmp_path / f"comm_lib_trace_rank_{r}", _dump(entries), "json")
        dumps.append(_load(tmp_path / f"comm_lib_trace_rank_{r}"))
    (v,) = collectives.analyse(dumps)
    assert (v.kind, v.culprits) == ("straggler", [1])
    assert v.summary.startswith("rank 1 entered ") and "1 collective behind" in v.summary


def test_only_the_stuck_group_is_blamed() -> None:
    dumps = [_load(DATA / f"comm_lib_trace_rank_{r}") for r in range(4)]
    by_pg = {v.pg: v for v in collectives.analyse(dumps)}
    assert by_pg["0"].kind == "missing" and by_pg["0"].culprits == [3]
    assert by_pg["1"].kind == "ok" and "not the stuck one" in by_pg["1"].summary


# --- the pipeline: citations verified, partial and bad dumps --------------------------------------------------------


def _bundle(tmp_path: Path, ranks: range = range(4)) -> Path:
    root = tmp_path / "bundle"
    (root / "fr").mkdir(parents=True)
    for r in ranks:
        shutil.copy(DATA / f"comm_lib_trace_rank_{r}", root / "fr" / f"comm_lib_trace_rank_{r}")
    (root / "rank0.log").write_text(
        "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
        "Timed out waiting 10000ms for recv operation to complete\n"
    )
    return root


async def test_the_diagnosis_names_the_rank_and_cites_dump_entries(tmp_path: Path, settings: Settings) -> None:
    out = await diagnose(_bundle(tmp_path), settings)
    rc = out.document.root_cause
    assert (rc.class_, rc.culprit.rank) == ("rank_hang_or_missing_rank", 3)
    assert "rank 3 never entered ALLREDUCE collective_seq_id 7 of PG 0 (default_pg); ranks 0-2 did" in rc.summary
    located = [c for c in rc.citations if c.locator]
    assert located and all(c.verified for c in rc.citations)
    assert located[0].file == "fr/comm_lib_trace_rank_3" and located[0].text.startswith("entries[5] of rank 3's")
    stops = {(s.rank, s.pg): (s.op, s.seq) for s in out.document.rank_stops}
    assert stops[3, "0"] == ("BROADCAST", 6) and stops[0, "0"] == ("ALLREDUCE", 7)
    assert all(s.citation.verified for s in out.document.rank_stops)
    assert any("PG 1: ranks 0, 1 all last entered ALLGATHER" in r for r in out.document.reasoning)


async def test_dumps_for_some_ranks_only_still_work(tmp_path: Path, settings: Settings) -> None:
    root = _bundle(tmp_path, range(4))
    (root / "fr" / "comm_lib_trace_rank_1").unlink()
    out = await diagnose(root, settings)
    assert out.document.root_cause.culprit.rank == 3
    assert any("no Flight Recorder dump for rank 1" in r for r in out.document.reasoning)


async def test_bad_dumps_are_refused_per_file(tmp_path: Path, settings: Settings) -> None:
    root = _bundle(tmp_path)
    full = (DATA / "comm_lib_trace_rank_1").read_bytes()
    (root / "fr" / "comm_lib_trace_rank_1").write_bytes(full[: len(full) // 2])  # truncated JSON
    (root / "fr" / "comm_lib_trace_rank_4").write_bytes(pickle.dumps({"entries": [_RunsCode(tmp_path / "x")]}))
    out = await diagnose(root, settings)
    reasons = {s.path: s.reason for s in out.document.stats.skipped_files}
    assert "truncated or not JSON" in reasons["fr/comm_lib_trace_rank_1"]
    assert "refused: the pickle asks for" in reasons["fr/comm_lib_trace_rank_4"]
    assert not (tmp_path / "x").exists()
    assert out.document.root_cause.culprit.rank == 3


def test_a_huge_dump_is_refused(tmp_path: Path) -> None:
    with pytest.raises(fr.DumpRefused, match="over the 1,000-byte limit"):
        fr.load(DATA / "comm_lib_trace_rank_0", "comm_lib_trace_rank_0", "json", max_bytes=1000)


def test_verify_rereads_a_located_entry(tmp_path: Path, settings: Settings) -> None:
    root = _bundle(tmp_path)
    with open_bundle(root, tmp_path / "w", settings.bundle_limits) as b:
        found = scan_hang_evidence(b, IdSource())
        ev = next(f.evidence[0] for f in found.findings if f.signature == "hang.fr.missing")
        assert check(ev.id, {ev.id: ev}, b).status == "ok"
        forged = ev.model_copy(update={"text": ev.text.replace("collective_seq_id 6", "collective_seq_id 7")})
        assert check(ev.id, {ev.id: forged}, b).status == "text_mismatch"
        gone = ev.model_copy(update={"locator": "entries[999]"})
        assert check(ev.id, {ev.id: gone}, b).status == "line_out_of_range"


# --- stack dumps ----------------------------------------------------------------------------------------------------

PYSPY_WAIT = """Process {pid}: /usr/bin/python3 train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread {pid} (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2501)
    wrapper (torch/distributed/c10d_logger.py:83)
    train (train.py:240)
    <module> (train.py:300)
Thread 77 (idle): "pin_memory"
    wait (threading.py:327)
"""
PYSPY_LOCK = """Process 4103: /usr/bin/python3 train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4103 (idle): "MainThread"
    _refresh_shard_cache (train.py:131)
    fault_deadlock (train.py:138)
    train (train.py:231)
    <module> (train.py:300)
"""


def test_pyspy_minority_stack_is_the_culprit(tmp_path: Path, settings: Settings) -> None:
    root = tmp_path / "b"
    (root / "stacks").mkdir(parents=True)
    for r in range(4):
        text = PYSPY_LOCK if r == 2 else PYSPY_WAIT.format(pid=4100 + r)
        (root / "stacks" / f"py-spy-rank{r}.txt").write_text(text)
    with open_bundle(root, tmp_path / "w", settings.bundle_limits) as b:
        assert {f.note for f in b.files} == {"py-spy dump"}
        found = scan_hang_evidence(b, IdSource())
        (f,) = [f for f in found.findings if f.signature == "hang.stack.minority"]
        assert f.rank == 2 and f.class_id == "rank_hang_or_missing_rank"
        assert "_refresh_shard_cache (train.py:131)" in f.summary and "ranks 0, 1, 3 wait in all_reduce" in f.summary
        assert all(check(e.id, {e.id: e}, b).status == "ok" for e in f.evidence)


FAULTHANDLER = """[rank{r}]:Thread 0x00007f3a1c5ff640 (most recent call first):
[rank{r}]:  File "/usr/lib/python3.11/threading.py", line 327 in wait
[rank{r}]:
[rank{r}]:Current thread 0x00007f3a2e1b4740 (most recent call first):
[rank{r}]:  File "/job/train.py", line {line} in {func}
[rank{r}]:  File "/job/train.py", line 231 in train
[rank{r}]:  File "/job/train.py", line 300 in <module>
"""


def test_faulthandler_dumps_inside_rank_logs(tmp_path: Path) -> None:
    lines: list[str] = []
    for r in range(3):
        func, line = ("_refresh_shard_cache", 131) if r == 1 else ("all_reduce", 2501)
        lines += FAULTHANDLER.format(r=r, func=func, line=line).splitlines()
    procs = stacks.parse("console.log", lines, None)
    assert [p.rank for p in procs] == [0, 1, 2]
    odd = stacks.odd_ones(procs)
    assert odd is not None and [p.rank for p in odd.culprits] == [1]


def test_gdb_thread_apply_all_bt() -> None:
    text = [
        'Thread 2 (Thread 0x7f00aa (LWP 901) "python"):',
        "#0  0x00007f00 in futex_wait () from /lib/libc.so.6",
        'Thread 1 (Thread 0x7f00bb (LWP 900) "python"):',
        "#0  0x00007f01 in ncclGroupEnd () from /usr/lib/libnccl.so.2",
        "#1  0x00007f02 in c10d::ProcessGroupNCCL::allreduce () from libtorch_cuda.so",
    ]
    (p,) = stacks.parse("rank5/gdb.txt", text, None)
    got = stacks.place(p)
    assert p.rank == 5 and got is not None and got[0].collective


# --- NCCL RAS (built from NCCL's documentation; no real capture was available) ---------------------------------------

RAS_DEAD = """Communicators... (2.05s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4       7-8        32        32   RUNNING  INCOMPLETE

Errors
======

DEAD
  1 job process is considered dead (unreachable via the RAS network)
  Process 3487984 on node 172.16.64.213 managing GPU 5

#0-0 (cf264af53edbe986) INCOMPLETE
  Missing communicator data from 1 rank
  The missing rank: 21
"""
RAS_MISMATCH = """Warnings
========

#0-0 (27a079b828ff1a75) MISMATCH
  Communicator ranks have different collective operation counts
  26 ranks have launched up to operation 6650
  Rank 7 has launched up to operation 6649 -- GPU 7 managed by process 483079 on node 172.16.64.210
"""


def test_ras_dead_process_and_missing_rank() -> None:
    rep = ras.parse(RAS_DEAD.splitlines())
    assert [(f.kind, f.rank, f.host) for f in rep.facts] == [("dead", None, "172.16.64.213"), ("missing", 21, None)]


def test_ras_rank_behind_in_operation_counts() -> None:
    (fact,) = ras.parse(RAS_MISMATCH.splitlines()).facts
    assert (fact.kind, fact.rank, fact.host) == ("behind", 7, "172.16.64.210")
    assert "up to operation 6649, the most ranks up to 6650" in fact.detail
    assert kind_of(RAS_MISMATCH.encode()) == "NCCL RAS report"
