"""Node-side Slurm failures and user-space memory killers, from the emitters' own sources (issue 14, capability 1).

Slurm lines follow SchedMD/slurm's format strings across 17.02-25.11 (the file is named on each case); bash lines
bash's error.c/execute_cmd.c (4.4-5.3), dash's "<script>: <n>: <cmd>: not found"; Ray lines python/ray/exceptions.py
and src/ray/raylet/node_manager.cc (1.x-2.x). The reduce rule (crashcart/reduce/memory.py): the work a memory
killer stopped reports its own death, and that report is the kill's consequence, never a second root.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from crashcart.catalogue import load_catalogue
from crashcart.reduce.causal import Candidate
from crashcart.reduce.memory import killed_work, named_nodes
from crashcart.settings import Settings
from tests.kit import finding, run_files, winner


@pytest.mark.parametrize(
    "line",
    [
        # slurm 23.02 src/plugins/prep/script/prep_script_slurmd.c _run_subpath_command ("%s failed: rc:%u output:%s")
        "[2023-06-01T10:00:00.123] error: epilog failed: rc:1 output:",
        "[2023-06-01T10:00:00.123] error: prolog killed by signal 9 output:",
        "[2023-06-01T10:00:00.123] error: prolog didn't run: status:-1 reason:Run command failed - configuration error",
        # slurm 23.02 slurmd.c health_check through the same runner
        "error: health_check failed: rc:1 output:ERROR:  nhc:  Health check failed:  check_hw_gpu:  0 GPUs found",
        # slurm 17.02-25.11 src/slurmd/slurmd/req.c
        "[2019-03-02T04:05:06.789] error: [job 4242] epilog failed status=1:0",
        "[2017-03-02T04:05:06.789] error: [job 4242] prolog start failed status=1:0",
        "[2018-03-02T04:05:06.789] error: Waiting for JobId=4242 prolog has failed, giving up after 50 sec",
        # slurm 20.11 src/slurmd/common/run_script.c
        "[2020-05-01T00:00:01.000] error: Can not run prolog [/etc/slurm/prolog.sh]: No such file or directory",
        "[2020-05-01T00:10:00.000] epilog: timeout after 120s: killing pgid 81234",
        "[2020-05-01T00:00:01.000] error: execve(/etc/slurm/prolog.sh): Exec format error",
        # slurm 23.02 src/common/run_command.c
        "[2023-06-01T10:00:00.123] error: run_command: epilog can not be executed (/etc/slurm/epilog.sh) Permission denied",
        "[2023-06-01T10:00:00.123] error: run_command: prolog is not fully qualified pathname (prolog.sh)",
        "[2023-06-01T10:00:00.123] error: prolog: timeout after 300000 ms: killing pgid 81234",
        # slurm 23.02 src/slurmctld/prep_slurmctld.c, src/common/slurm_errno.c ESLURMD_EPILOG_FAILED
        "[2024-02-02T02:02:02.222] error: prolog_slurmctld JobId=881 failed due to timing out",
        "[2024-02-02T02:02:02.222] error: epilog_slurmctld JobId=881 timed out",
        "srun: error: Application launch failed: Job epilog failed",
        # slurm 23.02 src/slurmctld/agent.c drain_nodes(..., "Prolog/Epilog failure") as scontrol and sinfo -R show it
        "   Reason=Prolog/Epilog failure [slurm@2024-02-02T02:02:02]",
        "Prolog/Epilog failur slurm     2024-02-02T02:02:02 gpu[03-04]",
        # slurm 23.02 src/slurmctld/ping_nodes.c, srun allocate.c with ESLURM_NODE_NOT_AVAIL
        "[2024-11-30T02:13:45.001] error: Nodes gpu-node-017 not responding, setting DOWN",
        "srun: error: Unable to allocate resources: Required node not available (down, drained or reserved)",
        # slurm 23.02 src/srun/allocate.c, src/salloc/salloc.c: allocated nodes that did not boot or resume
        "srun: error: Nodes gpu[01-02] are still not ready",
        "salloc: error: Something is wrong with the boot of the nodes.",
        # bash 5.2 execute_cmd.c/error.c and dash, the output of a prolog script that cannot run
        "/etc/slurm/prolog.sh: line 12: /usr/bin/nvidia-smi: No such file or directory",
        "/etc/slurm/prolog.d/50-enroot.sh: 3: enroot-check: not found",
        "/bin/sh: 1: /etc/slurm/prolog.d/*: not found",
        "bash: /etc/slurm/epilog.sh: No such file or directory",
        "/etc/slurm/taskprolog: /bin/bahs: bad interpreter: No such file or directory",
    ],
)
def test_slurm_prolog_epilog_and_node_failures_from_slurm_sources(line: str) -> None:
    got = winner(line)
    assert got is not None and got[1] == "slurm_node_failure", got


@pytest.mark.parametrize(
    ("line", "node"),
    [
        ("srun: Prolog hung on node gpu-node-017", "gpu-node-017"),  # slurm 23.02 req.c _prolog_timer
        ("Prolog failure on node dgx07", "dgx07"),  # slurm 23.02 req.c slurm_notify_job
        ("[2024-01-01T00:00:00.000] error: Epilog failure on host gpu12, setting DOWN", "gpu12"),  # agent.c
        ("[2024-01-01T00:00:00.000] error: Nodes gpu05 not responding", "gpu05"),  # node_mgr.c
    ],
)
def test_the_node_a_prolog_or_ping_failure_names_is_a_field(line: str, node: str) -> None:
    cat = load_catalogue()
    got = winner(line)
    assert got is not None and got[1] == "slurm_node_failure", got
    fields = cat.extract(cat.index[got[0]], line)
    assert fields is not None and node in {fields.get("node"), fields.get("host")}


@pytest.mark.parametrize(
    "line",
    [
        "/home/u/prologue.sh: line 3: foo: command not found",  # a user script whose name only starts like one
        "/home/u/train.sh: line 3: python3.11: command not found",
        "[2023-06-01T10:00:00.123] debug2: prolog success rc:0 output:",
        "[2023-06-01T10:00:00.123] prolog for job 4242 ran for 3 seconds",
        "[2024-11-30T02:15:00.000] Node gpu-node-017 now responding",
    ],
)
def test_a_users_script_and_a_prolog_that_succeeded_are_no_node_failure(line: str) -> None:
    got = winner(line)
    assert got is None or got[1] != "slurm_node_failure", got


def test_slurmctld_names_the_node_a_kill_task_failure_drains(tmp_path: Path, settings: Settings) -> None:
    # slurm 23.02 src/slurmctld/proc_req.c _slurm_rpc_complete_batch_script: "slurmd error running JobId=%u on
    # %s=%s: %s" with slurm_strerror(ESLURMD_KILL_TASK_FAILED), then drain_nodes(..., "Kill task failed")
    log = (
        "[2024-03-01T10:00:00.000] _job_complete: JobId=9911 WEXITSTATUS 0\n"
        "[2024-03-01T10:05:00.000] error: slurmd error running JobId=9911 on node(s)=gpu03: Kill task failed\n"
    )
    out = run_files(tmp_path / "b", {"slurmctld.log": log}, settings)
    root = out.document.root_cause
    assert root.class_ == "slurm_node_failure"
    assert root.culprit.node == "gpu03"
    assert any(c.line == 2 and c.verified for c in root.citations)


# Ray 2.x: ray.get re-raises the dead actor's error first; the raylet's OOM summary comes on its next print
# interval (RAY_event_stats_print_interval_ms, 60 s by default), after the traceback.
RAY_DRIVER = """\
2023-04-09 07:20:01,100	INFO worker.py:1553 -- Started a local Ray instance.
Traceback (most recent call last):
  File "/home/ray/train.py", line 40, in <module>
    results = ray.get(futures)
  File "/home/ray/anaconda3/lib/python3.9/site-packages/ray/_private/worker.py", line 2380, in get
    raise value
ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.
	class_name: TrainWorker
	actor_id: 5c9ac30f8a9eda340f651a204de5d94f01000000
	pid: 69161
	ip: 10.0.62.231
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: \
Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. \
(1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. \
(3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.
(raylet) [2023-04-09 07:23:59,445 E 395 395] (raylet) node_manager.cc:3049: 1 Workers (tasks / actors) killed \
due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: e5d953ef03e55e26f13973ea1b5a0fd0\
ecc729cd820bc89e4aa50451, IP: 10.0.62.231) over the last time period. To see more information about the Workers \
killed on this node, use `ray logs raylet.out -ip 10.0.62.231`
"""


def test_a_ray_actor_that_died_is_the_memory_monitors_kill_seen_from_the_driver(
    tmp_path: Path, settings: Settings
) -> None:
    out = run_files(tmp_path / "b", {"driver.log": RAY_DRIVER}, settings)
    root = out.document.root_cause
    assert root.class_ == "host_oom_kill"
    assert root.culprit.node == "10.0.62.231"  # the node the raylet's line names
    assert any(c.line == 13 and c.verified for c in root.citations)
    assert not any(h.class_ == "native_crash_segfault_abort" for h in out.document.hypotheses)  # Ray's "SIGSEGV" list


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # python/ray/exceptions.py (1.x-2.x)
        ("ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task. Check python-core-worker-*.log files for more information.", "ray.worker_died"),
        ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.", "ray.worker_died"),
        ("ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more information.", "ray.worker_died"),
        # RayTaskError.as_instanceof_cause names the cause class: 1.x's memory monitor raised in the task (a wrapped
        # "OutOfMemoryError" may be torch's CUDA one: its cause line decides, tests/test_h14_ray_oom.py)
        ("ray.exceptions.RayTaskError(RayOutOfMemoryError): ray::allocate_memory() (pid=11362, ip=10.0.62.231)", "ray.memory_monitor_kill"),
        # python/ray/tune/tune.py: an aggregate of failed trials
        ("ray.tune.error.TuneError: ('Trials did not complete', [train_fn_3c1a2_00000])", "ray.tune_trials_incomplete"),
        # python/ray/train/base_trainer.py (2.5-2.9): Ray Train's aggregate
        ("ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect the previous error messages for a cause.", "ray.tune_trials_incomplete"),
    ],
)  # fmt: skip
def test_rays_worker_deaths_and_aggregates_are_named_for_what_they_are(line: str, want: str) -> None:
    cat = load_catalogue()
    hits = [s.id for i, s in enumerate(cat.signatures) if cat.regex(i).search(line)]
    best = max(hits, key=lambda sid: cat.signatures[cat.index[sid]].priority)
    assert best == want, hits


def test_a_dataloader_worker_the_kernel_killed_by_pid_is_a_host_oom_kill(tmp_path: Path, settings: Settings) -> None:
    # torch/utils/data/_utils/signal_handling.py: "DataLoader worker (pid {}) is killed by signal: {}."; kernel
    # mm/oom_kill.c: "Out of memory: Killed process %d (%s) ..." on the same pid
    files = {
        "train.log": (
            "Traceback (most recent call last):\n"
            '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data\n'
            "    data = self._data_queue.get(timeout=timeout)\n"
            "RuntimeError: DataLoader worker (pid 28113) is killed by signal: Killed.\n"
        ),
        "kern.log": (
            "Mar  4 10:11:58 gpu7 kernel: [88123.4] Out of memory: Killed process 28113 (pt_data_worker) "
            "total-vm:41234567kB, anon-rss:38123456kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:80000kB "
            "oom_score_adj:0\n"
        ),
    }
    out = run_files(tmp_path / "b", files, settings)
    root = out.document.root_cause
    assert root.class_ == "host_oom_kill" and root.culprit.node == "gpu7"
    assert root.confidence >= 0.8  # the same pid: one event seen from both sides
    assert any(c.class_ == "dataloader_worker_failure" for c in out.document.contributing)


T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
KERNEL_KILL = "Out of memory: Killed process 4242 (python) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"


def _pair(victim_sig: str, victim_text: str, **victim: object) -> tuple[Candidate, Candidate]:
    oom = Candidate("host_oom_kill", [finding("kernel.oom_killed_process", KERNEL_KILL, time=T0)], [], score=50.0)
    oom.findings = [f.model_copy(update={"node": "gpu7"}) for f in oom.findings]
    f = finding(victim_sig, victim_text, file="rank3.log", time=victim.pop("time", T0 + timedelta(seconds=5)))  # type: ignore[arg-type]
    f = f.model_copy(update=victim)
    cls = load_catalogue().signatures[load_catalogue().index[victim_sig]].class_id
    return oom, Candidate(cls, [f], [], score=80.0)


def test_the_killed_works_error_on_the_same_node_falls_below_the_memory_killer() -> None:
    oom, victim = _pair(
        "ray.worker_died", "ray.exceptions.WorkerCrashedError: The worker died unexpectedly", node="gpu7"
    )
    killed_work([oom, victim])
    assert victim.score < oom.score
    assert any(p.startswith("explained by host_oom_kill") for p in victim.penalties)
    assert any(r.startswith("corroborated by the killed work") for r in oom.reasons)


@pytest.mark.parametrize(
    ("sig", "text", "extra"),
    [
        ("ray.worker_died", "ray.exceptions.WorkerCrashedError: The worker died unexpectedly", {"node": "gpu9"}),
        ("generic.killed", "Killed", {"node": "gpu7", "time": T0 - timedelta(hours=1)}),  # long before the kill
        ("dataloader.worker_killed", "DataLoader worker (pid 99) is killed by signal: Segmentation fault.", {}),
        ("python.file_not_found", "FileNotFoundError: [Errno 2] No such file or directory: '/d/x.pt'", {}),
    ],
)
def test_a_death_elsewhere_earlier_or_of_its_own_is_not_explained_by_the_kill(
    sig: str, text: str, extra: dict[str, object]
) -> None:
    oom, victim = _pair(sig, text, **extra)
    before = victim.score
    killed_work([oom, victim])
    assert victim.score == before and not victim.penalties


def test_a_ray_memory_kill_takes_the_node_its_line_names_by_address() -> None:
    line = (
        "Memory on the node (IP: 10.0.62.231, ID: e5d9) where the task was running was 27.71GB / 28.80GB (0.962273), "
        "which exceeds the memory usage threshold of 0.95. Ray killed this worker"
    )
    oom = Candidate("host_oom_kill", [finding("ray.memory_monitor_kill", line)], [])
    named_nodes([oom])
    assert oom.nodes == {"10.0.62.231"}


@pytest.mark.parametrize(
    "line",
    [
        # systemd src/oom/oomd-manager.c (v252) and earlyoom kill.c (v1.7), each a memory killer of its own
        "Jun 02 10:11:12 gpu3 systemd-oomd[812]: Killed /system.slice/train.service due to memory used (63.1G) / total (64.0G) and swap used (7.9G) / total (8.0G) being more than 90.00%",
        'Jun 02 10:11:12 gpu3 earlyoom[611]: sending SIGKILL to process 4242 uid 1000 "python": oom_score 812, VmRSS 61234 MiB',
        # systemd src/core/unit.c (249+) on the unit oomd emptied
        "Jun 02 10:11:12 gpu3 systemd[1]: session-3.scope: systemd-oomd killed 291 process(es) in this unit.",
    ],
)  # fmt: skip
def test_user_space_memory_killers_explain_a_sigkilled_worker(tmp_path: Path, settings: Settings, line: str) -> None:
    files = {
        "journal.log": line + "\n",
        "train.log": "W0602 10:11:13.000000 77 torch/distributed/elastic/multiprocessing/api.py:900] failed\n"
        "  exitcode  : -9 (pid: 4242)\n",
    }
    out = run_files(tmp_path / "b", files, settings)
    assert out.document.root_cause.class_ == "host_oom_kill"


@pytest.mark.parametrize(
    "line",
    [
        # mej/nhc 1.4.x nhc die(): log "ERROR:  $NAME:  Health check failed:  $*", syslog "Health check failed:  $*"
        "ERROR:  nhc:  Health check failed:  check_fs_mount:  /scratch not mounted",
        "Jun  2 10:11:12 gpu07 nhc[4411]: Health check failed:  check_hw_gpu:  Expected 8 GPUs, found 7",
        # helpers/node-mark-offline: "$0:  Marking $STATUS $HOSTNAME offline:  $LEADER $NOTE"
        "/usr/libexec/nhc/node-mark-offline:  Marking idle gpu07 offline:  NHC: check_hw_gpu:  Expected 8 GPUs, found 7",
    ],
)
def test_a_failed_node_health_check_is_a_node_failure(line: str) -> None:
    got = winner(line)
    assert got is not None and got[1] == "slurm_node_failure", got


@pytest.mark.parametrize(
    "line",
    [
        # CPython Lib/concurrent/futures/process.py (3.3-3.13) and joblib's loky process_executor.py
        "concurrent.futures.process.BrokenProcessPool: A process in the process pool was terminated abruptly while the future was running or pending.",
        "joblib.externals.loky.process_executor.TerminatedWorkerError: A worker process managed by the executor was unexpectedly terminated. This could be caused by a segmentation fault while calling the function or by an excessive memory usage causing the Operating System to kill the worker.",
    ],
)  # fmt: skip
def test_a_process_pool_whose_worker_died_is_the_kernel_kill_seen_from_the_pool(
    tmp_path: Path, settings: Settings, line: str
) -> None:
    files = {
        "train.log": "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.10/concurrent/futures/process.py", line 246, in _process_worker\n'
        f"{line}\n",
        "kern.log": "Mar  4 10:11:58 gpu7 kernel: [88123.4] Out of memory: Killed process 28113 (python) "
        "total-vm:41234567kB, anon-rss:38123456kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:80000kB\n",
    }
    out = run_files(tmp_path / "b", files, settings)
    assert out.document.root_cause.class_ == "host_oom_kill"
    assert out.document.root_cause.culprit.node == "gpu7"


def test_a_ray_worker_the_kernel_killed_is_linked_by_its_pid() -> None:
    # src/ray/raylet/node_manager.cc (2.x) DisconnectClient: "... Worker IP address: %s Worker port: %d Worker PID:
    # %d Worker exit type: SYSTEM_ERROR ..."; kernel mm/oom_kill.c names the same pid
    died = (
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot "
        "the problem, check the logs for the dead worker. RayTask ID: ffff Worker ID: 1efd Node ID: 0d73 Worker IP "
        "address: 10.80.8.181 Worker port: 43489 Worker PID: 150008 Worker exit type: SYSTEM_ERROR"
    )
    kill = "Out of memory: Killed process 150008 (ray::WorkerDict) total-vm:1kB, anon-rss:1kB, file-rss:0kB"
    oom = Candidate("host_oom_kill", [finding("kernel.oom_killed_process", kill, time=T0)], [], score=50.0)
    victim = Candidate("unknown", [finding("ray.worker_died", died, time=T0 + timedelta(seconds=2))], [], score=60.0)
    killed_work([oom, victim])
    assert victim.score <= oom.score - 30
    assert any("same process (pid 150008)" in p for p in victim.penalties)


def test_mpiruns_killed_rank_is_the_kernel_kill_on_that_node_and_pid() -> None:
    # Open MPI orte/tools/orterun (help-orterun.txt "mpirun noticed that process rank %d with PID %d on node %s
    # exited on signal %d (%s)."): the launcher's view of a rank the kernel killed
    line = "mpirun noticed that process rank 3 with PID 4242 on node gpu7 exited on signal 9 (Killed)."
    oom, victim = _pair("mpi.process_killed", line)
    killed_work([oom, victim])
    assert any("same process (pid 4242)" in p for p in victim.penalties)


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # chaos/pdsh src/common/pipecmd.c: "%p: %S: %s exited with exit code %d" (%p = pdsh@<local host>)
        ("pdsh@node1: node2: ssh exited with exit code 137", "pdsh.remote_sigkill"),
        ("pdsh@node1: node2: ssh exited with exit code 1", "pdsh.remote_exit"),
        # src/pdsh/dsh.c: "%p: process on host %S killed by signal %d"
        ("pdsh@gpu01: process on host gpu04 killed by signal 9", "pdsh.remote_sigkill"),
        # deepspeed 0.4.x launcher/launch.py sigkill_handler print()s, without the logger's prefix of 0.5+
        ("Killing subprocess 4242", "deepspeed.killing_subprocess"),
        ("Main process received SIGTERM, exiting", "deepspeed.main_signal"),
    ],
)
def test_launcher_exit_lines_of_pdsh_and_older_deepspeed(line: str, want: str) -> None:
    got = winner(line)
    assert got is not None and got[0] == want, got


def test_a_node_pdsh_saw_sigkilled_is_explained_by_that_nodes_oom_kill(tmp_path: Path, settings: Settings) -> None:
    files = {
        "launcher.log": "node2: [2024-05-01 10:00:00,000] [INFO] [launch.py:146:main] WORLD INFO DICT: {}\n"
        "pdsh@node1: node2: ssh exited with exit code 137\n",
        "node2/kern.log": "May  1 10:00:58 node2 kernel: [88123.4] Out of memory: Killed process 31337 (python) "
        "total-vm:41234567kB, anon-rss:38123456kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:80000kB\n",
    }
    out = run_files(tmp_path / "b", files, settings)
    root = out.document.root_cause
    assert root.class_ == "host_oom_kill" and root.culprit.node == "node2"


def test_a_local_ray_instances_loopback_address_is_no_node() -> None:
    line = "Memory on the node (IP: 127.0.0.1, ID: e5d9) was 27.71GB / 28.80GB (0.962273), which exceeds the memory usage threshold of 0.95."
    oom = Candidate("host_oom_kill", [finding("ray.memory_monitor_kill", line)], [])
    named_nodes([oom])
    assert oom.nodes == set()


GCS_DEAD = (
    "2023-03-03 05:15:30,774\tWARNING worker.py:1866 -- The node with node id: 9426f445 and address: {ip} and node "
    "name: {ip} has been marked dead because the detector has missed too many heartbeats from it. This can happen "
    "when a\t(1) raylet crashes unexpectedly (OOM, preempted node, etc.)"
)
RAY_SUMMARY = (
    "(raylet) node_manager.cc:3049: 3 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers "
    "crashed due to other reasons at node (ID: e5d9, IP: 10.130.0.113) over the last time period."
)


@pytest.mark.parametrize(("ip", "linked"), [("10.130.0.113", True), ("10.130.0.114", False)])
def test_a_ray_node_marked_dead_is_explained_by_a_memory_kill_at_that_address(ip: str, linked: bool) -> None:
    # src/ray/gcs/gcs_server/gcs_node_manager.cc (2.x): "The node with node id: %s and address: %s and node name:
    # %s has been marked dead because the detector has missed too many heartbeats from it."
    oom = Candidate("host_oom_kill", [finding("ray.memory_monitor_kill", RAY_SUMMARY, time=T0)], [], score=50.0)
    named_nodes([oom])
    dead = finding("ray.node_died", GCS_DEAD.format(ip=ip), time=T0 + timedelta(seconds=20))
    victim = Candidate("unknown", [dead], [], score=60.0)
    killed_work([oom, victim])
    assert any("same node (10.130.0.113)" in p for p in victim.penalties) is linked
    assert (victim.score < oom.score) is linked


def test_the_dashboard_agents_raylet_death_report_is_a_death_without_its_cause() -> None:
    # dashboard/agent.py (2.x) report_raylet_error_logs: "Raylet is terminated. Termination is unexpected. ..."
    line = (
        "Raylet is terminated. Termination is unexpected. Possible reasons include: (1) SIGKILL by the user or system "
        "OOM killer, (2) Invalid memory access from Raylet causing SIGSEGV or SIGBUS, (3) Other termination signals."
    )
    got = winner(line)
    assert got == ("ray.node_died", "unknown"), got
