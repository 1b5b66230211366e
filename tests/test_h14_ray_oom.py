"""Ray's reports that work was killed for lack of host memory, across 1.x-2.60 (issue 14, user-space memory killers).

Every line follows the emitter's own text, read from the released wheels (the Python files, and the format strings
compiled into ``raylet`` and ``_raylet.so``): python/ray/(_private/)memory_monitor.py, python/ray/exceptions.py,
python/ray/_private/worker.py print_worker_logs, src/ray/raylet/node_manager.cc, src/ray/core_worker/task_manager.cc,
src/ray/gcs/gcs_server/gcs_actor_manager.cc; the version is named on each. Identifiers (IDs, IPs, pids, sizes) are
made up. A traceback that re-raises the kill (a RayTaskError over the cause's traceback, an ActorDiedError with the
death's context, a Train aggregate chained over it) is the kill's carrier, not a Python exception of its own
(scan/tracebacks.py CARRIED_CLASSES); the node is the one the memory line names, never the caller's ``ip=``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.reduce.causal import Candidate
from crashcart.reduce.memory import named_nodes
from crashcart.settings import Settings
from crashcart.text.prefix import split_prefix
from tests.kit import finding, run_files, winner

ID = "5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b"


@pytest.mark.parametrize(
    "line",
    [
        # 1.13 / 2.0 exceptions.py RayTaskError.as_instanceof_cause over memory_monitor.py's RayOutOfMemoryError
        "ray.exceptions.RayTaskError(RayOutOfMemoryError): ray::preprocess() (pid=4242, ip=10.10.1.7)",
        "ray._private.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node worker-7 is used (60.12 / 62.8 GB). The top 10 memory consumers are:",
        # 2.1 docs/ 2.2-2.30 node_manager.cc: the kill's detail on the worker-death line, the exit type
        "WARNING worker.py:1839 -- A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker. RayTask ID: 8ce7 Worker ID: 5c9a Node ID: 3a4b Worker IP address: 172.17.0.2 Worker port: 10003 Worker PID: 69161 Worker exit type: SYSTEM_ERROR Worker exit detail: Task was killed due to the node running low on memory.",
        "The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on memory.",
        "[2023-02-01 01:02:03,456 I 120 120] node_manager.cc:2950: Worker evicted and process killed to reclaim memory. worker id: 5c9ac30f",
        # 2.1 node_manager.cc: the kill message's last sentence
        "Consider provisioning more memory on this node or reducing task parallelism by requesting more CPUs per task. To adjust the eviction threshold, set the environment variable `RAY_memory_usage_threshold_fraction` when starting Ray. To disable worker eviction, set the environment variable `RAY_memory_monitor_interval_ms` to zero.",
        # 2.2-2.60 the suggestions printed with a kill
        "(raylet) Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory on this node or reducing task parallelism by requesting more CPUs per task.",
        "Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-observability/user-guides/debug-apps/debug-memory.html. Consider provisioning more memory on this node or reducing task parallelism by requesting more CPUs per task.",
        # 2.2-2.60 core_worker/task_manager.cc (INFO in python-core-worker-*.log)
        "[2023-05-10 08:00:01,123 I 8812 8850] task_manager.cc:1047: task c8ef45cc retries left: 3, oom retries left: 0, task failed due to oom: 1",
        # 2.60 task_manager.cc, pushed to the driver; node_manager.cc kill message and the raylet's own line
        f"(raylet, ip=10.40.0.6) Task tokenize failed due to oom. There are 0 oom retries remaining, so the task will be retried. Error: 1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 10.40.0.6, ID: {ID}) was 120.50GB used / 125.00GB limit (0.964000); OOM kill reason: Memory usage 129385000000B exceeded threshold of 127500000000B (95.0% of 134217728000B limit)",
        f"ray.exceptions.OutOfMemoryError: 2 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 10.40.0.6, ID: {ID}) was 120.50GB used / 125.00GB limit (0.964000)",
        "Ray killed 1 worker(s) based on the killing policy: [(Task: job ID=05000000, pid=3471, actual memory used=2.85GB, worker ID=8150a4b5)]",
        "[2026-01-10 09:00:02,811 I 411 411] (raylet) node_manager.cc:3302: Killing 1 worker(s), kill details: [(Task: job ID=05000000, pid=3471)]",
    ],
)  # fmt: skip
def test_rays_memory_kills_of_every_version_are_host_oom_kills(line: str) -> None:
    assert winner(line) == ("ray.memory_monitor_kill", "host_oom_kill")


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # torch.OutOfMemoryError's __name__ is OutOfMemoryError too: Ray 2.10+ wraps it the same way (exceptions.py)
        ("ray.exceptions.RayTaskError(OutOfMemoryError): ray::train_fn() (pid=5120, ip=10.50.0.3, actor_id=8bd1c4e0, repr=Trainer)", None),
        ("[2023-05-10 08:00:01,123 I 8812 8850] task_manager.cc:1047: task c8ef45cc retries left: 2, oom retries left: 3, task failed due to oom: 0", "unknown"),
        # 2.60 threshold_memory_monitor: its start-up line, no pressure
        ("ThresholdMemoryMonitor initialized with usage threshold at 127500000000 bytes (0.950000% of system memory), total system memory bytes: 134217728000, monitor interval: 250ms", None),
    ],
)  # fmt: skip
def test_lines_that_only_look_like_a_ray_memory_kill_are_not_one(line: str, want: str | None) -> None:
    got = winner(line)
    assert (got[1] if got else None) in {want, "python_exception_rank_crash", "unknown", None}
    assert got is None or got[1] != "host_oom_kill", got


@pytest.mark.parametrize(
    "line",
    [
        # 2.2-2.30 node_manager.cc memory monitor callback, over the threshold without a kill
        "[2023-02-01 01:02:03,456 I 120 120] node_manager.cc:2988: Memory usage above threshold but no workers are available for killing.",
        "[2023-02-01 01:02:03,456 I 120 120] node_manager.cc:2985: Memory usage above threshold. Still waiting for worker eviction to free up memory.",
        "Worker killer did not select a worker to kill even though memory usage is high.",
        # 2.1 src/ray/common/memory_monitor.cc, 2.60 threshold_memory_monitor
        "Node memory usage above threshold, used: 129385000000, threshold_bytes: 127500000000, total bytes: 134217728000, threshold fraction: 0.950000",
    ],
)  # fmt: skip
def test_ray_memory_pressure_without_a_kill_only_confirms_one(line: str) -> None:
    assert winner(line) == ("ray.memory_pressure", "host_oom_kill")
    assert finding("ray.memory_pressure", line).role == "confirmation"


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # exceptions.py 2.30-2.60: RayActorError.BASE_ERROR_MSG, ActorUnavailableError
        ("ray.exceptions.RayActorError: The actor experienced an error before finishing this task.", "ray.worker_died"),
        ("ray.exceptions.ActorUnavailableError: The actor 2a6c6f1b8f5e4c3d2b1a09f8e7d6c5b401000000 is unavailable: The actor is temporarily unavailable: IOError: The actor was restarted. The task may or may not have been executed on the actor.", "ray.worker_died"),
        # gcs_actor_manager.cc 1.13-2.10 and 2.30-2.60: the actor's death context when its node died
        ("The actor is dead because its node has died. Node Id: 0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5", "ray.node_died"),
        ("The actor died because its node has died. Node Id: 0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5", "ray.node_died"),
    ],
)  # fmt: skip
def test_deaths_ray_reports_without_their_cause_stay_unknown(line: str, want: str) -> None:
    assert winner(line) == (want, "unknown")


@pytest.mark.parametrize(
    ("line", "node"),
    [
        # 2.60: the node's address after the "worker(s) were killed" start of the line
        (f"(raylet, ip=10.40.0.6) Task tokenize failed due to oom. There are 0 oom retries remaining, so the task will be retried. Error: 1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 10.40.0.6, ID: {ID}) was 120.50GB used / 125.00GB limit (0.964000)", "10.40.0.6"),
        # 2.2-2.30 on the worker-death line
        ("Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on memory. Memory on the node (IP: 10.30.0.4, ID: 0a1b) where the task (actor ID: 2a6c, name=W.__init__, pid=7310, memory used=58.20GB) was running was 60.95GB / 63.36GB (0.961963), which exceeds the memory usage threshold of 0.95.", "10.30.0.4"),
        # a RayTaskError's ip= is the caller's node (1.x: named again by host name on the error's own line)
        ("ray.exceptions.RayTaskError(RayOutOfMemoryError): ray::preprocess() (pid=4242, ip=10.10.1.7)", None),
    ],
)  # fmt: skip
def test_a_ray_memory_kill_takes_the_node_the_memory_line_names(line: str, node: str | None) -> None:
    oom = Candidate("host_oom_kill", [finding("ray.memory_monitor_kill", line)], [])
    named_nodes([oom])
    assert oom.nodes == ({node} if node else set())


@pytest.mark.parametrize(
    ("line", "host", "rest"),
    [
        # python/ray/_private/worker.py print_worker_logs (2.x), python/ray/worker.py (1.x): "({prefix}{pid}, ip={ip}) "
        ("(pid=3131, ip=10.60.0.8)   File \"/srv/job.py\", line 20, in run_shard", "10.60.0.8", '  File "/srv/job.py", line 20, in run_shard'),
        ("(pid=3131) RuntimeError: boom", None, "RuntimeError: boom"),
        ("(raylet) [2023-04-09 07:23:59,445 E 395 395] (raylet) node_manager.cc:3049: x", None, "[2023-04-09 07:23:59,445 E 395 395] (raylet) node_manager.cc:3049: x"),
        ("(raylet, ip=10.0.0.5) Task was killed due to the node running low on memory.", "10.0.0.5", "Task was killed due to the node running low on memory."),
        ("(MapWorker(MapBatches(fn)) pid=12, ip=10.1.1.1) x", "10.1.1.1", "x"),
        # log_monitor.py names gcs_server and runtime_env files by those words in place of a pid
        ("(pid=gcs_server, ip=10.0.0.1) g", "10.0.0.1", "g"),
        ("(autoscaler +1m2s) Resized to 8 CPUs.", None, "Resized to 8 CPUs."),
        ("(foo) not a Ray prefix", None, "(foo) not a Ray prefix"),
    ],
)  # fmt: skip
def test_ray_log_monitor_prefixes_are_stripped_with_their_node(line: str, host: str | None, rest: str) -> None:
    got = split_prefix(line)
    assert (got.host, got.rest) == (host, rest)


# 2.2-2.9: the caller's task re-raises the killed task's OutOfMemoryError; RayTaskError did not wrap RayError causes
# (exceptions.py as_instanceof_cause "don't try to wrap ray internal errors"), so its own line names no cause.
NESTED = f"""\
2023-05-10 08:00:00,000	INFO worker.py:1544 -- Connecting to existing Ray cluster at address: 10.20.0.1:6379...
Traceback (most recent call last):
  File "/home/ray/pipeline.py", line 51, in <module>
    ray.get(stage.remote(shards))
  File "/home/ray/anaconda3/lib/python3.10/site-packages/ray/_private/worker.py", line 2523, in get
    raise value.as_instanceof_cause()
