"""Issue 14, emitters: PyTorch distributed (v1.10 to the 2.x releases). The error, fatal and warning format strings of c10d
(ProcessGroupNCCL watchdog, heartbeat monitor, blocking wait, NCCLUtils, ProcessGroupGloo's monitored barrier,
ProcessGroupWrapper, TCPStore and socket.cpp, the DDP reducer), of torchelastic (agent, multiprocessing, the
ChildFailedError summary, rendezvous handlers), of distributed_c10d.py, launch.py/run.py and of the DataLoader
(dataloader.py, signal handlers, the shared-memory allocator), each printed with the prefixes its releases and
usual wrappers add, must land in the class its meaning gives. This file holds c10d's process groups;
test_emitters_torch_launch.py the store, torchelastic, the launchers, DDP and the DataLoader, with the helpers here.

Three kinds of expectation: a class id; NOT_ROOT for teardown and symptoms that must never be a confident root
(no winner, or a winner whose role is teardown or cascade); BENIGN for warnings and information printed by healthy
runs (no winner, or an "unknown" winner the catalogue itself knows as benign).
"""

from __future__ import annotations

import pytest

from crashcart.catalogue import load_catalogue
from crashcart.report.reading import is_benign_line
from tests.kit import winner

WATCHDOG = "nccl_watchdog_timeout"
HEARTBEAT = "nccl_watchdog_stuck_heartbeat"
PEER = "nccl_remote_peer_failure"
DESYNC = "collective_mismatch_desync"
HANG = "rank_hang_or_missing_rank"
BOOT = "nccl_init_bootstrap_failure"
KERNEL = "cuda_kernel_fault"
USER = "python_exception_rank_crash"
NATIVE = "native_crash_segfault_abort"
LOADER = "dataloader_worker_failure"
STORE = "launcher_rendezvous_store_failure"
SUMMARY = "torchelastic_childfailed_summary"
POLICY = "scheduler_preemption_or_timelimit"
UNKNOWN = "unknown"
VERSION = "software_version_mismatch"
NOT_ROOT = "<not a confident root>"
BENIGN = "<benign>"


def glog(level: str, src: str, message: str, *, rank: int | None = None, old: bool = False) -> str:
    """A c10d C++ log line: <=2.1 "[E ProcessGroupNCCL.cpp:737] ", 2.2+ "[rank3]:[E1130 02:23:07.100000000 ...] "."""
    if old:
        return f"[{level} {src}] {message}"
    head = f"[{level}1130 02:23:07.100000000 {src}] {message}"
    return f"[rank{rank}]:{head}" if rank is not None else head


def elastic(level: str, module: str, message: str, *, style: str = "glog") -> str:
    """A torchelastic Python log line in the shapes of its releases."""
    if style == "basic":  # 1.9-1.13 logging.basicConfig default
        return f"{level}:torch.distributed.elastic.{module}:{message}"
    if style == "bracket":  # 1.11-2.1 elastic get_logger with a formatter
        return f"[2024-11-30 02:23:07,100] torch.distributed.elastic.{module}: [{level}] {message}"
    path = "torch/distributed/elastic/" + module.replace(".", "/") + ".py"
    return f"{level[0]}1130 02:23:07.100000 4015698 {path}:900] {message}"


def py(message: str, rank: int = 3) -> str:
    """A line of a Python traceback as torchrun (2.2+) prefixes each rank's stderr."""
    return f"[rank{rank}]: {message}"


def role_of(signature_id: str) -> str:
    cat = load_catalogue()
    return cat.signatures[cat.index[signature_id]].role


def check(group: str, text: str, want: str) -> None:
    """The catalogue's winner for ``text`` is what ``want`` says (a class, NOT_ROOT or BENIGN)."""
    got = winner(text)
    if want == NOT_ROOT:
        assert got is None or role_of(got[0]) in ("teardown", "cascade"), (group, text, got)
    elif want == BENIGN:
        assert got is None or (got[1] == UNKNOWN and is_benign_line(text)), (group, text, got)
    else:
        assert got is not None, text
        assert got[1] == want, (group, text, got)


def cases(groups: dict[str, list[tuple[str, str]]]) -> list[tuple[str, str, str]]:
    return [(group, text, want) for group, rows in groups.items() for text, want in rows]


def case_ids(rows: list[tuple[str, str, str]]) -> list[str]:
    return [f"{g}-{i}" for i, (g, _, _) in enumerate(rows)]


