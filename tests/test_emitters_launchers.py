"""Launchers and runtimes other than torchrun, from their own format strings across releases: Ray (1.13-2.58:
python/ray/exceptions.py, the raylet, the GCS, Ray Train/Tune), DeepSpeed (0.5-0.16: launcher/launch.py, runner.py,
multinode_runner.py, the fp16 loss scaler, elasticity, config), Horovod (0.20-0.28: common/, runner/), accelerate
(0.10-1.14: commands/launch.py, launchers.py, utils/launch.py) and Open MPI (v3.0-v5: the orterun/errmgr/rmaps help
texts, PRRTE's wording of the same). Each wording, printed with the prefixes its program and the usual wrappers put in
front of it, gets the class its meaning gives; a launcher's report of a kill without a reason stays weak (unknown,
low priority); a launcher's aggregate or the teardown of healthy workers is never a root candidate."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.catalogue import Signature, load_catalogue
from crashcart.settings import Settings
from tests.kit import run_files, winner

PEER = "nccl_remote_peer_failure"
BOOT = "nccl_init_bootstrap_failure"
HANG = "rank_hang_or_missing_rank"
DESYNC = "collective_mismatch_desync"
USER = "python_exception_rank_crash"
NATIVE = "native_crash_segfault_abort"
HOSTOOM = "host_oom_kill"
DISK = "storage_full_or_io_error"
PREEMPT = "scheduler_preemption_or_timelimit"
LAUNCH = "launcher_rendezvous_store_failure"
SUMMARY = "torchelastic_childfailed_summary"
FP16 = "fp16_loss_scale_overflow"
UNKNOWN = "unknown"

# what a row asks besides the class: "root" a root candidate, "weak" an unknown kill that must not outrank a reason
# (priority <= 50, not a generic detector), "aggregate" never a root candidate, "known" recognised by a signature of
# its own (not one of the generic detectors)
ROOT, WEAK, AGG, KNOWN = "root", "weak", "aggregate", "known"

# Each table line is "CLASS | want | text", with the line as printed: the prefixes of the program and its usual
# wrappers are part of the text (Ray's driver "<time>\tERROR worker.py:N -- " and "(raylet) " / "(<Actor> pid=N, ip=A) ",
# the raylet's and GCS's "[<time> E pid tid] (raylet) file.cc:N: ", DeepSpeed's "[<time>] [ERROR] [launch.py:N:fn] "
# and pdsh's "<host>: ", horovodrun's "[<rank>]<stderr>:" and Horovod's C++ "[<time>: E <file>:<line>] ").
GROUPS: dict[str, str] = {
    # ---- Ray: python/ray/exceptions.py
    "ray exceptions": """
UNKNOWN | weak | ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task. Check python-core-worker-*.log files for more information.
UNKNOWN | weak | ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.
UNKNOWN | weak | ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
USER | root | ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, ray::Trainer.__init__() (pid=4242, ip=10.0.0.3, actor_id=8bd1c4e0, repr=<Trainer object>)
USER | root | ray.exceptions.RayTaskError(ValueError): ray::train_fn() (pid=5120, ip=10.50.0.3, actor_id=8bd1c4e0, repr=Trainer)
UNKNOWN | weak | ray.exceptions.NodeDiedError: Task failed because the node it was running on is dead or unavailable. Node IP: 10.0.0.7, node ID: 9426f445. This can happen if the node was preempted, had a hardware failure, or its raylet crashed unexpectedly.
HOSTOOM | root | ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.
UNKNOWN | weak | ray.exceptions.ObjectLostError: Failed to retrieve object 00ffffffffffffffffffffffffffffffffffffff0100000002000000. The ObjectRef was created at: train.py:42
UNKNOWN | weak | All copies of 00ffffffffffffffffffffffffffffffffffffff0100000002000000 have been lost due to node failure. Check cluster logs (`/tmp/ray/session_latest/logs`) for more information about the failure.
UNKNOWN | weak | ray.exceptions.OwnerDiedError: Failed to retrieve object 00ffffffffffffffffffffffffffffffffffffff0100000002000000.
UNKNOWN | weak | The object's owner has exited. This is the Python worker that first created the ObjectRef via `.remote()` or `ray.put()`. Check cluster logs (`/tmp/ray/session_latest/logs`) for more information about the Python worker failure.
HOSTOOM | root | ray.exceptions.ObjectStoreFullError: Failed to put object ffffffff00000000 in object store because it is full. Object size is 2147483648 bytes.
HOSTOOM | root | The local object store is full of objects that are still in scope and cannot be evicted. Tip: Use the `ray memory` command to list active objects in the cluster.
DISK | root | ray.exceptions.OutOfDiskError: Local disk is full
DISK | root | The object cannot be created because the local object store is full and the local disk's utilization is over capacity (95% by default).Tip: Use `df` on this node to check disk usage and `ray memory` to check object store memory usage.
UNKNOWN | weak | ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more information.
USER | root | ray.exceptions.RuntimeEnvSetupError: Failed to set up runtime environment.
HANG | root | ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready.
LAUNCH | root | ray.exceptions.ActorUnschedulableError: The actor is not schedulable: The node specified via NodeAffinitySchedulingStrategy doesn't exist any more or is infeasible, and soft=False was specified.
UNKNOWN | weak | ray.exceptions.ActorUnavailableError: The actor 2a6c6f1b is unavailable: The actor is temporarily unavailable: IOError: The actor was restarted. The task may or may not have been executed on the actor.
""",
    # ---- Ray: the raylet's and the core worker's reports of a worker's end
    "ray raylet workers": """
