"""NCCL's own WARN messages, from its format strings across releases (2.3-2.30): each group of wordings gets the class
it means, whatever the version's file name, "(function)" tag or missing "NCCL " before WARN; the message alone, as
PyTorch quotes it after "Last error:", keeps its class; benign warnings (context signatures whose summary says
"(benign)", as the report and the no_failure verdict read them) and INFO chatter are never a cause."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.settings import Settings
from tests.kit import assert_benign, assert_class, grouped, grouped_ids, run_files, winner

HOST = "gpu-node-07:48812:48890 [3]"


def warn(src: str, message: str, *, fn: str | None = None, legacy: bool = False) -> str:
    """A WARN line as NCCL's debug.cc prints it: 2.30 adds "(function)", 2.0-2.2 had no "NCCL " before WARN."""
    where = f"{src} ({fn})" if fn else src
    return f"{HOST} {where} {'WARN' if legacy else 'NCCL WARN'} {message}"


def quoted(message: str) -> str:
    """The message as ncclGetLastError returns it and PyTorch prints it under "Last error:"."""
    return f"[rank3]: {message}"


BOOT = "nccl_init_bootstrap_failure"
PEER = "nccl_remote_peer_failure"
IB = "ib_completion_error"
FABRIC = "nvswitch_fabric_manager_error"
VERSION = "software_version_mismatch"
USER = "python_exception_rank_crash"
LINK = "ib_port_error_link_flap"

