"""Tests for crashcart.text.prefix: per-rank/per-host line prefixes and ranks/hosts named by paths.

Hypothesis checks that ``rest`` is always ``line[length:]``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crashcart.text.prefix import Prefix, host_of_path, looks_like_host, rank_of_path, split_prefix

SPLIT_CASES = [
    ("pytorch", "[rank27]:Traceback", Prefix(27, None, None, "Traceback", 9)),
    ("pytorch-space", "[rank27]: Traceback", Prefix(27, None, None, "Traceback", 10)),
    (
        "pytorch-c10d",
        "[rank0]:[E1130 02:13:07.408271257 ProcessGroupNCCL.cpp:607] x",
        Prefix(0, None, None, "[E1130 02:13:07.408271257 ProcessGroupNCCL.cpp:607] x", 8),
    ),
    ("torchrun-tee", "[default3]:[rank27]:boom", Prefix(27, 3, None, "boom", 20)),
    ("torchrun-tee-no-rank", "[default3]:boom", Prefix(None, 3, None, "boom", 11)),
    ("srun-l", "27: boom", Prefix(27, None, None, "boom", 4)),
    ("srun-l-padded", "  27: boom", Prefix(27, None, None, "boom", 6)),
    ("srun-l-nested", "0: [rank0]:boom", Prefix(0, None, None, "boom", 11)),
    ("srun-l-rank-wins", "1: [rank9]: boom", Prefix(9, None, None, "boom", 12)),
    # torchrun under srun (one task per node): the srun label counts nodes, not ranks
    ("srun-l-torchrun", "1: [default3]:boom", Prefix(None, 3, None, "boom", 14)),
    ("srun-l-torchrun-rank", "1: [default3]:[rank11]:boom", Prefix(11, 3, None, "boom", 23)),
    ("mpi-stderr", "[1,27]<stderr>:boom", Prefix(27, None, None, "boom", 15)),
    ("mpi-stdout", "[1,27]<stdout>: boom", Prefix(27, None, None, "boom", 16)),
    ("mpi-nested", "[1,3]<stderr>:[rank3]:boom", Prefix(3, None, None, "boom", 22)),
    (
        "pdsh",
        "gpu-node-017: [  12.000001] NVRM",
        Prefix(None, None, "gpu-node-017", "[  12.000001] NVRM", 14),
    ),
    ("pdsh-short", "node017: up", Prefix(None, None, "node017", "up", 9)),
    ("pdsh-fqdn", "node017.cluster.local: up", Prefix(None, None, "node017.cluster.local", "up", 23)),
    ("pdsh-nested", "gpu-node-017: [rank5]: x", Prefix(5, None, "gpu-node-017", "x", 23)),
    ("kubectl-prefix", "[pod/trainer-worker-3/pytorch] x", Prefix(None, None, "trainer-worker-3", "x", 31)),
    (
        "ray",
        "(RayWorkerWrapper pid=4009) [rank1]:[E ProcessGroupNCCL.cpp:563] x",
        Prefix(1, None, None, "[E ProcessGroupNCCL.cpp:563] x", 36),
    ),
    ("ray-ip", "(Worker pid=1, ip=10.0.0.1) x", Prefix(None, None, "10.0.0.1", "x", 28)),
    ("leading-ws", "\t[rank2]:x", Prefix(2, None, None, "x", 9)),
    ("pdsh-ip", "10.0.0.17: [rank2]: x", Prefix(2, None, "10.0.0.17", "x", 20)),
]


@pytest.mark.parametrize(("line", "expected"), [c[1:] for c in SPLIT_CASES], ids=[c[0] for c in SPLIT_CASES])
def test_split_prefix(line: str, expected: Prefix) -> None:
    got = split_prefix(line)
    assert got == expected
    assert line[got.length :] == got.rest


NOT_PREFIXES = [
    ("timestamp", "02:13:07 something"),
    ("glog", "E1130 02:13:07.408271 12 f.cc:1] x"),
    ("srun-no-space", "27:boom"),
    ("number-in-text", "loss 12: foo"),
    ("kernel", "kernel: NVRM: Xid"),
    ("nccl-info", "NCCL INFO: x"),
    ("traceback", "Traceback: x"),
    ("error", "ERROR: x"),
    ("warning", "WARNING: x"),
    ("info", "INFO: x"),
    ("python3", "python3: can't open file"),
    ("eth0", "eth0: link up"),
    ("mlx5", "mlx5_0: port 1"),
    ("sha256", "sha256: abc"),
    ("epoch", "epoch10: loss 1.0"),
    ("c10d", "c10d: x"),
    ("nccl-host-colon", "H100-2:19989:20082 [1] NCCL INFO x"),
    ("slurm-id", "slurm-123456: x"),
    ("python-version", "python3.10: x"),
    ("syslog", "Nov 30 02:13:07 gpu-node-017 kernel: x"),
    ("json", '{"rank": 3, "msg": "x"}'),
    ("dmesg", "[  12345.678901] NVRM: Xid"),
    ("rank-in-message", "[Rank 0] Watchdog caught"),
    ("empty", ""),
    ("whitespace-only", "   "),
    ("version-number", "2.1.0: released"),
]


@pytest.mark.parametrize("line", [c[1] for c in NOT_PREFIXES], ids=[c[0] for c in NOT_PREFIXES])
def test_split_prefix_leaves_other_lines_alone(line: str) -> None:
    assert split_prefix(line) == Prefix(None, None, None, line, 0)


@given(st.text())
def test_split_prefix_rest_is_suffix(line: str) -> None:
    got = split_prefix(line)
    assert 0 <= got.length <= len(line)
    assert line[got.length :] == got.rest
    assert line.endswith(got.rest)


@given(st.lists(st.sampled_from(["[rank7]:", "[default1]:", "[1,7]<stderr>:", " ", "3: ", "x", ":"])))
def test_split_prefix_rest_is_suffix_on_prefix_soup(parts: list[str]) -> None:
    line = "".join(parts)
    got = split_prefix(line)
    assert line[got.length :] == got.rest


RANK_PATHS = [
    ("rank-dash", "rank-3.log", 3),
    ("rank-dir", "rank3/stderr.log", 3),
    ("rank-underscore", "rank_27.out", 27),
    ("node-dir", "logs/node-017/rank_27.out", 27),
    ("worker", "worker-5.log", 5),
    ("stdout-rank", "stdout_rank12.txt", 12),
    ("r-short", "r12.err", 12),
    ("proc", "proc5.log", 5),
    ("process", "logs/process_4/out.txt", 4),
    ("rnk", "rnk-8.log", 8),
    ("file-beats-dir", "rank1/rank_2.log", 2),
    ("windows-sep", "logs\\rank-6.log", 6),
    ("node", "node-017", None),
    ("node-file", "logs/node-017/stdout.log", None),
    ("slurm", "slurm-123456.out", None),
    ("slurm-array", "slurm-123456_3.out", None),
    ("local-rank", "local_rank3.log", None),
    ("node-rank", "node_rank1/out.log", None),
    ("ranks-plural", "ranks/combined.log", None),
    ("pod-worker", "trainer-worker-5/out.log", None),
    ("version-dir", "r2.1/out.log", None),
    ("dmesg", "nodes/gpu-node-017/dmesg.log", None),
]


@pytest.mark.parametrize(("path", "rank"), [c[1:] for c in RANK_PATHS], ids=[c[0] for c in RANK_PATHS])
def test_rank_of_path(path: str, rank: int | None) -> None:
    assert rank_of_path(path) == rank


HOST_PATHS = [
    ("nodes-dir", "nodes/gpu-node-017/dmesg.log", "gpu-node-017"),
    ("host-dir", "gpu-node-017/kern.log", "gpu-node-017"),
    ("host-dot-kind", "node017.dmesg", "node017"),
    ("kind-dash-host", "dmesg-gpu-node-017.log", "gpu-node-017"),
    ("host-underscore-kind", "NODE017_kern.log", "NODE017"),
    ("dcgm", "telemetry/dcgm-node017.csv", "node017"),
    ("rank-under-node", "logs/node-017/rank_27.out", "node-017"),
    ("fqdn-dir", "ip-10-0-1-5.ec2.internal/kern.log", "ip-10-0-1-5.ec2.internal"),
    ("logs", "logs/x.log", None),
    ("rank-dir", "rank3/stderr.log", None),
    ("slurm", "slurm-123456.out", None),
    ("kernel", "kernel/dmesg", None),
    ("telemetry", "telemetry/dcgm.csv", None),
    ("sacct", "sacct-123456.txt", None),
    ("case", "case-003/slurm-1.out", None),
    ("local-rank", "local_rank3.log", None),
    ("kern-rotated", "kern.log.1", None),
    ("dmesg-date", "dmesg-20261130.log", None),
    ("python-dir", "venv/lib/python3.10/site.py", None),
    ("lib64", "lib64/x.so", None),
]


@pytest.mark.parametrize(("path", "host"), [c[1:] for c in HOST_PATHS], ids=[c[0] for c in HOST_PATHS])
def test_host_of_path(path: str, host: str | None) -> None:
    assert host_of_path(path) == host


@pytest.mark.parametrize(
    ("token", "ok"),
    [
        ("gpu-node-017", True),
        ("node017", True),
        ("h100-2", True),
        ("n001", True),
        ("tj5-sc-ai-h800r-dev01", True),
        ("eth0", False),
        ("gpu0", False),
        ("python3", False),
        ("fp16", False),
        ("rank3", False),
        ("logs", False),
        ("1node", False),
        ("node-", False),
        ("nöde1", False),
    ],
    ids=lambda v: str(v),
)
def test_looks_like_host(token: str, ok: bool) -> None:
    assert looks_like_host(token) is ok
