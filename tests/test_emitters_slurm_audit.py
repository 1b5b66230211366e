"""Issue 14, capability 1: a second pass over Slurm's own error strings (SchedMD/slurm 17.02-26.05).

Wordings the first Slurm tests (test_emitters_slurm.py, test_slurm_node_launch.py) did not reach: the gang
scheduler's bare "preempted ... has been killed/requeued", slurmctld's step time limit (step_mgr.c / stepmgr.c
check_job_step_time_limit, old and %pS spellings), salloc's time-limit revocation notice, the 23.02+
ESLURM_JOB_NODE_FAIL_KILLED errno after srun's prefixes, srun's launch timeout (api/step_launch.c), slurmstepd's launch set-up failures in slurmd's log and "Unable to
create step" for a node that is down. Each line is written from the format string with its usual prefix; the
expectation is a class id, or UNKNOWN where the line is no cause of its own.
"""

from __future__ import annotations

import pytest

from tests.kit import winner

NODE = "slurm_node_failure"
POLICY = "scheduler_preemption_or_timelimit"
UNKNOWN = "unknown"
TS = "2024-11-30T02:14:00"


def ctld(msg: str, year: str = "2024") -> str:
    """slurmctld's log file: ``[ts] msg``."""
    return f"[{year}-11-30T02:14:00.123] {msg}"


GROUPS: dict[str, list[tuple[str, str]]] = {
    # slurmctld/gang.c (17.02-26.05): gang-scheduler preemption, no "to reclaim resources" tail
    "gang preemption": [
        (ctld("preempted JobId=881 has been killed"), POLICY),
        (ctld("preempted JobId=881 has been requeued"), POLICY),
        (ctld("preempted job 881 has been killed", year="2017"), POLICY),
        (ctld("_preempt_job_dequeue: preempted JobId=881 had to be killed"), POLICY),
    ],
    # slurmctld step_mgr.c (17.02-23.11), stepmgr/stepmgr.c (24.05-26.05): a step's own time limit
    "step time limit": [
        (ctld("check_job_step_time_limit: StepId=881.0 has timed out (60)"), POLICY),
        (ctld("check_job_step_time_limit: StepId=881+1.3 has timed out (5)"), POLICY),
        (ctld("check_job_step_time_limit: job 881 step 0 has timed out (60)", year="2017"), POLICY),
    ],
    # salloc/salloc.c (17.02-26.05): the allocation reached its time limit
    "allocation time limit": [
        ("salloc: Job 881 has exceeded its time limit and its allocation has been revoked.", POLICY),
        # a bare revocation may be a cancel or a time limit: not a cause by itself
        ("salloc: error: Job allocation 881 has been revoked", UNKNOWN),
    ],
    # common/slurm_errno.c ESLURM_JOB_NODE_FAIL_KILLED (23.02-26.05) after srun/salloc/sbatch's "%m" prefixes
    "errno node fail": [
        ("srun: error: Unable to create step for job 881: Job killed due node failure", NODE),
        ("srun: error: Unable to allocate resources: Job killed due node failure", NODE),
        ("salloc: error: Job submit/allocate failed: Job killed due node failure", NODE),
        ("srun: error: Task launch for StepId=881.0 failed on node gpu07: Job killed due node failure", NODE),
    ],
    # srun/launch.c (17.02-26.05) "Unable to create step for job %u: %m" with ESLURM_NODE_NOT_AVAIL
    "step create node down": [
        (
            "srun: error: Unable to create step for job 881: Required node not available (down, drained or reserved)",
            NODE,
        ),
    ],
    # api/step_launch.c (17.02-26.05) slurm_step_launch_wait_start: slurmd did not answer the launch
    "launch timeout": [
        ("srun: error: timeout waiting for task launch, started 0 of 16 tasks", NODE),
        ("srun: error: timeout waiting for task launch, started 8 of 16 tasks", NODE),
    ],
    # slurmstepd mgr.c (17.02-26.05; mpi prefork 23.02+) and spank: launch set-up failures, in slurmd's log where the
    # stepd tags each line with its step, and in the job's output
    "stepd launch set-up": [
        (
            "[2024-11-30T02:14:00.123] [881.0] error: _fork_all_tasks: Failed to invoke task plugins:"
            " one of task_p_pre_setup functions returned error",
            NODE,
        ),
        ("[2024-11-30T02:14:00.123] [881.0] error: proctrack_g_create: Operation not permitted", NODE),
        ("[2024-11-30T02:14:00.123] [881.0] error: Failed mpi_g_slurmstepd_prefork", NODE),
        (
            "[2024-11-30T02:14:00.123] [881.0] error: job_manager: exiting abnormally: Failed to invoke task plugins",
            NODE,
        ),
        ("[2024-11-30T02:14:00.123] [881.0] error: slurm_spank_init: Plugin stack initialization failed.", NODE),
        ("slurmstepd: error: spank_task_init_privileged failed", NODE),
        # without the step tag the line is no stepd's
        ("[2024-11-30T02:14:00.123] error: Failed mpi_g_slurmstepd_prefork", UNKNOWN),
    ],
    # api/step_launch.c _step_missing_handler (17.02-26.05): srun cannot reach a node's stepd to test the I/O link
    "io test": [
        ("srun: error: Aborting, can not test connection to node 3.", NODE),
    ],
    # already covered wordings, as the "slurmstepd-<node>:" prefix of newer releases prints them
    "stepd prefix": [
        (f"slurmstepd-gpu07: error: *** JOB 881 ON gpu07 CANCELLED AT {TS} DUE TO TIME LIMIT ***", POLICY),
        (f"slurmstepd-gpu07: error: *** JOB 881 ON gpu07 CANCELLED AT {TS} DUE TO PREEMPTION ***", POLICY),
        (
            f"slurmstepd-gpu07: error: *** STEP 881.0 ON gpu07 CANCELLED AT {TS} DUE TO NODE FAILURE,"
            " SEE SLURMCTLD LOG FOR DETAILS ***",
            NODE,
        ),
        (
            "slurmstepd-gpu07: error: Detected 1 oom_kill event in StepId=881.0."
            " Some of the step tasks have been OOM Killed.",
            "host_oom_kill",
        ),
    ],
}

CASES = [(group, line, cls) for group, rows in GROUPS.items() for line, cls in rows]


@pytest.mark.parametrize(("group", "line", "cls"), CASES, ids=[f"{g}-{i}" for i, (g, _, _) in enumerate(CASES)])
def test_slurm_audit_line(group: str, line: str, cls: str) -> None:
    won = winner(line)
    got = won[1] if won else UNKNOWN
    assert got == cls, f"{group}: {line!r} -> {won}"