GROUPS: dict[str, list[tuple[str, str]]] = {
    # peer closed or reset a socket while collectives ran: a cascade of the peer's death
    "socket peer lost": [
        (warn("include/socket.h:380", "Net : Connection closed by remote peer"), PEER),
        (warn("misc/socket.cc:523", "Net : Connection closed by remote peer node2.cluster<46281>"), PEER),
        (warn("misc/socket.cc:58", "socketProgress: Connection closed by remote peer node2<46281>"), PEER),
        (warn("misc/socket.cc:46", "socketProgressOpt: Call to send to 10.1.0.4<40537> failed : Broken pipe"), PEER),
        (
            warn(
                "os/linux.cc:362",
                "ncclOsSocketProgressOpt: Call to recv from 10.1.0.4<40537> failed : Connection reset by peer",
                fn="ncclOsSocketProgressOpt",
            ),
            PEER,
        ),
        (warn("transport/net_socket.cc:167", "NET/Socket : socket progress error"), PEER),
        (quoted("socketProgress: Connection closed by remote peer node2<46281>"), PEER),
    ],
    # the out-of-band bootstrap: its configuration and the messages of its rendezvous
    "bootstrap": [
        (warn("bootstrap.cu:148", "Invalid NCCL_COMM_ID, please use format: <ipv4>:<port> or [<ipv6>]:<port>"), BOOT),
        (warn("bootstrap.cc:443", "Invalid NCCL_COMM_ID, please use format: <ipv4>:<port>", fn="bootstrapInit"), BOOT),
        (warn("transport/net_socket.cu:188", "Message truncated : received 4096 bytes instead of 64"), BOOT),
        (warn("bootstrap.cc:141", "Message truncated : received 4096 bytes instead of 64"), BOOT),
        (warn("bootstrap.cu:143", "Bootstrap Root : mismatch in rank count from procs 16 : 8"), BOOT),
        (warn("bootstrap.cu:120", "Some wording nobody has seen yet", legacy=True), BOOT),
        (quoted("Message truncated : received 4096 bytes instead of 64"), BOOT),
    ],
    # IB/RoCE device set-up: the transport could not start (not an RDMA completion error)
    "ib device set-up": [
        (warn("transport/net_ib.cu:113", "NET/IB : Unable to open device mlx5_3"), BOOT),
        (warn("transport/net_ib.cc:117", "NET/IB : Unable to open device mlx5_3"), BOOT),
        (warn("transport/net_ib/init.cc:334", "NET/IB : Unable to open device mlx5_3", fn="ncclIbInitDevices"), BOOT),
        (warn("transport/net_ib.cc:98", "NET/IB : No IP interface found."), BOOT),
        (warn("transport/net_ib.cc:170", "NET/IB : Unable to query port 1"), BOOT),
        (
            warn(
                "transport/net_ib.cc:1423",
                "NET/IB : Attempted to connect incompatible devices: [0]mlx5_0:1/IB and [0]mlx5_0:1/RoCE. "
                "Try selecting NICs of only one link type using NCCL_IB_HCA",
            ),
            BOOT,
        ),
        (quoted("NET/IB : Unable to open device mlx5_3"), BOOT),
    ],
    # RDMA work requests that fail while data moves
    "ib data path": [
        (warn("include/ibvwrap.h:1092", "ibv_post_send() failed with error Cannot allocate memory"), IB),
        (
            warn(
                "include/ibvwrap.h:80",
                "ibv_post_send() failed with error Cannot allocate memory, Bad WR 0x7f1c20a8, First WR 0x7f1c20a8",
            ),
            IB,
        ),
        (warn("include/ibvwrap.h:300", "Call to ibv_poll_cq() returned -1"), IB),
        (warn("transport/net_ib.cu:713", "NET/IB : some new data-path wording"), IB),
    ],
    # communicator set-up and its configuration
    "init and config": [
        (warn("init.cu:625", "Invalid rank requested : 8/8"), BOOT),
        (warn("init.cc:2501", "Invalid rank requested : 8/8", fn="ncclCommInitRankDev"), BOOT),
        (
            warn(
                "init.cc:640",
                "Failed to determine local ranks rank 1 hostHash 5f2c3a4b1d2e3f40 pidHash 1c2d3e4f5a6b7c8d "
                "localRank 1 localRanks 1 localRank0 0",
            ),
            BOOT,
        ),
        (warn("enqueue.cc:277", "Error : no algorithm/protocol available"), BOOT),
        (warn("init.cc:1720", "Invalid config blocking attribute value -2147483648"), BOOT),
        (
            warn("init.cc:1057", "Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1"),
            BOOT,
        ),
        (warn("init.cc:512", "No transport found !"), BOOT),
        (warn("proxy.cc:585", "Rank 3 has no transport for recv peer 11 on channel 0/2"), BOOT),
    ],
    # topology detection and ring construction
    "topology": [
        (warn("init.cu:347", "Error : ring 0 does not loop back to start (3 != 0)"), BOOT),
        (warn("graph/rings.cc:51", "Error : ring 1 does not contain rank 5", fn="ncclBuildRings"), BOOT),
        (warn("transport/net_ib.cc:185", "Could not find real path of mlx5_0"), BOOT),
        (warn("os/linux.cc:637", "Could not find real path of /sys/class/net/eth0", fn="ncclOsRealPath"), BOOT),
    ],
    # shared memory (/dev/shm) and the handle exchange over Unix sockets
    "shm and uds": [
        (
            warn("transport/shm.cu:70", "Error while creating shared memory segment nccl-shm-recv-1 (size 9637888)"),
            BOOT,
        ),
        (warn("proxy.cc:1299", "ncclProxyClientGetFd call to tpRank 1 handle 0x7f0a8c000b10 failed : 3"), BOOT),
    ],
    # the proxy thread losing its peers: a cascade
    "proxy": [
        (warn("proxy.cc:977", "[Proxy Service] Poll failed with error 4"), PEER),
        (warn("proxy.cc:2003", "[Proxy Service UDS] Poll failed: Interrupted system call", fn="proxyUDSService"), PEER),
        (warn("proxy.cc:1874", "[Service thread] Could not receive type from localRank 5, res=3, closed=0"), PEER),
    ],
    # GPUDirect through GDRCopy
    "gdrcopy": [
        (warn("include/gdrwrap.h:30", "GDRCOPY failure -22"), BOOT),
        (warn("misc/gdrwrap.cc:148", "gdr_pin_buffer(addr 7f3a2c000000, size 2097152) failed: -12"), BOOT),
    ],
    # library, driver and ABI combinations NCCL refuses
    "versions": [
        (
            warn(
                "enqueue.cc:1102",
                "The installed CUDA driver is older than the minimum version (R465) required for NCCL's CUDA Graphs support",
            ),
            VERSION,
        ),
        (
            warn(
                "misc/strongstream.cc:91",
                "NCCL cannot be captured in a graph if either it wasn't built with CUDA runtime >= 11.3 "
                "or if the installed CUDA driver < R465.",
            ),
            VERSION,
        ),
        (warn("include/alloc.h:190", "CUMEM not supported prior to CUDA 11.3"), VERSION),
        (
            warn(
                "dev_runtime.cc:1428",
                "NCCL library is too old. This application was compiled with NCCL version 2.30.4, "
                "but is running with NCCL library version 2.29.3.",
                fn="ncclDevCommCreate",
            ),
            VERSION,
        ),
    ],
    # NVLink multicast / multi-node NVLink
    "fabric": [
        (warn("init.cc:953", "MNNVL is not supported on this system"), FABRIC),
    ],
    # calls of the program that NCCL rejects
    "invalid calls": [
        (warn("include/common_coll.h:44", "Broadcast : invalid root 8 (root should be in the 0..7 range)"), USER),
        (warn("misc/argcheck.cc:16", "AllReduce : sendbuff 0x7f3a00000000 is not a valid pointer"), USER),
        (
            warn("misc/argcheck.cc:28", "ncclAllGather : sendbuff allocated on device 1 mismatchs with NCCL device 0"),
            USER,
        ),
        (warn("enqueue.cc:1990", "Trying to send to self without a matching recv"), USER),
    ],
    "gpu memory": [
        (warn("include/alloc.h:84", "Failed to CUDA malloc 1073741824 bytes"), "cuda_oom"),
    ],
    # ncclGetErrorString as PyTorch prints it
    "result strings": [
        (
            "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:2110, timeout, NCCL version 2.30.3",
            "nccl_watchdog_timeout",
        ),
        (
            "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error",
            PEER,
        ),
        (
            "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1691, unhandled system error (run with NCCL_DEBUG=INFO",
            BOOT,
        ),
    ],
    # the HCA's async events (ibv_event_type_str's names), <= 2.22 "Got async event : %s" and 2.23+ split by kind:
    # a CQ or QP put in error is a failed work queue (its completions fail next), the device or its port the link
    "HCA async events": [
        *(
            (warn("transport/net_ib.cc:100", f"NET/IB : mlx5_0:1 Got async event : {name}"), cls)
            for name, cls in [
                ("local access violation work queue error", IB),
                ("local work queue catastrophic error", IB),
                ("invalid request local work queue error", IB),
                ("CQ error", IB),
                ("SRQ catastrophic error", IB),
                ("port error", LINK),
                ("local catastrophic error", LINK),
                ("path migration request error", LINK),
            ]
        ),
        (
            warn(
                "transport/net_ib.cc:152",
                "NET/IB : mlx5_2:1 async fatal event on QP (0x5581c0): local access violation work queue error",
            ),
            IB,
        ),
        (warn("transport/net_ib.cc:145", "NET/IB : mlx5_2:1 async fatal event on CQ (0x7f3a10): CQ error"), IB),
        (
            warn(
                "net_ib/common.cc:140",
                "NET/IB : mlx5_2:1 async fatal event on QP (0x5581c0) qpn=4411 handle=2 send_cq=1 recv_cq=1 state=6 sq_psn=77 rq_psn=12: invalid request local work queue error",
            ),
            IB,
        ),
        (warn("transport/net_ib.cc:140", "NET/IB : mlx5_2:1 async fatal event: local catastrophic error"), LINK),
        (warn("net_ib/common.cc:179", "NET/IB : mlx5_2:1 Got non-fatal async event: port error(10)"), LINK),
    ],
}