ray.exceptions.RayTaskError: ray::stage() (pid=8812, ip=10.20.0.5)
  File "/home/ray/pipeline.py", line 40, in stage
    return ray.get([load.remote(s) for s in shards])
ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.
Memory on the node (IP: 10.20.0.9, ID: {ID}) where the task (task ID: c8ef, name=load, pid=9911, memory used=22.10GB) was running was 30.12GB / 31.31GB (0.962), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 1f0e) because it was the most recently scheduled task; to see more information about memory usage on this node, use `ray logs raylet.out -ip 10.20.0.9`.
"""

# 2.10-2.30: ActorDiedError with the death's context (exceptions.py), its error_message the GCS's
ACTOR = f"""\
Traceback (most recent call last):
  File "/workspace/serve_batch.py", line 88, in <module>
    outputs = ray.get([w.run.remote(b) for w, b in zip(workers, batches)])
  File "/usr/local/lib/python3.10/dist-packages/ray/_private/worker.py", line 866, in get_objects
    raise value
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
	class_name: BatchWorker
	actor_id: 2a6c6f1b8f5e4c3d2b1a09f8e7d6c5b401000000
	pid: 7310
	ip: 10.30.0.4
The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on memory.
Memory on the node (IP: 10.30.0.4, ID: {ID}) where the task (actor ID: 2a6c, name=BatchWorker.__init__, pid=7310, memory used=58.20GB) was running was 60.95GB / 63.36GB (0.961963), which exceeds the memory usage threshold of 0.95.
"""

# 2.10+: Ray Train's aggregate chained over the trainer's RayTaskError(OutOfMemoryError); no line names the node that
# ran low (the RayTaskError's ip is the trainer's).
TRAIN = """\
Traceback (most recent call last):
  File "/home/user/ray/tune/execution/experiment_state.py", line 98, in _fetch
