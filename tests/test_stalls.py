"""Stalls no line names, and a training that stops on its own time budget (crashcart/reduce/stalls.py,
crashcart/locate/ends.py, the ``training.time_budget_exit`` and ``megatron.exit_signal`` signatures; issue 14,
capabilities 4, 5 and 6).

Lines are in the shapes their emitters print, none copied from a corpus case: c10d ProcessGroupNCCL's watchdog
(``Watchdog caught collective operation timeout: WorkNCCL(...)``, ``Exception (either an error or timeout) detected
by watchdog at work``), gloo's unbound_buffer.cc ``Timed out waiting <ms>ms for recv operation to complete``,
tqdm's format_meter (``<desc>: <pct>%|<bar>| <n>/<total> [<elapsed><<remaining>, <rate><postfix>]``; a bar is drawn
when created and again only on an update), NCCL's init line, Megatron's print_datetime
(``[<string>] datetime: <%Y-%m-%d %H:%M:%S[.%f]> ``), fairseq's should_stop_early.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.models import Finding, RankInfo, Topology
from crashcart.reduce import stalls
from crashcart.settings import Settings
from tests.kit import assert_class, finding, run_files, winner

WAIT_CLASS = "rank_hang_or_missing_rank"
SCORE = 35.0  # what reduce/offline.py gives its last resorts (MIN_SCORE + 5)


def watchdog(rank: int, *, seq: int = 912, op: str = "ALLREDUCE", timeout_ms: int = 600_000, line: int = 1) -> Finding:
    text = (
        f"[rank{rank}]:[E0312 11:20:07.004512344 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=2097152, NumelOut=2097152, "
        f"Timeout(ms)={timeout_ms}) ran for {timeout_ms + 71} milliseconds before timing out."
    )
    return finding("nccl.watchdog_timeout", text, rank=rank, line=line)


def work_state(rank: int, *, seq: int = 912, line: int = 2) -> Finding:
    text = (
        f"[rank{rank}]:[E0312 11:20:07.004601120 ProcessGroupNCCL.cpp:1680] [PG ID 0 PG GUID 0(default_pg) Rank "
        f"{rank}] Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: "
        f"{seq}, last completed NCCL work: {seq - 1}."
    )
    return finding("nccl.watchdog_work_state", text, rank=rank, line=line)


def world(n: int, present: set[int]) -> Topology:
    return Topology(world_size=n, ranks={r: RankInfo(rank=r) for r in present})


# ---------------------------------------------------------------------------------------------
# Lone waiters


def test_only_the_waiters_timeouts_and_absent_ranks_name_a_rank_that_did_not_arrive() -> None:
    found = [watchdog(6, line=1), work_state(6, line=2), watchdog(7, line=3)]
    c = stalls.lone_waiters(found, world(8, {6, 7}), SCORE)
    assert c is not None and c.class_id == WAIT_CLASS
    assert c.first.evidence[0] == found[0].evidence[0]
    assert c.where is not None and c.where.rank is None  # the waiters are not the culprit; no line names one
    assert c.inferred and c.penalties
    assert "ranks 0-5" in c.first.summary and "600 s" in c.first.summary


def test_gloo_waits_count_as_waits() -> None:
    text = (
        "[rank2]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
        "1800000ms for recv operation to complete"
    )
    w = winner(text)
    assert w is not None
    c = stalls.lone_waiters([finding(w[0], text, rank=2)], world(4, {2}), SCORE)
    assert c is not None and "ranks 0, 1, 3" in c.first.summary


def test_a_lone_rank_0_waited_for_ranks_the_bundle_leaves_out() -> None:
    """A collective of one process never times out: rank 0's timeout alone (world size read as 1) waited for others."""
    c = stalls.lone_waiters([watchdog(0), work_state(0)], world(1, {0}), SCORE)
    assert c is not None and "the job's other ranks" in c.first.summary


def test_every_rank_in_the_bundle_waiting_says_nothing_of_which_did_not_arrive() -> None:
    found = [watchdog(r, line=r + 1) for r in range(4)]
    assert stalls.lone_waiters(found, world(4, set(range(4))), SCORE) is None


