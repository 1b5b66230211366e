"""Collective and barrier timeouts of backends other than NCCL's watchdog, and the rank that did not arrive
(crashcart/reduce/hangs.py; issue 14, capabilities 5 and 6).

Lines as their emitters print them (source file and versions in each comment): TensorFlow's
base_collective_executor.cc, the TSL coordination service's barrier, gloo's tcp buffer/pair timeouts, c10d's
TCPStore.cpp doWait, Horovod's HorovodInternalError, ElasticDL's allreduce retry and task_data_service.py, tqdm's
format_meter bar.
"""

from __future__ import annotations

from pathlib import Path

from crashcart.models import Evidence, RankInfo, RankLast, Topology
from crashcart.reduce import hangs, named
from crashcart.settings import Settings
from crashcart.verify import rank_named
from tests.kit import finding, run_files, winner

# TensorFlow core/common_runtime/base_collective_executor.cc (2.4-2.18): the timeout Status, then StartAbort's
# "Collective ops is aborted by: <status>" wrapper.
TF_TIMEOUT = (
    "tensorflow.python.framework.errors_impl.DeadlineExceededError: Collective has timed out waiting for other "
    "workers. [Op:CollectiveReduceV2]"
)
# (its first line: the status message goes on "\nThe error could be from a previous operation. ...")
TF_ABORTED = (
    "tensorflow.python.framework.errors_impl.DeadlineExceededError: Collective ops is aborted by: Collective has "
    "timed out waiting for other workers."
)
# the Python error of a collective op past its deadline (TensorFlow ops.py raise_from_not_ok_status: "[Op:<name>]")
TF_DEADLINE = "tensorflow.python.framework.errors_impl.DeadlineExceededError: Deadline Exceeded [Op:CollectiveGatherV2]"
# tsl coordination_service.cc (2023+), as jax.distributed prints it through XlaRuntimeError
TSL_BARRIER = [
    "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Id: 0_async_write_complete.0.1. "
    "This usually happens because a task triggered the barrier too early or too slowly. Please look at the task "
    "logs (both timed out and first task) to debug further.",
    "# of tasks that reached the barrier: 3/4.",
    "The first task at the barrier: /job:jax_worker/replica:0/task:0. Some timed out task names:",
    "/job:jax_worker/replica:0/task:2",
]
# gloo transport/tcp/pair.cc (GLOO_ERROR_MSG("Read timeout ", peer_.str())) through ProcessGroupGloo
GLOO_READ = (
    "RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Read timeout [10.0.0.12]:41822"
)
# torch/csrc/distributed/c10d/TCPStore.cpp doWait (2.3-2.10)
STORE_WAIT = "torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /default_pg/0//cuda//0"
# ElasticDL elasticai_api/tensorflow/controller.py (2020-10 to 2024), its logger's format
ELASTICDL_RETRY = (
    "[2020-11-19 10:42:01,527] [WARNING] [controller.py:63:train_one_batch_with_retries] Failed to perform "
    "allreduce operation on the gradients. Retrying..."
)


def test_each_backend_s_timeout_is_a_wait_and_never_a_root() -> None:
    # ElasticDL worker/worker.py with FTLib (2019-12 to 2020-08)
    ftlib_barrier = "[2020-04-10 08:13:55,021] [WARNING] [worker.py:755:_broadcast_model_params] Failed to perform barrier operation"
    for text in (TF_TIMEOUT, TF_ABORTED, TF_DEADLINE, TSL_BARRIER[0], GLOO_READ, ELASTICDL_RETRY, ftlib_barrier):
        got = winner(text)
        assert got is not None and got[1] == "nccl_watchdog_timeout", (text, got)
    assert winner(STORE_WAIT) == ("c10d.store_wait_timeout", "launcher_rendezvous_store_failure")
    for sig, text in (
        ("tf.collective_timeout", TF_TIMEOUT),
        ("tf.collective_deadline", TF_DEADLINE),
        ("tsl.barrier_timeout", TSL_BARRIER[0]),
        ("gloo.io_timeout", GLOO_READ),
        ("elasticdl.allreduce_failed", ELASTICDL_RETRY),
    ):
        f = finding(sig, text, rank=1)
        assert f.role == "cascade" and hangs.waits([f]) == [f], sig
    # the store's wait is a store failure (TAXONOMY class 28, like "Socket Timeout" before 2.3) and a wait
    store = finding("c10d.store_wait_timeout", STORE_WAIT, rank=1)
    assert store.role == "root_candidate" and hangs.waits([store]) == [store]
    assert hangs.timeout_ms([store]) == 600_000