ray.exceptions.RayTaskError(OutOfMemoryError): ray::_Inner.train() (pid=5120, ip=10.50.0.3, actor_id=8bd1c4e0a9f47c1d2e3f405e01000000, repr=TorchTrainer)
  File "/home/user/ray/train/_internal/utils.py", line 54, in check_for_failure
    ray.get(object_ref)
ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/home/user/train.py", line 77, in <module>
    result = trainer.fit()
ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect the previous error messages for a cause. After fixing the issue (assuming that the error is not caused by your own application logic, but rather an error such as OOM), you can restart the run from scratch or continue this run.
"""

# 1.13: the worker's memory monitor raised inside the task; __str__ drops the ray/_private/ and _raylet.pyx frames
RAY1 = """\
Traceback (most recent call last):
  File "train.py", line 30, in <module>
    out = ray.get(refs)
  File "/opt/conda/lib/python3.8/site-packages/ray/worker.py", line 1833, in get
    raise value.as_instanceof_cause()
ray.exceptions.RayTaskError(RayOutOfMemoryError): ray::preprocess() (pid=4242, ip=10.10.1.7)
ray._private.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node worker-7 is used (60.12 / 62.8 GB). The top 10 memory consumers are:

PID	MEM	COMMAND
4242	40.12GiB	ray::preprocess()
"""

# a worker's traceback forwarded by the log monitor (worker.py print_worker_logs): each line carries its node
WORKER = """\
(pid=3131, ip=10.60.0.8) Traceback (most recent call last):
(pid=3131, ip=10.60.0.8)   File "/srv/job.py", line 20, in run_shard
(pid=3131, ip=10.60.0.8)     data = ray.get(ref)
(pid=3131, ip=10.60.0.8) ray.exceptions.RayTaskError: ray::load() (pid=3190, ip=10.60.0.8)
(pid=3131, ip=10.60.0.8) ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.
"""


@pytest.mark.parametrize(
    ("text", "node", "cited"),
    [
        (NESTED, "10.20.0.9", 11),
        (ACTOR, "10.30.0.4", 12),
        (TRAIN, None, 6),
        (RAY1, "worker-7", 6),
        (WORKER, "10.60.0.8", 5),
    ],
)
def test_a_traceback_that_reraises_a_ray_memory_kill_is_that_kill(
    tmp_path: Path, settings: Settings, text: str, node: str | None, cited: int
) -> None:
    out = run_files(tmp_path / "b", {"driver.log": text}, settings)
    root = out.document.root_cause
    assert root.class_ == "host_oom_kill"
    assert root.culprit.node == node
    assert any(c.line == cited and c.verified for c in root.citations)
    assert not any(h.class_ == "python_exception_rank_crash" for h in out.document.hypotheses)
    tracebacks = [f for f in out.findings if len(f.evidence) > 1 and f.evidence[1].end_line and f.role != "teardown"]
    assert tracebacks and all(f.class_id == "host_oom_kill" for f in tracebacks)  # TRAIN: the aggregate's own half
    assert all("memory" in f.summary.lower() for f in tracebacks), [f.summary for f in tracebacks]  # says the kill


def test_a_cuda_oom_the_same_wrapper_carries_is_no_host_kill(tmp_path: Path, settings: Settings) -> None:
    # Ray 2.10+ wraps torch.OutOfMemoryError as RayTaskError(OutOfMemoryError) too (its __name__); the cause says GPU
    text = """\
