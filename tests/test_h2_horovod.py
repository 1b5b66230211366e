"""Horovod's stall inspector (issue 14, capability 5): the ranks that never submitted the tensor the others wait on.

The messages are built from horovod/horovod's source, one per wording: tensorflow/mpi_ops.cc and
common/operations.cc ``CheckForStalledTensors`` of v0.9-v0.15 (one stderr line, ``Stalled ops: <t> [ready ranks:
...]``), common/operations.cc of v0.16 (``LOG(WARNING)`` per tensor, ``[missing ranks: ...]``),
common/stall_inspector.cc of v0.17-v0.20 (``Stalled ranks:``) and v0.21-v0.28 (``Missing ranks:``, ``!`` and the
shutdown sentence); the log prefix is common/logging.cc's ``[<%Y-%m-%d %H:%M:%S>.<us>: <TDIWEF> <file>:<line>] ``.
"""

from __future__ import annotations

from pathlib import Path

from crashcart.scan.findings import IdSource
from crashcart.scan.hang_evidence import horovod
from crashcart.settings import Settings
from crashcart.verify import rank_named
from tests.kit import run_files

SENTENCE = (
    "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting "
    "for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit "
    "different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. "
)
PREFIX = "[2021-06-01 10:20:30.123456: W /tmp/pip-req-build-x1/horovod/common/stall_inspector.cc:107] "
V021 = (
    PREFIX + SENTENCE + "\nMissing ranks:\n"
    "2!: [DistributedAdam_Allreduce/cond_12/HorovodAllreduce_gradients_dense_1_MatMul_grad_MatMul_1_0]\n"
    "3: [DistributedAdam_Allreduce/cond_12/HorovodAllreduce_gradients_dense_1_MatMul_grad_MatMul_1_0]\n"
    'One or more rank (marked by "!") is stalled for longer than 120 seconds. Will shutdown.\n'
)
V017 = PREFIX.replace("W ", "W ") + SENTENCE + "\nStalled ranks:\n1: [allreduce.fc2.weight, allreduce.fc2.bias]\n"
V016 = (
    "[2019-03-02 08:00:01.000001: W horovod/common/operations.cc:1670] " + SENTENCE + "\n"
    "Stalled ops:allreduce.conv1.weight [missing ranks: 1, 3]\n"
    "[2019-03-02 08:00:01.000002: W horovod/common/operations.cc:1670] allreduce.conv1.bias [missing ranks: 1, 3]\n"
)
V09 = "WARNING: " + SENTENCE + "Stalled ops: HorovodAllreduce_grad_0 [ready ranks: 0, 1, 3]\n"
MISMATCH = (
    PREFIX + SENTENCE + "\nMissing ranks:\n"
    "0: [allreduce.loss]\n1: [allreduce.loss]\n2: [allreduce.metric]\n3: [allreduce.metric]\n"
)


def stalls(text: str) -> list[horovod.Stall]:
    return horovod.parse(text.splitlines())


def test_each_wording_gives_its_missing_ranks() -> None:
    (st,) = stalls("step 900\n" + V021 + "step 901\n")
    assert (st.line, st.end, st.seconds, st.shutdown) == (2, 6, 60, True)
    assert st.missing_ranks(None) == [2]  # the rank past the shutdown time ("!")
    (st,) = stalls(V017)
    assert st.missing_ranks(None) == [1] and st.missing[1] == {"allreduce.fc2.weight", "allreduce.fc2.bias"}
    (st,) = stalls(V016)
    assert st.end == 3 and st.missing_ranks(None) == [1, 3]
    (st,) = stalls(V09)
    assert st.missing_ranks(4) == [2] and st.missing_ranks(None) == []
    assert not any(s.mismatch() for s in stalls(V021 + V017 + V016 + V09))


