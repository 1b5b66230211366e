"""Issue 14, capability 1: a second pass over PyTorch's and DeepSpeed's own error strings. Wordings the first torch
audit (test_emitters_torch.py, test_emitters_torch_launch.py) did not reach: torchelastic's D-state watch and its
store helpers, the etcd backend, TCPStore's client and server failures and socket.cpp's waitForInput, gloo's
missing-connection and size checks, the monitored barrier's coordinator timeout, DDP's per-parameter checks,
ProcessGroupNCCL's dump/abort teardown lines and its GIL check, accelerate's shape check and DeepSpeed's
checkpoint-directory failure. Each line is written from the emitter's format string with its usual prefix and
values filled in; the expectation is a class id, or NOT_ROOT / BENIGN as in test_emitters_torch.py."""

from __future__ import annotations

import pytest

from tests.kit import winner
from tests.test_emitters_torch import (
    BENIGN,
    BOOT,
    DESYNC,
    HANG,
    NOT_ROOT,
    PG,
    STORE,
    USER,
    WATCHDOG,
    case_ids,
    cases,
    check,
    elastic,
    glog,
    py,
)

DISK = "storage_full_or_io_error"

GROUPS: dict[str, list[tuple[str, str]]] = {
    # torch/distributed/elastic/agent/server/local_elastic_agent.py and multiprocessing/api.py (2.10+)
    "elastic workers": [
        (
            elastic(
                "ERROR",
                "agent.server.local_elastic_agent",
                "[default] Worker pid=4015790 stuck in uninterruptible sleep (D-state) for 300.0s (>= 300.0s); "
                "marking worker group UNHEALTHY and disabling restarts.",
            ),
            HANG,
        ),
        (
            elastic(
                "WARNING",
                "agent.server.local_elastic_agent",
                "[trainer] Worker pid=812 entered uninterruptible sleep (D-state); will mark UNHEALTHY if it remains "
                "for 120.0s.",
            ),
            HANG,
        ),
        (
            elastic(
                "ERROR",
                "multiprocessing.api",
                "Process 4015790 did not exit after SIGTERM within 30s; abandoning and continuing teardown. Worker may "
                "be in uninterruptible kernel sleep (e.g. wedged on GPU/NIC); host may need to be recycled.",
            ),
            NOT_ROOT,
        ),
    ],
    # torch/distributed/elastic/timer (1.9-2.x): the timer server reaps a worker whose timed scope never ended
    "elastic timers": [
        (
            elastic(
                "INFO",
                "timer.file_based_local_timer",
                "Reaping worker_pid=[4015790]. Expired timers: ['train_step']",
            ),
            HANG,
        ),
        (
            elastic("INFO", "timer.api", "Reaping worker_id=[2]. Expired timers: ['allreduce_grads']", style="basic"),
            HANG,
        ),
    ],
    # torch/distributed/elastic/utils/distributed.py, rendezvous/etcd_server.py, etcd_store.py (1.9-2.x)
    "elastic store": [
        ("RuntimeError: on node-0, port: 29500 already in use", STORE),
        (py("RuntimeError: on 10.0.0.1, port: 29400 already in use"), STORE),
        ("TimeoutError: timed out waiting for all 4 members to join", STORE),
        ("TimeoutError: Timed out waiting for etcd server to be ready!", STORE),
        ("RuntimeError: Etcd server process exited with the code: 1", STORE),
        ("LookupError: Timeout while waiting for keys in EtcdStore", STORE),
        (
            elastic(
                "WARNING",
                "utils.distributed",
                "port: 29500 already in use, attempt: [1/3]",
            ),
            BENIGN,
        ),
    ],
    # torch/csrc/distributed/c10d/TCPStore.cpp, TCPStoreBackend.cpp, TCPStoreLibUvBackend.cpp, socket.cpp (2.2+)
    "store client and server": [
        (
            glog(
                "W",
                "TCPStore.cpp:331",
                "[c10d] TCP client failed to connect/validate to host node-0:29500 - timed out (try=1, "
                "timeout=600000ms): Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server "
                "shutdown or crash?",
            ),
            STORE,
        ),
        (
            glog(
                "W",
                "TCPStore.cpp:343",
                "[c10d] TCP client failed to connect/validate to host 10.0.0.1:29500 - retrying (try=0, "
                "timeout=1800000ms, delay=312ms): The client socket has failed to connect to [10.0.0.1]:29500 "
                "(errno: 111 - Connection refused).",
                rank=3,
            ),
            STORE,
        ),
        (
            py(
                "torch.distributed.DistNetworkError: Failed to send, sent 0 bytes. Connection was likely closed. Did "
                "the remote server shutdown or crash?"
            ),
            NOT_ROOT,
        ),
        (
            glog(
                "E",
                "TCPStoreBackend.cpp:420",
                "[c10d] TCPStoreMasterDaemon::run() failed with exception: Too many open files",
            ),
            STORE,
        ),
        (
            glog("E", "TCPStoreLibUvBackend.cpp:120", "[c10d] Failed to accept client due to too many open files"),
            STORE,
        ),
        (
            glog(
                "W",
                "socket.cpp:521",
                "[c10d] The server socket on [::]:29500 has failed to accept a connection (errno: 24 - Too many open "
                "files).",
            ),
            STORE,
        ),
        (
            glog(
                "W",
                "socket.cpp:500",
                "[c10d] The server could not be initialized on any address for port=29500, family=0",
            ),
            STORE,
        ),
        (
            "RuntimeError: waitForInput: socket SocketImpl(fd=12, addr=[node-3]:39732, remote=[node-0]:29500) timed "
            "out after 300000ms",
            STORE,
        ),
        (
            glog(
                "W",
                "socket.cpp:100",
                "[c10d] waitForInput: poll for socket SocketImpl(fd=12, addr=[node-3]:39732, remote=[node-0]:29500) "
                "returned 0, likely a timeout",
                rank=3,
            ),
            BENIGN,
        ),
        # FileStore.cpp (file:// init) and TCPStore 1.x: a key never written
        ("RuntimeError: Timeout waiting for key: default_pg/0/0 after 1800000 ms", STORE),
        (py("RuntimeError: Wait timeout"), STORE),
        # before 2.5 the lost store surfaced as the bare errno text; on the store's host, a client dropping
        ("RuntimeError: Connection reset by peer", NOT_ROOT),
        (py("torch.distributed.DistNetworkError: Broken pipe"), NOT_ROOT),
        (
            glog(
                "E",
                "TCPStoreLibUvBackend.cpp:1234",
                "[c10d] Read callback failed. code:-104 name:ECONNRESET desc:connection reset by peer",
            ),
            NOT_ROOT,
        ),
        # torch/distributed/elastic/utils/store.py barrier (2.5+): the ranks that never arrived are named
        (
            "torch.distributed.DistStoreError: Timed out waiting on barrier on rank 3, for key prefix: "
            "torchelastic/agent/terminal_state (world_size=4, missing_ranks=[1, 2], timeout=0:05:00)",
            NOT_ROOT,
        ),
        # healthy hosts without IPv6 print the per-address failures; the retry lines are progress
        (
            glog(
                "W",
                "socket.cpp:500",
                "[c10d] The server socket cannot be initialized on [::]:29500 (errno: 97 - Address family not "
                "supported by protocol).",
            ),
            BENIGN,
        ),
        (
            glog("I", "socket.cpp:800", "[c10d] No socket on (node-0, 29500) is listening yet, will retry."),
            BENIGN,
        ),
    ],
    # gloo collectives and transport (third_party/gloo), ProcessGroupGloo.cpp monitoredBarrier, ProcessGroupWrapper.cpp
    "gloo and the monitored barrier": [
        (
            "RuntimeError: [enforce fail at ../third_party/gloo/gloo/allreduce_ring.h:54] context->getPair(recvRank). "
            "missing connection between rank 3 (this process) and rank 4",
            STORE,
        ),
        (
            "RuntimeError: [enforce fail at gloo/broadcast.cc:61] context->getPair(next). missing connection between "
            "rank 2 and next ring rank 3",
            STORE,
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Received data size doesn't match "
            "expected size. Is there a distributed collective mismatch in your code?",
            DESYNC,
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/device.cc:100] Unable to find interface for: ib0",
            STORE,
        ),
        (
            "RuntimeError: Rank 0 timed out in monitoredBarrier after 1800000 ms. Successfully processed ranks: 1, 3",
            NOT_ROOT,
        ),
        (
            glog("E", "ProcessGroupGloo.cpp:160", "Rank 0 timed out in monitoredBarrier after 30000 ms.", rank=0),
            NOT_ROOT,
        ),
        (
            "RuntimeError: ProcessGroupWrapper: Monitored Barrier encountered error running collective: "
            "CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE, TensorShape=[8], TensorDtypes=Float, "
            "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)). Error: ",
            NOT_ROOT,
        ),
    ],
    # torch/csrc/distributed/c10d/reducer.cpp (1.10-2.x); accelerate utils/operations.py verify_operation (0.17-1.x)
    "ddp and accelerate checks": [
        (
            "RuntimeError: [3]: params[12] in this process with sizes [768, 768] appears not to match sizes of the "
            "same param in process 0.",
            DESYNC,
        ),
        (
            py(
                "RuntimeError: [5]: params[0] in this process with sizes [64, 3, 7, 7] appears not to match strides "
                "of the same param in process 0.",
                rank=5,
            ),
            DESYNC,
        ),
        (py("Parameter indices which did not receive grad for rank 3: 12 13 14"), USER),
        ("Parameters which did not receive grad for rank 1: head.bias, head.weight", USER),
        (
            "accelerate.utils.operations.DistributedOperationException: Cannot apply desired operation due to shape "
            "mismatches. All shapes across devices must be valid.",
            DESYNC,
        ),
    ],
    # torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp watchdog and heartbeat monitor (2.2+)
    "process group nccl": [
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1380",
                "[PG 0 Rank 3] Received a global timeout from another rank and will start to dump the debug info. "
                "Last enqueued NCCL work: 12, last completed NCCL work: 11.",
                rank=3,
            ),
            NOT_ROOT,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1595",
                f"{PG} Stack trace of the failed collective not found, potentially because FlightRecorder is "
                "disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.",
                rank=3,
            ),
            NOT_ROOT,
        ),
        (glog("E", "ProcessGroupNCCL.cpp:1595", f"{PG} Stack trace of the failed collective: ", rank=3), NOT_ROOT),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1321",
                f"{PG} Future for ProcessGroup abort timed out after 600000 ms",
                rank=3,
            ),
            NOT_ROOT,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:2114",
                f"{PG} timed out after waiting for 60000ms flight recorder dumps to finish.",
                rank=3,
            ),
            NOT_ROOT,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1972",
                f"{PG} Could not acquire GIL within 300 ms on exit, possible GIL induced hang",
                rank=3,
            ),
            HANG,
        ),
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1218",
                "Could not acquire GIL within 300 ms on exit, possible GIL induced hang",
                old=True,
            ),
            HANG,
        ),
        # the first audit's watchdog wordings stay symptoms
        (
            glog(
                "E",
                "ProcessGroupNCCL.cpp:1987",
                f"{PG} Received a dump signal due to a collective timeout from  rank 7 and we will try our best to "
                "dump the debug info. Last enqueued NCCL work: 56116, last completed NCCL work: 56116.",
                rank=3,
            ),
            WATCHDOG,
        ),
    ],
    # DeepSpeed's pdsh/ssh multi-node launch (launcher/multinode_runner.py, runner.py) relaying the ssh client's errors
    "deepspeed ssh launch": [
        ("node2: ssh: connect to host node2 port 22: Connection refused", STORE),
        ("pdsh@node1: node3: ssh: connect to host node3 port 22: Connection timed out", STORE),
        ("ssh: Could not resolve hostname worker-7: Name or service not known", STORE),
        ("node2: Permission denied (publickey,password).", STORE),
        ("node2: Host key verification failed.", STORE),
        ("PermissionError: [Errno 13] Permission denied: '/ckpt/run1'", USER),
    ],
    # torch/cuda/__init__.py _check_driver, c10/cuda/CUDAFunctions.cpp device_count_impl (1.8-2.x): no usable GPU
    "cuda initialization": [
        (
            "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
            "installed a driver from http://www.nvidia.com/Download/index.aspx",
            BOOT,
        ),
        (
            "/usr/lib/python3/dist-packages/torch/cuda/__init__.py:129: UserWarning: CUDA initialization: CUDA "
            "unknown error - this may be due to an incorrectly set up environment, e.g. changing env variable "
            "CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero. (Triggered "
            "internally at ../c10/cuda/CUDAFunctions.cpp:108.)",
            BOOT,
        ),
    ],
    # DeepSpeed deepspeed/runtime/engine.py _create_checkpoint_file (0.5-0.16)
    "deepspeed checkpoint": [
        (
            "[2024-03-05 07:01:51,590] [ERROR] [engine.py:3437:_create_checkpoint_file] Failed saving model checkpoint "
            "to /ckpt/run1 with tag global_step1000",
            DISK,
        ),
        (
            "node2: [2024-03-05 07:01:51,590] [ERROR] [engine.py:3081:_create_checkpoint_file] Failed saving model "
            "checkpoint to /mnt/shared/ckpt with tag step_200",
            DISK,
        ),
    ],
}