Traceback (most recent call last):
  File "/home/user/train.py", line 12, in <module>
    ray.get(train.remote())
ray.exceptions.RayTaskError(OutOfMemoryError): ray::train() (pid=5120, ip=10.50.0.3)
  File "/home/user/train.py", line 8, in train
    loss = model(batch).sum()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.06 GiB is free.
"""
    out = run_files(tmp_path / "b", {"driver.log": text}, settings)
    assert out.document.root_cause.class_ == "cuda_oom"
    assert not any(f.class_id == "host_oom_kill" for f in out.findings)


def test_a_schedulers_line_after_a_traceback_is_not_its_message(tmp_path: Path, settings: Settings) -> None:
    # Slurm's srun (src/srun/srun_job.c "%s: task %s: Out Of Memory") prints its own record after the rank's
    # traceback: the traceback does not carry it (only Ray's own lines make a Ray exception's message)
    text = """\
Traceback (most recent call last):
  File "train.py", line 3, in <module>
    main()
RuntimeError: loader stopped
srun: error: nid001277: task 1: Out Of Memory
"""
    out = run_files(tmp_path / "b", {"slurm-1.out": text}, settings)
    assert out.document.root_cause.class_ == "host_oom_kill"
    tracebacks = [f for f in out.findings if len(f.evidence) > 1 and f.evidence[1].end_line]
    assert [f.class_id for f in tracebacks] == ["python_exception_rank_crash"]


# 2.60 Ray Train v2: WorkerGroupError over a worker whose health check failed because its actor was killed
# (v2/api/exceptions.py, v2/_internal/execution/worker_group/poll.py and worker_group.py; the ActorDiedError's str)
TRAIN_V2 = """\
Traceback (most recent call last):
  File "/home/user/train.py", line 61, in <module>
    result = trainer.fit()
