"""Emitter coverage audited against the emitters' sources (issue 14, capability 1).

Lines are in the shapes the programs print: NCCL src/debug.cc (2.7-2.25 ``host:pid:tid [dev] file:line NCCL
WARN``; 2.26+ a ``[%F %T] `` timestamp first; 2.30 ``file:line (function) NCCL WARN``), NCCL's socket layer
(misc/socket.cc 2.27, os/linux.cc 2.30), Slurm's slurmstepd (mgr.c, req.c) and srun (api/step_launch.c,
common/slurm_errno.c), PyTorch's caffe2/serialize/inline_container.cc (PyTorchStreamWriter::valid,
ostream_write_func), Ray's memory monitor and DeepSpeed's launcher (launcher/launch.py sigkill_handler).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.catalogue import load_catalogue
from crashcart.locate.topology import nccl_prefix
from crashcart.settings import Settings
from tests.kit import run_files, winner

# NCCL 2.30 src/debug.cc: "[%d] %s:%d (%s) NCCL WARN %s" when the call site's function is known; 2.26+ prefixes
# WARN lines with NCCL_DEBUG_TIMESTAMP_FORMAT's default "[%F %T] ".
NCCL_230 = "[2026-03-01 08:00:01] gpu12:4100:4188 [3] {src}:{line} ({func}) NCCL WARN {msg}"


@pytest.mark.parametrize(
    ("src", "func", "msg", "want"),
    [
        ("graph/topo.cc", "ncclTopoGetNetDev", "Could not find NET with id 2", "nccl.topology_failure"),
        ("transport/nvls.cc", "nvlsGroupBindMem", "Cuda failure 1 'invalid argument'", "nccl.nvls_warn"),
        ("transport/net_ib/connect.cc", "ncclIbConnect", "NET/IB : ibv_modify_qp failed", "nccl.warn_ib_transport"),
        ("transport/shm.cc", "shmSendSetup", "Error while attaching to shared memory", "nccl.warn_shm"),
        ("bootstrap.cc", "bootstrapAllGather", "Message truncated : received 8,0 bytes instead of 16,0", "nccl.warn_bootstrap"),
        ("transport/p2p.cc", "p2pMap", "Cuda failure 'peer access is not supported'", "nccl.warn_p2p"),
    ],
)  # fmt: skip
def test_nccl_230_warn_lines_with_a_function_name_keep_their_subsystem(
    src: str, func: str, msg: str, want: str
) -> None:
    line = NCCL_230.format(src=src, line=412, func=func, msg=msg)
    got = winner(line)
    assert got is not None and got[0] == want, got


def test_nccl_prefix_reads_timestamped_and_function_named_warn_lines() -> None:
    line = NCCL_230.format(src="os/linux.cc", line=328, func="ncclOsSocketPollConnect", msg="x")
    assert nccl_prefix(line) == ("gpu12", "4100", 3)
    assert nccl_prefix("[rank5]:gpu12:4100:4190 [1] NCCL INFO Channel 00/02") == ("gpu12", "4100", 1)
    assert nccl_prefix("gpu12: 4100 [1] NCCL INFO") is None


@pytest.mark.parametrize(
    ("msg", "want_class"),
    [
        # 2.27 misc/socket.cc / 2.30 os/linux.cc socketStartConnect, socketPollConnect, socketTryAccept
        ("socketStartConnect: connect to 10.0.0.9<51234> failed : Connection refused", "nccl_init_bootstrap_failure"),
        ("ncclOsSocketPollConnect to 10.0.0.9<51234> failed with error Connection timed out", "nccl_init_bootstrap_failure"),
        ("ncclOsSocketTryAccept: exceeded error retry count after 34 attempts, Connection reset by peer", "nccl_init_bootstrap_failure"),
        ("Error: network IB not found.", "nccl_init_bootstrap_failure"),  # init.cc / net.cc ncclNetInit
        ("No transport found for rank 0[1b000] -> rank 8[1b000]", "nccl_init_bootstrap_failure"),
        ("nvmlInit_v2() failed: Driver Not Loaded", "nccl_init_bootstrap_failure"),
        ("UDS: Binding to socket nccl-socket-0-2b failed : Permission denied (13)", "nccl_init_bootstrap_failure"),
        ("CUDA Driver version found is 11020. Minimum requirement is 11030", "software_version_mismatch"),
        ("NET/Socket : peer 10.0.0.9<40000> message truncated : receiving 2048 bytes instead of 1024.", "collective_mismatch_desync"),
        ("Proxy Call to rank 2 failed (Connect)", "nccl_remote_peer_failure"),
    ],
)  # fmt: skip
def test_nccl_warn_wordings_across_versions(msg: str, want_class: str) -> None:
    where = "proxy.cc" if msg.startswith("Proxy") else "init.cc"
    for src in (f"{where}:600 ", f"{where}:300 (someFunction) ", ""):
        got = winner(f"gpu3:11:12 [0] {src}NCCL WARN {msg}")
        assert got is not None and got[1] == want_class, (src, got)


def test_the_peer_of_a_refused_connect_is_a_field_in_every_socket_wording() -> None:
    cat = load_catalogue()
    lines = {
        "nccl.connect_failed": "h:1:2 [0] misc/socket.cc:578 NCCL WARN socketPollConnect: connect to 10.9.8.7<40001> "
        "returned Connection refused, exceeded error retry count after 35 attempts",
        "nccl.socket_poll_connect_failed": "h:1:2 [0] NCCL WARN socketPollConnect to 10.9.8.7<40001> failed with error "
        "No route to host",
    }
    for sig, line in lines.items():
        fields = cat.extract(cat.index[sig], line)
        assert fields is not None and fields["peer"] == "10.9.8.7"


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: IO setup failed: Slurmd could not connect IO",
        "slurmstepd: error: job_manager exiting abnormally, rc = 4014",
        "slurmstepd: error: _become_user failed: Invalid argument",
        "srun: error: Task launch for StepId=77.0 failed on node gpu09: Slurmd could not execve job",
        "srun: error: task 0 launch failed: Slurmd could not set up environment for batch job",
        "slurmstepd: error: *** JOB 77 ON gpu09 UNCORRECTABLE MEMORY ERROR AT 2025-01-02T03:04:05 ***",
        "slurmstepd: error: Could not open output file /home/u/out/%j.log: No such file or directory",
    ],
)
def test_slurm_node_side_launch_failures_are_node_failures(line: str) -> None:
    got = winner(line)
    assert got is not None and got[1] == "slurm_node_failure", got


def test_the_node_a_launch_failure_names_is_the_findings_node() -> None:
    cat = load_catalogue()
    fields = cat.extract(
        cat.index["slurm.launch_failed"],
        "srun: error: Task launch for StepId=77.0 failed on node gpu09: Slurmd could not execve job",
    )
    assert fields is not None and fields["node"] == "gpu09"


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # PyTorchStreamWriter::valid once a short write was seen: "PytorchStreamWriter failed " what info "."
        ("RuntimeError: [enforce fail at inline_container.cc:764] . PytorchStreamWriter failed writing file data/3.", "storage_full_or_io_error"),
        ("RuntimeError: PytorchStreamWriter failed writing file data/0: file write failed", "storage_full_or_io_error"),
        ("RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 4160 vs 4048", "storage_full_or_io_error"),
        # torch/csrc/serialization.cpp doWrite (legacy torch.save): "write(): fd <n> failed with <strerror>"
        ("RuntimeError: write(): fd 31 failed with Input/output error", "storage_full_or_io_error"),
        ("OSError: [Errno 28] No space left on device: '/dev/shm/torch_2871_1'", "dataloader_worker_failure"),
        ("OSError: [Errno 28] No space left on device: '/data/ckpt/step_100.pt'", "storage_full_or_io_error"),
        # NCCL's own segment (2.27 misc/shmutils.cc, 2.30 os/linux.cc) is NCCL's shared-memory transport
        ("n:1:2 [0] misc/shmutils.cc:87 NCCL WARN Error: failed to extend /dev/shm/nccl-4kXvbq to 9637892 bytes, error: No space left on device (28)", "nccl_init_bootstrap_failure"),
        ("ray._private.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node gpu4 is used (60.1 / 62.9 GB).", "host_oom_kill"),
        ("(raylet) [2022-11-17 09:16:52,264 E 90996 90996] (raylet) node_manager.cc:3096: 2 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 90ef, IP: 172.17.0.2) over the last time period.", "host_oom_kill"),
    ],
)  # fmt: skip
def test_io_and_memory_lines_are_classified_by_meaning(line: str, want: str) -> None:
    got = winner(line)
    assert got is not None and got[1] == want, got


TORCH_SAVE = """\
Saving checkpoint to /ckpt/epoch3.pt
Traceback (most recent call last):
  File "/usr/lib/python3.10/site-packages/torch/serialization.py", line 441, in save
    _save(obj, opened_zipfile, pickle_module, pickle_protocol)
RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed writing file data/94: file write failed

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "train.py", line 210, in <module>
    torch.save(state, path)
  File "/usr/lib/python3.10/site-packages/torch/serialization.py", line 291, in __exit__
    self.file_like.write_end_of_file()
RuntimeError: [enforce fail at inline_container.cc:337] . unexpected pos 1254720 vs 1254608
"""


def test_a_failed_torch_save_is_a_storage_failure_cited_once_per_line(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", {"train.log": TORCH_SAVE}, settings)
    root = out.document.root_cause
    assert root.class_ == "storage_full_or_io_error"
    spans = [(c.file, c.line, c.end_line) for c in root.citations]
    assert spans and len(spans) == len(set(spans))  # two signatures matching one line cite it once
    assert any(line == 5 for _, line, _ in spans)


def test_a_wrapped_line_is_cited_from_its_own_head_not_from_the_record_above(
    tmp_path: Path, settings: Settings
) -> None:
    """slurmstepd's "*** JOB <id> ON <host> CANCELLED AT <t> DUE TO NODE FAILURE ... ***" (slurmstepd/req.c) cut by
    a terminal: the span is the two lines it covers, never the srun line printed above it."""
    job = (
        "srun: error: gpu09: task 3: Exited with exit code 1\n"
        "slurmstepd: error: *** JOB 77 ON gpu09 CANCELLED AT 2024-03-01T10:00:00 DUE TO NODE\n"
        "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"
    )
    out = run_files(tmp_path / "b", {"job.out": job}, settings)
    spans = {(f.evidence[0].line, f.evidence[0].end_line) for f in out.findings if f.class_id == "slurm_node_failure"}
    assert spans == {(2, 3)}
    assert out.document.root_cause.class_ == "slurm_node_failure"


@pytest.mark.parametrize(
    "line",
    [
        # sinfo -R (reason:20 user:9 timestamp:19 nodelist) with slurmctld's drain reasons
        "Prolog error         slurm     2020-04-01T10:00:00 dgx[01-04]",
        "Kill task failed     root      2024-11-30T02:20:00 gpu-node-017",
        # src/common/run_command.c: the prolog script itself could not be executed
        "[2024-03-01T10:00:00.000] error: run_command: execv(/etc/slurm/prolog.sh): No such file or directory",
    ],
)
def test_drained_nodes_and_prolog_scripts_that_cannot_run_are_node_failures(line: str) -> None:
    got = winner(line)
    assert got is not None and got[1] == "slurm_node_failure", got
    assert winner("REASON               USER      TIMESTAMP           NODELIST") is None


def test_a_last_error_detail_of_the_same_class_brings_its_peer(tmp_path: Path, settings: Settings) -> None:
    """c10d (NCCLUtils getNcclErrorDetailStr) prints ncclGetLastError() after its own line; when the detail is the
    same class as the wrapper, its facts (the peer NCCL could not reach) still join the finding."""
    text = (
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system "
        "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
        "Last error:\n"
        "socketPollConnect to 10.0.0.5<46543> failed with error Connection refused\n"
    )
    out = run_files(tmp_path / "b", {"rank0.log": text}, settings)
    head = next(f for f in out.findings if f.signature == "nccl.system_error" and f.evidence[0].line == 1)
    assert head.fields["peer"] == "10.0.0.5"
    assert head.fields["_detail_signature"] == "nccl.socket_poll_connect_failed"
    assert out.document.root_cause.class_ == "nccl_init_bootstrap_failure"


def test_sinfo_rows_of_drained_or_down_nodes_are_node_failures_and_idle_ones_are_not() -> None:
    got = winner("batch*       up   infinite      2  drain dgx[01-02]")
    assert got is not None and got[1] == "slurm_node_failure"
    assert winner("batch*       up   infinite      2   idle dgx[01-02]") is None


def test_gloos_size_enforce_is_a_collective_mismatch_and_the_lost_peer_a_symptom(
    tmp_path: Path, settings: Settings
) -> None:
    """gloo transport/tcp/pair.cc GLOO_ENFORCE_LE(op.preamble.length, op.nbytes): one rank received more than it
    posted; the other rank's "Connection closed by peer" is the consequence."""
    log = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "train.py", line 50, in <module>\n'
        "[rank1]:     dist.all_gather(out, t)\n"
        "[rank1]: RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "
        "op.preamble.length <= op.nbytes. 8773632 vs 4194304\n"
        "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
        "[10.0.0.2]:22151\n"
    )
    out = run_files(tmp_path / "b", {"log.txt": log}, settings)
    root = out.document.root_cause
    assert root.class_ == "collective_mismatch_desync"
    assert root.culprit.rank == 1
