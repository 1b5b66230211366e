"""The NCCL network plugin aws-ofi-nccl ("NET/OFI", v1.1-v1.21; libfabric's own EFA lines are in
test_emitters_efa.py): each failure wording, built from the plugin's format strings, gets the class it means.
Completion errors are RDMA completion errors unless the provider's status says the peer is gone (unreachable,
unresponsive, reset, no such QP), then they are a remote-peer cascade; the plugin's own security-group diagnosis and
set-up failures (no provider, fi_getinfo, endpoint/AV creation, connect, registration) are init failures; version
floors are version mismatches. Benign warnings and INFO chatter are never a cause.

Sources: aws-ofi-nccl include/nccl_ofi_log.h (NCCL_OFI_WARN prefixes "NET/OFI " and passes __PRETTY_FUNCTION__
as NCCL's file field), src/nccl_ofi_net.c, src/nccl_ofi_rdma.c(pp), src/nccl_ofi_sendrecv.c(pp),
include/nccl_ofi_platform.h, src/platform-aws.c(pp); the status strings in the completion errors are libfabric's
(prov/efa/src/efa_errno.h, efa_strerror.c)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.settings import Settings
from tests.kit import assert_benign, assert_class, grouped, grouped_ids, run_files, winner

HOST = "ip-172-31-22-14:48812:48890 [3]"


def ofi(fn: str, line: int, message: str) -> str:
    """A NCCL_OFI_WARN line as NCCL's logger prints it: the plugin's function (C++: its pretty signature) and line."""
    return f"{HOST} {fn}:{line} NCCL WARN NET/OFI {message}"


def quoted(message: str) -> str:
    """The plugin's warning as ncclGetLastError returns it and PyTorch prints it under "Last error:"."""
    return f"[rank3]: NET/OFI {message}"


PEER = "nccl_remote_peer_failure"
IB = "ib_completion_error"
BOOT = "nccl_init_bootstrap_failure"
VERSION = "software_version_mismatch"

