"""Hung, busy and slow ranks that no error line names (crashcart/reduce/hangs.py).

Lines are in the shapes their emitters print: c10d's watchdog, gloo's unbound_buffer.cc timeout, tqdm's
format_meter bar, Megatron's training_log iteration line and dataset index builds, torch's cpp_extension build.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from crashcart.models import Evidence, Finding, RankInfo, RankLast, Topology
from crashcart.reduce import hangs
from crashcart.reduce.causal import Candidate
from crashcart.text import clock
from tests.kit import finding

T0 = datetime(2026, 11, 30, 2, 0, 0, tzinfo=UTC)


def watchdog(rank: int, *, timeout_ms: int = 1_800_000, line: int = 10, file: str = "train.log") -> Finding:
    text = (
        f"[rank{rank}]:[E1130 02:30:00.123456789 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={timeout_ms}) "
        f"ran for {timeout_ms + 312} milliseconds before timing out."
    )
    return finding("nccl.watchdog_timeout", text, rank=rank, line=line, file=file)


def topo(world: int) -> Topology:
    return Topology(world_size=world, ranks={r: RankInfo(rank=r) for r in range(world)})


def test_bar_of_reads_the_last_update_of_a_carriage_return_line() -> None:
    text = (
        "Running tokenizer on dataset:   0%|          | 0/2000000 [00:00<?, ? examples/s]\r"
        "Running tokenizer on dataset:   9%|▉         | 180000/2000000 [28:41<4:49:57, 104.62 examples/s]"
    )
    assert hangs.bar_of(text) == ("Running tokenizer on dataset", 28 * 60 + 41.0, 9)
    assert hangs.bar_of("Map (num_proc=16):  40%|████      | 4000/10000 [1:02:03<1:33:04,  1.07 examples/s]") == (
        "Map (num_proc=16)",
        3723.0,
        40,
    )
    assert hangs.bar_of("step 30/100 loss 2.1796") is None


def test_work_descriptions_are_not_training_loops() -> None:
    for desc in (
        "Running tokenizer on dataset",
        "Map (num_proc=8)",
        "Loading checkpoint shards",
        "Generating train split",
    ):
        assert hangs.is_work(desc), desc
    for desc in ("Epoch 3", "Training", "", "0/299 6.52G 0.06442"):
        assert not hangs.is_work(desc), desc


def test_a_bar_of_non_collective_work_reaching_the_timeout_is_the_hang() -> None:
    bar = finding(
        "progress.tqdm",
        "Running tokenizer on dataset:  10%|█         | 300000/3000000 [29:12<4:22:48, 171.1 examples/s]",
        line=1,
    )
    found = [bar, watchdog(1, line=2), watchdog(2, line=3), watchdog(3, line=4)]
    c = hangs.hang_candidate(found, Topology(), {})
    assert c is not None and c.class_id == "rank_hang_or_missing_rank"
    assert c.first.evidence[0] == bar.evidence[0]
    assert c.first.rank is None  # no line names the rank that tokenized
    assert not c.penalties


def test_a_training_bar_or_a_short_bar_says_nothing() -> None:
    train = finding("progress.tqdm", "Epoch 2:  45%|████▌     | 450/1000 [2:10:00<2:38:53, 17.33s/it]", line=1)
    short = finding("progress.tqdm", "Map:  10%|█         | 100/1000 [03:00<27:00,  0.56 examples/s]", line=1)
    for bar in (train, short):
        assert hangs.hang_candidate([bar, watchdog(1), watchdog(2), watchdog(3)], Topology(), {}) is None


def test_a_silent_rank_that_announced_an_index_build() -> None:
    step = finding(
        "progress.step_announced",
        "INFO:megatron.core.datasets.gpt_dataset:Build and save the sample index to /cache/x-sample_index.npy",
        rank=3,
        file="rank3.log",
        line=40,
    )
    last_ev = Evidence(id="L00001", file="rank3.log", line=41, text="INFO:megatron.core.datasets.gpt_dataset:...")
    last = {3: RankLast(evidence=last_ev, time=None)}
    found = [step, *(watchdog(r, file=f"rank{r}.log") for r in (0, 1, 2))]
    c = hangs.hang_candidate(found, topo(4), last)
    assert c is not None and c.class_id == "rank_hang_or_missing_rank"
    assert c.first.evidence[0] == step.evidence[0] and c.first.rank == 3
    assert last_ev in [f.evidence[0] for f in c.findings]


def test_a_silent_rank_without_a_reason_is_weaker_and_defers_to_a_short_timeout() -> None:
    last = {1: RankLast(evidence=Evidence(id="L00001", file="r1.log", line=4, text="step 30/100 loss 2.17"), time=None)}
    gloo = finding(
        "gloo.timeout",
        "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
        "1800000ms for recv operation to complete",
        rank=0,
        file="r0.log",
    )
    c = hangs.hang_candidate([gloo], topo(2), last)
    assert c is not None and c.score == hangs.BASE_SILENT and c.penalties and c.first.rank == 1
    short = gloo.model_copy(update={"fields": {**gloo.fields, "timeout_ms": "60000"}})
    short = short.model_copy(
        update={
            "evidence": [
                gloo.evidence[0].model_copy(update={"text": gloo.evidence[0].text.replace("1800000", "60000")})
            ]
        }
    )
    assert hangs.hang_candidate([short], topo(2), last) is None


def test_a_rank_missing_from_the_bundle_or_writing_after_the_timeouts_is_not_silent() -> None:
    waits = [watchdog(r).model_copy(update={"time": T0}) for r in (0, 1, 2)]
    assert hangs.hang_candidate(waits, topo(4), {}) is None
    alive = {3: RankLast(evidence=Evidence(id="L1", file="r3.log", line=9, text="x"), time=T0 + timedelta(minutes=3))}
    assert hangs.hang_candidate(waits, topo(4), alive) is None


def test_the_waiting_ranks_own_timeout_is_explained_by_the_hang() -> None:
    wd = watchdog(0)
    other = Candidate("launcher_rendezvous_store_failure", [wd], [], score=50.0)
    hang = Candidate("rank_hang_or_missing_rank", [wd], [], score=44.0)
    hangs.explained_by_wait([other, hang], [wd], hang)
    assert other.score == 50.0 - hangs.WAIT_PENALTY and other.penalties
    assert hang.score == 44.0


def _iteration(t: float, n: int, batch: int = 2048, unit: str = "s") -> Finding:
    text = (
        f" iteration {42780 + n:8d}/  115311 | consumed samples: {71455664 + 2048 * n:12d} | elapsed time per "
        f"iteration ({unit}): {t:.2f} | learning rate: 4.475E-05 | global batch size: {batch:5d} | lm loss: 2.1E+00 |"
    )
    return finding("progress.iteration_time", text, line=1 + 3 * n, file="main_log.txt")


def test_iteration_times_that_step_up_and_stay_up_are_a_straggler() -> None:
    series = [_iteration(t, i) for i, t in enumerate((105.2, 105.1, 106.3, 104.9, 110.4, 111.2, 110.9))]
    c = hangs.throughput_drop(series)
    assert c is not None and c.class_id == "straggler_fail_slow"
    assert c.first.evidence[0] == series[4].evidence[0]
    assert c.penalties  # the log does not name the slow GPU: never a confident answer


def test_noise_a_spike_or_a_batch_ramp_is_not_a_straggler() -> None:
    noise = [_iteration(t, i) for i, t in enumerate((105.2, 106.1, 104.3, 105.9, 104.8, 106.0))]
    spike = [_iteration(t, i) for i, t in enumerate((105.2, 105.1, 106.3, 140.0, 105.0, 105.3))]
    ramp = [_iteration(t, i, batch=b) for i, (t, b) in enumerate(((50.1, 1024),) * 3 + ((100.3, 2048),) * 3)]
    for series in (noise, spike, ramp):
        assert hangs.throughput_drop(series) is None
    ms = [_iteration(t, i, unit="ms") for i, t in enumerate((1000.0, 1002.0, 999.0, 1300.0, 1310.0))]
    assert hangs.throughput_drop(ms) is not None


def test_an_inherited_time_contradicted_by_the_next_clock_is_dropped() -> None:
    banner = T0
    tb = finding(
        "nccl.watchdog_timeout",
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, "
        "Timeout(ms)=600000) ran for 600123 milliseconds before timing out.",
        rank=1,
        line=500,
        time=banner,
        _time="inherited from an earlier line",
    )
    later = tb.model_copy(update={"id": "F9999", "time": banner + timedelta(hours=3), "fields": {}})
    later = later.model_copy(update={"evidence": [tb.evidence[0].model_copy(update={"line": 501})]})
    near = later.model_copy(update={"id": "F9998", "time": banner + timedelta(seconds=20)})
    out = hangs.trusted_times([tb, later])
    assert out[0].time is None and out[0].fields["_time"].startswith("untrusted")
    assert hangs.trusted_times([tb, near])[0].time == banner
    assert hangs.trusted_times([tb])[0].time == banner  # nothing contradicts it


def test_clock_rule_for_inherited_times() -> None:
    assert clock.inherited_is_stale(T0, T0 + timedelta(hours=1))
    assert not clock.inherited_is_stale(T0, T0 + timedelta(minutes=1))
    assert not clock.inherited_is_stale(T0, None)


# ---------------------------------------------------------------------------------------------
# Configuration smells (crashcart/reduce/smells.py)


def test_loopback_or_docker_bootstrap_in_a_multi_node_job_is_a_smell() -> None:
    from crashcart.reduce.smells import interface_smells

    lo = finding("nccl.interface_in_use", "node-1:2044:2044 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>", line=3)
    eth = finding("nccl.interface_in_use", "node-2:3011:3011 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.12<0>", line=4)
    error = "node-2:3011:3090 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 127.0.0.1<43617> failed"
    smells = interface_smells([lo, eth], Topology(), error)
    assert [s.kind for s in smells] == ["loopback"] and smells[0].finding is lo
    docker = finding("nccl.interface_in_use", "gpu-a:901:901 [3] NCCL INFO Bootstrap: Using docker0:172.17.0.1<0>")
    docker_b = finding("nccl.interface_in_use", "gpu-b:77:77 [0] NCCL INFO Bootstrap: Using docker0:172.17.0.1<0>")
    assert [s.kind for s in interface_smells([docker, docker_b], Topology(), error)] == ["container"]
    assert interface_smells([lo], Topology(), error) == []  # one host: loopback is fine


def test_ipoib_oob_is_a_smell_only_under_a_socket_or_bootstrap_error() -> None:
    from crashcart.reduce.smells import interface_smells

    oob = finding(
        "nccl.interface_in_use",
        "h1:7:40 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.10.1.5<0>",
    )
    bootstrap_error = "h1:7:40 [0] bootstrap.cc:77 NCCL WARN Bootstrap : remote socket closed, connection refused"
    assert [s.kind for s in interface_smells([oob], Topology(), bootstrap_error)] == ["ipoib"]
    assert interface_smells([oob], Topology(), "CUDA error: out of memory") == []


def test_master_addr_that_is_not_the_failing_endpoint() -> None:
    from crashcart.reduce.smells import master_addr_smell

    launch = finding("launch.master_addr", "export MASTER_ADDR=10.0.3.7 MASTER_PORT=29500")
    fail = finding(
        "c10d.client_connect_failed",
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to [10.0.3.9]:29500 (errno: 111 - "
        "Connection refused).",
    )
    smell = master_addr_smell([launch, fail], [fail])
    assert smell is not None and smell.finding is launch and "10.0.3.9" in smell.why
    same = fail.model_copy(update={"fields": {**fail.fields, "endpoint": "[10.0.3.7]:29500"}})
    assert master_addr_smell([launch, same], [same]) is None
    by_name = fail.model_copy(update={"fields": {**fail.fields, "endpoint": "[node-0]:29500"}})
    assert master_addr_smell([launch, by_name], [by_name]) is None  # a name and an address may be one host


def test_one_file_without_clocks_orders_by_line() -> None:
    remote = finding(
        "gloo.peer_closed",
        "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Read error [10.1.2.3]:6542: Connection reset by peer",
        line=12,
    )
    wd = watchdog(0, line=30)
    assert hangs.first_in_file_order([wd, remote], set()) is remote
    assert hangs.first_in_file_order([wd, remote], {remote.id}) is wd
    elsewhere = wd.model_copy(update={"evidence": [wd.evidence[0].model_copy(update={"file": "other.log"})]})
    assert hangs.first_in_file_order([elsewhere, remote], set()) is None  # two files: line order says nothing
    timed = remote.model_copy(update={"time": T0})
    assert hangs.first_in_file_order([wd, timed], set()) is None  # a clock decides instead


# ---------------------------------------------------------------------------------------------
# py-spy dumps pasted into a log (py-spy src/dump.rs: "Process <pid>: <cmd>", "Python v<ver> (<exe>)",
# 'Thread <tid> (<state>): "<name>"', frames "    <func> (<file>:<line>)", innermost first)


def _pyspy(pid: int, frames: list[tuple[str, str, int]]) -> list[str]:
    out = [f"Process {pid}: /usr/bin/python3 -u train.py", "Python v3.10.12 (/usr/bin/python3.10)", ""]
    out.append(f'Thread {pid} (idle): "MainThread"')
    out += [f"    {func} ({file}:{line})" for func, file, line in frames]
    return [*out, 'Thread 0x7F3A2C5FE700 (idle): "pin_memory"', "    wait (threading.py:320)", ""]


def test_a_py_spy_dump_inside_a_log_names_the_process_that_is_elsewhere(tmp_path: Path) -> None:
    from crashcart.ingest.bundle import open_bundle
    from crashcart.scan.findings import IdSource
    from crashcart.scan.hang_evidence import scan_hang_evidence
    from crashcart.settings import Settings

    waiting = [("all_reduce", "torch/distributed/distributed_c10d.py", 2050), ("train_step", "train.py", 88)]
    stuck = [("_poll", "multiprocessing/popen_fork.py", 28), ("__next__", "torch/utils/data/dataloader.py", 630)]
    lines = ["step 4100 | loss 2.03", "$ py-spy dump --pid ..."]
    for i in range(4):
        lines += _pyspy(5100 + i, stuck if i == 1 else waiting)
    src = tmp_path / "bundle"
    src.mkdir()
    (src / "train.log").write_text("\n".join(lines) + "\n")
    settings = Settings(_env_file=None)
    bundle = open_bundle(src, tmp_path / "work", settings.bundle_limits)
    try:
        found = scan_hang_evidence(bundle, IdSource()).findings
    finally:
        bundle.close()
    assert [f.class_id for f in found] == ["rank_hang_or_missing_rank"]
    assert "5101" in found[0].summary and "_poll" in found[0].summary
    assert found[0].evidence[0].text.startswith('Thread 5101 (idle): "MainThread"')


def test_a_py_spy_dump_pasted_without_its_process_headers(tmp_path: Path) -> None:
    from crashcart.ingest.bundle import open_bundle
    from crashcart.scan.findings import IdSource
    from crashcart.scan.hang_evidence import scan_hang_evidence
    from crashcart.settings import Settings

    waiting = [("barrier", "torch/distributed/distributed_c10d.py", 3696), ("evaluate", "eval.py", 51)]
    stuck = [("read", "torch/serialization.py", 1211), ("load_shard", "eval.py", 30)]
    lines = ["eval hangs after 45k samples; py-spy on each rank:"]
    for i in range(3):
        lines += _pyspy(7000 + i, stuck if i == 2 else waiting)[3:]  # from the first "Thread" line on
    src = tmp_path / "bundle"
    src.mkdir()
    (src / "issue.txt").write_text("\n".join(lines) + "\n")
    bundle = open_bundle(src, tmp_path / "work", Settings(_env_file=None).bundle_limits)
    try:
        found = scan_hang_evidence(bundle, IdSource()).findings
    finally:
        bundle.close()
    assert [f.class_id for f in found] == ["rank_hang_or_missing_rank"]
    assert "read (serialization.py" in found[0].summary


def test_a_job_that_never_trained_and_lost_its_peer_over_ipoib_is_a_bootstrap_config_failure() -> None:
    from crashcart.reduce.smells import interface_failure

    oob = finding("nccl.interface_in_use", "node-1:51:51 [0] NCCL INFO Bootstrap : Using ib0:192.168.100.11<0>", line=2)
    peer = finding(
        "nccl.connection_closed",
        "node-1:51:90 [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer node-2<40127>",
        line=9,
    )
    got = interface_failure([oob, peer], Topology())
    assert got is not None and got[0] is peer and [s.kind for s in got[1]] == ["ipoib"]
    step = finding("training.step_loss", "step 100/1000 loss 2.31", line=5)
    assert interface_failure([oob, step, peer], Topology()) is None  # it trained over that interface
