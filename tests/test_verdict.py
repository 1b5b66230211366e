"""The no_failure verdict and calibrated confidence (crashcart/reduce/verdict.py, causal.calibrate).

Lines are in their emitters' shapes: torchrun's agent (torch/distributed/elastic/agent/server/api.py), NCCL's
net plugin probe (src/plugin/net.cc), Slurm's slurmstepd cancel line.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from crashcart.pipeline import diagnose
from crashcart.settings import Settings

SUCCEEDED = (
    "I1201 20:06:18.330000 99 torch/distributed/elastic/agent/server/api.py:932] [default] worker group "
    "successfully finished. Waiting 300 seconds for other agents to finish.\n"
    "I1201 20:06:18.331000 99 torch/distributed/elastic/agent/server/api.py:985] Local worker group finished "
    "(WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish\n"
)
PLUGIN = (
    "gpu46:5151:5151 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n"
    "gpu46:5151:5151 [0] net.cc:63 NCCL WARN NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open "
    "shared object file: No such file or directory : when loading libnccl-net.so\n"
)


def _diagnose(root: Path, files: dict[str, str], settings: Settings):  # type: ignore[no-untyped-def]
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return asyncio.run(diagnose(root, settings)).document


def test_a_job_that_completed_is_no_failure(tmp_path: Path, settings: Settings) -> None:
    doc = _diagnose(
        tmp_path / "b",
        {"torchrun.log": SUCCEEDED, "rank0.log": PLUGIN + "step 100/100 loss 1.02\n"},
        settings,
    )
    assert doc.root_cause.class_ == "no_failure"
    assert doc.root_cause.confidence >= 0.8
    assert doc.contributing == []  # the plugin warning is benign, never a contributing factor
    assert any("checked" in r for r in doc.reasoning)
    assert doc.root_cause.citations and "successfully finished" in doc.root_cause.citations[0].text


def test_success_with_an_error_in_the_bundle_is_not_no_failure(tmp_path: Path, settings: Settings) -> None:
    doc = _diagnose(
        tmp_path / "b",
        {"torchrun.log": SUCCEEDED, "rank0.log": "[rank0]: RuntimeError: CUDA error: an illegal memory access\n"},
        settings,
    )
    assert doc.root_cause.class_ != "no_failure"


def test_no_completion_line_is_not_no_failure(tmp_path: Path, settings: Settings) -> None:
    doc = _diagnose(tmp_path / "b", {"rank0.log": "step 10/100 loss 2.2\n"}, settings)
    assert doc.root_cause.class_ != "no_failure"


def test_a_stop_signal_without_a_reason_is_never_confident(tmp_path: Path, settings: Settings) -> None:
    log = (
        "W1201 20:06:17.281000 99 torch/distributed/elastic/agent/server/api.py:719] Received Signals.SIGTERM "
        "death signal, shutting down workers\n"
        "W1201 20:06:17.282000 99 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 101 "
        "closing signal SIGTERM\n"
    )
    doc = _diagnose(tmp_path / "b", {"torchrun.log": log}, settings)
    assert doc.root_cause.confidence <= 0.6