PG = "[PG ID 0 PG GUID 0(default_pg) Rank 3]"

GROUPS: dict[str, list[tuple[str, str]]] = {
    # ProcessGroupNCCL watchdog: a collective did not finish in time on this rank; a symptom of another rank
    "watchdog timeout": [
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:566",
                "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, "
                "Timeout(ms)=1800000) ran for 1800640 milliseconds before timing out.",
                old=True,
            ),
            WATCHDOG,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:587",
                "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=BROADCAST, "
                "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600367 milliseconds before timing out.",
                old=True,
            ),
            WATCHDOG,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:563",
                "[PG 0 Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, "
                "OpType=_ALLGATHER_BASE, NumelIn=4, NumelOut=32, Timeout(ms)=600000) ran for 600031 milliseconds "
                "before timing out.",
                rank=3,
            ),
            WATCHDOG,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:632",
                f"{PG} Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, "
                "NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600004 milliseconds before timing out.",
                rank=3,
            ),
            WATCHDOG,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1595",
                f"{PG} Timeout at NCCL work: 12, last enqueued NCCL work: 14, last completed NCCL work: 11.",
                rank=3,
            ),
            WATCHDOG,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1664",
                "[PG 0 Rank 3] Exception (either an error or timeout) detected by watchdog at work: 12, last "
                "enqueued NCCL work: 14, last completed NCCL work: 11.",
                rank=3,
            ),
            WATCHDOG,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:474",
                "Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
                "subsequent GPU operations might run on corrupted/incomplete data. To avoid this inconsistency, we are "
                "taking the entire process down.",
                old=True,
            ),
            WATCHDOG,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:621",
                f"{PG} To avoid data inconsistency, we are taking the entire process down.",
                rank=3,
            ),
            WATCHDOG,
        ),
        (
            "RuntimeError: NCCL communicator was aborted on rank 3.  Original reason for failure was: [Rank 3] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, Timeout(ms)=1800000) "
            "ran for 1800485 milliseconds before timing out.",
            WATCHDOG,
        ),
        (
            "  what():  [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, "
            "Timeout(ms)=1800000) ran for 1800640 milliseconds before timing out.",
            WATCHDOG,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1537",
                f"{PG} Process group watchdog thread terminated with exception: [PG 0 Rank 3] Watchdog caught "
                "collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, "
                "Timeout(ms)=600000) ran for 600004 milliseconds before timing out.",
                rank=3,
            ),
            WATCHDOG,
        ),
    ],
    # blocking wait (NCCL_BLOCKING_WAIT / TORCH_NCCL_BLOCKING_WAIT): the same timeout, raised in the caller
    "blocking wait": [
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:412",
                "[Rank 3] Work WorkNCCL(SeqNum=12, OpType=ALLREDUCE, Timeout(ms)=60000) timed out in blocking wait "
                "(NCCL_BLOCKING_WAIT=1).",
                old=True,
            ),
            WATCHDOG,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:651",
                "[PG 0 Rank 3] Work WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=60000) "
                "timed out in blocking wait (TORCH_NCCL_BLOCKING_WAIT=1).",
                rank=3,
            ),
            WATCHDOG,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:720",
                f"{PG} Work WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=60000) timed "
                "out in blocking wait.",
                rank=3,
            ),
            WATCHDOG,
        ),
        (
            glog(
                "I",
                "ProcessGroupNCCL.cpp:378",
                "[Rank 3] Caught collective operation timeout for work: WorkNCCL(OpType=ALLREDUCE, "
                "TensorShape=[1024], Timeout(ms)=60000)",
                old=True,
            ),
            WATCHDOG,
        ),
        (py("RuntimeError: Operation timed out!"), NOT_ROOT),
    ],
    # the watchdog carries the error that ended the communicator: the payload's own class wins
    "watchdog payloads": [
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1182",
                "[Rank 3] NCCL watchdog thread terminated with exception: CUDA error: an illegal memory access was "
                "encountered",
                old=True,
            ),
            KERNEL,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1537",
                f"{PG} Process group watchdog thread terminated with exception: NCCL error: remote process exited or "
                "there was a network error, NCCL version 2.19.3",
                rank=3,
            ),
            PEER,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:1019",
                "[Rank 3] Found key in store: NCCLABORTEDCOMM:a1b2c3, from rank: 5. This means that rank has aborted "
                "its NCCL communicators previously and is not in a healthy state.. Aborting appropriate communicators",
                old=True,
            ),
            PEER,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1537",
                f"{PG} Process group watchdog thread terminated with exception: CUDA error: unspecified launch failure",
                rank=3,
            ),
            KERNEL,
        ),
        (py("terminate called after throwing an instance of 'c10::DistBackendError'"), NOT_ROOT),
    ],
    # the heartbeat monitor: the watchdog thread itself stopped making progress
    "heartbeat monitor": [
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1316",
                "[PG 0 Rank 3] Heartbeat monitor timed out! Process will be terminated after dumping debug info. "
                "workMetaList_.size()=3",
                rank=3,
            ),
            HEARTBEAT,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1375",
                "[PG 0 Rank 3] First PG on this rank that detected no heartbeat of its watchdog.",
                rank=3,
            ),
            HEARTBEAT,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1743",
                f"{PG} ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring "
                "enqueued collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang "
                "blocking the watchdog, and could be triggered by another thread holding the GIL inside a CUDA api "
                "(for example, CudaEventDestroy), or other deadlock-prone behaviors.",
                rank=3,
            ),
            HEARTBEAT,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1404",
                f"{PG} Received a dump signal due to a collective timeout from rank 0 and we will try our best to "
                "dump the debug info. Last enqueued NCCL work: 14, last completed NCCL work: 11.",
                rank=3,
            ),
            NOT_ROOT,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1987",
                f"{PG} Received a dump signal due to a collective timeout from  rank 7 and we will try our best to "
                "dump the debug info. Last enqueued NCCL work: 56116, last completed NCCL work: 56116.This is most "
                "likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of "
                "collectives is not same for all ranks or the scheduled collective, for some reason, didn't run.",
                rank=3,
            ),
            NOT_ROOT,
        ),
        (
            glog("E", "ProcessGroupNCCL.cpp:2106", f"{PG} First PG on this rank to signal dumping.", rank=3),
            NOT_ROOT,
        ),
        (
            glog(
                "F",
                "ProcessGroupNCCL.cpp:1306",
                f"{PG} {PG} Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL "
                "watchdog hang.",
                rank=3,
            ),
            HEARTBEAT,
        ),
        (
            glog(
                "F",
                "ProcessGroupNCCL.cpp:1725",
                f"{PG} {PG} Terminating the process after attempting to dump debug info, due to collective timeout or "
                "exception.",
                rank=3,
            ),
            NOT_ROOT,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1700",
                f"{PG} ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1, only active "
                "collectives: 0",
                rank=3,
            ),
            NOT_ROOT,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1380",
                "[PG 0 Rank 3] Observed flight recorder dump signal from another rank via TCPStore.",
                rank=3,
            ),
            NOT_ROOT,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:1283",
                f'{PG} Failed to check the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too '
                "early), with error: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server "
                "shutdown or crash?",
                rank=3,
            ),
            BENIGN,
        ),
    ],
    # NCCLUtils: the NCCL result PyTorch raises, with its explanation of the code
    "nccl results": [
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
            ":1331, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
            KERNEL,
        ),
        (py("ncclUnhandledCudaError: Call to CUDA function failed."), KERNEL),
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
            BOOT,
        ),
        (
            py(
                "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. "
                "It can be also caused by unexpected exit of a remote peer, you can check NCCL warnings for failure "
                "reason and see if there is connection closure by a peer."
            ),
            BOOT,
        ),
        (
            "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, remote process "
            "exited or there was a network error, NCCL version 2.14.3",
            PEER,
        ),
        (
            py(
                "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
                "prematurely."
            ),
            PEER,
        ),
        (
            "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, invalid usage, "
            "NCCL version 2.10.3",
            BOOT,
        ),
        (py("ncclInvalidUsage: This usually reflects invalid usage of NCCL library."), BOOT),
        (
            "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
            BOOT,
        ),
    ],
    # ProcessGroupWrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL): ranks called different collectives
    "collective fingerprint": [
        (
            "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running inconsistent "
            "collective: CollectiveFingerPrint(OpType=ALLREDUCE, TensorShape=[20, 10], TensorDtypes=Float, "
            "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), "
            "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt)))",
            DESYNC,
        ),
        (
            "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
            "CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE, TensorShape=[10], TensorDtypes=Float, "
            "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)), but Rank 0 is running "
            "collective: CollectiveFingerPrint(SequenceNumber=12, OpType=BROADCAST, TensorShape=[10]).Collectives "
            "differ in the following aspects: \t Op type: ALLREDUCEvs BROADCAST",
            DESYNC,
        ),
    ],
    # ProcessGroupGloo: the monitored barrier names the ranks that never arrived, or the coordinator that failed
    "monitored barrier": [
        ("RuntimeError: [Rank 0]: Rank 3 failed to pass monitoredBarrier in 30000 ms", HANG),
        (
            glog(
                "E",
                "ProcessGroupGloo.cpp:138",
                "[Rank 0]: Rank 3 failed to pass monitoredBarrier in 30000 ms",
                old=True,
            ),
            HANG,
        ),
        ("RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 1800000 ms", HANG),
        (
            "RuntimeError: Rank 3 successfully reached monitoredBarrier, but received errors while waiting for "
            "send/recv from rank 0. Please check rank 0 logs for faulty rank.",
            PEER,
        ),
    ],
    # gloo transport failures as PyTorch surfaces them: timeouts are symptoms, a closed pair is a peer gone
    "gloo transport": [
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms "
            "for recv operation to complete",
            WATCHDOG,
        ),
        (
            "RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:133] Timed out "
            "waiting 60000ms for send operation to complete",
            WATCHDOG,
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
            "[10.1.0.4]:14738",
            PEER,
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [10.1.0.4]:40712: "
            "Connection reset by peer",
            PEER,
        ),
        (
            "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "
            "op.preamble.length <= op.nbytes. 8 vs 4",
            DESYNC,
        ),
        (
            "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] "
            "no error",
            STORE,
        ),
        (
            "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. "
            "Unable to find address for: eth7",
            STORE,
        ),
    ],
    # what ProcessGroupNCCL prints on healthy runs: its configuration, deprecations and shutdown
    "benign c10d": [
        (
            glog(
                "I",
                "ProcessGroupNCCL.cpp:913",
                "[PG 0 Rank 3] ProcessGroupNCCL initialization options: size: 8, global rank: 3, TIMEOUT(ms): 600000, "
                "USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: 0",
                rank=3,
            ),
            BENIGN,
        ),
        (
            glog(
                "I",
                "ProcessGroupNCCL.cpp:922",
                "[PG 0 Rank 3] ProcessGroupNCCL environments: NCCL version: 2.20.5, TORCH_NCCL_ASYNC_ERROR_HANDLING: 3, "
                "TORCH_NCCL_DUMP_ON_TIMEOUT: 0, TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC: 60000, TORCH_NCCL_DESYNC_DEBUG: 0, "
                "TORCH_NCCL_ENABLE_TIMING: 0, TORCH_NCCL_BLOCKING_WAIT: 0, TORCH_DISTRIBUTED_DEBUG: OFF",
                rank=3,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:2291",
                "Warning: TORCH_NCCL_AVOID_RECORD_STREAMS=1 has no effect for point-to-point collectives. (function "
                "operator())",
                rank=3,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "Utils.hpp:164",
                "Warning: Environment variable NCCL_BLOCKING_WAIT is deprecated; use TORCH_NCCL_BLOCKING_WAIT instead "
                "(function getCvarBool)",
                rank=3,
            ),
            BENIGN,
        ),
        (glog("I", "ProcessGroupNCCL.cpp:1168", f"{PG} ProcessGroupNCCL destructor entered.", rank=3), BENIGN),
        (
            "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:4169: UserWarning: No device id is "
            "provided via `init_process_group` or `barrier `. Using the current device set by the user. ",
            BENIGN,
        ),
        (
            "INFO:torch.distributed.distributed_c10d:Added key: store_based_barrier_key:1 to store for rank: 3",
            BENIGN,
        ),
        (
            "INFO:torch.distributed.distributed_c10d:Rank 3: Completed store-based barrier for key:"
            "store_based_barrier_key:1 with 8 nodes.",
            BENIGN,
        ),
        (
            "INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize process group for "
            "rank: 3, key: store_based_barrier_key:1 (world_size=8, num_workers_joined=4, timeout=0:30:00)",
            BENIGN,
        ),
    ],
}

CASES = cases(GROUPS)


@pytest.mark.parametrize(("group", "text", "want"), CASES, ids=case_ids(CASES))
def test_each_wording_gets_the_class_it_means(group: str, text: str, want: str) -> None:
    check(group, text, want)
