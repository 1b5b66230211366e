"""libfabric's EFA provider (1.11-2.6) as aws-ofi-nccl jobs print it: each failure wording, built from libfabric's
format strings, gets the class it means (the plugin's own "NET/OFI" lines are in test_emitters_ofi.py). Completion
errors are RDMA completion errors unless the EFA status says the peer is gone (then a remote-peer cascade); a flush
of a destroyed queue pair is a follow-on; efa_show_help's security-group reading, the handshake and registration
are set-up failures; protocol-version and feature checks between peers are version mismatches.

Sources: libfabric src/log.c (the "libfabric:<pid>:<time>:[<prefix>:]<prov>:<subsys>:<func>():<line><level> "
prefix), prov/efa/src/efa_errno.h and efa_strerror.c (status strings, efa_show_help), rxr/rxr_cq.c, rxr/rxr_msg.c,
rdm/rxr_op_entry.c, rdm/efa_rdm_ope.c, rdm/efa_rdm_cq.c, efa_base_ep.c, efa_mr.c, dgram/efa_dgram_cq.c,
rdm/efa_rdm_pke_cmd.c, rdm/efa_rdm_ep_utils.c."""

from __future__ import annotations

import pytest

from crashcart.catalogue import load_catalogue
from tests.kit import assert_class, grouped, grouped_ids, winner
from tests.test_emitters_ofi import BOOT, IB, PEER, UNREACH, VERSION


def lf(fn: str, line: int, message: str, *, subsys: str = "cq", new: bool = True, level: str = "warn") -> str:
    """A libfabric log line: 1.14-1.17 "libfabric:pid:time:prov:subsys:fn():line<level> ", 1.18+ adds a prefix field."""
    head = "libfabric:48812:1701234567::efa" if new else "libfabric:48812:1701234567:efa"
    return f"{head}:{subsys}:{fn}():{line}<{level}> {message}"


