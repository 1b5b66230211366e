"""Culprit attribution from what lines say, teardown that is never a cause, and collective timeouts as symptoms
(crashcart/locate/topology.py, crashcart/reduce/causal.py, crashcart/reduce/offline.py).

Bundles are written in the shapes their emitters print: torchrun's --log-dir folders and failure summary
(torch/distributed/elastic), NCCL's ``host:pid:tid [cudaDev]`` prefix (src/debug.cc), gloo's pair.cc and
unbound_buffer.cc errors, c10d's watchdog lines and libstdc++'s terminate message.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from crashcart.models import Finding
from crashcart.pipeline import Outcome, diagnose
from crashcart.reduce.offline import _sane_timeout
from crashcart.settings import Settings
from crashcart.text.prefix import host_of_path, local_of_path, rank_of_path

GLOO_TIMEOUT = (
    "[rank{r}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 10000ms for recv operation to complete"
)
GLOO_CLOSED = (
    "[rank{r}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
    "Connection closed by peer [10.0.0.{p}]:55949"
)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _run(root: Path, settings: Settings) -> Outcome:
    return asyncio.run(diagnose(root, settings))


def _summary(rank: int, local: int, pid: int, exitcode: str, signal: str, trace: str) -> str:
    """torchrun's error summary (torch/distributed/elastic/multiprocessing/errors/__init__.py format)."""
    return (
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n"
        "  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2026-12-01_20:06:18\n"
        "  host      : localhost\n"
        f"  rank      : {rank} (local_rank: {local})\n"
        f"  exitcode  : {exitcode} (pid: {pid})  ({signal})\n"
        "  error_file: <N/A>\n"
        f"  traceback : {trace}\n"
        "============================================================\n"
    )


def test_torchrun_folders_give_local_ranks_and_the_run_id_names_no_rank() -> None:
    path = "node1/logs/exp-rank3/attempt_0/1/stderr.log"
    assert rank_of_path(path) is None  # "exp-rank3" is the run id, not a rank
    assert local_of_path(path) == 1
    assert host_of_path("logs/job-v2/attempt_0/0/stdout.log") is None  # the run id is not a host
    assert host_of_path(path) == "node1"
    assert rank_of_path("logs/rank3/stderr.log") == 3


def test_a_folder_rank_comes_from_its_sibling_file(tmp_path: Path, settings: Settings) -> None:
    """stdout.log in attempt_0/1/ has no prefix; stderr.log next to it says [rank3]: (node1, local rank 1)."""
    root = _write(
        tmp_path / "b",
        {
            "node1/logs/myrun/attempt_0/1/stderr.log": "[rank3]: Traceback (most recent call last):\n"
            '[rank3]:   File "train.py", line 10, in <module>\n'
            "[rank3]: KeyError: 'label'\n",
            "node1/logs/myrun/attempt_0/1/stdout.log": "step 10 loss 2.2\nLoss is nan, stopping training\n",
            "node1/logs/myrun/attempt_0/0/stderr.log": GLOO_CLOSED.format(r=2, p=2) + "\n",
        },
    )
    out = _run(root, settings)
    nan = [f for f in out.findings if f.evidence[0].file.endswith("1/stdout.log") and f.role != "context"]
    assert nan and all(f.rank == 3 for f in nan)
    assert out.topology.ranks[3].node == "node1"


def test_default_prefix_is_a_local_rank_not_the_files_rank(tmp_path: Path, settings: Settings) -> None:
    """A torchrun --tee console: one [rankN]: traceback made the file look like rank 0's log."""
    lines = [
        "[default0]:rank 0/2 pid 100 backend gloo",
        "[default1]:rank 1/2 pid 101 backend gloo",
        "[default1]:Loss is nan, stopping training",
        "[default0]:" + GLOO_CLOSED.format(r=0, p=1),
    ]
    out = _run(_write(tmp_path / "b", {"console.log": "\n".join(lines) + "\n"}), settings)
    nan = next(f for f in out.findings if f.class_id == "nan_inf_loss_or_grad")
    assert nan.rank == 1
    assert out.document.root_cause.class_ == "nan_inf_loss_or_grad"


def test_the_worker_torchrun_saw_die_of_a_signal_owns_the_crash(tmp_path: Path, settings: Settings) -> None:
    console = (
        "Fatal Python error: Segmentation fault\n"
        + GLOO_CLOSED.format(r=0, p=1).replace("Connection closed by peer", "Read error")
        + ": Connection reset by peer\n"
        + "E1201 20:06:18.100000 99 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -11) "
        "local_rank: 1 (pid: 4242) of binary: /usr/bin/python3\n"
        + _summary(1, 1, 4242, "-11", "SIGSEGV", "Signal 11 (SIGSEGV) received by PID 4242")
    )
    out = _run(_write(tmp_path / "b", {"console.log": console}), settings)
    crash = [f for f in out.findings if f.class_id == "native_crash_segfault_abort"]
    assert crash and all(f.rank == 1 for f in crash)
    assert out.document.root_cause.class_ == "native_crash_segfault_abort"
    assert out.document.root_cause.culprit.rank == 1


