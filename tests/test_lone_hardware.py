"""An informational hardware event that is all a bundle shows (issue 14, capabilities 1 and 3).

The Xid catalogue rates Xid 63 (row remapping recorded) and Xid 92 (high single-bit ECC rate) informational. Next to a
failure they are context; alone (a monitoring alert, a node's kernel log cut to the event) they are offered as the
root at medium confidence, on the GPU and node the line itself names. Driver wording: open-gpu-kernel-modules
src/nvidia/src/kernel/gpu/rc/kernel_rc.c ("NVRM: Xid (PCI:%04x:%02x:%02x): %d, ..."); the row-remapper message is
the driver's, the alert wrapper a monitoring system's.
"""

from __future__ import annotations

from pathlib import Path

from crashcart.settings import Settings
from tests.kit import run_files

XID92 = "Oct  3 11:22:33 dgx-b17 kernel: [ 9120.004411] NVRM: Xid (PCI:0000:b7:00): 92, pid=0, High single bit error\n"
ALERT63 = (
    "ALERT host gpu-node-042 raised: Oct  3 11:22:33 gpu-node-042 kernel: [ 9120.004411] NVRM: Xid (PCI:0000:3b:00): "
    "63, pid=771, Row Remapper: New row marked for remapping, reset gpu to activate.\n"
)


def test_a_lone_informational_xid_is_a_medium_hardware_root_on_its_node(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", {"alert.txt": ALERT63}, settings)
    root = out.document.root_cause
    assert root.class_ == "gpu_memory_ecc_uncorrectable"
    assert root.culprit.node == "gpu-node-042"  # the syslog host inside the alert, not the file's name
    assert 0.4 <= root.confidence < 0.8  # informational: never shown as high
    assert [c.line for c in root.citations if c.verified] == [1]


def test_a_kernel_log_of_one_xid_92_names_its_gpu(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", {"nodes/dgx-b17/kern.log": XID92}, settings)
    root = out.document.root_cause
    assert root.class_ == "gpu_memory_ecc_uncorrectable"
    assert root.culprit.node == "dgx-b17"
    assert root.culprit.gpu == "0000:b7:00"


def test_an_informational_xid_next_to_a_failure_is_not_the_root(tmp_path: Path, settings: Settings) -> None:
    rank = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/w/train.py", line 9, in <module>\n'
        "[rank0]: KeyError: 'labels'\n"
    )
    out = run_files(tmp_path / "b", {"nodes/dgx-b17/kern.log": XID92, "rank0.log": rank}, settings)
    assert out.document.root_cause.class_ == "python_exception_rank_crash"


# A SIGKILL nothing else explains (reduce/lone.py unexplained_sigkill): wordings of torchrun
# (torch/distributed/elastic/multiprocessing/errors: "Signal 9 (SIGKILL) received by PID"), srun (src/srun
# "task %s: Killed"), a shell's job report ("line N: PID Killed  cmd").
SIGKILLED = {
    "torchrun": "[2024-05-01 10:00:00,000] torch.distributed.elastic: ERROR failed\n  traceback : Signal 9 (SIGKILL) received by PID 4242\n",
    "srun": "srun: error: node-a17: task 3: Killed\n",
    "shell": "/var/spool/slurmd/job77/slurm_script: line 12: 90210 Killed                  python train.py\n",
}


def test_a_lone_sigkill_is_a_low_confidence_memory_guess(tmp_path: Path, settings: Settings) -> None:
    for name, text in SIGKILLED.items():
        out = run_files(tmp_path / name, {"job.out": text}, settings)
        root = out.document.root_cause
        assert root.class_ == "host_oom_kill", name
        assert root.confidence < 0.55, name  # shown as low: no line says memory
        assert all(c.verified for c in root.citations)


def test_a_sigkill_after_a_time_limit_is_not_a_memory_guess(tmp_path: Path, settings: Settings) -> None:
    text = (
        "slurmstepd: error: *** JOB 77 ON node-a17 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME LIMIT ***\n"
        "srun: error: node-a17: task 3: Killed\n"
    )
    out = run_files(tmp_path / "b", {"job.out": text}, settings)
    assert out.document.root_cause.class_ != "host_oom_kill"


def test_an_oom_killer_line_speaks_with_more_confidence_than_the_guess(tmp_path: Path, settings: Settings) -> None:
    kern = "Oct  3 11:22:33 node-a17 kernel: Out of memory: Killed process 90210 (python) total-vm:9000kB\n"
    out = run_files(tmp_path / "b", {"job.out": SIGKILLED["srun"], "nodes/node-a17/kern.log": kern}, settings)
    root = out.document.root_cause
    assert root.class_ == "host_oom_kill"
    assert root.confidence >= 0.55
    assert any(c.file.endswith("kern.log") for c in root.citations)
