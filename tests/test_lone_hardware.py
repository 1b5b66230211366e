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


def test_a_lone_sigkill_stays_unknown_with_memory_first_among_the_hypotheses(
    tmp_path: Path, settings: Settings
) -> None:
    """TAXONOMY rule 8 (a): a SIGKILL (exit 137, "Killed") without a kernel or cgroup OOM line is an unknown SIGKILL
    (OOM, scheduler, user or health check could have sent it); srun's wording (src/srun "task %s: Killed")."""
    out = run_files(tmp_path / "b", {"job.out": "srun: error: node-a17: task 3: Killed\n"}, settings)
    root = out.document.root_cause
    assert root.class_ == "unknown"
    assert out.document.hypotheses[0].class_ == "host_oom_kill"


def test_an_oom_killer_line_names_the_memory_kill(tmp_path: Path, settings: Settings) -> None:
    kern = "Oct  3 11:22:33 node-a17 kernel: Out of memory: Killed process 90210 (python) total-vm:9000kB\n"
    files = {"job.out": "srun: error: node-a17: task 3: Killed\n", "nodes/node-a17/kern.log": kern}
    root = run_files(tmp_path / "b", files, settings).document.root_cause
    assert root.class_ == "host_oom_kill"
    assert any(c.file.endswith("kern.log") and c.verified for c in root.citations)