def test_nccl_prefix_names_host_and_rank(tmp_path: Path, settings: Settings) -> None:
    log = (
        "gpu46:5151:5151 [3] NCCL INFO comm 0x55d1 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 4e000 "
        "commId 0x1 - Init COMPLETE\n"
        "gpu46:5151:5190 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "10.1.1.7<42> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.1.1.6\n"
    )
    out = _run(_write(tmp_path / "b", {"train.log": log}), settings)
    warn = next(f for f in out.findings if "NCCL WARN" in f.evidence[0].text)
    assert warn.node == "gpu46"
    assert warn.rank == 3


def test_a_gloo_timeout_is_a_symptom_and_the_silent_rank_is_named(tmp_path: Path, settings: Settings) -> None:
    root = _write(
        tmp_path / "b",
        {
            "logs/run/attempt_0/0/stderr.log": GLOO_TIMEOUT.format(r=0) + "\n",
            "logs/run/attempt_0/0/stdout.log": "rank 0/2\nstep 30/100 loss 2.17\n",
            "logs/run/attempt_0/1/stdout.log": "rank 1/2\nstep 30/100 loss 2.17\n",
            "logs/run/attempt_0/1/stderr.log": "",
            "torchrun.log": "W1201 20:06:17.281000 99 torch/distributed/elastic/multiprocessing/api.py:1028] "
            "Sending process 101 closing signal SIGTERM\n"
            + _summary(1, 1, 101, "-15", "SIGTERM", "Signal 15 (SIGTERM) received by PID 101"),
        },
    )
    out = _run(root, settings)
    timeout = next(f for f in out.findings if f.signature == "gloo.timeout")
    assert (timeout.class_id, timeout.role) == ("nccl_watchdog_timeout", "cascade")
    assert out.document.root_cause.class_ == "rank_hang_or_missing_rank"
    assert out.document.root_cause.culprit.rank == 1
    assert out.document.root_cause.confidence < 0.8  # inferred from silence


def test_the_watchdogs_own_abort_is_not_the_root(tmp_path: Path, settings: Settings) -> None:
    log = (
        "[E ProcessGroupNCCL.cpp:567] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=12, OpType=BROADCAST, Timeout(ms)=60000) ran for 69479 milliseconds before timing out.\n"
        "[E ProcessGroupNCCL.cpp:327] Some NCCL operations have failed or timed out. Due to the asynchronous "
        "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data. To avoid this "
        "inconsistency, we are taking the entire process down.\n"
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, "
        "OpType=BROADCAST, Timeout(ms)=60000) ran for 69479 milliseconds before timing out.\n"
        "Aborted (core dumped)\n"
    )
    out = _run(_write(tmp_path / "b", {"train.log": log}), settings)
    assert out.document.root_cause.class_ != "native_crash_segfault_abort"


def _wd(timeout: str, ran: str) -> Finding:
    from crashcart.models import Evidence

    ev = Evidence(id="E1", file="a.log", line=1, text="x")
    return Finding(
        id="F1",
        class_id="nccl_watchdog_timeout",
        signature="nccl.watchdog_timeout",
        role="cascade",
        severity="P1",
        summary="",
        fields={"timeout_ms": timeout, "ran_ms": ran},
        evidence=[ev],
        source="rule",
    )


def test_a_timeout_a_thousand_times_below_ran_for_is_a_unit_slip() -> None:
    assert _sane_timeout(_wd("1800", "1800123")) == 1800123
    assert _sane_timeout(_wd("60000", "69479")) == 60000


def test_an_error_in_a_torchrun_summary_entry_is_that_entrys_rank(tmp_path: Path, settings: Settings) -> None:
    """ChildFailedError.format_msg: ``rank : 304 (local_rank: 0)`` then the re-printed traceback."""
    summary = (
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2022-02-26_22:02:07\n"
        "  host      : jean-zay-iam39-ib0\n"
        "  rank      : 304 (local_rank: 0)\n"
        "  exitcode  : 1 (pid: 181845)\n"
        "  error_file: /tmp/torchelastic_x/none_y/attempt_0/0/error.json\n"
        "  traceback : Traceback (most recent call last):\n"
        '    File "pretrain_gpt.py", line 241, in main\n'
        "      die\n"
        "  NameError: name 'die' is not defined\n"
        "============================================================\n"
    )
    out = _run(_write(tmp_path / "b", {"train.log": summary}), settings)
    root = out.document.root_cause
    assert root.class_ == "python_exception_rank_crash"
    assert (root.culprit.rank, root.culprit.node) == (304, "jean-zay-iam39-ib0")