def test_a_short_timeout_is_left_to_its_own_story() -> None:
    assert stalls.lone_waiters([watchdog(1, timeout_ms=60_000)], world(4, {1}), SCORE) is None


def test_other_failures_or_different_collectives_are_not_lone_waits() -> None:
    peer = finding(
        "nccl.remote_error",
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:"
        "275, remote process exited or there was a network error, NCCL version 2.21.5",
        rank=1,
        line=5,
    )
    assert stalls.lone_waiters([watchdog(1), peer], world(4, {1}), SCORE) is None
    apart = [watchdog(1, seq=912, line=1), watchdog(2, seq=910, op="ALLGATHER", line=2)]
    assert stalls.lone_waiters(apart, world(4, {1, 2}), SCORE) is None


# The watchdog's own abort as c10d and torchrun print it (capability 4): C++ terminate with the what() line, torchrun
# SIGTERMing the sibling and its summary naming the SIGABRT; teardown, not another failure
LONE_WAIT_PASTE = [
    "[rank1]:[E0911 16:42:10.330611182 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=77120, OpType=ALLREDUCE, NumelIn=25690112, NumelOut=25690112, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
    "[rank1]:[E0911 16:42:10.330822513 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 77120, last enqueued NCCL work: 77120, last completed NCCL work: 77119.",
    "[rank1]:[E0911 16:42:10.330840117 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout at NCCL work: 77120, last enqueued NCCL work: 77120, last completed NCCL work: 77119.",
    "[rank1]:[E0911 16:42:10.330850093 ProcessGroupNCCL.cpp:630] [Rank 1] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
    "[rank1]:[E0911 16:42:10.330857801 ProcessGroupNCCL.cpp:636] [Rank 1] To avoid data inconsistency, we are taking the entire process down.",
    "[rank1]:[E0911 16:42:10.332318462 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=77120, OpType=ALLREDUCE, NumelIn=25690112, NumelOut=25690112, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
    "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 (most recent call first):",
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f1c2a36c446 in /opt/conda/lib/python3.11/site-packages/torch/lib/libc10.so)",
    "terminate called after throwing an instance of 'c10::DistBackendError'",
    "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=77120, OpType=ALLREDUCE, NumelIn=25690112, NumelOut=25690112, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
    "W0911 16:42:15.018000 140221 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 140290 closing signal SIGTERM",
    "E0911 16:42:15.582000 140221 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) local_rank: 1 (pid: 140291) of binary: /opt/conda/bin/python",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "  <NO_OTHER_FAILURES>",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2025-09-11_16:42:15",
    "  host      : worker-3",
    "  rank      : 1 (local_rank: 1)",
    "  exitcode  : -6 (pid: 140291)",
    "  error_file: <N/A>",
    "  traceback : Signal 6 (SIGABRT) received by PID 140291",
    "============================================================",
]