UNKNOWN | weak | 2024-03-05 07:01:51,123\tWARNING worker.py:2074 -- A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker. RayTask ID: 7bfe64c6 Worker ID: be18a379 Node ID: ab372961 Worker IP address: 172.28.0.12 Worker port: 35803 Worker PID: 65040 Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.
UNKNOWN | weak | (raylet) A worker died or was killed while executing a task by an unexpected system error. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker exits unexpectedly. Worker exits with an exit code None. The worker may have exceeded K8s pod memory limits.
UNKNOWN | weak | [2024-03-05 07:01:51,123 E 5521 5540] (raylet) node_manager.cc:3040: Worker exits with an exit code 1.
UNKNOWN | weak | The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.
HOSTOOM | root | Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on memory.
HOSTOOM | root | [2024-03-05 07:01:51,123 E 5521 5540] (raylet) node_manager.cc:3040: 10 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: e5d953ef, IP: 10.0.62.231) over the last time period.
""",
    # ---- Ray: the GCS on a node's death, and preemption
    "ray nodes": """
UNKNOWN | weak | 2024-03-05 07:01:51,123\tWARNING worker.py:2074 -- The node with node id: 9426f445 and address: 10.130.0.113 and node name: 10.130.0.113 has been marked dead because the detector has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly (OOM, etc.) 
UNKNOWN | weak | [2024-03-05 07:01:51,123 W 114781 114781] (gcs_server) gcs_node_manager.cc:128: Node is dead because the health check failed.
UNKNOWN | weak | [2024-03-05 07:01:51,123 W 114781 114781] (gcs_server) gcs_node_manager.cc:128: Node 9426f445 health check failed due to missing too many heartbeats
UNKNOWN | weak | 2024-03-05 07:01:51,123\tERROR agent.py:217 -- Raylet is terminated. Termination is unexpected. Possible reasons include: (1) SIGKILL by the user or system OOM killer, (2) Invalid memory access from Raylet causing SIGSEGV or SIGBUS, (3) Other termination signals.
UNKNOWN | weak | The actor died because its node has died. Node Id: 0a1b2c3d4e5f60718293a4b5c6d7e8f9
PREEMPT | root | (raylet) Task train_step failed due to node preemption on node 9426f445. The task will be retried, but the retry will not count against the normal retry count.
PREEMPT | root | \tthe actor's node was preempted: Node was forcibly preempted
PREEMPT | root | 2024-03-05 07:01:51,123\tERROR worker.py:409 -- Actor died by preemption.
""",
    # ---- Ray: object spilling and the disk (file_system_monitor)
    "ray disk": """
DISK | root | [2024-03-05 07:01:51,123 E 5521 5540] file_system_monitor.cc:111: /tmp/ray/session_2024-03-05_07-00-00_123456_4242 is over 95% full, available space: 1073741824; capacity: 107374182400. Object creation will fail if spilling is required.
DISK | root | (raylet) [2025-03-26 09:15:12,562 E 228 259] (raylet) file_system_monitor.cc:116: /tmp/ray/session_2025-03-26_08-55-15_777925_1 is over 95% full, available space: 16.7067 GB; capacity: 491.079 GB. Object creation will fail if spilling is required.
DISK | root | [2024-03-05 07:01:51,123 E 5521 5540] file_system_monitor.cc:104: /tmp/ray/session_latest has no capacity, object creation will fail if spilling is required.
""",
    # ---- Ray Train / Tune: aggregates of the workers' own errors
    "ray train and tune": """