CASES = grouped(GROUPS)


@pytest.mark.parametrize(("group", "text", "cls"), CASES, ids=grouped_ids(CASES))
def test_each_wording_gets_the_class_it_means(group: str, text: str, cls: str) -> None:
    assert_class(group, text, cls)


BENIGN = [
    warn("misc/ibvwrap.cc:66", "Failed to open libibverbs.so[.1]"),
    warn(
        "transport.cc:464",
        "Cannot initialize CollNet, using point-to-point network instead",
        fn="ncclTransportCollNetSetup",
    ),
    warn("init.cc:524", "Cannot initialize CollNet, using SHARP instead"),
    warn(
        "transport/net_socket.cc:191",
        "NET/Socket : NCCL_SOCKET_NTHREADS is greater than the maximum allowed, setting to 16",
    ),
    warn("misc/profiler.cc:337", "Profiler init failed with error (3). Continue without profiler."),
    warn("misc/rings.cc:310", "Could not create rings, falling back on simple ring"),
    warn("init.cc:1890", "NCCL_WORK_FIFO_BYTES=1000 is being ignored because it is not a power of 2."),
    warn(
        "net.cc:120",
        "NCCL_DEVICE_UNPACK plugin has incompatible version 1, this NCCL build is compatible with 2, not using it",
    ),
    warn("plugin/net.cc:80", "NET/Plugin: Could not find: libnccl-net.so."),
]