def test_the_watchdogs_own_abort_and_torchruns_summary_leave_a_lone_wait(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", {"err.log": "\n".join(LONE_WAIT_PASTE) + "\n"}, settings)
    rc = out.document.root_cause
    assert rc.class_ == WAIT_CLASS, rc.summary
    assert rc.culprit.rank is None  # rank 1 waited; the rank it waited for names itself nowhere
    assert rc.confidence < 0.8
    assert any(c.line == 1 for c in rc.citations)


# ---------------------------------------------------------------------------------------------
# A log ending on a bar that never advanced

NCCL_INIT = [
    "gpu-a7:4410:4499 [0] NCCL INFO comm 0x55d1a8c0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId "
    "0x1c2d3e4f5a6b7c8d - Init COMPLETE",
    "gpu-a7:4411:4502 [1] NCCL INFO comm 0x55d1b310 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 1c000 commId "
    "0x1c2d3e4f5a6b7c8d - Init COMPLETE",
]
STALLED = {
    "lm-eval": "Running loglikelihood requests:   0%|          | 0/48211 [00:00<?, ?it/s]",
    "shards": "Loading checkpoint shards:   0%|          | 0/4 [00:00<?, ?it/s]",
    "vllm-add": "Adding requests:   0%|          | 0/250 [00:00<?, ?it/s]",
    "refreshed": "Processed prompts:   0%|          | 0/1024 [07:31<?, ?it/s, est. speed input: 0.00 toks/s]",
    "first-step": "Epoch 0:   0%|          | 0/3125 [00:00<?, ?it/s]",  # the first step's collective never completed
}


@pytest.mark.parametrize("bar", list(STALLED.values()), ids=list(STALLED))
def test_a_log_ending_on_a_bar_that_never_advanced_is_a_stall(tmp_path: Path, settings: Settings, bar: str) -> None:
    out = run_files(tmp_path / "b", {"worker.log": "\n".join([*NCCL_INIT, bar]) + "\n\n"}, settings)
    rc = out.document.root_cause
    assert rc.class_ == WAIT_CLASS, rc.summary
    assert rc.confidence < 0.8
    assert rc.culprit.rank is None and rc.culprit.node is None
    assert any(c.line == 3 for c in rc.citations)
    assert any(c.line == 2 for c in rc.citations)  # the communicator that was up before it


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ([*NCCL_INIT, "Loading checkpoint shards:  50%|█████     | 2/4 [00:41<00:41, 20.6s/it]"], "it advanced"),
        (
            [
                *NCCL_INIT,
                STALLED["shards"],
                "INFO 03-12 11:02:13 model_runner.py:1072] Loading model weights took 13 GB",
            ],
            "the log goes on",
        ),
        ([STALLED["shards"]], "one process"),
        (
            [*NCCL_INIT, "RuntimeError: CUDA error: an illegal memory access was encountered", STALLED["shards"]],
            "an error",
        ),
    ],
    ids=["advanced", "goes-on", "single", "error"],
)
def test_no_stall_when_the_bar_advanced_the_log_goes_on_one_process_or_an_error(
    tmp_path: Path, settings: Settings, lines: list[str], why: str
) -> None:
    out = run_files(tmp_path / "b", {"worker.log": "\n".join(lines) + "\n"}, settings)
    assert "never advanced" not in out.document.root_cause.summary, why


# ---------------------------------------------------------------------------------------------
# A planned time budget that ran out


@pytest.mark.parametrize(
    "text",
    [
        "[exiting program after 719.9731 minutes] datetime: 2022-11-20 08:13:44 ",  # Megatron 2021-2023
        "[rank0]: [exiting program after 30.0082 minutes] datetime: 2026-01-05 19:40:02.115340 ",  # f-string, .%f
        "12: [exiting program after 2850.51 minutes] datetime: 2024-07-01 06:00:00 ",  # srun -l
        "2023-04-02 09:30:11 | INFO | fairseq_cli.train | Stopping training due to cumulative_training_time: 48.0051 "
        "> stop_time_hours: 48.0 hour(s)",
        "Time limit reached. Elapsed time is 2 days, 0:00:04. Signaling Trainer to stop.",  # Lightning's Timer
    ],
)
def test_a_planned_time_budget_is_a_time_limit(text: str) -> None:
    assert_class("time budget", text, "scheduler_preemption_or_timelimit")


def test_an_exit_interval_or_an_update_budget_is_not_a_time_limit() -> None:
    for text in (
        "[exiting program at iteration 20000] datetime: 2023-01-09 10:00:00 ",
        "Stopping training due to num_updates: 500000 >= max_update: 500000",
    ):
        got = winner(text)
        assert got is None or got[1] != "scheduler_preemption_or_timelimit", (text, got)


def test_megatrons_signal_exit_is_a_weak_stop() -> None:
    from crashcart.reduce.adjust import WEAK_ROOT_SIGNATURES

    got = winner("[exiting program after receiving SIGTERM.] datetime: 2025-06-30 23:59:58.001200 ")
    assert got == ("megatron.exit_signal", "scheduler_preemption_or_timelimit")
    assert "megatron.exit_signal" in WEAK_ROOT_SIGNATURES  # an error printed before it says why


