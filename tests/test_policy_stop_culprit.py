"""A stop by policy ends the whole job: the node its line names is where the step ran, never the culprit."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from crashcart.report.terminal import render
from crashcart.settings import Settings
from tests.kit import run_files

STOPS = [
    # slurmstepd req.c: "*** %s ON %s CANCELLED AT %s DUE TO TIME LIMIT ***" (and PREEMPTION)
    "slurmstepd: error: *** STEP 55595933.0 ON gpu-node-17 CANCELLED AT 2025-01-10T15:27:25 DUE TO TIME LIMIT ***",
    "slurmstepd: error: *** JOB 881 ON dgx03 CANCELLED AT 2024-03-01T12:00:00 DUE TO PREEMPTION ***",
]


@pytest.mark.parametrize("line", STOPS)
def test_a_policy_stop_names_no_culprit_node(line: str, tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", {"slurm-881.out": f"step 100 loss 2.31\n{line}\n"}, settings)
    rc = out.document.root_cause
    assert rc.class_ == "scheduler_preemption_or_timelimit"
    assert (rc.culprit.node, rc.culprit.rank, rc.culprit.gpu) == (None, None, None)
    buf = io.StringIO()
    render(out.document, Console(file=buf, width=120))
    assert "none: a policy stopped the whole job" in buf.getvalue()