ROWS = cases(GROUPS)


@pytest.mark.parametrize(("group", "text", "want"), ROWS, ids=case_ids(ROWS))
def test_audited_wording(group: str, text: str, want: str) -> None:
    check(group, text, want)


def test_audit_fields() -> None:
    """The lines that name a peer, a rank, a pid or an endpoint carry it into the finding's fields."""
    from crashcart.catalogue import load_catalogue

    cat = load_catalogue()

    def fields(text: str) -> dict[str, str]:
        got = winner(text)
        assert got is not None, text
        out = cat.extract(cat.index[got[0]], text)
        assert out is not None, text
        return {k: v for k, v in out.items() if v}

    assert (
        fields(
            "RuntimeError: [enforce fail at gloo/allreduce_ring.h:54] missing connection between rank 3 (this process) and rank 4"
        )["peer_rank"]
        == "4"
    )
    assert (
        fields(
            "RuntimeError: [7]: params[2] in this process with sizes [8] appears not to match sizes of the same param in process 0."
        )["rank"]
        == "7"
    )
    assert (
        fields(
            "[W1201 10:00:00.123456789 TCPStore.cpp:331] [c10d] TCP client failed to connect/validate to host "
            "node-0:29500 - timed out (try=1, timeout=600000ms): Connection reset by peer"
        )["endpoint"]
        == "node-0:29500"
    )
    assert (
        fields(
            "E1201 20:06:17.281000 4015698 torch/distributed/elastic/agent/server/local_elastic_agent.py:554] [default] "
            "Worker pid=4015790 stuck in uninterruptible sleep (D-state) for 300.0s (>= 300.0s); marking worker group "
            "UNHEALTHY and disabling restarts."
        )["pid"]
        == "4015790"
    )
    assert (
        fields(
            "torch.distributed.DistStoreError: Timed out waiting on barrier on rank 0, for key prefix: /default_pg/x "
            "(world_size=8, missing_ranks=[5], timeout=0:30:00)"
        )["ranks"]
        == "5"
    )
    assert (
        fields(
            "[rank4]:[E427 10:00:00.123456789 ProcessGroupNCCL.cpp:1972] [PG ID 0 PG GUID 0(default_pg) Rank 4] Could "
            "not acquire GIL within 300 ms on exit, possible GIL induced hang"
        )["rank"]
        == "4"
    )