def test_lightnings_signal_alone_is_a_stop_shown_below_high(tmp_path: Path, settings: Settings) -> None:
    """Lightning's signal connector printing the SIGTERM it got says the run was stopped, not why (like torchrun's
    death signal): never a high-confidence answer."""
    log = ["Epoch 3:  41%|████      | 410/1000 [05:12<07:29,  1.31it/s, v_num=7]", "[rank: 0] Received SIGTERM: 15"]
    out = run_files(tmp_path / "b", {"train.log": "\n".join(log) + "\n"}, settings)
    rc = out.document.root_cause
    assert rc.class_ == "scheduler_preemption_or_timelimit", rc.summary
    assert rc.confidence <= 0.6


def test_a_megatron_run_that_ends_on_its_time_budget_is_a_time_limit(tmp_path: Path, settings: Settings) -> None:
    log = [
        " iteration     4100/   50000 | consumed samples:      2099200 | elapsed time per iteration (ms): 10412.7 |"
        " learning rate: 2.910E-04 | global batch size:   512 | lm loss: 2.104511E+00 | loss scale: 1.0 |",
        "saving checkpoint at iteration    4104 to /ckpt/gpt-8b",
        "  successfully saved checkpoint at iteration    4104 to /ckpt/gpt-8b",
        "[exiting program after 712.0344 minutes] datetime: 2024-10-02 13:12:40 ",
    ]
    out = run_files(tmp_path / "b", {"logs/train-5521.out": "\n".join(log) + "\n"}, settings)
    rc = out.document.root_cause
    assert rc.class_ == "scheduler_preemption_or_timelimit", rc.summary
    assert any(c.line == 4 for c in rc.citations)


# ---------------------------------------------------------------------------------------------
# Validation on one rank, announced, while the others wait (reduce/hangs.py's announced steps)


def test_validation_announced_on_one_rank_before_the_others_time_out(tmp_path: Path, settings: Settings) -> None:
    """finetrainers' run_validation prints "===== Memory before validation =====" on the rank that validates; the
    others wait in their next collective until the watchdog fires."""
    lines = ["[rank0]:===== Memory before validation ====="]
    lines += [
        f"[rank{r}]:[E0214 07:41:02.551200931 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=5120, OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, "
        "Timeout(ms)=1800000) ran for 1800057 milliseconds before timing out."
        for r in (1, 2, 3)
    ]
    out = run_files(tmp_path / "b", {"train.log": "\n".join(lines) + "\n"}, settings)
    rc = out.document.root_cause
    assert rc.class_ == WAIT_CLASS and rc.culprit.rank == 0, rc.summary
    assert any(c.line == 1 for c in rc.citations)


def test_a_reasonless_cancel_on_a_one_node_job_does_not_take_the_odd_rank_from_the_wait(
    tmp_path: Path, settings: Settings
) -> None:
    """All ranks on one node: a node's event (slurmstepd's step-wide "CANCELLED AT" without a reason, printed "ON" the
    node it ran on) cannot single out the rank the others waited for, so it does not outrank the wait."""
    wait = [
        f"[E ProcessGroupNCCL.cpp:828] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
        f"OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800042 milliseconds before timing out."
        for r in (1, 2, 3)
    ]
    files = {
        "train.log": "\n".join(
            [
                "Building index:  52%|█████▏    | 13/25 [27:40<26:10, 130.80s/it]",
                *wait,
                "[E ProcessGroupNCCL.cpp:737] To avoid data inconsistency, we are taking the entire process down.",
            ]
        )
        + "\n",
        "slurm.out": "\n".join(
            [
                "slurmstepd: error: *** STEP 7311.0 ON gpu17 CANCELLED AT 2025-02-11T08:41:09 ***",
                "srun: error: gpu17: task 0: Terminated",
                "srun: Force Terminated StepId=7311.0",
            ]
        )
        + "\n",
    }
    outcome = run_files(tmp_path / "b", files, settings)
    assert outcome.document.root_cause.class_ == WAIT_CLASS, outcome.document.root_cause
