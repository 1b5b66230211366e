"""Issue 14, emitters: PyTorch distributed (v1.10 to 2.10). The error, fatal and warning format strings of c10d
(ProcessGroupNCCL watchdog, heartbeat monitor, blocking wait, NCCLUtils, ProcessGroupGloo's monitored barrier,
ProcessGroupWrapper, TCPStore and socket.cpp, the DDP reducer), of torchelastic (agent, multiprocessing, the
ChildFailedError summary, rendezvous handlers), of distributed_c10d.py, launch.py/run.py and of the DataLoader
(dataloader.py, signal handlers, the shared-memory allocator), each printed with the prefixes its releases and
usual wrappers add, must land in the class its meaning gives.

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
    # socket.cpp / TCPStore: the store could not be reached, bound or answered
    "store connect": [
        (
            glog(
                "E",
                "socket.cpp:860",
                "[c10d] The client socket has timed out after 60s while trying to connect to (node-0, 29500).",
                old=True,
            ),
            STORE,
        ),
        (
            "torch.distributed.DistNetworkError: The client socket has timed out after 1800000ms while trying to "
            "connect to (node-0, 29500).",
            STORE,
        ),
        (
            "RuntimeError: The client socket has failed to connect to any network address of (node-0, 29500). The "
            "client socket has failed to connect to [node-0]:29500 (errno: 113 - No route to host).",
            STORE,
        ),
        (
            glog(
                "W",
                "socket.cpp:601",
                "[c10d] The IPv4 network addresses of (node-0, 29500) cannot be retrieved (gai error: -2 - Name or "
                "service not known).",
            ),
            STORE,
        ),
        ("RuntimeError: connect() timed out. Original timeout was 60000 ms.", STORE),
        (
            glog(
                "W",
                "socket.cpp:464",
                "[c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
                old=True,
            ),
            STORE,
        ),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use). The "
            "server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in use).",
            STORE,
        ),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
            STORE,
        ),
        ("RuntimeError: Address already in use", STORE),
    ],
    "store waits": [
        ("RuntimeError: Socket Timeout", STORE),
        (
            "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
            STORE,
        ),
        (
            "torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /default_pg//0//cuda//0",
            STORE,
        ),
        (
            "RuntimeError: [3] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d "
            "key-value store by key '0', but store->get('0') got error: Socket Timeout",
            STORE,
        ),
        (
            py(
                "torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId "
                "from [0] via c10d key-value store by key '0', but store->get('0') got error: wait timeout after "
                "600000ms, keys: /default_pg//0//cuda//0"
            ),
            STORE,
        ),
        (
            "RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for key: "
            "store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)",
            STORE,
        ),
        (
            "torch.distributed.DistStoreError: Timed out initializing process group in store based barrier on rank "
            "3, for key: store_based_barrier_key:1 (world_size=8, num_workers_joined=4, timeout=0:30:00 error=)",
            STORE,
        ),
    ],
    # the store's server went away mid-run (the process hosting it exited): a symptom of that exit
    "store lost": [
        (
            glog(
                "W",
                "TCPStore.cpp:125",
                "[c10d] recvValue failed on SocketImpl(fd=77, addr=[::ffff:10.1.0.7]:39732, "
                "remote=[::ffff:10.1.0.2]:29500): failed to recv, got 0 bytes",
                rank=3,
            ),
            NOT_ROOT,
        ),
        (
            py(
                "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did "
                "the remote server shutdown or crash?"
            ),
            NOT_ROOT,
        ),
        (
            glog(
                "W",
                "TCPStore.cpp:106",
                "[c10d] sendBytes failed on SocketImpl(fd=12, addr=[node-3]:52114, remote=[node-0]:29500): Broken "
                "pipe",
                rank=3,
            ),
            NOT_ROOT,
        ),
    ],
    # torchelastic rendezvous handlers
    "rendezvous": [
        (
            "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store "
            "has failed. See inner exception for details.",
            STORE,
        ),
        ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", STORE),
        ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError", STORE),
        (
            elastic(
                "INFO",
                "rendezvous.etcd_rendezvous",
                "Rendezvous timeout occured in EtcdRendezvousHandler",
                style="basic",
            ),
            STORE,
        ),
        (
            elastic("INFO", "rendezvous.etcd_rendezvous", "Rendezvous for run_id=job-17 was observed to be closed"),
            STORE,
        ),
        (
            "torch.distributed.elastic.rendezvous.api.RendezvousStateError: The state object is corrupt. See inner "
            "exception for details.",
            STORE,
        ),
        (
            elastic(
                "ERROR",
                "agent.server.api",
                "Error waiting on exit barrier. Elapsed: 300.10335206985474 seconds",
            ),
            STORE,
        ),
        (
            elastic(
                "WARNING",
                "rendezvous.dynamic_rendezvous",
                "The node 'node-3_4015698_0' has failed to send a keep-alive heartbeat to the rendezvous 'job-17' due "
                "to an error of type RendezvousTimeoutError.",
            ),
            NOT_ROOT,
        ),
    ],
    # torchelastic's agent stopping workers and its summary: teardown, never a confident root
    "elastic teardown": [
        (
            elastic("WARNING", "multiprocessing.api", "Sending process 4015788 closing signal SIGTERM"),
            NOT_ROOT,
        ),
        (
            elastic("WARNING", "multiprocessing.api", "Sending process 4015788 closing signal SIGTERM", style="basic"),
            NOT_ROOT,
        ),
        (
            elastic("WARNING", "multiprocessing.api", "Closing process 4015788 via signal SIGTERM", style="basic"),
            NOT_ROOT,
        ),
        (
            elastic(
                "WARNING",
                "multiprocessing.api",
                "Unable to shutdown process 4015788 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL",
            ),
            NOT_ROOT,
        ),
        (
            elastic(
                "ERROR",
                "multiprocessing.api",
                "failed (exitcode: 1) local_rank: 0 (pid: 4015788) of binary: /usr/bin/python3",
                style="bracket",
            ),
            SUMMARY,
        ),
        (
            elastic(
                "ERROR",
                "multiprocessing.api",
                "failed (exitcode: -15) local_rank: 3 (pid: 4015791) of binary: /usr/bin/python3",
            ),
            SUMMARY,
        ),
        ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", SUMMARY),
        ("Root Cause (first observed failure):", SUMMARY),
        (
            elastic(
                "WARNING",
                "agent.server.api",
                "[default] Worker group FAILED. 3/3 attempts left; will restart worker group",
                style="bracket",
            ),
            SUMMARY,
        ),
        ("  exitcode  : -15 (pid: 4015791)", NOT_ROOT),
        ("  traceback : Signal 15 (SIGTERM) received by PID 4015791", NOT_ROOT),
        ("  exitcode  : 1 (pid: 4015788)", NOT_ROOT),
        ("  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html", NOT_ROOT),
        ("  <NO_OTHER_FAILURES>", NOT_ROOT),
        ("  exitcode  : -6 (pid: 4015788)", NOT_ROOT),
    ],
    # the summary's exit code of a worker killed by a fatal signal
    "elastic exit codes": [
        ("  exitcode  : -11 (pid: 4015788)", NATIVE),
        ("  traceback : Signal 11 (SIGSEGV) received by PID 4015788", NATIVE),
        ("  traceback : Signal 7 (SIGBUS) received by PID 4015788", NATIVE),
        ("  exitcode  : -9 (pid: 4015788)", UNKNOWN),
    ],
    # the agent itself was signalled from outside (scheduler, user, closed terminal)
    "elastic death signal": [
        (
            elastic(
                "WARNING",
                "agent.server.api",
                "Received 15 death signal, shutting down workers",
                style="bracket",
            ),
            POLICY,
        ),
        (elastic("WARNING", "agent.server.api", "Received Signals.SIGTERM death signal, shutting down workers"), POLICY),
        (elastic("WARNING", "agent.server.api", "Received Signals.SIGHUP death signal, shutting down workers"), POLICY),
        ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 4015698 got signal: 15", POLICY),
    ],
    # launch.py passes --local_rank=N (to 1.13) or --local-rank=N (2.0+): a script that declares no such argument
    # fails in argparse (a program error), one written for the old spelling fails under a newer launcher (a
    # version mismatch, as the catalogue's launch.local_rank_argument has it)
    "launcher arguments": [
        (py("train.py: error: unrecognized arguments: --local-rank=3"), VERSION),
        ("train.py: error: unrecognized arguments: --local_rank=3", USER),
    ],
    # distributed_c10d.py and the DDP reducer: the program's own mistakes
    "user errors": [
        (
            "RuntimeError: Default process group has not been initialized, please make sure to call "
            "init_process_group.",
            USER,
        ),
        (
            py(
                "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new "
                "one. This error indicates that your module has parameters that were not used in producing loss. "
                "You can enable unused parameter detection by passing the keyword argument "
                "`find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`, and by "
            ),
            USER,
        ),
        (
            py(
                "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the "
                "following reasons: 1) Use of a module parameter outside the `forward` function. Please make sure "
                "model parameters are not shared across multiple concurrent forward-backward passes. or try to use "
                "_set_static_graph() as a workaround if this module graph does not change during training loop."
            ),
            USER,
        ),
        (
            py(
                "RuntimeError: Your training graph has changed in this iteration, e.g., one parameter is used in "
                "first iteration, but then got unused in the second iteration. this is not compatible with "
                "static_graph set to True."
            ),
            USER,
        ),
        (
            "RuntimeError: DDP expects same model across all ranks, but Rank 0 has 4 params, while rank 1 has "
            "inconsistent 3 params.",
            DESYNC,
        ),
        ("RuntimeError: Tensors must be CUDA and dense", USER),
    ],
    # the DataLoader: workers killed, crashed or out of shared memory
    "dataloader": [
        ("RuntimeError: DataLoader worker (pid 1285) is killed by signal: Killed. ", LOADER),
        (py("RuntimeError: DataLoader worker (pid 41234) is killed by signal: Segmentation fault. "), LOADER),
        (
            "RuntimeError: DataLoader worker (pid 41234) is killed by signal: Bus error. It is possible that "
            "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",
            LOADER,
        ),
        (py("RuntimeError: DataLoader worker (pid 41234) is killed by signal: Aborted. "), LOADER),
        ("RuntimeError: DataLoader worker (pid(s) 1234, 1235) exited unexpectedly", LOADER),
        (
            "RuntimeError: DataLoader worker (pid 109) exited unexpectedly with exit code 1. Details are lost due "
            "to multiprocessing. Rerunning with num_workers=0 may give better error trace.",
            LOADER,
        ),
        ("RuntimeError: DataLoader timed out after 1800 seconds", LOADER),
        ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).", LOADER),
        ("ERROR: Unexpected segmentation fault encountered in worker.", LOADER),
        ("ERROR: Unexpected floating-point exception encountered in worker.", LOADER),
        ("RuntimeError: Pin memory thread exited unexpectedly", LOADER),
        (
            "RuntimeError: Too many open files. Communication with the workers is no longer possible. Please "
            "increase the limit using `ulimit -n` in the shell or change the sharing strategy by calling "
            "`torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning of your code",
            LOADER,
        ),
        (
            "RuntimeError: unable to write to file </torch_28041_1546596096_0>: No space left on device (28)",
            LOADER,
        ),
        (
            py(
                "RuntimeError: unable to open shared memory object </torch_28041_1546596096_0> in read-write mode: "
                "Too many open files (24)"
            ),
            LOADER,
        ),
        (
            "RuntimeError: unable to allocate shared memory(shm) for file </torch_28041_1546596096_0>: Resource "
            "temporarily unavailable (11)",
            LOADER,
        ),
        (
            "RuntimeError: unable to mmap 1048576 bytes from file </torch_28041_1546596096_0>: Cannot allocate "
            "memory (12)",
            LOADER,
        ),
        (
            "RuntimeError: unable to resize file </torch_28041_1546596096_0> to the right size: Invalid argument (22)",
            LOADER,
        ),
        ("RuntimeError: Caught RuntimeError in DataLoader worker process 0.", USER),
        ("RuntimeError: Caught KeyError in pin memory thread for device 0.", USER),
        ("RuntimeError: DataLoader worker (pid 261166) is killed by signal: Terminated. ", NOT_ROOT),
        (
            "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f1c2b7fe700>",
            NOT_ROOT,
        ),
    ],
    # warnings and information healthy runs print
    "benign": [
        (
            "Setting OMP_NUM_THREADS environment variable for each "
            "process to be 1 in default, to avoid your system being overloaded, please further tune the variable "
            "for optimal performance in your application as needed. ",
            BENIGN,
        ),
        (
            elastic(
                "WARNING",
                "run",
                "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
                "system being overloaded, please further tune the variable for optimal performance in your "
                "application as needed. ",
                style="basic",
            ),
            BENIGN,
        ),
        (
            "/usr/lib/python3/dist-packages/torch/distributed/launch.py:181: FutureWarning: The module "
            "torch.distributed.launch is deprecated and will be removed in future. Use torchrun.",
            BENIGN,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:1250",
                "Warning: WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL. On normal "
                "program exit, the application should call destroy_process_group to ensure that any pending NCCL "
                "operations have finished in this process. In rare cases this process can exit before this point and "
                "block the progress of another member of the process group. This constraint has always been "
                "present,  but this warning has only been added since PyTorch 2.4 (function operator())",
                rank=3,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:4115",
                f"{PG}  using GPU 3 to perform barrier as devices used by this process are currently unknown. This "
                "can potentially cause a hang if this rank to GPU mapping is incorrect.Specify device_ids in "
                "barrier() to force use of a particular device,or call init_process_group() with a device_id.",
                rank=3,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:2302",
                "Rank 3 using GPU 3 to perform barrier as devices used by this process are currently unknown. This can "
                "potentially cause a hang if this rank to GPU mapping is incorrect.Specify device_ids in barrier() to "
                "force use of a particular device.",
                old=True,
            ),
            BENIGN,
        ),
        (glog("I", "ProcessGroupNCCL.cpp:1132", "[Rank 3] NCCL watchdog thread terminated normally", old=True), BENIGN),
        (
            glog(
                "I",
                "ProcessGroupNCCL.cpp:1332",
                f"{PG} Process group watchdog thread terminated normally",
                rank=3,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "socket.cpp:697",
                "[c10d] The client socket cannot be initialized to connect to [localhost]:29500 (errno: 97 - Address "
                "family not supported by protocol).",
                old=True,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "socket.cpp:426",
                "[c10d] The server socket cannot be initialized on [::]:29500 (errno: 97 - Address family not "
                "supported by protocol).",
                old=True,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "reducer.cpp:1300",
                "Warning: find_unused_parameters=True was specified in DDP constructor, but did not find any unused "
                "parameters in the forward pass. This flag results in an extra traversal of the autograd graph "
                "every iteration,  which can adversely affect performance. If your model indeed never has any unused "
                "parameters in the forward pass, consider turning this flag off. (function operator())",
                old=True,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "reducer.cpp:1346",
                "Warning: Grad strides do not match bucket view strides. This may indicate grad was not created "
                "according to the gradient layout contract, or that the param's strides changed since DDP was "
                "constructed.  This is not an error, but may impair performance.",
                rank=3,
            ),
            BENIGN,
        ),
        (
            glog("I", "reducer.cpp:1305", "Reducer buckets have been rebuilt in this iteration.", old=True),
            BENIGN,
        ),
        (
            "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will "
            "create 16 worker processes in total. Our suggested max number of worker in current system is 8, which "
            "is smaller than what this DataLoader is going to create. Please be aware that excessive worker "
            "creation might get DataLoader running slow or even freeze, lower the worker number to avoid potential "
            "slowness/freeze if necessary.",
            BENIGN,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:1002",
                "[PG 0 Rank 3] NCCL_ASYNC_ERROR_HANDLING is deprecated, use TORCH_NCCL_ASYNC_ERROR_HANDLING instead",
                rank=3,
            ),
            BENIGN,
        ),
        (
            elastic(
                "INFO",
                "agent.server.api",
                "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.",
            ),
            BENIGN,
        ),
        (elastic("INFO", "agent.server.api", "Done waiting for other agents. Elapsed: 0.0012 seconds"), BENIGN),
        (
            glog("I", "socket.cpp:787", "[c10d] The server socket has started to listen on [::]:29500.", old=True),
            BENIGN,
        ),
    ],
}

CASES = [(group, text, want) for group, rows in GROUPS.items() for text, want in rows]


def _role(signature_id: str) -> str:
    cat = load_catalogue()
    return cat.signatures[cat.index[signature_id]].role


@pytest.mark.parametrize(("group", "text", "want"), CASES, ids=[f"{g}-{i}" for i, (g, _, _) in enumerate(CASES)])
def test_each_wording_gets_the_class_it_means(group: str, text: str, want: str) -> None:
    got = winner(text)
    if want == NOT_ROOT:
        assert got is None or _role(got[0]) in ("teardown", "cascade"), (group, text, got)
    elif want == BENIGN:
        assert got is None or (got[1] == UNKNOWN and is_benign_line(text)), (group, text, got)
    else:
        assert got is not None, text
        assert got[1] == want, (group, text, got)