RDMA_REQ = "{ dev: 1, size: 0, state: CREATED, type: SEND }"
SR_REQ = "{ buffer_index: 255, dev: 1, size: 0, state: CREATED, direction: SEND }"
UNREACH = (
    "Unreachable remote - never received a response My EFA addr: fi_addr_efa://[fe80::4a2:5bff:fe1f:9c5d]:1:2057468765"
    " My host id: i-0a1b2c3d4e5f60718 Peer EFA addr: fi_addr_efa://[fe80::4f1:1aff:fe3b:7a21]:0:1234567890"
    " Peer host id: i-0f9e8d7c6b5a49382"
)
GROUPS: dict[str, list[tuple[str, str]]] = {
    # a request's completion error, every version's wording; the status names no lost peer
    "completion errors": [
        # v1.4-v1.13 "Request %p completed with error. RC: %d. Error: %s. Completed length: %ld, Request: %s"
        (
            ofi(
                "ofi_process_cq",
                1008,
                f"Request 0x7f3c2c0a11b8 completed with error. RC: 5. Error: Input/output error. Completed length: 0, "
                f"Request: {SR_REQ}",
            ),
            IB,
        ),
        (
            ofi(
                "process_err_completion",
                1541,
                "Request 0x7f3c2c0a11b8 completed with error. RC: 22. Error: unknown error. Completed length: 0, "
                f"Request: {RDMA_REQ}",
            ),
            IB,
        ),
        # v1.14+ "... Error: %d (%s) ..."
        (
            ofi(
                "process_err_completion",
                1755,
                "Request 0x7f3c2c0a11b8 completed with error. RC: 22. Error: 5 (Local memory registration is invalid, "
                f"has insufficient access flags or does not match IOVA). Completed length: 0, Request: {RDMA_REQ}",
            ),
            IB,
        ),
        (
            ofi(
                "int process_err_completion(nccl_net_ofi_rdma_device_t*, nccl_net_ofi_ep_rail_t*, fi_cq_err_entry*)",
                1320,
                "Request 0x7f3c2c0a11b8 seq 17 completed with error. RC: 90. Error: 6 (Message too long). "
                f"Completed length: 0, Request: {RDMA_REQ}",
            ),
            IB,
        ),
        (
            ofi(
                "gin_handle_cq_error",
                40,
                "Request 0x7f3c2c0a11b8 completed with error. RC: 261. Flags: 2048. Error: 4096 (Unknown error). "
                "Completed length: 0",
            ),
            IB,
        ),
        # include/nccl_ofi_platform.h log_cq_error (v1.19+)
        (
            ofi(
                "virtual void Platform::log_cq_error(void*, fid_cq*, fi_cq_err_entry*, const char*)",
                125,
                "Request 0x7f3c2c0a11b8 (RECV) completed with error: err: 22, flags: 1024, prov_errno: 5, "
                "strerror: Local memory registration is invalid, len: 0",
            ),
            IB,
        ),
        (
            ofi(
                "process_err_completion",
                1463,
                "Remote write completed with error. RC: 22. Flags: 65536. Error: 7 (Remote memory registration is "
                "invalid, has insufficient access flags or does not match IOVA). Completed length: 0",
            ),
            IB,
        ),
        (ofi("process_err_completion", 1748, "Operation with NULL context completed with error"), IB),
        (ofi("process_err_completion", 1720, "Operation with NULL context completed with error!"), IB),
        (ofi("process_err_completion", 1547, "Fatal: Bounce buffer recv completed with error"), IB),
        (ofi("process_err_completion", 1762, "Fatal: rx buffer recv completed with error"), IB),
        (ofi("test", 2313, "Request completed with error"), IB),
        (ofi("process_err_completion", 1527, "Unknown remote write error, could not get CQ data"), IB),
        # fi_cq_read itself failed (v1.1-v1.21)
        (
            ofi(
                "ofi_process_cq_rail",
                1696,
                "Unable to retrieve completion queue entries. RC: -5, ERROR: Input/output error",
            ),
            IB,
        ),
        (
            ofi(
                "ofi_process_cq",
                955,
                "Unable to read from fi_cq_readerr. RC: -11. Error: Resource temporarily unavailable",
            ),
            IB,
        ),
        (
            quoted("Request 0x7f3c2c0a11b8 completed with error. RC: 5. Error: 2 (Internal queue pair error (local))."),
            IB,
        ),
    ],
    # the status says the peer is gone: a cascade of its death (or of the path to it)
    "peer gone": [
        (
            ofi(
                "process_err_completion",
                1755,
                f"Request 0x7f3c2c0a11b8 completed with error. RC: 113. Error: 15 ({UNREACH}). Completed length: 0, "
                f"Request: {RDMA_REQ}",
            ),
            PEER,
        ),
        (
            ofi(
                "ofi_process_cq",
                263,
                "Request 0x7f3c2c0a11b8 completed with error. RC: 107. Error: 9 (Bad queue pair (QP) number (QP does "
                f"not exist or is in error state)). Completed length: 0, Request: {SR_REQ}",
            ),
            PEER,
        ),
        (
            ofi(
                "virtual void Platform::log_cq_error(void*, fid_cq*, fi_cq_err_entry*, const char*)",
                125,
                "Request 0x7f3c2c0a11b8 (SEND) completed with error: err: 103, flags: 2, prov_errno: 4124, "
                "strerror: Unresponsive receiver (connection previously established), len: 0",
            ),
            PEER,
        ),
        (
            ofi(
                "process_err_completion",
                1541,
                "Request 0x7f3c2c0a11b8 completed with error. RC: 103. Error: Receiver connection aborted. "
                f"Completed length: 0, Request: {RDMA_REQ}",
            ),
            PEER,
        ),
        (
            quoted(
                "Request 0x7f14cc5b60c0 completed with error. RC: 113. Error: 2 (UNDELIVERABLE). Completed length: 0"
            ),
            PEER,
        ),
    ],
    # the plugin's own diagnosis of FI_EHOSTUNREACH (v1.19+ platform-aws): security groups, a set-up fault
    "security group": [
        (
            "* This error indicates that the security group on either this instance or the peer instance",
            BOOT,
        ),
    ],
    # the plugin cannot find, open or configure its libfabric provider
    "provider set-up": [
        (ofi("nccl_net_ofi_rdma_init", 5801, "OFI fi_getinfo() call failed: No data available"), BOOT),
        (ofi("find_ofi_provider", 583, "Couldn't find any optimal provider"), BOOT),
        (ofi("find_ofi_provider", 573, "Could not find any optimal provider supporting GPUDirect RDMA"), BOOT),
        (ofi("nccl_net_ofi_init", 1136, "Only EFA provider is supported"), BOOT),
        (ofi("nccl_net_ofi_sendrecv_init", 2418, "Insufficient Libfabric devices found"), BOOT),
        (
            ofi(
                "nccl_net_ofi_init",
                1144,
                "No viable endpoint found for TCP provider. Try and relax the filters using OFI_NCCL_USE_IPV6_TCP or "
                "OFI_NCCL_EXCLUDE_TCP_IF environment variables",
            ),
            BOOT,
        ),
        (
            ofi("create_nccl_ofi_component", 736, "Couldn't open a fabric provider. RC: -61, ERROR: No data available"),
            BOOT,
        ),
        (
            ofi(
                "create_nccl_ofi_component",
                745,
                "Couldn't open a fabric access domain. RC: -12, ERROR: Cannot allocate memory",
            ),
            BOOT,
        ),
        (ofi("create_nccl_ofi_component", 754, "Couldn't allocate endpoint. RC: -22, ERROR: Invalid argument"), BOOT),
        (ofi("create_nccl_ofi_component", 763, "Couldn't open CQ. RC: -12, ERROR: Cannot allocate memory"), BOOT),
        (ofi("create_nccl_ofi_component", 771, "Couldn't open AV. RC: -12, ERROR: Cannot allocate memory"), BOOT),
        (ofi("create_nccl_ofi_component", 780, "Couldn't bind EP-CQ. RC: -22, ERROR: Invalid argument"), BOOT),
        (ofi("create_nccl_ofi_component", 797, "Couldn't enable endpoint. RC: -22, ERROR: Invalid argument"), BOOT),
        (ofi("ofi_listen", 1441, "Call to fi_getname() failed with RC: -22, ERROR: Invalid argument"), BOOT),
        (
            ofi(
                "nccl_net_ofi_init",
                764,
                "GDR support reported to NCCL but then couldn't be configured on an endpoint.  Cannot continue.",
            ),
            BOOT,
        ),
        (
            ofi("nccl_net_ofi_create_plugin", 120, "Unable to find a protocol that worked.  Failing initialization."),
            BOOT,
        ),
        (ofi("nccl_net_ofi_init_v6", 97, "Initializing plugin failed"), BOOT),
        (
            ofi(
                "ncclResult_t nccl_net_ofi_init_v6(ncclDebugLogger_t)",
                160,
                "Caught exception in plugin init: fi_domain failed",
            ),
            BOOT,
        ),
        (
            ofi(
                "nccl_net_ofi_init",
                1166,
                "NCCL_OFI_NIC_DUP_CONNS set on platform that supports GPUDirect RDMA.  This configuration is not supported.",
            ),
            BOOT,
        ),
        (ofi("get_param", 221, "WARNING: OFI_NCCL_PROTOCOL set to invalid value RMDA"), BOOT),
        (
            ofi(
                "nccl_net_ofi_rdma_init", 6012, "Endpoint does not support RMA operations, required for RDMA protocol!"
            ),
            BOOT,
        ),
        (
            ofi(
                "nccl_net_ofi_rdma_init",
                6020,
                "Provider does not support 4 bytes of immediate data, required for RDMA transport",
            ),
            BOOT,
        ),
        (ofi("nccl_net_ofi_rdma_init", 5835, "Failed to initialize rdma protocol"), BOOT),
        (ofi("nccl_net_ofi_rdma_init", 5840, "Failed to create NCCL OFI topology"), BOOT),
        (ofi("platform_init", 610, "Unable to set NCCL_TOPO_FILE. ERROR: No such file or directory"), BOOT),
    ],
    # the connection set-up between two ranks' plugins
    "connect": [
        (ofi("ofi_connect", 1819, "Unable to insert remote address into address vector for device 1. RC: -22"), BOOT),
        (
            ofi("ofi_connect", 1608, "Unable to send connect message for dev 1. RC: -113, ERROR: No route to host"),
            BOOT,
        ),
        (
            ofi(
                "ofi_listen",
                1390,
                "Unable to post a buffer for receving connections for dev 1. RC: -12, ERROR: Cannot allocate memory",
            ),
            BOOT,
        ),
        (ofi("create_send_comm", 4939, "Cannot open more connection for device ID 1. Maximum is 4096"), BOOT),
        (ofi("connect", 3025, "Unexpected number of remote rails for dev 1. Expected 4 but got 2"), BOOT),
        (ofi("connect", 180, "CM connect failed: Connection timed out"), BOOT),
    ],
    # memory registration with the provider
    "registration": [
        (
            ofi(
                "register_mr_buffers",
                463,
                "Unable to register memory (type = 2) for device 1. RC: -14, Error: Bad address",
            ),
            BOOT,
        ),
    ],
    # posting work to the provider failed while data moved
    "data-path posts": [
        (ofi("post_rdma_ctrl", 2970, "Error posting RDMA ctrl request. RC: -5, Error: Input/output error"), IB),
        (
            ofi(
                "send_progress",
                5544,
                "Error posting RDMA { dev: 0, size: 1048576, state: PENDING, type: WRITE } request. RC: -5, "
                "Error: Input/output error",
            ),
            IB,
        ),
        (ofi("post_rx_buffer", 2260, "Error posting rx buffer. RC: -5, Error: Input/output error"), IB),
        (ofi("post_bounce_buffer", 2190, "Error posting bounce buffer. RC: -5, Error: Input/output error"), IB),
        (ofi("ofi_isend", 1945, "Unable to post request; RC: -5"), IB),
        (ofi("send_progress", 3411, "fi_writedata failed; RC: -5, Error: Input/output error"), IB),
        (ofi("flush", 2660, "Error posting flush request. RC: -5, Error: Input/output error"), IB),
    ],
    # version floors of the libfabric and CUDA the plugin runs with
    "versions": [
        (
            ofi(
                "nccl_net_ofi_query_provider_capabilities",
                499,
                "EFA provider requires at least libfabric version 1.18.0.",
            ),
            VERSION,
        ),
        (
            ofi(
                "nccl_net_ofi_query_provider_capabilities",
                612,
                "EFA provider requires at least libfabric version 1.22.0.",
            ),
            VERSION,
        ),
        (ofi("nccl_net_ofi_init", 902, "CUDA flush requested, but CUDART_VERSION 11020 < 11030"), VERSION),
        (
            ofi("nccl_net_ofi_cuda_init", 30, "Insufficient driver to use CUDA function cuFlushGPUDirectRDMAWrites"),
            VERSION,
        ),
        (
            ofi(
                "nccl_net_ofi_init",
                786,
                "Using Libfabric 1.18 API with GPUDirect RDMA support, and FI_OPT_CUDA_API_PERMITTED is not declared.",
            ),
            VERSION,
        ),
    ],
}

