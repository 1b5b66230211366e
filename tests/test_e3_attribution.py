"""Culprits from what lines say and the no_failure verdict (issue 14, capabilities 3, 4 and 11).

Bundles are in the shapes the emitters print: torchrun's failure summary (torch/distributed/elastic/multiprocessing/
errors ChildFailedError.format_msg: ``host :`` then ``rank : R (local_rank: L)`` per entry), DeepSpeed's launcher
(deepspeed/launcher/launch.py: "process P spawned with command: [...]", "Process P exits successfully.",
sigkill_handler's "Killing subprocess" and "exits with return code"), PyTorch's CUDA caching allocator OOM message
(c10/cuda/CUDACachingAllocator.cpp: "GPU N has a total capacity of ..."), Slurm's scontrol/sacct job state.
"""

from __future__ import annotations

from pathlib import Path

from crashcart.settings import Settings
from tests.kit import run_files


def _entry(idx: int, host: str, rank: int, exitcode: str, trace: str) -> str:
    return (
        f"[{idx}]:\n"
        "  time      : 2026-12-01_20:35:02\n"
        f"  host      : {host}\n"
        f"  rank      : {rank} (local_rank: {rank})\n"
        f"  exitcode  : {exitcode} (pid: {170 + rank})\n"
        "  error_file: <N/A>\n"
        f"  traceback : {trace}\n"
    )


def _torchrun_summary(failures: str, root: str) -> str:
    bar, dash = "=" * 60, "-" * 60
    return f"{bar}\ntrain.py FAILED\n{dash}\nFailures:\n{failures}{dash}\nRoot Cause (first observed failure):\n{root}{bar}\n"


CONSOLE = (
    "[rank0]:[E1201 20:35:00.100000 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800050 milliseconds "
    "before timing out.\n"
    "[rank0]:terminate called after throwing an instance of 'c10::DistBackendError'\n"
    "[rank1]: Traceback (most recent call last):\n"
    '[rank1]:   File "train.py", line 70, in <module>\n'
    "[rank1]: ValueError: corrupt record at offset 4096\n"
    "E1201 20:35:02.000000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) "
    "local_rank: 0 (pid: 170) of binary: /usr/bin/python\n"
)


def test_the_summary_entry_names_the_failing_ranks_host_and_its_sigabrt_root_is_teardown(
    tmp_path: Path, settings: Settings
) -> None:
    """torchrun's "Root Cause" names rank 0 (SIGABRT from its own watchdog); rank 1's exception is the cause, and
    the summary's entry for rank 1 says which host it ran on."""
    summary = _torchrun_summary(
        _entry(1, "gpu46", 1, "-15", "Signal 15 (SIGTERM) received by PID 171"),
        _entry(0, "gpu46", 0, "-6", "Signal 6 (SIGABRT) received by PID 170"),
    )
    out = run_files(tmp_path / "b", {"console.log": CONSOLE + summary}, settings)
    root = out.document.root_cause
    assert root.class_ == "python_exception_rank_crash"
    assert (root.culprit.rank, root.culprit.node) == (1, "gpu46")
    assert out.topology.ranks[1].node == "gpu46"
    assert any("gpu46" in c.text for c in root.citations)  # the node is named by a cited line


def test_a_loopback_summary_host_names_no_node(tmp_path: Path, settings: Settings) -> None:
    summary = _torchrun_summary("  <NO_OTHER_FAILURES>\n", _entry(0, "localhost", 1, "1", "ValueError"))
    out = run_files(tmp_path / "b", {"console.log": CONSOLE + summary}, settings)
    assert out.topology.ranks.get(1) is None or out.topology.ranks[1].node is None


DS_OOM = """\
[2024-05-01 10:00:00,000] [INFO] [launch.py:256:main] process 4101 spawned with command: ['/usr/bin/python', '-u', 'train.py', '--local_rank=0', '--deepspeed']
[2024-05-01 10:00:00,000] [INFO] [launch.py:256:main] process 4102 spawned with command: ['/usr/bin/python', '-u', 'train.py', '--local_rank=1', '--deepspeed']
Traceback (most recent call last):
  File "train.py", line 88, in <module>
    loss.backward()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB of which 1.12 GiB is free. Process 4102 has 78.01 GiB memory in use.
[2024-05-01 10:00:34,590] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4101
[2024-05-01 10:00:34,591] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=1', '--deepspeed'] exits with return code = 1
"""


def test_deepspeeds_spawn_line_ties_a_pid_to_its_local_rank_and_the_gpu_index_is_the_culprit(
    tmp_path: Path, settings: Settings
) -> None:
    out = run_files(tmp_path / "b", {"train.log": DS_OOM}, settings)
    oom = next(f for f in out.findings if f.signature == "cuda.oom")
    assert oom.rank == 1  # pid 4102 was started as --local_rank=1 on a single-node job
    root = out.document.root_cause
    assert root.class_ == "cuda_oom"
    assert root.culprit.gpu == "1"  # "GPU 1 has a total capacity of ..." names the device


def test_launchers_and_schedulers_that_report_success_give_no_failure(tmp_path: Path, settings: Settings) -> None:
    ok = (
        "[2024-05-01 12:00:00,123] [INFO] [launch.py:351:main] Process 4101 exits successfully.\n"
        "[2024-05-01 12:00:00,124] [INFO] [launch.py:351:main] Process 4102 exits successfully.\n"
        "gpu46:2211:2290 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared "
        "object file: No such file or directory : when loading libnccl-net.so\n"
    )
    out = run_files(tmp_path / "ds", {"train.log": ok}, settings)
    assert out.document.root_cause.class_ == "no_failure"
    sacct = "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode \n881          train        gpu      acct1         16  COMPLETED      0:0 \n"
    out = run_files(tmp_path / "slurm", {"sacct.txt": sacct}, settings)
    assert out.document.root_cause.class_ == "no_failure"


def test_a_success_line_beside_a_failure_is_not_no_failure(tmp_path: Path, settings: Settings) -> None:
    text = DS_OOM.replace("Killing subprocess 4101", "Killing subprocess 4101\n[2024-05-01 10:00:30,000] [INFO] "
                          "[launch.py:351:main] Process 4101 exits successfully.")  # fmt: skip
    out = run_files(tmp_path / "b", {"train.log": text}, settings)
    assert out.document.root_cause.class_ == "cuda_oom"


def test_megatrons_nan_check_names_rank_node_and_device(tmp_path: Path, settings: Settings) -> None:
    """Megatron-LM's grad-norm check (megatron/core/distributed: "Rank {r}: found NaN in local grad norm ...
    Device: {d}, node: {host}") names all three; each is shown because the cited line names it."""
    line = (
        "[rank13]: AssertionError: Rank 13: found NaN in local grad norm in backward pass before data-parallel "
        "communication collective. Device: 5, node: node-15-11\n"
    )
    out = run_files(tmp_path / "b", {"log.txt": line}, settings)
    c = out.document.root_cause.culprit
    assert (c.rank, c.node, c.gpu) == (13, "node-15-11", "5")
