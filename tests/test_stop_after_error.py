"""A stop without a reason loses to the error printed before it (issue 14, capability 4). Slurm's own sequence
when a task dies of the step's memory limit: slurmstepd's task/cgroup plugin "Detected %u oom-kill event(s) in
%ps cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler." (Slurm 20.11+),
srun's "%s: task %d: Out Of Memory", "Terminating job step %ps", then slurmstepd's reasonless "*** STEP %s ON %s
CANCELLED AT %s ***" (src/slurmd/slurmstepd/req.c), the only line with a clock."""

from __future__ import annotations

from pathlib import Path

from crashcart.settings import Settings
from tests.kit import run_files

OOM = "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=81.0. Some of your processes may have been killed by the cgroup out-of-memory handler."
TASK = "srun: error: gpu-a07: task 2: Out Of Memory"
CANCEL = "slurmstepd: error: *** STEP 81.0 ON gpu-a07 CANCELLED AT 2024-05-02T11:20:05 ***"


def test_the_oom_before_the_cancel_is_the_cause(tmp_path: Path, settings: Settings) -> None:
    log = "\n".join([OOM, TASK, "srun: Terminating job step 81.0", CANCEL, ""])
    root = run_files(tmp_path, {"slurm-81.out": log}, settings).document.root_cause
    assert root.class_ == "host_oom_kill"
    assert root.culprit.node == "gpu-a07"
    assert any(c.text == TASK or c.text == OOM for c in root.citations)


def test_a_cancel_alone_stays_a_weak_stop(tmp_path: Path, settings: Settings) -> None:
    root = run_files(tmp_path, {"slurm-81.out": CANCEL + "\n"}, settings).document.root_cause
    assert root.class_ == "scheduler_preemption_or_timelimit"
    assert root.confidence <= 0.6