ray.train.WorkerGroupError: Training failed due to worker errors:
[Rank 2 Error Snippet]:
A worker health check failed.
Worker info: Worker(actor=Actor(RayTrainWorker, 9c1d2e3f01000000), metadata=WorkerMetadata(node_ip='10.0.0.6', pid=48210))
The actor died unexpectedly before finishing this task.
	class_name: RayTrainWorker
	actor_id: 9c1d2e3f01000000
	pid: 48210
	ip: 10.0.0.6
The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: 1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 10.0.0.6, ID: 5e4d) was 120.50GB used / 125.00GB limit (0.964000)
"""


def test_ray_train_v2s_aggregate_carries_the_workers_memory_kill(tmp_path: Path, settings: Settings) -> None:
    assert winner("ray.train.WorkerGroupError: Training failed due to worker errors:") == (
        "ray.tune_trials_incomplete",
        "unknown",
    )
    out = run_files(tmp_path / "b", {"driver.log": TRAIN_V2}, settings)
    root = out.document.root_cause
    assert root.class_ == "host_oom_kill" and root.culprit.node == "10.0.0.6"
    assert any(c.line == 13 and c.verified for c in root.citations)


def test_an_actor_whose_creation_task_the_1x_memory_monitor_stopped_is_that_kill(
    tmp_path: Path, settings: Settings
) -> None:
    # exceptions.py 1.13 RayActorError(cause=RayTaskError): "The actor died because of an error raised in its creation
    # task, {cause.__str__()}", the cause's frames outside ray/_private/ and _raylet.pyx, then its exception line
    text = """\
Traceback (most recent call last):
  File "/srv/build_index.py", line 33, in <module>
    ray.get([s.ready.remote() for s in shards])
  File "/opt/conda/lib/python3.8/site-packages/ray/worker.py", line 1833, in get
    raise value
ray.exceptions.RayActorError: The actor died because of an error raised in its creation task, ray::Shard.__init__() (pid=5501, ip=10.10.4.9)
  File "/srv/shard.py", line 14, in __init__
    self.table = load_table(path)
ray._private.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node node-09 is used (59.8 / 62.8 GB). The top 10 memory consumers are:
"""
    out = run_files(tmp_path / "b", {"driver.log": text}, settings)
    root = out.document.root_cause
    assert root.class_ == "host_oom_kill" and root.culprit.node == "node-09"
    assert not any(h.class_ == "python_exception_rank_crash" for h in out.document.hypotheses)