CHATTER = [
    f"{HOST} NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file",
    f"{HOST} NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
    f"{HOST} NCCL INFO NCCL_IB_DISABLE set by environment to 1.",
    f"{HOST} NCCL INFO ginForceEnable is being deprecated in favor of explicitly setting ginConnectionType!",
    f"{HOST} NCCL INFO dlsym failed on gdr_pin_buffer_v2, ignoring",
    f"{HOST} NCCL INFO Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1, retrying 1/7 after 2000 msec",
    f"{HOST} NCCL INFO NET/IB : No device found.",
    f"{HOST} NCCL INFO Using network Socket",
]


@pytest.mark.parametrize("text", BENIGN)
def test_benign_warnings_are_known_as_benign(text: str) -> None:
    assert_benign(text)


@pytest.mark.parametrize("text", CHATTER)
def test_info_chatter_is_never_a_failure(text: str) -> None:
    assert winner(text) is None, text


def test_a_failed_run_with_benign_warnings_blames_the_failure(tmp_path: Path, settings: Settings) -> None:
    log = "\n".join(
        [
            *BENIGN,
            f"{HOST} NCCL INFO Bootstrap : Using eth0:10.0.1.7<0>",
            warn("transport/net_ib.cc:117", "NET/IB : Unable to open device mlx5_3"),
            f"{HOST} NCCL INFO init.cc:1230 -> 2",
        ]
    )
    root = run_files(tmp_path / "b", {"rank.log": log + "\n"}, settings).document.root_cause
    assert root.class_ == BOOT
    texts = [c.text for c in root.citations]
    assert not any(b in t for t in texts for b in ("libibverbs", "CollNet", "Profiler", "simple ring"))


def test_a_completed_run_with_benign_warnings_has_no_failure(tmp_path: Path, settings: Settings) -> None:
    done = (
        "I1201 22:23:55.652000 27909 torch/distributed/elastic/agent/server/api.py:932] [default] worker group "
        "successfully finished. Waiting 300 seconds for other agents to finish."
    )
    log = "\n".join([*BENIGN, done]) + "\n"
    root = run_files(tmp_path / "b", {"rank.log": log}, settings).document.root_cause
    assert root.class_ == "no_failure"
