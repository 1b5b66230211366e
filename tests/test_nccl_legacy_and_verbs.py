"""NCCL lines across versions: 2.0-2.2's prefix without "NCCL ", the error-return trace through communicator set-up,
and failed verbs calls of the IB transport (misc/ibvwrap.cc)."""

from __future__ import annotations

from pathlib import Path

from crashcart.locate.topology import nccl_prefix
from crashcart.settings import Settings
from tests.kit import run_files, winner

LEGACY = """node1:54573:54696 [1] include/socket.h:194 WARN Call to recv failed : Connection reset by peer
node1:54573:54696 [1] INFO transport/net_ib.cu:537 -> 2
node1:54573:54696 [1] INFO include/net.h:30 -> 2 [Net]
node1:54573:54696 [1] INFO bootstrap.cu:169 -> 2
node1:54573:54696 [1] INFO init.cu:400 -> 2
"""


def test_the_legacy_prefix_names_host_pid_and_device() -> None:
    assert nccl_prefix("node1:54573:54696 [1] include/socket.h:194 WARN Call to recv failed : x") == (
        "node1",
        "54573",
        1,
    )
    assert nccl_prefix("node1:54573:54696 [1] INFO init.cu:400 -> 2") == ("node1", "54573", 1)
    assert nccl_prefix("gpu3:4100:4188 [0] NCCL INFO Bootstrap : Using eth0") == ("gpu3", "4100", 0)
    assert nccl_prefix("node1:54573:54696 [1] something else WARNED") is None


def test_an_error_through_init_is_a_setup_failure_citing_what_failed(tmp_path: Path, settings: Settings) -> None:
    rc = run_files(tmp_path / "b", {"rank.log": LEGACY}, settings).document
    root = rc.root_cause
    assert root.class_ == "nccl_init_bootstrap_failure"
    assert root.culprit.node == "node1"
    assert root.confidence <= 0.7  # the trace says where the error passed, not what it was
    texts = [c.text for c in root.citations if c.verified]
    assert any("WARN Call to recv failed : Connection reset by peer" in t for t in texts)


def test_a_trace_outside_set_up_is_not_a_setup_failure() -> None:
    assert winner("H100-2:19989:20082 [1] NCCL INFO transport/net.cc:1302 -> 6") != (
        "nccl.init_error_trace",
        "nccl_init_bootstrap_failure",
    )
    assert (
        winner("gpu-node-02:4410:4410 [3] NCCL INFO init.cc:1502 -> 0") is None
        or winner("gpu-node-02:4410:4410 [3] NCCL INFO init.cc:1502 -> 0")[0] != "nccl.init_error_trace"
    )


def test_failed_verbs_calls_are_a_transport_set_up_failure() -> None:
    for line in [
        "misc/ibvwrap.cc:206 NCCL WARN Call to ibv_modify_qp failed with error Invalid argument errno 22",
        "h:1:2 [0] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
        "h:1:2 [0] misc/ibvwrap.cc:327 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev "
        "mlx5_0:1, curr state INIT, next state RTR",
    ]:
        assert winner(line) == ("nccl.ibv_call_failed", "nccl_init_bootstrap_failure"), line
    # NCCL retries ibv_modify_qp and says so at INFO: a retry is not a failure
    retry = (
        "h:1:2 [0] NCCL INFO Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1, retrying 1/7"
    )
    assert winner(retry) != ("nccl.ibv_call_failed", "nccl_init_bootstrap_failure")