GROUPS: dict[str, list[tuple[str, str]]] = {
    # a request's completion error, every version's wording; the status names no lost peer
    "completion errors": [
        # libfabric EFA: rxr_cq.c 1.11 "rxr_cq_handle_tx_error", 1.14-1.17 "rxr_cq_write_tx_error/rx_error"
        (
            lf(
                "rxr_cq_handle_tx_error",
                219,
                "rxr_cq_handle_tx_error: err: 5, prov_err: Unknown error -2 (2)",
                new=False,
            ),
            IB,
        ),
        (
            lf(
                "rxr_cq_write_tx_error",
                244,
                "rxr_cq_write_tx_error: err: 22, prov_err: Invalid argument (22)",
                new=False,
            ),
            IB,
        ),
        (
            lf(
                "rxr_cq_write_rx_error",
                139,
                "rxr_cq_write_rx_error: err: 5, prov_err: Internal queue pair error (2)",
            ),
            IB,
        ),
        # rdm/rxr_op_entry.c 1.18 and rdm/efa_rdm_ope.c 1.19+ "err: %d, message: %s (%d)"
        (lf("rxr_tx_entry_handle_error", 712, "err: 22, message: Invalid address handle (local) (4)"), IB),
        (lf("efa_rdm_txe_handle_error", 702, "err: 22, message: Unsupported operation type (3)"), IB),
        (lf("efa_rdm_rxe_handle_error", 610, "err: 90, message: Message too long (6)"), IB),
        (
            lf(
                "efa_rdm_txe_handle_error",
                741,
                "EFA provider internal txe failure err: 12, message: Out of memory (4105)",
            ),
            IB,
        ),
        (
            lf(
                "efa_rdm_cq_poll_ibv_cq",
                550,
                "Unexpected error when polling ibv cq, err: Invalid argument (22) prov_errno: Invalid address handle (4)",
            ),
            IB,
        ),
        (
            lf(
                "efa_base_ep_write_eq_error",
                460,
                "Writing error to EQ: err: Input/output error (5) prov_errno: Internal queue pair error (2)",
                subsys="eq",
            ),
            IB,
        ),
        (lf("efa_dgram_cq_readerr", 93, "Work completion status: Internal queue pair error"), IB),
    ],
    # the status says the peer is gone: a cascade of its death (or of the path to it)
    "peer gone": [
        (lf("efa_rdm_txe_handle_error", 702, f"err: 113, message: {UNREACH} (15)"), PEER),
        (lf("efa_rdm_rxe_handle_error", 610, "err: 103, message: Connection was reset by remote peer (8)"), PEER),
        (lf("rxr_tx_entry_handle_error", 712, "err: 103, message: Unresponsive remote (detected locally) (13)"), PEER),
        (
            lf(
                "rxr_cq_write_tx_error",
                237,
                "rxr_cq_write_tx_error: err: 107, prov_err: Invalid receiver queue pair number (QPN) (9) our address: "
                "fi_addr_efa://[fe80::4a2:5bff:fe1f:9c5d]:1:2057468765, peer address fi_addr_efa://[fe80::4f1:1aff:fe3b:7a21]:0:123",
            ),
            PEER,
        ),
        (
            lf(
                "efa_rdm_cq_process_prov_errno",
                641,
                "The peer of address fi_addr_efa://[fe80::4f1:1aff:fe3b:7a21]:0:1234567890 becomes unresponsive",
                subsys="ep_ctrl",
            ),
            PEER,
        ),
        (
            lf(
                "efa_show_help",
                100,
                "This error is detected remotely; typically encountered when the peer process is no longer present",
            ),
            PEER,
        ),
    ],
    # completion errors as the provider's flush of a destroyed queue pair: a follow-on
    "flushed": [
        (lf("efa_rdm_rxe_handle_error", 610, "err: 125, message: Flushed during queue pair destroy (1)"), IB),
    ],
    # the plugin's own diagnosis of FI_EHOSTUNREACH (v1.19+ platform-aws): security groups, a set-up fault
    "security group": [
        (
            lf(
                "efa_show_help",
                100,
                "This error is detected locally. The peer is not reachable by the EFA device. This typically indicates "
                "one or more misconfigured EC2 instances; most often due to incorrect inbound/outbound security group "
                "rules and/or instances placed in different subnets. Refer to the public AWS documentation for EFA for "
                "up-to-date configuration requirements. This error can also be encountered when a peer process is no "
                "longer present.",
            ),
            BOOT,
        ),
    ],
    # the connection set-up between two ranks' plugins
    "connect": [
        (
            lf(
                "efa_rdm_ep_post_handshake_or_queue",
                664,
                "Failed to post HANDSHAKE to peer 5: Resource temporarily unavailable",
            ),
            BOOT,
        ),
        (
            lf("rxr_ep_wait_for_handshake", 94, "waiting for handshake packet failed!", subsys="ep_ctrl", new=False),
            BOOT,
        ),
    ],
    # memory registration with the provider
    "registration": [
        (
            lf(
                "efa_mr_reg_impl",
                820,
                "Unable to register MR of 2097152 bytes: Cannot allocate memory, ibv pd: 0x55d1c3a0e2b0, "
                "total mr reg size 4194304, mr reg count 2",
                subsys="mr",
            ),
            BOOT,
        ),
    ],
    # version floors of the libfabric and CUDA the plugin runs with
    "versions": [
        (
            lf(
                "efa_rdm_pke_insert_addr",
                756,
                "Host fi_addr_efa://[fe80::4f1:1aff:fe3b:7a21]:0:1234567890 received a packet with invalid protocol "
                "version 3.",
            ),
            VERSION,
        ),
        (
            lf(
                "efa_rdm_cq_handle_recv_completion",
                358,
                "Peer 5 is requesting feature 4, which this EP does not support.",
            ),
            VERSION,
        ),
    ],
}

CASES = grouped(GROUPS)


@pytest.mark.parametrize(("group", "text", "cls"), CASES, ids=grouped_ids(CASES))
def test_each_wording_gets_the_class_it_means(group: str, text: str, cls: str) -> None:
    assert_class(group, text, cls)


def test_a_flushed_completion_is_a_follow_on() -> None:
    """EFA status 1 (flushed during QP destroy) follows the first error, like NET/IB status 5."""
    got = winner(GROUPS["flushed"][0][0])
    assert got is not None
    cat = load_catalogue()
    assert cat.signatures[cat.index[got[0]]].role == "cascade", got


def test_provider_registration_chatter_is_never_a_failure() -> None:
    line = "libfabric:48812:1701234567::core:core:ofi_register_provider():476<info> registering provider: efa (118.20)"
    assert winner(line) is None