def test_a_wrapper_gives_way_to_the_error_it_wraps() -> None:
    # Horovod torch/mpi_ops.py (v0.20-v0.28): raise HorovodInternalError(e) around gloo's own timeout
    wrapped = (
        "horovod.common.exceptions.HorovodInternalError: [/tmp/pip-req-build/third_party/gloo/gloo/transport/tcp/"
        "unbound_buffer.cc:136] Timed out waiting 30000ms for recv operation to complete"
    )
    assert winner(wrapped) == ("gloo.timeout", "nccl_watchdog_timeout")
    assert winner("horovod.common.exceptions.HorovodInternalError: ncclCommInitRank failed: unhandled system error")
    assert winner(
        "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: Socket closed"
    ) == (
        "tf.collective_aborted",
        "nccl_remote_peer_failure",
    )


def _waiting_tf(rank: int) -> str:
    return f"Epoch 3/10\n{TF_TIMEOUT}\n"


def test_tf_workers_time_out_while_one_runs_its_evaluation(tmp_path: Path, settings: Settings) -> None:
    files = {f"worker-{r}.log": _waiting_tf(r) for r in (0, 1, 3)}
    files["worker-2.log"] = "Epoch 3/10\nINFO - Starting evaluation on the held-out shard\n"
    out = run_files(tmp_path / "b", files, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 2
    assert any(c.file == "worker-2.log" and c.line == 2 and c.verified for c in rc.citations)
    assert rc.confidence < 0.8


def test_a_store_wait_while_rank_0_tokenizes_past_the_timeout(tmp_path: Path, settings: Settings) -> None:
    # the others' first collective lazily creates its communicator and waits in the store for rank 0's
    # ncclUniqueId; rank 0 is still in a datasets map (tqdm format_meter, elapsed 10:48 of a 600000 ms timeout)
    files = {
        "rank0.log": "[rank0]: Running tokenizer on dataset:  31%|███       | 62000/200000 [10:48<24:02, 95.61 examples/s]\n"
    }
    for r in (1, 2, 3):
        files[f"rank{r}.log"] = f"[rank{r}]: loading done\n[rank{r}]: {STORE_WAIT}\n"
    out = run_files(tmp_path / "b", files, settings)
    rc = out.document.root_cause
    assert rc.class_ in {"rank_hang_or_missing_rank", "straggler_fail_slow"}
    assert rc.culprit.rank == 0
    assert any(c.file == "rank0.log" and c.line == 1 and c.verified for c in rc.citations)


def test_an_elasticdl_worker_out_of_tasks_while_the_others_allreduce(tmp_path: Path, settings: Settings) -> None:
    # ElasticDL worker/task_data_service.py (2019 to 2020-10): "No more task, stopping"
    files = {
        f"worker-{r}.log": (
            "[2020-10-16 08:00:01,002] [INFO] [worker.py:227:run] the evaluation task_id: 7\n" + ELASTICDL_RETRY + "\n"
        )
        for r in (0, 2)
    }
    files["worker-1.log"] = (
        "[2020-10-16 08:00:01,002] [INFO] [worker.py:227:run] the evaluation task_id: 6\n"
        "[2020-10-16 08:00:02,118] [INFO] [task_data_service.py:226:get_dataset] No more task, stopping\n"
    )
    out = run_files(tmp_path / "b", files, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 1
    assert any(c.file == "worker-1.log" and c.line == 2 and c.verified for c in rc.citations)
    assert rc.confidence <= 0.6  # inferred from what it did not do


def test_one_file_without_clocks_a_rank_that_wrote_after_the_timeouts_is_not_silent() -> None:
    topo = Topology(world_size=4, ranks={r: RankInfo(rank=r) for r in range(4)})
    waits = [finding("gloo.io_timeout", f"[rank{r}]: {GLOO_READ}", rank=r, line=10 + r) for r in (0, 2, 3)]
    late = "[rank1]: Map (num_proc=8):  12%|█▏        | 1200/10000 [00:41<05:03, 29.02 examples/s]"
    after = {1: RankLast(evidence=Evidence(id="L1", file="train.log", line=20, text=late), time=None)}
    assert hangs.hang_candidate(waits, topo, after) is None
    before = {1: RankLast(evidence=Evidence(id="L1", file="train.log", line=5, text=late), time=None)}
    c = hangs.hang_candidate(waits, topo, before)
    assert c is not None and c.class_id == "rank_hang_or_missing_rank" and c.lead is not None
    assert c.lead.rank == 1 and c.lead.evidence[0].line == 5


def test_dispatcher_idle_wordings() -> None:
    for text, step in (
        (
            "[2020-11-19 10:40:12,004] [INFO] [task_data_service.py:89:get_dataset_gen] Waiting more tasks",
            "Waiting more tasks",
        ),
        ("No tasks for now, maybe more later", "No tasks for now"),
    ):
        assert finding("progress.waiting_for_work", text).fields["step"] == step


def test_a_coordination_barrier_that_lists_the_one_task_missing(tmp_path: Path, settings: Settings) -> None:
    files = {f"rank{r}.log": f"[rank{r}]: step 40 | loss 2.31\n" for r in (1, 2, 3)}
    files["rank0.log"] = "[rank0]: step 40 | loss 2.31\n" + "\n".join(TSL_BARRIER) + "\n"
    out = run_files(tmp_path / "b", files, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 2
    assert any(c.file == "rank0.log" and c.line == 5 and c.verified for c in rc.citations)


def test_a_partial_or_long_task_list_names_no_one() -> None:
    head = finding("tsl.barrier_timeout", TSL_BARRIER[0], line=1)
    tasks = [
        finding("tsl.barrier_task", f"/job:jax_worker/replica:0/task:{t}", line=3 + i) for i, t in enumerate((2, 5))
    ]
    assert (
        named.barrier_named(
            [head, finding("tsl.barrier_arrived", "# of tasks that reached the barrier: 13/16.", line=2), *tasks]
        )
        is None
    )
    three = [*tasks, finding("tsl.barrier_task", "/job:jax_worker/replica:0/task:7", line=5)]
    assert (
        named.barrier_named(
            [head, finding("tsl.barrier_arrived", "# of tasks that reached the barrier: 13/16.", line=2), *three]
        )
        is None
    )
    both = named.barrier_named(
        [head, finding("tsl.barrier_arrived", "# of tasks that reached the barrier: 14/16.", line=2), *tasks]
    )
    assert both is not None and {f.rank for f in both.findings if f.signature == "tsl.barrier_task"} == {2, 5}


# lm-evaluation-harness lm_eval/models/huggingface.py (0.4.x): tqdm(total=len(requests), disable=(disable_tqdm or
# self.rank != 0), desc="Running generate_until requests"): only rank 0 draws it, without a rank prefix
def _watchdog(rank: int) -> str:
    return (
        f"[rank{rank}]:[E1130 02:30:00.123456789 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLGATHER, NumelIn=1, NumelOut=4, Timeout(ms)=1800000) "
        "ran for 1800094 milliseconds before timing out."
    )


def test_a_silent_rank_whose_log_stops_inside_an_evaluation_bar(tmp_path: Path, settings: Settings) -> None:
    files = {
        "rank0.log": "[rank0]: Running loglikelihood requests:  61%|██████    | 6100/10000 [07:12<04:36, 14.1it/s]\n"
    }
    for r in (1, 2, 3):
        files[f"rank{r}.log"] = _watchdog(r) + "\n"
    out = run_files(tmp_path / "b", files, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 0
    assert any(c.file == "rank0.log" and c.line == 1 and c.verified for c in rc.citations)
    assert rc.confidence <= 0.6


def test_one_pasted_file_an_unnamed_generate_bar_before_the_timeouts(tmp_path: Path, settings: Settings) -> None:
    bar = "Running generate_until requests:  38%|███▊      | 502/1319 [12:40<20:37,  1.51s/it]"
    text = "\n".join(["2026-11-30:02:00:01 INFO     [evaluator_utils:480] Task: gsm8k (gsm8k/gsm8k.yaml)", bar])
    text += "\n" + "\n".join(_watchdog(r) for r in (1, 2, 3)) + "\n"
    out = run_files(tmp_path / "b", {"paste.txt": text}, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank is None
    assert any(c.line == 2 and c.verified for c in rc.citations)
    assert rc.confidence <= 0.6
    # a bar that finished early says nothing of who is late
    done = text.replace(bar, "Running generate_until requests: 100%|██████████| 1319/1319 [03:18<00:00,  6.65it/s]")
    out = run_files(tmp_path / "c", {"paste.txt": done}, settings)
    assert not any(c.line == 2 for c in out.document.root_cause.citations)


def test_the_others_wait_for_rank_0_s_ncclUniqueId_while_it_builds_an_index(tmp_path: Path, settings: Settings) -> None:
    # ProcessGroupNCCL.cpp broadcastUniqueNCCLID (torch 1.13-2.0 spelled it "retreiving"); Megatron's dataset
    # index build (megatron/core/datasets) is what rank 0 announced last
    files = {"rank0.log": "[rank0]: > building indices for blendable datasets ...\n"}
    for r in (1, 2, 3):
        files[f"rank{r}.log"] = (
            f"[rank{r}]: RuntimeError: [{r}] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via "
            f"c10d key-value store by key '0', but store->get('0') got error: Timeout waiting for key: default_pg/0/0 "
            "after 1800000 ms\n"
        )
    out = run_files(tmp_path / "b", files, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 0
    assert any(c.file == "rank0.log" and c.line == 1 and c.verified for c in rc.citations)


def test_the_dispatcher_names_the_worker_whose_task_timed_out(tmp_path: Path, settings: Settings) -> None:
    # ElasticDL master/task_manager.py (2020-11 on) on the master; the workers' allreduce retry (controller.py)
    master = (
        "[2020-11-19 10:30:00,000] [INFO] [task_manager.py:364:create_tasks] 40 tasks created with total of 40000 records.\n"
        "[2020-11-19 10:45:31,004] [INFO] [task_manager.py:606:_check_and_reassign_timeout_tasks] worker 1 timeout, "
        "relaunch it\n"
        "[2020-11-19 10:45:31,010] [INFO] [task_manager.py:546:recover_tasks] Recover the tasks assigned to worker 1\n"
    )
    files = {"master.log": master, **{f"worker-{r}.log": ELASTICDL_RETRY + "\n" for r in (0, 2)}}
    out = run_files(tmp_path / "b", files, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 1
    assert any(c.file == "master.log" and c.line == 2 and c.verified for c in rc.citations)


def test_the_tasks_that_stopped_sending_heartbeats_are_named_but_not_trusted(
    tmp_path: Path, settings: Settings
) -> None:
    # jax.distributed through tsl coordination_service.cc, under srun -l (AMD-AGI/maxtext-slurm post-mortem layout)
    files = {
        "slurm-881.out": (
            " 0: completed step: 70, seconds: 30.309, TFLOP/s/device: 207.973, MFU: 8.32%\n"
            " 0: F0224 19:21:00.075587  157988 client.h:77] Terminating process because the JAX distributed service "
            "detected fatal errors. This most likely indicates that another task died; see the other task logs for "
            "more details. absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n"
            " 0: /job:jax_worker/replica:0/task:3\n"
            " 0: The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. "
            "preemption, eviction) to debug further.\n"
        )
    }
    out = run_files(tmp_path / "b", files, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 3
    assert any(c.line == 3 and c.verified for c in rc.citations)
    assert rc.confidence <= 0.6


def test_horovod_s_launcher_timeouts_are_start_failures_not_rank_crashes() -> None:
    # horovod/runner/common/util/timeout.py (v0.16-v0.28) with launch.py's and elastic/driver.py's messages
    for text in (
        "horovod.runner.common.util.timeout.TimeoutException: Timed out waiting for tasks to start. Please check "
        "connectivity between servers. You may need to increase the --start-timeout parameter if you have too many "
        "servers. Timeout after 30 seconds.",
        "Timed out waiting for Spark tasks to start. Please check that you have enough resources to run all Horovod "
        "processes. Each Horovod process runs in a Spark task. You may need to increase the start_timeout parameter "
        "to a larger value if your Spark resources are allocated on-demand. Timeout after 600 seconds.",
    ):
        assert winner(text) == ("horovod.start_timeout", "launcher_rendezvous_store_failure")


def test_pod_named_worker_logs_say_which_worker_they_are(tmp_path: Path, settings: Settings) -> None:
    # ElasticDL 2020-04 (worker/main.py "Starting worker %d", task_data_service.py, worker.py with FTLib); k8s pod
    # names name no rank, the worker's own first line does
    def log(worker: int, last: str) -> str:
        return (
            f"[2020-04-10 08:00:01,002] [INFO] [main.py:21:main] Starting worker {worker}\n"
            "[2020-04-10 08:00:09,880] [INFO] [worker.py:658:_process_eval_task] the evaluation task_id: 12\n"
            f"{last}\n"
        )

    barrier = "[2020-04-10 08:13:55,021] [WARNING] [worker.py:755:_broadcast_model_params] Failed to perform barrier operation"
    files = {
        "elasticdl-mnist-worker-0.log": log(0, barrier),
        "elasticdl-mnist-worker-1.log": log(
            1, "[2020-04-10 08:01:00,118] [INFO] [task_data_service.py:203:get_dataset] No more task, stopping"
        ),
        "elasticdl-mnist-worker-2.log": log(2, barrier),
    }
    out = run_files(tmp_path / "b", files, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 1, rc
    assert any(c.file == "elasticdl-mnist-worker-1.log" and c.line == 3 and c.verified for c in rc.citations)
    assert rc.confidence <= 0.6


def test_a_worker_index_names_a_rank_but_a_dataloader_worker_does_not() -> None:
    assert rank_named(3, "master.log", "worker 3 timeout, relaunch it")
    assert rank_named(3, "worker-3.log", "No more task, stopping")  # the path names it (text/prefix.rank_of_path)
    assert not rank_named(3, "train.log", "RuntimeError: DataLoader worker 3 exited unexpectedly")
    assert not rank_named(3, "elasticdl-job-worker-3.log", "No more task, stopping")  # a pod name is a node


def test_an_lm_eval_rank_that_never_came_back_from_its_requests(tmp_path: Path, settings: Settings) -> None:
    # lm_eval/api/task.py (0.4.x) logs "Building contexts for <task> on rank <r>..." on every rank of an accelerate
    # launch without rank prefixes; the others then wait in the gather (c10d's watchdog names each waiting rank)
    lines = [
        f"2026-11-30:02:00:0{r} INFO     [api.task:312] Building contexts for gsm8k on rank {r}..." for r in range(4)
    ]
    lines += [_watchdog(r).split("]:", 1)[1] for r in (0, 1, 3)]
    out = run_files(tmp_path / "b", {"eval.log": "\n".join(lines) + "\n"}, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 2, rc
    assert any(c.line == 3 and c.verified for c in rc.citations)
    assert rc.confidence < 0.8


TF_DOWN = (
    "ERROR:tensorflow:Cluster check alive failed, /job:worker/replica:0/task:1 is down, aborting collectives: "
    "Deadline Exceeded"
)


def test_the_tf_health_check_names_the_task_that_went_down(tmp_path: Path, settings: Settings) -> None:
    # tensorflow/python/distribute/collective_all_reduce_strategy.py _check_health (2.3-2.18)
    seems = "WARNING:tensorflow:/job:worker/replica:0/task:1 seems down, retrying 1/3"
    files = {"worker-0.log": f"Epoch 3/10\n{seems}\n{TF_DOWN}\n", "worker-1.log": "Epoch 3/10\n"}
    rc = run_files(tmp_path / "b", files, settings).document.root_cause
    assert rc.class_ in {"nccl_remote_peer_failure", "rank_hang_or_missing_rank"} and rc.culprit.rank == 1
    assert any(c.file == "worker-0.log" and c.line == 3 and c.verified for c in rc.citations)
    assert rc.confidence < 0.8
    # the task's own error, when it printed one, is why it went down
    files["worker-1.log"] = (
        'Epoch 3/10\nTraceback (most recent call last):\n  File "train.py", line 88, in <module>\n'
        "    batch = next(it)\nKeyError: 'input_ids'\n"
    )
    rc = run_files(tmp_path / "c", files, settings).document.root_cause
    assert rc.class_ == "python_exception_rank_crash" and rc.culprit.rank == 1


def test_a_task_that_stopped_heartbeating_after_its_own_error_is_that_error(tmp_path: Path, settings: Settings) -> None:
    heartbeat = (
        "F0224 19:21:00.075587  157988 client.h:77] Terminating process because the JAX distributed service detected "
        "fatal errors. This most likely indicates that another task died; see the other task logs for more details. "
        "absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n"
        "/job:jax_worker/replica:0/task:3\n"
    )
    files = {f"rank{r}.log": "completed step: 70, seconds: 30.309\n" + heartbeat for r in (0, 1, 2)}
    files["rank3.log"] = (
        'completed step: 70, seconds: 30.309\nTraceback (most recent call last):\n  File "train.py", line 88, in '
        "<module>\n    batch = next(it)\nKeyError: 'input_ids'\n"
    )
    rc = run_files(tmp_path / "b", files, settings).document.root_cause
    assert rc.class_ == "python_exception_rank_crash" and rc.culprit.rank == 3


def test_a_vllm_generate_bar_is_work_outside_collectives() -> None:
    # vllm/entrypoints/llm.py _run_engine: tqdm(desc="Processed prompts", postfix="est. speed input: ... toks/s, ...")
    text = (
        "Processed prompts:  42%|████▏     | 210/500 [31:02<42:51,  8.87s/it, est. speed input: 12.31 toks/s, "
        "output: 40.02 toks/s]"
    )
    bar = hangs.bar_of(text)
    assert bar is not None and bar[0] == "Processed prompts" and hangs.is_work(bar[0])