UNKNOWN | aggregate | ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect the previous error messages for a cause.
UNKNOWN | aggregate | ray.train.WorkerGroupError: Training failed due to worker errors:
UNKNOWN | aggregate | ray.tune.error.TuneError: ('Trials did not complete', [train_fn_3c1a2_00000])
UNKNOWN | aggregate | Training errored after 12 iterations at 2024-03-05 07:01:51. Total running time: 3min 2s
LAUNCH | root | TimeoutError: Placement group creation timed out. Make sure your cluster either has enough resources or use an autoscaling cluster. If you are running on a cluster, make sure you specify an address in `ray.init()`, for example, `ray.init("auto")`.
DESYNC | root | (RayTrainWorker pid=4242, ip=10.0.0.3) RuntimeError: Some workers returned results while others didn't. Make sure that `session.report()` are called the same number of times on all workers.
""",
    # ---- DeepSpeed launcher (launch.py sigkill_handler / main loop)
    "deepspeed launch": """
UNKNOWN | weak | [2024-03-05 07:01:51,590] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=1', '--deepspeed'] exits with return code = -9
UNKNOWN | weak | node2: [2024-03-05 07:01:51,590] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=1', '--deepspeed'] exits with return code = -9
NATIVE | root | [2024-03-05 07:01:51,590] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=1', '--deepspeed'] exits with return code = -11
SUMMARY | aggregate | [2024-03-05 07:01:51,590] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=1', '--deepspeed'] exits with return code = 1
SUMMARY | aggregate | [2024-03-05 07:01:51,590] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=1', '--deepspeed'] exits with return code = -15
SUMMARY | aggregate | [2024-03-05 07:01:51,590] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 4242
SUMMARY | aggregate | node2: Killing subprocess 4242
SUMMARY | aggregate | [2024-03-05 07:01:51,590] [INFO] [launch.py:319:sigkill_handler] Main process received SIGTERM, exiting
SUMMARY | aggregate | subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=0']' returned non-zero exit status 1.
UNKNOWN | weak | subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=0']' died with <Signals.SIGKILL: 9>.
UNKNOWN | weak | pdsh@node1: node2: ssh exited with exit code 137
SUMMARY | aggregate | pdsh@node1: node2: ssh exited with exit code 1
""",
    # ---- DeepSpeed runner (runner.py, multinode_runner.py): the launch itself fails
    "deepspeed runner": """
LAUNCH | root | RuntimeError: Using hostfile at /job/hostfile but host=worker-1 was not reachable via ssh. If you are running with a single node please remove /job/hostfile or setup passwordless ssh.
LAUNCH | root | [2024-03-05 07:01:51,590] [ERROR] [runner.py:252:fetch_hostfile] Unable to detect suitable master address via `hostname -I`, please manually specify one via --master_addr
BOOT | root | RuntimeError: Unable to proceed, no GPU resources available
LAUNCH | root | ValueError: Num nodes is >1 but no extra nodes available via hostfile
LAUNCH | root | ValueError: Hostfile contains a bad entry: worker-1 slot=8, unable to proceed with launching
LAUNCH | root | ValueError: Hostfile is empty or not formatted correctly, unable to proceed with launching.
LAUNCH | root | ValueError: Hostfile contains multiple entries for worker-1, unable to proceed with launching
LAUNCH | root | [2024-03-05 07:01:51,590] [ERROR] [runner.py:252:fetch_hostfile] Hostfile is not formatted correctly, unable to proceed with training.
LAUNCH | root | [2024-03-05 07:01:51,590] [ERROR] [runner.py:252:fetch_hostfile] Hostfile contains duplicate hosts, unable to proceed with training.
LAUNCH | root | ValueError: Hostname 'worker-3' not found in hostfile
LAUNCH | root | RuntimeError: launcher 'pdsh' not installed.
LAUNCH | root | OSError: MPI environment variables are not set. Ensure you are running the script with an MPI-compatible launcher.
""",
    # ---- DeepSpeed runtime: fp16 loss scaler, config, elasticity
    "deepspeed runtime": """
