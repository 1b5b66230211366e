"""Past ``FINDINGS_BUDGET`` files the pool reads a small file keeping only what is itemised: the same scan as
reading it keeping ``hit_limits`` of the full caps and trimming it after (``scan.budget.trim``), as it did."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crashcart.scan.budget import FINDINGS_BUDGET, hit_limits, itemised_per_file, trim
from crashcart.scan.matcher import make_matcher
from crashcart.scan.reader import BACKSCAN_MIN_BYTES, scan_file
from crashcart.scan.run import ScanPool
from crashcart.settings import Settings

LINES = [  # lines of a Megatron rank log under NCCL_DEBUG=INFO: context signatures every step, a few failures
    b"gpu-node-017:4003:4103 [1] NCCL INFO comm 0x5581a2c0 rank 3 nranks 4 cudaDev 1 nvmlDev 1 busId 3b000 "
    b"commId 0x9f1c2d3e4b5a6978 - Init COMPLETE",
    b"gpu-node-017:4003:4103 [1] NCCL INFO NCCL version 2.21.5+cuda12.4",
    b" [2026-11-30 02:13:07] iteration      120/  500000 | consumed samples:        15360 | elapsed time per "
    b"iteration (ms): 1612.3 | learning rate: 3.000E-04 | global batch size:   128 | lm loss: 2.913E+00 |",
    b"[rank3]:[E1130 02:23:07.408271257 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation "
    b"timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) "
    b"ran for 600060 milliseconds before timing out.",
    b"Traceback (most recent call last):",
    b"RuntimeError: CUDA error: an illegal memory access was encountered",
    b"plain line that matches nothing",
    b"",
]
MATCHER = make_matcher(Settings().scan.matcher)
CAP = Settings().scan.max_findings_per_signature_per_file


@hsettings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(range(len(LINES))), max_size=1500),
    st.integers(FINDINGS_BUDGET + 1, 20_000),
    st.sampled_from([4096, 65536, 1024 * 1024]),
)
def test_reading_with_the_itemised_limits_is_reading_all_and_trimming(
    tmp_path_factory: object, picks: list[int], files: int, buffer: int
) -> None:
    phys = tmp_path_factory.mktemp("keep") / "rank-3.log"  # type: ignore[attr-defined]
    phys.write_bytes(b"\n".join(LINES[i] for i in picks) + b"\n")
    assert phys.stat().st_size < BACKSCAN_MIN_BYTES
    small = hit_limits(*itemised_per_file(files, CAP))
    args = {"buffer_bytes": buffer, "max_line_bytes": 65536, "keep_tail": False}
    full = scan_file(MATCHER, phys, "rank-3.log", keep_hits=hit_limits(CAP), **args)  # type: ignore[arg-type]
    trim(full, small)
    got = scan_file(MATCHER, phys, "rank-3.log", keep_hits=small, **args)  # type: ignore[arg-type]
    assert got == full


def test_the_pool_keeps_the_full_limits_for_a_large_file_or_a_small_bundle() -> None:
    s = Settings().scan
    with ScanPool(s, 65536) as pool:
        assert pool._keep_for(1000) == hit_limits(CAP)  # no more files offered than the budget
        pool.offered = 10_000
        assert pool._keep_for(1000) == hit_limits(*itemised_per_file(10_000, CAP))
        assert pool._keep_for(BACKSCAN_MIN_BYTES) == hit_limits(CAP)  # read back from its end: trimmed after
        assert pool._keep_for(None) == hit_limits(CAP)
