"""Slurm and Kubernetes, from their format strings across releases: each wording lands in the class its meaning gives.

Slurm 17.02-26.05 (SchedMD/slurm): slurmstepd req.c / step_terminate_monitor.c (the "*** ... ***" banners), srun
launch.c and api/step_launch.c (task exits, node failure, launch errors with the slurm_errno.c strings), the cgroup
OOM counters and jobacct_gather memory limits, slurmctld job_mgr.c / node_mgr.c / ping_nodes.c log lines, and the
state names sacct, squeue and scontrol print. Kubernetes v1.20-v1.35: kubelet eviction manager (helpers.go), node
shutdown manager, active deadline, oom watcher, node lifecycle (NodeLost), taint manager, scheduler FailedScheduling,
container termination reasons; NVIDIA k8s-device-plugin v0.9-v0.20 health checks. Each line is built here in the shape
its program prints it (plain, journald "name[pid]:", the daemon log's "[ts] [step]", kubectl describe / get events /
-o yaml / -o json), so the patterns are checked against wording they were not written from. A policy stop (time limit,
preemption, cancel, deadline) is class 26; a node that failed is class 25; a bare kill, a non-zero exit and the step
teardown are not a cause of their own (``unknown`` or no signature).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.catalogue import load_catalogue
from crashcart.settings import Settings
from tests.kit import run_files, winner

NODE = "slurm_node_failure"
POLICY = "scheduler_preemption_or_timelimit"
K8S = "k8s_pod_eviction_or_oomkilled"
HOST_OOM = "host_oom_kill"
NATIVE = "native_crash_segfault_abort"
NO_GPU = "nccl_init_bootstrap_failure"
VERSION = "software_version_mismatch"
ECC = "gpu_memory_ecc_uncorrectable"
BUS = "gpu_fallen_off_bus"
UNKNOWN = "unknown"  # not a cause we classify: the winner is None or an ``unknown`` signature

TS = "2024-11-30T02:14:00"
NF = "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"
OLD_OOM = "Some of your processes may have been killed by the cgroup out-of-memory handler."  # 17.11.13-22.05
NEW_OOM = "Some of the step tasks have been OOM Killed."  # 23.02-26.05
NOT_ENDING = "DUE TO JOB NOT ENDING WITH SIGNALS ***"


def stepd(msg: str) -> str:
    """slurmstepd's error() as the job's output file shows it."""
    return f"slurmstepd: error: {msg}"


def journal(msg: str, name: str = "slurmstepd") -> str:
    """The same error() line through syslog/journald (``name[pid]:``)."""
    return f"Nov 30 02:14:00 gpu07 {name}[44113]: error: {msg}"


def daemon(msg: str, step: str | None = "881.0", level: str = "error: ") -> str:
    """slurmd/slurmstepd/slurmctld log file: ``[ts] [job.step] error: msg``."""
    where = f" [{step}]" if step else ""
    return f"[{TS}.123]{where} {level}{msg}"


KLOG = "0614 10:23:45.123456       1"  # klog's "<L>MMDD hh:mm:ss.us pid" after the level letter
PLUGIN = "2021/06/14 10:23:45"  # the device plugin's log.Printf (v0.9-v0.12)


def srun(msg: str, level: str = "error: ") -> str:
    return f"srun: {level}{msg}"


GROUPS: dict[str, list[tuple[str, str]]] = {
    # slurmstepd req.c _handle_signal_container (17.02-26.05): the step ended by policy
    "stepd policy stop": [
        (stepd(f"*** JOB 881 ON gpu07 CANCELLED AT {TS} DUE TO TIME LIMIT ***"), POLICY),
        (stepd(f"*** STEP 881.0 ON gpu07 CANCELLED AT {TS} DUE TO TIME LIMIT ***"), POLICY),
        (journal(f"*** STEP 881.0 ON gpu07 CANCELLED AT {TS} DUE TO TIME LIMIT ***"), POLICY),
        (daemon(f"*** JOB 881 ON gpu07 CANCELLED AT {TS} DUE TO PREEMPTION ***", step="881.batch"), POLICY),
        (stepd(f"*** STEP 881+1.0 ON gpu07 CANCELLED AT {TS} DUE TO PREEMPTION ***"), POLICY),
        (stepd(f"*** JOB 881 ON gpu07 CANCELLED AT {TS} DUE TO JOB REQUEUE ***"), POLICY),
        (stepd(f"*** STEP 881.0 ON gpu07 CANCELLED AT {TS} ***"), POLICY),
        (stepd(f"*** JOB 881 ON gpu07 CANCELLED AT {TS} ***"), POLICY),
        # 25.11-26.05: SIGTERM/SIGKILL from scancel name the signal (strsignal), with a lower-case "to"
        (stepd(f"*** STEP 881.0 ON gpu07 CANCELLED AT {TS} DUE to SIGNAL Terminated ***"), POLICY),
        (stepd(f"*** JOB 881 ON gpu07 CANCELLED AT {TS} DUE to SIGNAL Killed ***"), POLICY),
    ],
    # the node failed under the step, or the step could not be killed on it (the node drains)
    "stepd node failure": [
        (stepd(f"*** JOB 881 ON gpu07 CANCELLED AT {TS} {NF}"), NODE),
        (journal(f"*** STEP 881.0 ON gpu07 CANCELLED AT {TS} {NF}"), NODE),
        (stepd(f"*** JOB 881 STEPD TERMINATED ON gpu07 AT {TS} {NOT_ENDING}"), NODE),
        (stepd(f"*** STEP 881.0 STEPD TERMINATED ON gpu07 AT {TS} {NOT_ENDING}"), NODE),
        # step_terminate_monitor.c names the extern (17.02+) and interactive (20.11+) steps "... STEP FOR <job>"
        (stepd(f"*** EXTERN STEP FOR 881 STEPD TERMINATED ON gpu07 AT {TS} {NOT_ENDING}"), NODE),
        (
            daemon(f"*** INTERACTIVE STEP FOR 881 STEPD TERMINATED ON gpu07 AT {TS} DUE TO JOB NOT RUNNING ***"),
            NODE,
        ),
        (stepd(f"*** STEP 881.0 STEPD TERMINATED ON gpu07 AT {TS} DUE TO JOB NOT RUNNING ***"), NODE),
        # 17.02-24.11: the node reported an uncorrectable memory error
        (stepd(f"*** STEP 881.0 ON gpu07 UNCORRECTABLE MEMORY ERROR AT {TS} ***"), NODE),
    ],
    # the step's own failure as slurmstepd reports it: the cause is elsewhere
    "stepd teardown": [
        (stepd("*** STEP 881.0 ON gpu07 FAILED (non-zero exit code or other failure mode) ***"), UNKNOWN),
        (stepd(f"*** STEP 881.0 ON gpu07 CANCELLED AT {TS} DUE TO TASK FAILURE ***"), UNKNOWN),
    ],
    # srun launch.c _task_finish (17.02-26.05): "%s: %s %s: ..." with the host list (ranged), task(s), status
    "srun task exit": [
        (srun("gpu07: task 3: Exited with exit code 1"), UNKNOWN),
        (srun("gpu[07-08]: tasks 0-15: Exited with exit code 1"), UNKNOWN),
        (srun("gpu07: tasks 0-7: Terminated"), UNKNOWN),
        (srun("gpu07: task 3: Killed"), UNKNOWN),
        (srun("gpu07: task 3: Segmentation fault (core dumped)"), NATIVE),
        (srun("gpu07: task 3: Segmentation fault"), NATIVE),
        (srun("gpu[07,09]: tasks 3,11: Bus error (core dumped)"), NATIVE),
        (srun("gpu07: task 3: Aborted (core dumped)"), NATIVE),
        (srun("gpu07: task 3: Illegal instruction (core dumped)"), NATIVE),
        (srun("gpu07: task 3: Floating point exception (core dumped)"), NATIVE),
        (srun("gpu07: task 3: Out Of Memory"), HOST_OOM),
        (srun("gpu[07-08]: tasks 0-15: Out Of Memory"), HOST_OOM),
    ],
    # srun/api: the allocation lost a node, or the step is being torn down
    "srun node failure and teardown": [
        (srun("Node failure on gpu07"), NODE),
        (srun("Node failure on gpu[07-08]"), NODE),
        ("salloc: error: Node failure on gpu07", NODE),
        (srun("Nodes gpu[07-08] are still not ready"), NODE),
        (srun("Something is wrong with the boot of the nodes."), NODE),
        (srun("Job step aborted: Waiting up to 32 seconds for job step to finish.", level=""), UNKNOWN),
        (srun("Timed out waiting for job step to complete"), UNKNOWN),
        (srun("forcing job termination", level=""), UNKNOWN),
        (srun("Force Terminated StepId=881.0", level=""), UNKNOWN),
        (srun("Force Terminated job step 881.0", level=""), UNKNOWN),
        (srun("Job allocation 881 has been revoked"), UNKNOWN),
        (srun("First task exited 60s ago", level=""), UNKNOWN),
        # step_launch.c step_launch_notify_io_failure: srun lost the node's slurmstepd
        (srun("step_launch_notify_io_failure: aborting, io error with slurmstepd on node 3"), NODE),
        (srun("Aborting, step missing and io error on node 3"), NODE),
        (srun("Aborting, io error and missing step on node 3"), NODE),
    ],
    # api/step_launch.c / srun launch.c with slurm_errno.c strings (17.02 "%u.%u", 20.11+ "StepId=%u.%u")
    "launch on a node": [
        (srun("Task launch for StepId=881.0 failed on node gpu07: Slurmd could not execve job"), NODE),
        (srun("Task launch for 881.0 failed on node gpu07: Job prolog failed"), NODE),
        (srun("Task launch for StepId=881.0 failed on node gpu07: Communication connection failure"), NODE),
        (srun("Task launch for StepId=881.0 failed on node gpu07: Socket timed out on send/recv operation"), NODE),
        (srun("Task launch for StepId=881.0 failed on node gpu07: Zero Bytes were transmitted or received"), NODE),
        (srun("Task launch for StepId=881.0 failed on node gpu07: Slurmd could not connect IO"), NODE),
        (
            srun(
                "Task launch for StepId=881.0 failed on node gpu07: Slurmd could not set up environment for batch job"
            ),
            NODE,
        ),
        (srun("Application launch failed: Job prolog failed"), NODE),
        (srun("task 3 launch failed: Slurmd could not connect IO"), NODE),
        (srun("Task launch for StepId=881.0 failed on node gpu07: Unable to satisfy cpu bind request"), UNKNOWN),
        (srun("Task launch for StepId=881.0 failed on node gpu07: Job credential revoked"), UNKNOWN),
        (srun("Unable to create step for job 881: Job/step already completing or completed"), UNKNOWN),
        (srun("Unable to allocate resources: Required node not available (down, drained or reserved)"), NODE),
        # the request, not a node
        (
            srun(
                "Unable to allocate resources: Job violates accounting/QOS policy "
                "(job submit limit, user's size and/or time limits)"
            ),
            UNKNOWN,
        ),
        (srun("Unable to allocate resources: Requested node configuration is not available"), UNKNOWN),
        (srun("Unable to create step for job 881: Memory required by task is not available"), UNKNOWN),
        (srun("Unable to allocate resources: Invalid account or account/partition combination specified"), UNKNOWN),
        (srun("Unable to allocate resources: Unable to contact slurm controller (connect failure)"), UNKNOWN),
    ],
    # prolog/epilog/health check failures on a node (slurmd req.c, prep/script, slurmctld agent.c / job_mgr.c)
    "prolog and epilog": [
        (daemon("prolog failed: rc:1 output:", step=None), NODE),
        (daemon("[job 881] prolog failed status=1:0", step=None), NODE),
        (daemon("[job 881] epilog failed status=1:0", step=None), NODE),
        (srun("Prolog hung on node gpu07", level=""), NODE),
        (daemon("_job_complete: JobId=881 epilog error on gpu07, draining the node", step=None, level=""), NODE),
        (
            daemon(
                "health_check failed: rc:1 output:ERROR:  nhc:  Health check failed:  check_fs_mount:  /scratch not mounted",
                step=None,
            ),
            NODE,
        ),
        (srun("Task launch for StepId=881.0 failed on node gpu07: Job epilog failed"), NODE),
        # srun's own --prolog/--epilog (src/srun/srun_job.c 22.05+): the user's script, not the node's
        (srun("srun prolog failed rc = 1. Aborting step."), UNKNOWN),
        (srun("srun epilog failed status=1"), UNKNOWN),
    ],
    # cgroup OOM counters (task/cgroup, cgroup/v1 and v2) and jobacct_gather's memory limit, in each release's words
    "memory limit": [
        # 17.02-17.11.2
        (stepd("Exceeded step memory limit at some point."), HOST_OOM),
        (stepd("Exceeded job memory limit at some point."), HOST_OOM),
        # 17.11.3-20.02 (18.08.0 ended at "cgroup.")
        (stepd("Detected 1 oom-kill event(s) in step 881.0 cgroup."), HOST_OOM),
        # 17.11.13, 18.08-20.02
        (stepd(f"Detected 1 oom-kill event(s) in step 881.0 cgroup. {OLD_OOM}"), HOST_OOM),
        # 20.11
        (stepd(f"Detected 2 oom-kill event(s) in StepId=881.0 cgroup. {OLD_OOM}"), HOST_OOM),
        # 21.08-22.05
        (stepd(f"Detected 1 oom-kill event(s) in StepId=881.batch. {OLD_OOM}"), HOST_OOM),
        # 23.02-26.05
        (stepd(f"Detected 1 oom_kill event in StepId=881.0. {NEW_OOM}"), HOST_OOM),
        (journal(f"Detected 3 oom_kill events in StepId=881.batch. {NEW_OOM}"), HOST_OOM),
        (daemon(f"Detected 1 oom_kill event in StepId=881.interactive. {NEW_OOM}"), HOST_OOM),
        (stepd("Detected 1 oom_kill event in StepId=881+1.0. Some of the step tasks have been OOM Killed."), HOST_OOM),
        # jobacct_gather (17.02-20.02 "Step %u.%u" / "Job %u", 20.11+ "%ps")
        (stepd("Step 881.0 exceeded memory limit (83886080 > 81920000), being killed"), HOST_OOM),
        (stepd("Job 881 exceeded memory limit (83886080 > 81920000), being killed"), HOST_OOM),
        (stepd("StepId=881.0 exceeded memory limit (83886080 > 81920000), being killed"), HOST_OOM),
        (stepd("StepId=881.0 exceeded virtual memory limit (183886080 > 181920000), being killed"), HOST_OOM),
        # slurmd job_mem_limit.c (17.02-26.05)
        (daemon("Job 881 exceeded memory limit (83886080>81920000), cancelling it", step=None, level=""), HOST_OOM),
        # jobacct_gather's job notify ("Exceeded job memory limit"), printed by the step
        (stepd("Exceeded job memory limit"), HOST_OOM),
        # slurmstepd mgr.c verbose() when a task's exit status says OOM
        (daemon("task 3 (44120) Out Of Memory (OOM)", level=""), HOST_OOM),
        # slurmctld job_mgr.c _job_complete
        (daemon("_job_complete: JobId=881 OOM failure", step=None, level=""), HOST_OOM),
    ],
    # slurmctld's log: the time limit, preemption and the nodes it lost
    "slurmctld": [
        (daemon("Time limit exhausted for JobId=881", step=None, level=""), POLICY),
        (
            daemon("preempted JobId=881 has been requeued to reclaim resources for JobId=990", step=None, level=""),
            POLICY,
        ),
        (daemon("preempted JobId=881 has been killed to reclaim resources for JobId=990", step=None, level=""), POLICY),
        (daemon("preempted job 881 has been killed to reclaim resources for job 990", step=None, level=""), POLICY),
        (daemon("Nodes gpu07 not responding, setting DOWN", step=None), NODE),
        (daemon("Nodes gpu[07-08] not responding", step=None), NODE),
        (daemon("requeue job JobId=881 due to failure of node gpu07", step=None, level=""), NODE),
        (daemon("Killing JobId=881 on failed node gpu07", step=None, level=""), NODE),
        (daemon("_job_complete: JobId=881 cancelled by node failure", step=None, level=""), NODE),
        (
            daemon(
                "validate_node_specs: Node gpu07 unexpectedly rebooted boot_time=1732932840 last response=1732932800",
                step=None,
                level="",
            ),
            NODE,
        ),
        (daemon("slurmd error running JobId=881 on node(s)=gpu07: Kill task failed", step=None), NODE),
        (daemon("Revoking job JobId=881 due to nodes not responding", step=None), NODE),
        (daemon("Node gpu07 rebooted, killing missing step 881.0", step=None, level=""), NODE),
    ],
    # node reasons: scontrol show node, sinfo -R
    "node reasons": [
        ("   Reason=Kill task failed [root@2024-11-30T02:20:00]", NODE),
        # step_terminate_monitor.c 20.11+: the drain reason carries the job and step
        ("   Reason=Kill task failed (JobId=881 StepId=0) [root@2024-11-30T02:20:00]", NODE),
        ("   Reason=Job step not running (JobId=881 StepId=0) [root@2024-11-30T02:20:00]", NODE),
        ("   Reason=Not responding [slurm@2024-11-30T02:13:45]", NODE),
        ("   Reason=Prolog error [slurm@2024-11-30T02:13:45]", NODE),
        ("   Reason=Epilog error [slurm@2024-11-30T02:13:45]", NODE),
        ("   Reason=batch job complete failure [slurm@2024-11-30T02:13:45]", NODE),
        ("   Reason=Node unexpectedly rebooted [slurm@2024-11-30T02:13:45]", NODE),
        ("Kill task failed     root      2024-11-30T02:20:00 gpu07", NODE),
    ],
    # job states as sacct (width 10, "+" when cut), scontrol show job and squeue print them
    "job states": [
        ("881          train        gpu      acct1         64  NODE_FAIL      0:0 ", NODE),
        ("881          train        gpu      acct1         64  BOOT_FAIL      0:0 ", NODE),
        ("881          train        gpu      acct1         64    TIMEOUT      0:0 ", POLICY),
        ("881          train        gpu      acct1         64  PREEMPTED      0:0 ", POLICY),
        ("881          train        gpu      acct1         64   DEADLINE      0:0 ", POLICY),
        ("881          train        gpu      acct1         64 CANCELLED+      0:0 ", POLICY),
        ("881|train|gpu|acct1|64|CANCELLED by 1000|0:0", POLICY),
        ("881.0        python                acct1         64 OUT_OF_ME+    0:125 ", HOST_OOM),
        ("881|train|gpu|acct1|64|OUT_OF_MEMORY|0:125", HOST_OOM),
        ("   JobState=TIMEOUT Reason=TimeLimit Dependency=(null)", POLICY),
        ("   JobState=NODE_FAIL Reason=NodeDown Dependency=(null)", NODE),
        ("   JobState=OUT_OF_MEMORY Reason=OutOfMemory Dependency=(null)", HOST_OOM),
        ("   JobState=DEADLINE Reason=DeadLine Dependency=(null)", POLICY),
        ("               881       gpu    train    alice NF    1:02:03      2 gpu[07-08]", NODE),
        ("               881       gpu    train    alice TO   12:00:03      2 gpu[07-08]", POLICY),
        ("               881       gpu    train    alice CA      12:03      2 gpu[07-08]", POLICY),
        ("               881       gpu    train    alice PREEMPTE   12:00:03 1-00:00:00      2 gpu[07-08]", POLICY),
        ("               881       gpu    train    alice OOM    1:02:03      2 gpu[07-08]", HOST_OOM),
        ("881          train        gpu      acct1         64     FAILED      1:0 ", UNKNOWN),
        ("   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)", UNKNOWN),
    ],
    # kubelet eviction manager (pkg/kubelet/eviction/helpers.go v1.20-v1.35) and admission
    "k8s eviction": [
        ("Message:          The node was low on resource: memory. ", K8S),
        (
            "  message: 'The node was low on resource: memory. Threshold quantity: 100Mi, available: 87232Ki. "
            "Container trainer was using 61234560Ki, request is 0, has larger consumption of memory. '",
            K8S,
        ),
        (
            '    "message": "The node was low on resource: ephemeral-storage. Container trainer was using 72Gi, '
            'which exceeds its request of 0. ",',
            K8S,
        ),
        ("Message:          The node had condition: [DiskPressure]. ", K8S),
        ("Message:          Pod ephemeral local storage usage exceeds the total limit of containers 10Gi. ", K8S),
        ('Message:          Container trainer exceeded its local ephemeral storage limit "10Gi". ', K8S),
        ('  message: \'Usage of EmptyDir volume "dshm" exceeds the limit "8Gi". \'', K8S),
        ("Reason:           Evicted", K8S),
        ("12m   Warning   Evicted   pod/trainer-worker-3   The node was low on resource: memory. ", K8S),
        (
            'I1130 02:14:00.123456    2231 eviction_manager.go:366] "Eviction manager: must evict pod(s) to reclaim" '
            'resourceName="memory"',
            K8S,
        ),
        (
            "I1130 02:14:00.123456    2231 eviction_manager.go:346] eviction manager: must evict pod(s) to reclaim memory",
            K8S,
        ),
    ],
    # container and pod termination as kubectl describe / -o yaml / get pods print it
    "k8s termination": [
        ("      Reason:       OOMKilled", K8S),
        ('          "reason": "OOMKilled",', K8S),
        ("trainer-worker-3   0/1     OOMKilled   2          41m", K8S),
        ("      Reason:       Error", UNKNOWN),
        ("      Exit Code:    137", UNKNOWN),
        ("      Exit Code:    1", UNKNOWN),
        ("      Reason:       ContainerCannotRun", UNKNOWN),
        # kubelet active deadline (pod activeDeadlineSeconds) and the Job controller's activeDeadlineSeconds
        ("Reason:           DeadlineExceeded", POLICY),
        ("Message:          Pod was active on the node longer than the specified deadline", POLICY),
        ("5m   Warning   DeadlineExceeded   job/train   Job was active longer than specified deadline", POLICY),
        ("5m   Warning   BackoffLimitExceeded   job/train   Job has reached the specified backoff limit", UNKNOWN),
        # node lifecycle controller (pkg/util/node NodeLost) and graceful node shutdown (v1.20-1.21, v1.22+)
        ("Reason:    NodeLost", K8S),
        ("Message:   Node gpu-node-3 which was running pod trainer-0 is unresponsive", K8S),
        ("  message: Node is shutting, evicting pods", K8S),
        ("Message:        Pod was terminated in response to imminent node shutdown.", K8S),
        ("Message:        Pod was rejected as the node is shutting down.", K8S),
        ('    "message": "Node gpu-node-3 status is now: NodeNotReady",', K8S),
        ("    reason: TerminationByKubelet", K8S),
        ("2m   Normal   TaintManagerEviction   pod/trainer-0   Marking for deletion Pod default/trainer-0", K8S),
        ('  "reason": "Preempted",', K8S),
    ],
    # kubelet oom_watcher (pkg/kubelet/oom): the kernel OOM killer on the node
    "k8s node oom": [
        (
            "6m57s   Warning   SystemOOM   node/gpu-node-3   System OOM encountered, victim process: python, pid: 3419",
            HOST_OOM,
        ),
        (
            "  Warning  SystemOOM  6m57s  kubelet  System OOM encountered, victim process: pt_main_thread, pid: 884213",
            HOST_OOM,
        ),
    ],
    # scheduler FailedScheduling: a worker that never started for want of GPUs (the job never ran whole)
    "k8s scheduling": [
        (
            "  Warning  FailedScheduling  12s  default-scheduler  0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
            K8S,
        ),
        (
            "  Warning  FailedScheduling  3m  default-scheduler  0/7 nodes are available: 3 Insufficient nvidia.com/gpu, "
            "4 node(s) didn't match Pod's node affinity/selector. preemption: 0/7 nodes are available: 3 No preemption "
            "victims found for incoming pod, 4 Preemption is not helpful for scheduling.",
            K8S,
        ),
    ],
    # kubelet admission: the scheduler placed the pod, the node's devices were not there when it started
    "k8s admission": [
        (
            "32s   Warning   UnexpectedAdmissionError   pod/trainer-0   Allocate failed due to requested number of "
            "devices unavailable for nvidia.com/gpu. Requested: 4, Available: 0, which is unexpected",
            K8S,
        ),
        ("Message:      Pod Node didn't have enough resource: nvidia.com/gpu, requested: 8, used: 0, capacity: 7", K8S),
        ("Reason:       OutOfnvidia.com/gpu", K8S),
        ("Message:      no healthy devices present; cannot allocate unhealthy devices nvidia.com/gpu", K8S),
    ],
    # NVIDIA k8s-device-plugin health checks (v0.9-v0.12 log.Printf, v0.14-v0.20 klog)
    "device plugin": [
        (f"{PLUGIN} XidCriticalError: Xid=79 on Device=GPU-d23d91a3, the device will go unhealthy.", BUS),
        (
            f"I{KLOG} health.go:152] XidCriticalError: Xid=48 on Device=GPU-d23d91a3; marking device as unhealthy.",
            ECC,
        ),
        (f"{PLUGIN} XidCriticalError: Xid=79, All devices will go unhealthy.", BUS),
        (f"I{KLOG} server.go:276] 'nvidia.com/gpu' device marked unhealthy: GPU-d23d91a3", K8S),
        (f"{PLUGIN} 'nvidia.com/gpu' device marked unhealthy: GPU-d23d91a3", K8S),
        (f"I{KLOG} health.go:101] Marking device GPU-d23d91a3 as unhealthy: Unknown Error", K8S),
        (
            f"I{KLOG} health.go:132] Error waiting for event: Unknown Error; Marking all devices as unhealthy",
            K8S,
        ),
        (f"{PLUGIN} Failed to initialize NVML: could not load NVML library.", NO_GPU),
        (f"E{KLOG} factory.go:87] Failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND.", NO_GPU),
        (f"E{KLOG} factory.go:87] Failed to initialize NVML: Driver Not Loaded.", NO_GPU),
        (f"E{KLOG} factory.go:87] Failed to initialize NVML: ERROR_DRIVER_NOT_LOADED.", NO_GPU),
        (
            f"E{KLOG} main.go:132] Failed to initialize NVML: Driver/library version mismatch.",
            VERSION,
        ),
        (
            f"E{KLOG} factory.go:87] Failed to initialize NVML: ERROR_LIB_RM_VERSION_MISMATCH.",
            VERSION,
        ),
        (
            f"I{KLOG} health.go:101] Marking device GPU-d23d91a3 as unhealthy: ERROR_GPU_IS_LOST",
            BUS,
        ),
        (
            f"I{KLOG} health.go:132] Error waiting for event: GPU is lost; Marking all devices as unhealthy",
            BUS,
        ),
    ],
}

CASES = [(group, text, cls) for group, rows in GROUPS.items() for text, cls in rows]


def _class_of(text: str) -> tuple[str, str] | None:
    """The winner's (signature, class), with an Xid signature's class read from xid.toml by the captured code."""
    got = winner(text)
    if got is None or got[1] != "xid":
        return got
    cat = load_catalogue()
    fields = cat.extract(cat.index[got[0]], text) or {}
    return got[0], cat.xid_info(int(fields["xid"])).class_id


@pytest.mark.parametrize(("group", "text", "cls"), CASES, ids=[f"{g}-{i}" for i, (g, _, _) in enumerate(CASES)])
def test_each_wording_gets_the_class_it_means(group: str, text: str, cls: str) -> None:
    got = _class_of(text)
    if cls == UNKNOWN:
        assert got is None or got[1] == UNKNOWN, (group, text, got)
        return
    assert got is not None, (group, text)
    assert got[1] == cls, (group, text, got)


# Lines these programs print when nothing failed: progress, recovery and the scheduler's own bookkeeping.
CHATTER = [
    srun("Job 881 step creation temporarily disabled, retrying (Requested nodes are busy)", level=""),
    srun("Step created for StepId=881.0", level=""),
    srun("Job 881 step creation still disabled, retrying (Requested nodes are busy)", level=""),
    daemon("Node gpu07 now responding", step=None, level=""),
    daemon(
        "StepId=881.0 hit memory limit at least once during execution. This may or may not result in some failure.",
        level="",
    ),
    daemon("_job_complete: JobId=881 WEXITSTATUS 0", step=None, level=""),
    daemon("_job_complete: JobId=881 done", step=None, level=""),
    "881          train        gpu      acct1         64  COMPLETED      0:0 ",
    "   JobState=COMPLETED Reason=None Dependency=(null)",
    f"I{KLOG} main.go:256] Retreiving plugins.",
    f"I{KLOG} server.go:165] Starting GRPC server for 'nvidia.com/gpu'",
    f"I{KLOG} health.go:64] Ignoring the following XIDs for health checks: map[13:true 31:true 43:true 45:true 68:true 109:true]",
    "  Normal   Scheduled  41m   default-scheduler  Successfully assigned default/trainer-0 to gpu-node-3",
    "      Reason:       Completed",
    # kubelet eviction manager before it decides to evict (image GC may free enough)
    'I1130 02:14:00.123456    2231 eviction_manager.go:349] "Eviction manager: attempting to reclaim" resourceName="ephemeral-storage"',
    'I1130 02:14:00.123456    2231 eviction_manager.go:360] "Eviction manager: able to reduce resource pressure without evicting pods." resourceName="ephemeral-storage"',
    "      Exit Code:    0",
]


@pytest.mark.parametrize("text", CHATTER)
def test_chatter_is_never_a_cause(text: str) -> None:
    got = winner(text)
    assert got is None or got[1] == UNKNOWN, (text, got)


# Whole-bundle checks: the new wordings keep the engine's notions (a policy stop names no culprit node; a memory-limit
# kill explains the bare SIGKILL srun reports for the same task).
STOPS = [
    stepd(f"*** STEP 881.0 ON gpu07 CANCELLED AT {TS} DUE to SIGNAL Terminated ***"),
    daemon("Time limit exhausted for JobId=881", step=None, level=""),
    "Message:          Pod was active on the node longer than the specified deadline",
]


@pytest.mark.parametrize("line", STOPS)
def test_a_policy_stop_in_these_wordings_names_no_culprit(line: str, tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", {"slurm-881.out": f"step 100 loss 2.31\n{line}\n"}, settings)
    rc = out.document.root_cause
    assert rc.class_ == POLICY
    assert (rc.culprit.node, rc.culprit.rank, rc.culprit.gpu) == (None, None, None)


def test_a_memory_limit_kill_explains_the_killed_task(tmp_path: Path, settings: Settings) -> None:
    log = "\n".join(
        [
            "step 100 loss 2.31",
            stepd("StepId=881.0 exceeded memory limit (83886080 > 81920000), being killed"),
            srun("gpu07: task 3: Killed"),
            stepd(f"*** STEP 881.0 ON gpu07 CANCELLED AT {TS} ***"),
        ]
    )
    rc = run_files(tmp_path / "b", {"slurm-881.out": log + "\n"}, settings).document.root_cause
    assert rc.class_ == HOST_OOM