CASES = grouped(GROUPS)


@pytest.mark.parametrize(("group", "text", "cls"), CASES, ids=grouped_ids(CASES))
def test_each_wording_gets_the_class_it_means(group: str, text: str, cls: str) -> None:
    assert_class(group, text, cls)


BENIGN = [
    ofi("platform_init", 478, "GDR disabled on GDR-supported instance type p4d.24xlarge"),
    ofi("nccl_net_ofi_init", 905, "CUDA flush enabled"),
    ofi(
        "nccl_ofi_tuner_init",
        151,
        "The tuner plugin can not be loaded when explicitly choosing an algorithm or protocol with NCCL_ALGO/NCCL_PROTO",
    ),
    ofi("nccl_ofi_tuner_init", 67, "NCCL_OFI_TUNER is not available because platform type is unavailable."),
    ofi("platform_config_endpoint", 528, "Failed to find shared library info. Not configuring NCCL_TUNER_PLUGIN."),
    ofi("rdma_init_params", 7721, "Use of OFI_NCCL_RDMA_MIN_POSTED_BOUNCE_BUFFERS is deprecated."),
    ofi("get_param", 336, "WARNING: Use of OFI_NCCL_NIC_DUP_CONNS is deprecated."),
    ofi("histogram_init", 45, "Unrecognized histogram print format: csvx, ignoring"),
    ofi("platform_sort_rails", 802, "Did not reorder arrays due to calloc failure"),
]