FP16 | root | [2024-03-05 07:01:51,590] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768
FP16 | root | [2024-03-05 07:01:51,590] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis is 2. Reducing hysteresis to 1
FP16 | root | [deepspeed] OVERFLOW! Rank 0 Skipping step.
FP16 | root | [2021-09-01 10:00:00,000] [INFO] [stage3.py:2731:_overflow_clean_up] [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4294967296, reducing to 2147483648
FP16 | root | [deepspeed] fp16 dynamic loss scale overflow! Skipping step. Attempted loss scale: 65536.0, reducing to 32768.0
FP16 | root | [rank3]: Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.
USER | root | AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 32 != 4 * 1 * 4
USER | root | deepspeed.elasticity.config.ElasticityIncompatibleWorldSize: World size (12) is not valid with the current list of valid GPU counts: [8, 16]
USER | root | deepspeed.elasticity.config.ElasticityConfigError: Elasticity is disabled, please enable it ('enabled':true) if running an elastic training job.
""",
    # ---- Horovod: common/ (controller, operations, gloo http store)
    "horovod common": """
PEER | aggregate | tensorflow.python.framework.errors_impl.UnknownError: Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution.
PEER | aggregate | horovod.common.exceptions.HorovodInternalError: ncclCommInitRank failed: unhandled system error
DESYNC | root | [1]<stderr>:RuntimeError: Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [1024], but another rank sent a tensor of shape [2048].
DESYNC | root | [1]<stderr>:RuntimeError: Mismatched data types: One rank had type float32, but another rank had type int64.
DESYNC | root | [1]<stderr>:RuntimeError: Mismatched operations: One rank did an ALLREDUCE, but another rank did an ALLGATHER.
DESYNC | root | [1]<stderr>:RuntimeError: Mismatched ALLGATHER tensor shapes: One rank sent a tensor of rank 2, but another rank sent a tensor of rank 3.
BOOT | root | [2021-03-04 10:00:00.123456: E /tmp/pip-req-build-x/horovod/common/operations.cc:697] Horovod could not be initialized: Gloo context initialization failed
PEER | aggregate | [2021-03-04 10:00:00.123456: E /tmp/pip-req-build-x/horovod/common/operations.cc:697] Horovod background loop uncaught exception: [/tmp/pip-req-build-x/third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [10.0.0.2]:42183: Connection reset by peer
LAUNCH | root | [2021-03-04 10:00:00.123456: E /tmp/pip-req-build-x/horovod/common/gloo/http_store.cc:96] HTTP GET request failed too many times, aborting. See exception message above.
LAUNCH | known | RuntimeError: [/tmp/pip-req-build-x/horovod/common/gloo/http_store.cc:58] Wait timeout after 30 seconds for key(s): global/1. You may want to increase the timeout via HOROVOD_GLOO_TIMEOUT_SECONDS
""",
    # ---- Horovod: runner/ (horovodrun, gloo_run, elastic driver)
    "horovod runner": """
SUMMARY | aggregate | Process 3 exit with status code 1.
UNKNOWN | weak | Process 3 exit with status code 137.
UNKNOWN | weak | Process 3 exit with status code -9.
SUMMARY | aggregate | Terminating remaining workers after failure of Process 3.
SUMMARY | aggregate | RuntimeError: mpirun failed with exit code 1
SUMMARY | aggregate | RuntimeError: jsrun failed with exit code 1
LAUNCH | root | horovod.runner.common.util.timeout.TimeoutException: Timed out waiting for tasks to start. Please check connectivity between servers. You may need to increase the --start-timeout parameter if you have too many servers. Timeout after 30 seconds.
SUMMARY | aggregate | ERROR:root:failure count == 4 -> stop running
SUMMARY | aggregate | ERROR:root:blacklisted slots count == 4 -> stop running
SUMMARY | aggregate | ERROR:root:reset count 3 has exceeded limit 3 -> stop running
SUMMARY | aggregate | RuntimeError: Job has been shutdown, see above error messages for details.
SUMMARY | aggregate | WARNING:root:blacklist failing host: worker-2
""",
    # ---- accelerate: commands/launch.py, launchers.py, utils/launch.py
    "accelerate": """
SUMMARY | aggregate | subprocess.CalledProcessError: Command '['/usr/bin/python3', 'train.py', '--lr', '1e-4']' returned non-zero exit status 1.
NATIVE | root | subprocess.CalledProcessError: Command '['/usr/bin/python3', 'train.py']' died with <Signals.SIGSEGV: 11>.
USER | root | RuntimeError: CUDA has been initialized before the `notebook_launcher` could create a forked subprocess. This likely stems from an outside import causing issues once the `notebook_launcher()` is called.
LAUNCH | root | OSError: mpirun or mpiexec were not found. Ensure that Intel MPI, Open MPI, or MVAPICH are installed.
""",
    # ---- Open MPI v3.0-v4.1 (orterun, errmgr, rmaps help texts) and v5 (PRRTE's prterun/mpirun)
    "open mpi": """
UNKNOWN | weak | mpirun noticed that process rank 3 with PID 4242 on node gpu-node-3 exited on signal 9 (Killed).
UNKNOWN | weak | prterun noticed that process rank 3 with PID 4242 on node gpu-node-3 exited on signal 9 (Killed).
NATIVE | root | mpirun noticed that process rank 12 with PID 41234 on node gpu-node-7 exited on signal 11 (Segmentation fault).
NATIVE | root | mpirun noticed that process rank 12 with PID 41234 on node gpu-node-7 exited on signal 6.
SUMMARY | aggregate | Primary job  terminated normally, but 1 process returned
SUMMARY | aggregate | a non-zero exit code. Per user-direction, the job has been aborted.
SUMMARY | aggregate | mpirun detected that one or more processes exited with non-zero status, thus causing
SUMMARY | aggregate | mpirun has exited due to process rank 3 with PID 4242 on
SUMMARY | aggregate | prterun has exited due to process rank 0 with PID 12345 on node gpu-node-3
SUMMARY | aggregate | node gpu-node-3 exiting improperly. There are three reasons this could occur:
SUMMARY | aggregate | mpirun noticed that the job aborted, but has no info as to the process
UNKNOWN | weak | ORTE has lost communication with a remote daemon.
UNKNOWN | weak | PRTE has lost communication with a remote daemon.
LAUNCH | root | ORTE was unable to reliably start one or more daemons.
LAUNCH | root | prterun was unable to reliably start one or more daemons.
LAUNCH | root | An ORTE daemon has unexpectedly failed after launch and before
LAUNCH | root | An PRTE daemon has unexpectedly failed after launch and before
LAUNCH | root | ORTE is unable to establish a communication connection to the
LAUNCH | root | There are not enough slots available in the system to satisfy the 16
LAUNCH | root | mpirun was unable to launch the specified application as it encountered an error:
LAUNCH | root | mpirun was unable to start the specified application as it encountered an
LAUNCH | root | mpirun was unable to allocate enough resources to start your application.
LAUNCH | root | There are not enough slots available in the system to satisfy the 16 slots
LAUNCH | root | The application appears to have been direct launched using "srun",
LAUNCH | root | [gpu-node-3:04242] OPAL ERROR: Unreachable in file pmix3x_client.c at line 112
LAUNCH | root | [gpu-node-3:04242] PMIX ERROR: UNREACHABLE in file server/pmix_server.c at line 2198
LAUNCH | root | but OMPI was not built with SLURM's PMI support and therefore cannot
USER | root | MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD
PREEMPT | known | The user-provided time limit for job execution has been reached:
""",
}

CLASSES = {
    "PEER": PEER,
    "BOOT": BOOT,
    "HANG": HANG,
    "DESYNC": DESYNC,
    "USER": USER,
    "NATIVE": NATIVE,
    "HOSTOOM": HOSTOOM,
    "DISK": DISK,
    "PREEMPT": PREEMPT,
    "LAUNCH": LAUNCH,
    "SUMMARY": SUMMARY,
    "FP16": FP16,
    "UNKNOWN": UNKNOWN,
}


def _rows(table: str) -> list[tuple[str, str, str]]:
    """``CLASS | want | text`` lines: the class by its name above, what else the row asks, the line as printed."""
    rows = []
    for line in table.strip("\n").splitlines():
        cls, want, text = (part.strip() for part in line.split(" | ", 2))
        rows.append((text, CLASSES[cls], want))
    return rows


CASES = [(group, text, cls, want) for group, table in GROUPS.items() for text, cls, want in _rows(table)]


def _signature(sig_id: str) -> Signature:
    cat = load_catalogue()
    return cat.signatures[cat.index[sig_id]]


@pytest.mark.parametrize(
    ("group", "text", "cls", "want"), CASES, ids=[f"{g}-{i}" for i, (g, _, _, _) in enumerate(CASES)]
)
def test_each_wording_gets_the_class_it_means(group: str, text: str, cls: str, want: str) -> None:
    got = winner(text)
    assert got is not None, text
    assert got[1] == cls, (group, text, got)
    sig = _signature(got[0])
    if want == ROOT:
        assert sig.role in ("root_candidate", "confirmation"), (text, got, sig.role)
    elif want == WEAK:
        assert not got[0].startswith("generic."), (text, got)
        assert sig.priority <= 50, (text, got, sig.priority)
    elif want == AGG:
        assert sig.role in ("cascade", "teardown"), (text, got, sig.role)
    else:
        assert not got[0].startswith("generic."), (text, got)


BENIGN = [
    # DeepSpeed launch.py: a worker that returned 0, the spawn record, the rank mapping
    "[2024-05-01 12:00:00,123] [INFO] [launch.py:351:main] Process 4101 exits successfully.",
    "[2024-05-01 10:00:00,000] [INFO] [launch.py:256:main] process 4102 spawned with command: "
    "['/usr/bin/python', '-u', 'train.py', '--local_rank=1']",
    # accelerate commands/launch.py _validate_launch_command: defaults it filled in
    "The following values were not passed to `accelerate launch` and had defaults used instead:",
    # Horovod's info lines at start-up
    "[2021-03-04 10:00:00.123456: I /tmp/pip-req-build-x/horovod/common/operations.cc:702] Horovod initialized",
    # Ray's start-up and its memory monitor's configuration
    "2024-03-05 07:01:51,123\tINFO worker.py:1724 -- Started a local Ray instance.",
]


@pytest.mark.parametrize("text", BENIGN)
def test_start_up_and_success_lines_are_never_a_cause(text: str) -> None:
    got = winner(text)
    assert got is None, (text, got)


def test_accelerate_p2p_warning_is_not_a_cause() -> None:
    text = (
        "Using RTX 4000 series which doesn't support faster communication speedups. Ensuring P2P and IB "
        "communications are disabled."
    )
    got = winner(text)
    assert got is None or (got[1] == UNKNOWN and got[0].startswith("generic.")), got


@pytest.mark.parametrize(
    "same_line",
    [
        True,  # v0.17-v0.20: "... which will cause deadlock. Stalled ranks:" then one line per rank
        False,  # v0.21 on: "Missing ranks:" on a line of its own
    ],
)
def test_horovod_stall_inspector_names_the_missing_rank(tmp_path: Path, settings: Settings, same_line: bool) -> None:
    stall = (
        "[2021-03-04 10:05:00.123456: W /tmp/pip-req-build-x/horovod/common/stall_inspector.cc:107] One or more "
        "tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for "
        "remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit "
        "different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. "
    )
    head = [stall + "Stalled ranks:"] if same_line else [stall, "Missing ranks:"]
    log = "\n".join(
        [
            "[2021-03-04 10:00:00.123456: I /tmp/pip-req-build-x/horovod/common/operations.cc:702] Horovod initialized",
            *head,
            "3: [DistributedAdam_Allreduce/cond/HorovodAllreduce_grads_0, "
            "DistributedAdam_Allreduce/cond_1/HorovodAllreduce_grads_1_0 ...]",
        ]
    )
    root = run_files(tmp_path / "b", {"rank0.log": log + "\n"}, settings).document.root_cause
    assert root.class_ == HANG, root


def test_a_kill_the_launcher_reports_is_explained_by_the_memory_killer(tmp_path: Path, settings: Settings) -> None:
    """horovodrun's "Process N exit with status code 137." is the victim's side of a kernel OOM kill."""
    files = {
        "dmesg.log": "[Tue Mar  5 07:01:50 2024] Out of memory: Killed process 4242 (python) total-vm:98765432kB, "
        "anon-rss:87654321kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:2048kB oom_score_adj:0\n",
        # gloo_run prints these bare (its workers' lines carry "<time>[<index>]<stdout|stderr>:")
        "horovodrun.log": "Tue Mar  5 07:01:49 2024[3]<stdout>:epoch 3 step 120\n"
        "Process 3 exit with status code 137.\n"
        "Terminating remaining workers after failure of Process 3.\n",
    }
    root = run_files(tmp_path / "b", files, settings).document.root_cause
    assert root.class_ == HOSTOOM, root