def test_launcher_prefixes_and_address_prefixes() -> None:
    from crashcart.locate.topology import launcher_rank, nccl_prefix

    assert launcher_rank("(VllmWorker rank=1 pid=2445156) ERROR 05-10 16:00:15 [multiproc_executor.py:470] x") == 1
    assert launcher_rank("[rank=3] loss is nan") == 3
    assert launcher_rank("(pid=1234) INFO x") is None
    assert nccl_prefix("[default3]:gpu46:88412:88500 [3] NCCL INFO comm 0x5 rank 27") == ("gpu46", "88412", 3)
    assert nccl_prefix("gpu46:88412:88500 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : x") == ("gpu46", "88412", 3)
    assert nccl_prefix("step 3 [2] loss 1.0") is None


def test_a_pdsh_address_prefix_names_the_node(tmp_path: Path, settings: Settings) -> None:
    dmesg = (
        "192.168.11.119: kern: warning: [2026-04-22T21:26:20.599716692Z]: NVRM: Xid (PCI:0000:48:00): 79, "
        "pid=22884, name=python, GPU has fallen off the bus.\n"
    )
    out = _run(_write(tmp_path / "b", {"dmesg.log": dmesg}), settings)
    assert out.document.root_cause.culprit.node == "192.168.11.119"


def test_a_native_crash_cites_its_signal_line_and_frame_0(tmp_path: Path, settings: Settings) -> None:
    log = (
        "[rank0]: step 10 loss 2.2\n"
        "*** SIGSEGV (@0x0) received by PID 41234 (TID 0x7f1c2b7fe700) from PID 0; stack trace: ***\n"
        "#0  0x00007f1c2b8a1234 in at::native::copy_impl (self=..., src=...) at aten/src/ATen/native/Copy.cpp:250\n"
        "#1  0x00007f1c2b8a5678 in at::native::copy_ () from /opt/torch/lib/libtorch_cpu.so\n"
    )
    out = _run(_write(tmp_path / "b", {"train.log": log}), settings)
    root = out.document.root_cause
    assert root.class_ == "native_crash_segfault_abort"
    cited = [c.text for c in root.citations]
    assert any("SIGSEGV" in t for t in cited) and any(t.startswith("#0 ") for t in cited)


def test_the_lost_peer_is_offered_as_the_suspect(tmp_path: Path, settings: Settings) -> None:
    """NCCL's bootstrap line says which node owns 10.1.1.7; rank 3's IB error names that peer."""
    logs = {
        "gpu46/rank3.log": "gpu46:5151:5151 [3] NCCL INFO Bootstrap : Using ib0:10.1.1.6<0>\n"
        "gpu46:5151:5190 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "10.1.1.7<42> with error 12, opcode 0, len 0, vendor err 129\n",
        "gpu47/rank4.log": "gpu47:6161:6161 [0] NCCL INFO Bootstrap : Using ib0:10.1.1.7<0>\n",
    }
    out = _run(_write(tmp_path / "b", logs), settings)
    assert any("suspect: the peer at 10.1.1.7 (node gpu47)" in r for r in out.document.reasoning)


def test_output_under_a_shell_prompt_is_the_prompts_host(tmp_path: Path, settings: Settings) -> None:
    paste = (
        "root@gpu47:~# dmesg -T | grep -i xid\n"
        "[Mon Dec  1 20:06:18 2026] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"
    )
    out = _run(_write(tmp_path / "b", {"paste.txt": paste}), settings)
    assert out.document.root_cause.culprit.node == "gpu47"


def test_a_single_pasted_files_name_is_not_a_node(tmp_path: Path, settings: Settings) -> None:
    line = "[155044.078590] NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.\n"
    out = _run(_write(tmp_path / "b", {"gpu-node-017.log": line}), settings)
    assert out.document.root_cause.culprit.node is None
    out = _run(_write(tmp_path / "c", {"gpu-node-017/dmesg.log": line, "gpu-node-018/dmesg.log": ""}), settings)
    assert out.document.root_cause.culprit.node == "gpu-node-017"  # a collector's folder does name the node


def test_the_rank_a_store_wait_names_is_the_suspect(tmp_path: Path, settings: Settings) -> None:
    """c10d ProcessGroupNCCL::broadcastUniqueNCCLID: the waiting rank names the rank that never published."""
    line = (
        "[rank3]: torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving "
        "ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout\n"
    )
    out = _run(_write(tmp_path / "b", {"rank3.log": line}), settings)
    assert any("suspect: peer rank 0" in r for r in out.document.reasoning)