def test_different_tensors_on_different_ranks_is_a_mismatch() -> None:
    (st,) = stalls(MISMATCH)
    assert st.mismatch()
    (f,) = horovod.findings([("rank0.log", MISMATCH.splitlines(), st)], IdSource(), 4)
    assert f.class_id == "collective_mismatch_desync" and f.rank is None


def test_findings_cite_the_whole_message_and_name_the_rank() -> None:
    lines = ("epoch 3\n" + V021).splitlines()
    (f,) = horovod.findings([("logs/worker-0.log", lines, horovod.parse(lines)[0])], IdSource(), None)
    ev = f.evidence[0]
    assert (f.class_id, f.rank, ev.line, ev.end_line) == ("rank_hang_or_missing_rank", 2, 2, 6)
    assert ev.text == "\n".join(lines[1:6])
    assert rank_named(2, ev.file, ev.text) and not rank_named(4, ev.file, ev.text)
    assert rank_named(3, "x.log", "Stalled ops:allreduce.conv1.weight [missing ranks: 1, 3]")


def test_the_diagnosis_names_the_rank_that_never_submitted(tmp_path: Path, settings: Settings) -> None:
    files = {"horovod-rank0.log": "Epoch 1/10\n" + V021, "horovod-rank1.log": "Epoch 1/10\n"}
    out = run_files(tmp_path / "b", files, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 2
    assert any(c.file == "horovod-rank0.log" and c.line == 2 and c.verified for c in rc.citations)


def test_issue_457_layout_and_a_stall_the_log_ran_on_after() -> None:
    # horovod/horovod#457 (v0.13): "Stalled ops:" alone on its line, one "<tensor> [missing ranks: N]" per line
    text = (
        "WARNING: " + SENTENCE.rstrip() + "\nStalled ops:\n"
        "v0/tower_0/HorovodAllreduce_v0_tower_0_gradients_AddN_37_0 [missing ranks: 815]\n"
        "v0/tower_0/HorovodAllreduce_v0_tower_0_gradients_AddN_44_0 [missing ranks: 815]\n"
    )
    (st,) = stalls(text)
    assert st.end == 4 and st.missing_ranks(None) == [815]
    lines = (text + "".join(f"step {i} loss 1.0\n" for i in range(horovod.PASSED_AFTER + 1))).splitlines()
    (f,) = horovod.findings([("train.log", lines, horovod.parse(lines)[0])], IdSource(), None)
    assert f.role == "context"  # it passed: Horovod's "recoverable stall"


def test_a_gloo_rendezvous_wait_timeout_is_a_rendezvous_symptom() -> None:
    # gloo/rendezvous/file_store.cc and horovod/common/gloo/http_store.cc before and after Horovod v0.21 (Nov 2020)
    from tests.kit import winner

    old = (
        "gloo::IoException: [/tmp/third_party/gloo/gloo/rendezvous/file_store.cc:126] Wait timeout for key(s): global/1"
    )
    new = (
        "RuntimeError: [horovod/common/gloo/http_store.cc:58] Wait timeout after 30 seconds for key(s): global/1. "
        "You may want to increase the timeout via HOROVOD_GLOO_TIMEOUT_SECONDS"
    )
    for text in (old, new):
        assert winner(text) == ("gloo.rendezvous_wait_timeout", "launcher_rendezvous_store_failure")


def test_a_stall_behind_mpirun_s_output_prefix(tmp_path: Path, settings: Settings) -> None:
    # horovod/horovod#1890 (v0.19, stall_inspector.cc:105) under mpirun --tag-output: "[1,<rank>]<stderr>:"
    text = (
        "[1,0]<stderr>:[2020-04-20 20:29:29. 89665: W horovod/common/stall_inspector.cc:105] " + SENTENCE + "\n"
        "[1,0]<stderr>:Stalled ranks:\n[1,0]<stderr>:1: [allreduce.fc1.weight]\n"
    )
    rc = run_files(tmp_path / "b", {"mpirun.log": "[1,0]<stdout>:Epoch 1\n" + text}, settings).document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 1
