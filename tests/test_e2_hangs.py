"""Slow and hung ranks without a mismatch message (crashcart/reduce/hangs.py), issue 14 capability 6.

Lines in the shapes their emitters print: tqdm format_meter with and without a total, c10d's watchdog and
"communicator was aborted", Megatron's dataset builds and their "finished" line, HF Trainer's evaluation banner.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from crashcart.catalogue import load_catalogue
from crashcart.models import Evidence, Finding, RankInfo, RankLast, Topology
from crashcart.pipeline import diagnose
from crashcart.reduce import hangs
from crashcart.settings import Settings
from tests.kit import finding


def aborted(rank: int, line: int = 9) -> Finding:
    """A waiting rank's error that states no timeout (c10d: the communicator was aborted)."""
    return finding(
        "nccl.communicator_aborted",
        f"RuntimeError: NCCL communicator was aborted on rank {rank}.",
        rank=rank,
        file=f"rank{rank}.log",
        line=line,
    )


def topo(world: int) -> Topology:
    return Topology(world_size=world, ranks={r: RankInfo(rank=r) for r in range(world)})


def test_a_bar_without_a_total_gives_its_elapsed_time() -> None:
    assert hangs.bar_of("Tokenizing: 45000 examples [35:10, 21.32 examples/s]") == ("Tokenizing", 2110.0, -1)
    assert hangs.bar_of("Generating: 1234it [1:02:03,  0.33it/s]") == ("Generating", 3723.0, -1)
    assert hangs.bar_of("[12:03, 4 workers]") is None


def test_without_a_stated_timeout_pytorch_s_default_decides() -> None:
    bar = finding(
        "progress.tqdm",
        "Running generate_until requests:  38%|███▊      | 380/1000 [14:10<23:07,  2.24s/it]",
        rank=0,
        file="rank0.log",
        line=30,
    )
    waits = [aborted(r) for r in (1, 2, 3)]
    c = hangs.hang_candidate([bar, *waits], topo(4), {})
    assert c is not None and c.first.evidence[0] == bar.evidence[0] and c.first.rank == 0
    assert "default timeout" in " ".join(c.reasons)
    short = finding("progress.tqdm", "Map:  10%|█         | 100/1000 [04:00<36:00,  0.42 examples/s]", rank=0)
    assert hangs.hang_candidate([short, *waits], topo(4), {}) is None  # 4 min: well inside 10


def _step(text: str, rank: int, line: int) -> Finding:
    return finding("progress.step_announced", text, rank=rank, file=f"rank{rank}.log", line=line)


def test_an_announced_evaluation_or_dataset_build_that_never_finished() -> None:
    for text in (
        "[INFO|trainer.py:3819] 2024-06-01 10:00:00,000 >> ***** Running Evaluation *****",
        "> building train, validation, and test datasets ...",
        "INFO - Loading the training dataset from /data/pile/train",
    ):
        step = _step(text, 3, 40)
        last = {3: RankLast(evidence=step.evidence[0], time=None)}
        c = hangs.hang_candidate([step, *(aborted(r) for r in (0, 1, 2))], topo(4), last)
        assert c is not None and c.first.evidence[0] == step.evidence[0] and c.first.rank == 3, text
        assert not c.penalties


def test_work_the_rank_reported_finished_is_not_where_it_hung() -> None:
    step = _step("> building train, validation, and test datasets ...", 3, 40)
    done = finding("progress.step_done", "> finished creating GPT datasets ...", rank=3, file="rank3.log", line=52)
    last_ev = Evidence(id="L1", file="rank3.log", line=60, text="> compiling dataset index builder ...")
    last = {3: RankLast(evidence=last_ev, time=None)}
    c = hangs.hang_candidate([step, done, *(aborted(r) for r in (0, 1, 2))], topo(4), last)
    assert c is not None and c.first.evidence[0] == last_ev  # its last line, not the finished step
    assert c.penalties  # no line says what it was doing