CHATTER = [
    f"{HOST} NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.7.4-aws",
    f"{HOST} NCCL INFO NET/OFI Using Libfabric version 1.18",
    f"{HOST} NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
    f"{HOST} NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)",
    f"{HOST} NCCL INFO NET/OFI Setting FI_EFA_FORK_SAFE environment variable to 1",
    f"{HOST} NCCL INFO NET/OFI No eligible providers were found",
    f"{HOST} NCCL INFO NET/OFI Could not load libgdrapi.so",
    f"{HOST} NCCL INFO NET/OFI Disabling NVLS support due to NCCL version 22005",
    f"{HOST} NCCL INFO NET/OFI Need to force simple protocol: GDR not supported",
]


@pytest.mark.parametrize("text", BENIGN)
def test_benign_warnings_are_known_as_benign(text: str) -> None:
    assert_benign(text)


@pytest.mark.parametrize("text", CHATTER)
def test_info_chatter_is_never_a_failure(text: str) -> None:
    assert winner(text) is None, text


def test_an_efa_unreachable_peer_with_the_security_group_banner_blames_the_set_up(
    tmp_path: Path, settings: Settings
) -> None:
    """v1.19+ prints FI_EHOSTUNREACH with a banner naming the security group: the set-up, not the peer, is the cause."""
    log = "\n".join(
        [
            f"{HOST} NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
            ofi(
                "virtual void PlatformAWS::log_cq_error(void*, fid_cq*, fi_cq_err_entry*, const char*)",
                1047,
                f"Request 0x7f3c2c0a11b8 (SEND) completed with error: err: 113, flags: 2, prov_errno: 15, "
                f"strerror: {UNREACH}, len: 0",
            ),
            "",
            "**********************************************************************",
            "* This error indicates that the security group on either this instance or the peer instance",
            "* is not setup correctly.  For more information, please see the AWS documentation at",
            "* https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html#nccl-start-base-setup",
            "**********************************************************************",
        ]
    )
    root = run_files(tmp_path / "b", {"rank.log": log + "\n"}, settings).document.root_cause
    assert root.class_ == BOOT
    assert any("security group" in c.text for c in root.citations)


def test_a_failed_run_with_benign_plugin_warnings_blames_the_failure(tmp_path: Path, settings: Settings) -> None:
    log = "\n".join(
        [
            *BENIGN,
            f"{HOST} NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.9.1-aws",
            ofi("nccl_net_ofi_rdma_init", 5801, "OFI fi_getinfo() call failed: No data available"),
            f"{HOST} NCCL INFO init.cc:1230 -> 2",
        ]
    )
    root = run_files(tmp_path / "b", {"rank.log": log + "\n"}, settings).document.root_cause
    assert root.class_ == BOOT
    assert any("fi_getinfo" in c.text for c in root.citations)
