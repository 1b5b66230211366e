"""Slurm telling a user or admin that a node could not run the job or went bad, across 17.02-25.11 (issue 14, Slurm
node-side launch failures).

Every line follows a format string of SchedMD/slurm at the release named beside it: src/common/slurm_errno.c's
ESLURMD_* strings after srun's src/api/step_launch.c "Task launch for %ps failed on node %s: %m"; slurmd req.c and
slurmstepd task.c/mgr.c; slurmctld job_mgr.c, agent.c, power_save.c, node_mgr.c; job state reasons
(job_state_reason.c, job_mgr.c state_desc) as scontrol (src/scontrol/info_job.c, src/api/job_info.c) and squeue
print them; sinfo's layouts (src/sinfo/opts.c). A time limit, a preemption, a request the node cannot meet or a
user's own task prolog is no node failure; a listing of nodes (sinfo, scontrol show node) counts for the job's own
nodes (crashcart/reduce/listing.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.catalogue import load_catalogue
from crashcart.models import Topology
from crashcart.reduce.causal import Candidate
from crashcart.reduce.listing import ELSEWHERE, UNTIED, expand, listed_nodes
from crashcart.settings import Settings
from tests.kit import finding, run_files, winner

NODE_CLASS = "slurm_node_failure"


@pytest.mark.parametrize(
    ("line", "node"),
    [
        # 25.11 step_launch.c + slurm_errno.c ESLURMD_FORK_FAILED, ESLURMD_CREATE_BATCH_DIR_ERROR-family (17.02-22.05)
        ("srun: error: Task launch for StepId=9001.0 failed on node gpu07: Slurmd could not fork job", "gpu07"),
        (
            "srun: error: Task launch for StepId=9001.0 failed on node gpu07: "
            "Slurmd could not chown or chmod a batch directory",
            "gpu07",
        ),
        # 17.02 step_launch.c "Task launch for %u.%u failed on node %s: %m", ESLURMD_UID_NOT_FOUND
        ("srun: error: Task launch for 9001.0 failed on node gpu07: User not found on host", "gpu07"),
        # 19.05+ ESLURMD_INVALID_SOCKET_NAME_LEN (SlurmdSpoolDir path too long on that node)
        (
            "srun: error: Task launch for StepId=9001.0 failed on node gpu07: Unix socket name exceeded maximum length",
            "gpu07",
        ),
        # RPC errors to that node's slurmd (slurm_errno.c SLURM_COMMUNICATIONS_CONNECTION_ERROR, socket timeout)
        ("srun: error: Task launch for StepId=9001.0 failed on node gpu07: Communication connection failure", "gpu07"),
        ("srun: error: Task launch for 9001.0 failed on node gpu07: Socket timed out on send/recv operation", "gpu07"),
        # ESLURMD_INVALID_JOB_CREDENTIAL / ESLURMD_CREDENTIAL_EXPIRED: the node's clock or munge key
        ("srun: error: Task launch for StepId=9001.0 failed on node gpu07: Job credential expired", "gpu07"),
        ("srun: error: Application launch failed: Invalid job credential", None),
        # 25.05+ ESPANK_NODE_FAILURE; 17.02 plugins/launch/slurm "Application launch failed: %m"
        ("srun: error: Application launch failed: Spank plugin failure, node failed", None),
        ("srun: error: task 3 launch failed: Slurmd could not spawn I/O thread", None),
        # slurmd req.c 17.02-25.11
        ("[2024-01-01T10:00:00.000] error: Invalid job credential from 1000@10.0.0.1: Job credential expired", None),
        ("[2024-01-01T10:00:00.000] error: exec of slurmstepd failed: No such file or directory", None),
        # slurmstepd task.c 17.02-22.05 "Could not run %s [%s]: %m" (the slurm.conf TaskProlog), mgr.c "... access
        # denied" (TaskEpilog), 23.02+ run_command.c "%s: %s can not be executed (%s) %m"
        (
            "[2020-05-01T10:00:00.000] [881.0] error: Could not run slurm task_prolog [/etc/slurm/tp.sh]: "
            "No such file or directory",
            None,
        ),
        (
            "[2024-05-01T10:00:00.000] [881.0] error: Could not run slurm task_epilog [/etc/slurm/te.sh]: access denied",
            None,
        ),
        (
            "[2024-05-01T10:00:00.000] [881.0] error: run_command: slurm task_prolog can not be executed "
            "(/etc/slurm/tp.sh) Permission denied",
            None,
        ),
        # slurmctld job_mgr.c 20.02-25.11 (%pJ) and 17.02 ("job_id %u")
        ("[2024-03-01T10:00:00.000] requeue job JobId=881 due to failure of node gpu07", "gpu07"),
        ("[2017-03-01T10:00:00.000] Killing job_id 881 on failed node gpu07", "gpu07"),
        ("[2024-03-01T10:00:00.000] error: Removing failed node gpu07 from JobId=881", "gpu07"),
        ("[2024-03-01T10:00:00.000] _job_complete: JobId=881 cancelled by node failure", None),
        (
            "[2024-03-01T10:00:00.000] Batch JobId=881 missing from batch node gpu07 (not found BatchStartTime after "
            "startup), Requeuing job",
            "gpu07",
        ),
        # agent.c, power_save.c 23.02-25.11 and 20.11, node_mgr.c validate_node_specs 17.02-25.11, 22.05+ INVAL
        ("[2024-03-01T10:00:00.000] error: Duplicate jobid on nodes gpu07, set to state DRAIN", "gpu07"),
        (
            "[2023-03-01T10:00:00.000] node gpu07 not resumed by ResumeTimeout(600), setting DOWN and POWERED_DOWN",
            "gpu07",
        ),
        (
            "[2021-03-01T10:00:00.000] node gpu07 not resumed by ResumeTimeout(600) - marking down and power_save",
            "gpu07",
        ),
        (
            "[2024-03-01T10:00:00.000] validate_node_specs: Node gpu07 unexpectedly rebooted boot_time=1709287200 "
            "last response=1709287100",
            "gpu07",
        ),
        ("[2019-03-01T10:00:00.000] error: Node gpu07 has low real_memory size (515000 < 1031000)", "gpu07"),
        # scontrol show job 23.02+ "FailedNode=%s"; job_mgr.c state_desc with scontrol's "_" for spaces; squeue %R
        ("   JobState=NODE_FAIL Reason=NodeDown FailedNode=gpu07 Dependency=(null)", "gpu07"),
        ("   JobState=PENDING Reason=launch_failed_requeued_held Dependency=(null)", None),
        ("   JobState=PENDING Reason=user_env_retrieval_failed_requeued_held Dependency=(null)", None),
        ("   JobState=BOOT_FAIL Reason=JobLaunchFailure Dependency=(null)", None),
        ("               881       gpu    train    alice PD       0:00      2 (launch failed requeued held)", None),
        ("               881       gpu    train    alice PD       0:00      2 (NodeDown)", None),
        # slurmctld proc_req.c 25.05-25.11 "slurmd error running %pI on Node(s)=%s: %s" (17.02-24.11 "JobId=%u on
        # %s=%s" with "node(s)"), after which the node drains with "batch job complete failure"
        (
            "[2025-06-01T00:00:00.000] error: slurmd error running StepId=881.batch on Node(s)=gpu03: Job epilog failed",
            "gpu03",
        ),
        # scontrol -o show node (info_node.c 17.02-25.11 one_liner): the record on one line names its node
        (
            "NodeName=gpu07 Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=2 "
            "Reason=Kill task failed [root@2024-03-01T10:00:00]",
            "gpu07",
        ),
        ("NodeName=gpu07 Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 State=DOWN* ThreadsPerCore=2 TmpDisk=0", "gpu07"),
        # slurmctld job_mgr.c 17.02-25.11 job_epilog_complete; salloc.c 17.02-25.11 "Job submit/allocate failed: %m"
        (
            "[2024-03-01T10:00:00.000] error: job_epilog_complete: JobId=881 epilog error on gpu07, draining the node",
            "gpu07",
        ),
        ("salloc: error: Job submit/allocate failed: Required node not available (down, drained or reserved)", None),
        # slurmd req.c 17.02-25.11 _launch_job_fail / _rpc_batch_job
        ("[2024-03-01T10:00:00.000] Could not launch JobId=881 and not able to requeue it, cancelling job", None),
        ("[2024-03-01T10:00:00.000] error: Could not confirm batch launch for JobId=881, aborting request", None),
        # job_container/tmpfs 23.02 _create_ns, 25.11 namespace/tmpfs namespace_p_join
        ("[2023-03-01T10:00:00.000] [881.extern] error: _create_ns: mkdir /local/slurm/881 failed: No such file", None),
        ("slurmstepd: error: namespace_p_join: open failed for /local/slurm/881/.ns: No such file or directory", None),
        # squeue 17.02-25.11 default layout, compact state NF (job_state_string_compact)
        ("               881       gpu    train    alice NF    1:02:03      2 dgx[01-02]", None),
        # scontrol show node's reason line (node_mgr.c, power_save.c, agent.c reasons)
        ("   Reason=ResumeTimeout reached [slurm@2024-03-01T10:00:00]", None),
        ("   Reason=Duplicate jobid [slurm@2024-03-01T10:00:00]", None),
        (
            "   Reason=Low RealMemory (reported:515000 < 100.00% of configured:1031000) [slurm@2024-03-01T10:00:00]",
            None,
        ),
        # sinfo -l (23.02+ with the reservation column, empty here), sinfo -N, sinfo -N -l, sinfo -R -l
        ("gpu*         up 2-00:00:00 1-infinite   no       NO        all      2     drained dgx[01-02]", None),
        ("gpu*         up   infinite 1-infinite   no       NO        all      1       down*             dgx03", None),
        ("dgx02          1      gpu* drain ", "dgx02"),
        ("dgx02          1      gpu*     drained  128   2:32:2 1024000        0      1   (null) Prolog error", "dgx02"),
        (
            "dgx03          1      gpu*       down*  128   2:32:2 1024000        0      1   (null) Not responding",
            "dgx03",
        ),
        ("Prolog error         slurm(64030) 2024-03-01T10:00:00  drain dgx[01-04]", None),
        ("Not responding       root(0)      2024-03-01T10:00:00  down* gpu07", None),
    ],
)
def test_a_node_that_could_not_run_the_job_is_a_node_failure(line: str, node: str | None) -> None:
    got = winner(line)
    assert got is not None and got[1] == NODE_CLASS, got
    if node is not None:
        cat = load_catalogue()
        fields = cat.extract(cat.index[got[0]], line) or {}
        assert node in {fields.get("node"), fields.get("host")}, fields


@pytest.mark.parametrize(
    "line",
    [
        # requests the node's CPUs cannot meet (slurm_errno.c 22.05+ ESLURMD_CPU_BIND_ERROR, 23.02+ CPU_LAYOUT_ERROR)
        "srun: error: Task launch for StepId=9001.0 failed on node gpu07: Unable to satisfy cpu bind request",
        "srun: error: Task launch for StepId=9001.0 failed on node gpu07: Unable to layout tasks on given cpus",
        "srun: error: Task launch for StepId=9001.0 failed on node gpu07: Invalid accounting frequency requested",
        # the user's own --task-prolog (task.c 17.02-25.11 "user task_prolog", "--task-prolog failed status=%d")
        "[2024-05-01T10:00:00.000] [881.0] error: Could not run user task_prolog [/home/u/tp.sh]: No such file",
        "[2024-05-01T10:00:00.000] [881.0] error: --task-prolog failed status=127",
        # a launch after the job ended: ESLURMD_CREDENTIAL_REVOKED, ESLURM_ALREADY_DONE
        "srun: error: Task launch for StepId=9001.3 failed on node gpu07: Job credential revoked",
        "srun: error: Unable to create step for job 881: Job/step already completing or completed",
        # reasons that say nothing of a failed node (job_state_reason.c WAIT_TIME, WAIT_HELD, WAIT_PROLOG)
        "   JobState=PENDING Reason=BeginTime Dependency=(null)",
        "   JobState=PENDING Reason=JobHeldAdmin Dependency=(null)",
        "               881       gpu    train    alice PD       0:00      2 (BeginTime)",
        "               881       gpu    train    alice PD       0:00      2 (Prolog)",
        # squeue rows of a running and a pending job
        "               881       gpu    train    alice  R    1:02:03      2 dgx[01-02]",
        # healthy sinfo rows and headers
        "gpu*         up 2-00:00:00 1-infinite   no       NO        all      2       idle dgx[01-02]",
        "dgx01          1      gpu* idle ",
        "dgx01          1      gpu*   allocated  128   2:32:2 1024000        0      1   (null) none",
        "NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON",
        # policy, not a node (slurmstepd req.c "*** %s ON %s CANCELLED AT %s DUE TO TIME LIMIT ***")
        "slurmstepd: error: *** JOB 881 ON gpu07 CANCELLED AT 2024-03-01T12:00:00 DUE TO TIME LIMIT ***",
        "slurmstepd: error: *** JOB 881 ON gpu07 CANCELLED AT 2024-03-01T12:00:00 DUE TO PREEMPTION ***",
    ],
)
def test_a_request_a_policy_or_a_healthy_node_is_no_node_failure(line: str) -> None:
    got = winner(line)
    assert got is None or got[1] != NODE_CLASS, got


def test_a_task_launch_failure_names_the_node(tmp_path: Path, settings: Settings) -> None:
    # slurm 23.02 srun: step_launch.c's per-node line, then launch.c's "Application launch failed: %m"
    out_file = (
        "srun: error: Task launch for StepId=881.0 failed on node gpu07: Slurmd could not fork job\n"
        "srun: error: Application launch failed: Slurmd could not fork job\n"
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
    )
    root = run_files(tmp_path / "b", {"slurm-881.out": out_file}, settings).document.root_cause
    assert root.class_ == NODE_CLASS
    assert root.culprit.node == "gpu07"
    assert root.citations[0].line == 1 and root.citations[0].verified


def test_a_request_the_node_cannot_meet_is_not_blamed_on_the_node(tmp_path: Path, settings: Settings) -> None:
    out_file = (
        "srun: error: Task launch for StepId=881.0 failed on node gpu07: Unable to satisfy cpu bind request\n"
        "srun: error: Application launch failed: Unable to satisfy cpu bind request\n"
    )
    root = run_files(tmp_path / "b", {"slurm-881.out": out_file}, settings).document.root_cause
    assert root.class_ != NODE_CLASS
    assert root.culprit.node is None


@pytest.mark.parametrize(
    ("files", "node"),
    [
        # sinfo -N -l (opts.c 17.02-25.11): the drained row names its node
        (
            {
                "sinfo-Nl.txt": (
                    "NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON\n"
                    "dgx01          1      gpu*   allocated  128   2:32:2 1024000        0      1   (null) none\n"
                    "dgx02          1      gpu*     drained  128   2:32:2 1024000        0      1   (null) Prolog error\n"
                )
            },
            "dgx02",
        ),
        # scontrol show job 23.02-25.11: FailedNode=
        (
            {
                "scontrol_show_job.txt": (
                    "JobId=881 JobName=train\n"
                    "   JobState=NODE_FAIL Reason=NodeDown FailedNode=dgx02 Dependency=(null)\n"
                    "   NodeList=dgx[01-02]\n"
                )
            },
            "dgx02",
        ),
        # slurmctld 23.02: ping_nodes.c, then job_mgr.c kill_running_job_by_node_ptr
        (
            {
                "slurmctld.log": (
                    "[2024-03-01T10:00:00.000] sched: Allocate JobId=881 NodeList=dgx[01-02] #CPUs=256 Partition=gpu\n"
                    "[2024-03-01T11:05:00.000] error: Nodes dgx02 not responding, setting DOWN\n"
                    "[2024-03-01T11:05:00.001] Killing JobId=881 on failed node dgx02\n"
                )
            },
            "dgx02",
        ),
    ],
)
def test_the_failed_node_is_the_culprit(tmp_path: Path, settings: Settings, files: dict[str, str], node: str) -> None:
    root = run_files(tmp_path / "b", files, settings).document.root_cause
    assert root.class_ == NODE_CLASS
    assert root.culprit.node == node
    assert all(c.verified for c in root.citations)


def test_a_time_limit_stays_a_time_limit_beside_a_drained_node(tmp_path: Path, settings: Settings) -> None:
    # slurmstepd's time-limit line in the job's output; sinfo (default layout) shows another node drained
    files = {
        "slurm-881.out": (
            "step 100 loss 2.3\n"
            "slurmstepd: error: *** JOB 881 ON dgx01 CANCELLED AT 2024-03-01T12:00:00 DUE TO TIME LIMIT ***\n"
        ),
        "sinfo.txt": (
            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
            "gpu*         up   infinite      1  drain dgx09\n"
            "gpu*         up   infinite      2  alloc dgx[01-02]\n"
        ),
    }
    root = run_files(tmp_path / "b", files, settings).document.root_cause
    assert root.class_ == "scheduler_preemption_or_timelimit"


# reduce/listing.py: a sinfo or scontrol show node listing names nodes of the partition, not of the job
SINFO_R = "Prolog error         slurm     2024-03-01T10:00:00 dgx[08-09]"  # sinfo -R (opts.c 17.02-25.11)
SINFO_N = "dgx02          1      gpu* drain "  # sinfo -N (opts.c 17.02-25.11)


@pytest.mark.parametrize(
    ("line", "job_nodes", "penalty"),
    [
        (SINFO_R, ["dgx01", "dgx02"], ELSEWHERE),  # the drained nodes are not the job's
        (SINFO_R, ["dgx01", "dgx09"], 0.0),  # one of them is: the listing counts in full
        (SINFO_N, ["dgx02"], 0.0),
        (SINFO_N, [], UNTIED),  # the bundle does not say where the job ran
    ],
)
def test_a_node_listing_counts_for_the_jobs_own_nodes(line: str, job_nodes: list[str], penalty: float) -> None:
    cat = load_catalogue()
    sig = winner(line)
    assert sig is not None
    f = finding(sig[0], line, file="sinfo.txt")
    if f.fields.get("node"):
        f = f.model_copy(update={"node": f.fields["node"]})
    c = Candidate(NODE_CLASS, [f], [])
    c.score = 60.0
    listed_nodes([c], Topology(nodes=job_nodes), floor=30.0)
    assert c.score == 60.0 - penalty
    assert cat.signatures[cat.index[sig[0]]].class_id == NODE_CLASS


def test_an_untied_listing_alone_still_answers_but_not_over_a_ranks_error() -> None:
    alone = Candidate(NODE_CLASS, [finding("slurm.sinfo_node_state", SINFO_N, file="sinfo.txt")], [])
    alone.score = 38.0  # a P1 line with no bonus
    listed_nodes([alone], Topology(), floor=30.0)
    assert 30.0 < alone.score < 34.0  # above the least answer, below a rank's traceback (GENERIC_WEIGHT 34)


def test_slurm_hostlists_expand_to_their_nodes() -> None:
    assert expand("dgx[01-03,07],gpu-node-017") == {"dgx01", "dgx02", "dgx03", "dgx07", "gpu-node-017"}
    assert expand("n[8-10]") == {"n8", "n9", "n10"}
    assert expand("dgx[01-0") == set()  # cut off: nothing is read from it


def test_a_ranks_own_error_beats_a_listing_of_another_node(tmp_path: Path, settings: Settings) -> None:
    files = {
        "rank3.log": (  # torch 2.x prefixes a rank's traceback with [rankN]:
            "[rank3]: Traceback (most recent call last):\n"
            '[rank3]:   File "train.py", line 10, in <module>\n'
            "[rank3]:     x = batch['labels']\n"
            "[rank3]: KeyError: 'labels'\n"
        ),
        "sinfo-R.txt": "REASON               USER      TIMESTAMP           NODELIST\n" + SINFO_R + "\n",
    }
    root = run_files(tmp_path / "b", files, settings).document.root_cause
    assert root.class_ == "python_exception_rank_crash"
    assert root.culprit.rank == 3