def test_a_rank_busy_generating_while_the_others_time_out(make_bundle, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    files = {
        "logs/rank0.log": (
            "[rank0]: step 300 | loss 1.9123\n"
            "[rank0]: Running generate_until requests:   0%|          | 0/2000 [00:00<?, ?it/s]\r"
            "Running generate_until requests:  22%|██▏       | 440/2000 [31:07<1:50:20,  4.24s/it]\n"
        ),
    }
    for r in (1, 2, 3):
        files[f"logs/rank{r}.log"] = (
            f"[rank{r}]: step 300 | loss 1.9123\n"
            f"[rank{r}]:[E1130 02:30:00.123456789 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=601, OpType=ALLGATHER, NumelIn=1, NumelOut=4, Timeout(ms)=1800000) "
            "ran for 1800094 milliseconds before timing out.\n"
        )
    out = asyncio.run(diagnose(make_bundle(files), settings))
    rc = out.document.root_cause
    assert rc.class_ in {"rank_hang_or_missing_rank", "straggler_fail_slow"}
    assert rc.culprit.rank == 0
    assert any(c.file == "logs/rank0.log" and c.line == 2 and c.verified for c in rc.citations)


# ---------------------------------------------------------------------------------------------
# Configuration smells in launch scripts (issue 14, capability 9)


def test_a_launch_script_s_master_addr_is_cited_beside_the_failing_connection(make_bundle, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    script = (
        "#!/bin/bash\n"
        "#SBATCH --nodes=2\n"
        "export MASTER_ADDR=10.0.3.7\n"
        "export MASTER_PORT=29500\n"
        'echo "ERROR: this echo is not an error of the job"\n'
        "srun torchrun --nnodes=2 --nproc-per-node=8 --rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT train.py\n"
    )
    log = (
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to [10.0.3.9]:29500 (errno: 111 - "
        "Connection refused).\n"
        "torch.distributed.DistNetworkError: The client socket has timed out after 900s while trying to connect to "
        "(10.0.3.9, 29500).\n"
    )
    out = asyncio.run(diagnose(make_bundle({"job.sbatch": script, "slurm-881.out": log}), settings))
    rc = out.document.root_cause
    assert rc.citations[0].file == "slurm-881.out"  # the failure speaks; the script only says why
    assert any(c.file == "job.sbatch" and c.line == 3 and c.verified for c in rc.citations)
    cited = [c for part in (out.document.contributing, out.document.symptoms) for x in part for c in x.citations]
    assert not any(c.file == "job.sbatch" and c.line == 5 for c in [*rc.citations, *cited])


def test_a_launch_script_alone_is_no_failure_and_shell_variables_are_no_address(
    make_bundle, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    cat = load_catalogue()
    idx = cat.index["launch.master_addr"]
    assert cat.extract(idx, "export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)") is None
    assert cat.extract(idx, "torchrun --master_addr $MASTER_ADDR --master_port 29500 train.py") is None
    script = '#!/bin/bash\nexport MASTER_ADDR=10.0.3.7\necho "Traceback (most recent call last):"\nexit 1\n'
    out = asyncio.run(diagnose(make_bundle({"run.sh": script, "train.log": "step 10 loss 2.3\n"}), settings))
    rc = out.document.root_cause
    assert not any(c.file == "run.sh" for c in rc.citations)


def test_a_rank_that_went_silent_after_an_error_it_carried_on_from_is_still_the_silent_one() -> None:
    t0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
    waits = [
        finding(
            "nccl.watchdog_timeout",
            f"[rank{r}]:[E1130 03:00:00.123456789 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=77, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) "
            "ran for 1800312 milliseconds before timing out.",
            rank=r,
            file=f"rank{r}.log",
            line=50,
        ).model_copy(update={"time": t0})
        for r in (0, 1, 2)
    ]
    early = finding(
        "generic.error", "2026-11-30 01:40:00,001 ERROR trainer: checkpoint upload failed, retrying", rank=3
    )
    early = early.model_copy(update={"time": t0 - timedelta(minutes=80)})
    last_ev = Evidence(id="L9", file="rank3.log", line=44, text="2026-11-30 02:29:10,000 step 4100 | loss 2.03")
    last = {3: RankLast(evidence=last_ev, time=t0 - timedelta(minutes=31))}
    c = hangs.hang_candidate([*waits, early], topo(4), last)
    assert c is not None and c.first.evidence[0] == last_ev and c.first.rank == 3
    late = early.model_copy(update={"time": t0 - timedelta(minutes=20)})  # inside the collective's window
    assert hangs.hang_candidate([*waits, late], topo(4), last) is None


def test_a_lone_peer_error_in_one_pasted_file_without_clocks_is_first_by_line_order(
    make_bundle, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    paste = (
        "step 1200 loss 2.31\n"
        "gpu-a:2201:2290 [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer gpu-b<40127>\n"
        "gpu-a:2201:2290 [0] NCCL INFO transport/net_socket.cc:474 -> 6\n"
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4011, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600345 milliseconds before timing out.\n"
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4011, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600351 milliseconds before timing out.\n"
    )
    out = asyncio.run(diagnose(make_bundle({"issue.txt": paste}), settings))
    rc = out.document.root_cause
    assert rc.class_ == "nccl_remote_peer_failure"
    assert rc.citations[0].line == 2 and rc.citations[0].verified
    assert rc.confidence < 0.8  # an order, not a clock


def test_an_announced_step_in_a_paste_without_rank_prefixes_before_the_timeouts() -> None:
    step = finding(
        "progress.step_announced", " > building indices for blendable datasets ...", file="paste.txt", line=3
    )
    waits = [
        finding(
            "nccl.watchdog_timeout",
            f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=BROADCAST, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800421 milliseconds before timing out.",
            rank=r,
            file="paste.txt",
            line=10 + r,
        )
        for r in (1, 2, 3)
    ]
    c = hangs.hang_candidate([step, *waits], topo(4), {})
    assert c is not None and c.first.evidence[0] == step.evidence[0]
    assert c.penalties == ["no line names the rank that announced it"]
    done = finding("progress.step_done", "> finished creating GPT datasets ...", file="paste.txt", line=7)
    assert hangs.hang_candidate([step, done, *waits], topo(4), {}) is None
    after = step.model_copy(update={"evidence": [step.evidence[0].model_copy(update={"line": 20})]})
    assert hangs.hang_candidate([after, *waits], topo(4), {}) is None  # printed after the timeouts


def test_every_rank_of_one_node_silent_while_the_other_node_waits() -> None:
    nodes = Topology(world_size=4, ranks={r: RankInfo(rank=r, node="n1" if r < 2 else "n2") for r in range(4)})
    waits = [aborted(r) for r in (0, 1)]
    last = {
        r: RankLast(
            evidence=Evidence(id=f"L{r}", file=f"rank{r}.log", line=30, text="step 4100 | loss 2.03"), time=None
        )
        for r in (2, 3)
    }
    c = hangs.hang_candidate(waits, nodes, last)
    assert c is not None and c.ranks == {2, 3}
    scattered = Topology(world_size=4, ranks={r: RankInfo(rank=r, node=f"n{r % 2}") for r in range(4)})
    assert hangs.hang_candidate(waits, scattered, last) is None  # ranks 2 and 3 are on different nodes
