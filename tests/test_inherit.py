"""Clock inheritance and the line index it reads through (issue 16): the same answers as reading back from the
last buffer boundary, for any file, any finding line and any rank (property-tested against the old algorithm)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crashcart.ingest.bundle import Bundle, LineIndex, _read_back, canonical_line
from crashcart.scan.findings import _Inheritor
from crashcart.scan.matcher import make_matcher
from crashcart.scan.reader import scan_file
from crashcart.settings import BundleLimits
from crashcart.text import clock, prefix

MAX_LINE = 96  # small, so that generated lines are often cut (giant lines)
LIMITS = BundleLimits(max_line_bytes=MAX_LINE)
CTX = clock.ClockContext(year=2026, boot_time=datetime(2026, 11, 28, 3, 0, tzinfo=UTC))


class OldInheritor:
    """The algorithm before issue 16, kept as the oracle: re-read the lines before the finding from the
    nearest buffer boundary, newest first, and take the first clock on a line of the same rank."""

    LOOKBACK = 40

    def __init__(self, bundle: Bundle, path: str, ctx: clock.ClockContext) -> None:
        self._bundle, self._path, self._ctx = bundle, path, ctx

    def __call__(self, line: int, rank: int | None) -> datetime | None:
        start = max(1, line - self.LOOKBACK)
        for text in reversed(self._bundle.read_lines(self._path, start, line - 1)):
            if prefix.view(text).rank != rank:
                continue
            parsed = clock.parse_time(text, self._ctx)
            if parsed is not None and parsed.time is not None:
                return parsed.time
        return None


_PIECES = [
    "2026-11-30 02:13:07,120 INFO step 10 loss 3.2",
    "[rank3]:[E1130 02:23:07.100000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout",
    "[rank0]: 2026-11-30T02:20:00Z iteration 5",
    "[rank3]: frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233",
    "[  12345.678901] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "gpu-node-1:9000:9100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
    "gpu-node-1:9000:9100 [0] NCCL WARN Call to ibv_modify_qp failed",
    "Nov 30 02:13:07 gpu-node-017 kernel: NVRM: GPU at PCI:0000:3b:00",
    "\x1b[31m2026-11-30 02:14:00\x1b[0m coloured",
    '  File "train.py", line 12, in <module>',
    "",
    "x" * 300,
    "2026-11-30 02:15:00 " + "y" * 200,
]
lines_st = st.lists(
    st.one_of(st.sampled_from(_PIECES), st.text(alphabet="ab [0-9]:.\r", max_size=20)).map(str.encode),
    min_size=1,
    max_size=150,
)


def _write(tmp: Path, lines: list[bytes], trailing_newline: bool) -> tuple[Path, list[int]]:
    data = b"\n".join(lines) + (b"\n" if trailing_newline else b"")
    path = tmp / "rank-3.log"
    path.write_bytes(data)
    offsets, pos = [], 0
    for ln in lines:
        offsets.append(pos)
        pos += len(ln) + 1
    return path, offsets


def _bundles(path: Path, offsets: list[int], known: set[int]) -> tuple[Bundle, Bundle]:
    """The same file twice: indexed by buffer boundaries only (before), and with ``known`` line offsets too."""
    scanned = scan_file(make_matcher("re"), path, path.name, buffer_bytes=256, max_line_bytes=MAX_LINE)
    n = len(offsets)
    out = []
    for extra in ({}, {line: offsets[line - 1] for line in known if 1 <= line <= n}):
        b = Bundle(path.parent, [], {path.name: path}, [], None, LIMITS, [], 2026)
        b.set_index(path.name, LineIndex(checkpoints=list(scanned.checkpoints), lines=scanned.lines, known=extra))
        out.append(b)
    return out[0], out[1]


@hsettings(max_examples=150, deadline=None)
@given(
    lines=lines_st,
    trailing=st.booleans(),
    queries=st.lists(st.tuples(st.integers(1, 160), st.sampled_from([None, 0, 3])), min_size=1, max_size=25),
    known_share=st.sampled_from([0.0, 0.3, 1.0]),
)
def test_inherited_clock_equals_the_old_read_back(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[bytes],
    trailing: bool,
    queries: list[tuple[int, int | None]],
    known_share: float,
) -> None:
    path, offsets = _write(tmp_path_factory.mktemp("inherit"), lines, trailing)
    known = {q for q, _ in queries if (q * 7919) % 10 < known_share * 10}
    old_b, new_b = _bundles(path, offsets, known)
    old, new = OldInheritor(old_b, path.name, CTX), _Inheritor(new_b, path.name, CTX)
    for line, rank in (
        sorted(queries, key=lambda q: q[0]) + queries
    ):  # in line order (as build_findings asks), then shuffled
        assert new(line, rank) == old(line, rank), (line, rank)


@hsettings(max_examples=150, deadline=None)
@given(lines=lines_st, trailing=st.booleans(), line=st.integers(1, 160), count=st.integers(1, 60))
def test_lines_before_equals_read_lines(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], trailing: bool, line: int, count: int
) -> None:
    path, offsets = _write(tmp_path_factory.mktemp("before"), lines, trailing)
    old_b, new_b = _bundles(path, offsets, {line, line - 3})
    want = old_b.read_lines(path.name, max(1, line - count), line - 1)
    assert new_b.lines_before(path.name, line, count) == want
    assert old_b.lines_before(path.name, line, count) == want  # offset found by counting on from a boundary
    assert new_b.read_lines(path.name, max(1, line - count), line + 2) == old_b.read_lines(
        path.name, max(1, line - count), line + 2
    )


@pytest.mark.parametrize("buffer_bytes", [300, 64 * 1024])  # the per-hit path and the vectorised one
def test_scanner_records_the_offset_of_every_kept_hit_line(tmp_path: Path, buffer_bytes: int) -> None:
    lines = []
    for i in range(3000):
        lines.append(
            f"gpu-node-1:9000:9100 [0] NCCL WARN retry {i}" if i % 3 == 0 else f"step {i} ok " + "z" * (i % 50)
        )
    path, offsets = _write(tmp_path, [ln.encode() for ln in lines], True)
    fs = scan_file(make_matcher(), path, path.name, buffer_bytes=buffer_bytes, max_line_bytes=MAX_LINE)
    hit_lines = {line for _, line, _ in fs.hits}
    assert len(hit_lines) == 1000
    assert fs.offsets == {line: offsets[line - 1] for line in hit_lines}


def test_a_finding_reads_only_the_lines_before_it(tmp_path: Path) -> None:
    """The read-back starts at the finding's line: a 1 MiB buffer of clock-less lines before it is not read."""
    filler = [b"gpu-node-1:9000:9100 [0] NCCL INFO opCount 1 sendbuff 0x7f00" for _ in range(40_000)]
    lines = [b"2026-11-30 02:13:07,000 INFO start", *filler, b"2026-11-30 02:14:00,000 INFO later", b"no clock here"]
    path, offsets = _write(tmp_path, lines, True)
    bundle = Bundle(tmp_path, [], {path.name: path}, [], None, LIMITS, [], 2026)
    n = len(lines)
    bundle.set_index(path.name, LineIndex(checkpoints=[(1, 0)], lines=n, known={n: offsets[n - 1]}))
    got = _Inheritor(bundle, path.name, CTX)(n, None)
    assert got == datetime(2026, 11, 30, 2, 14, tzinfo=UTC)
    assert bundle._index[path.name].known == {n: offsets[n - 1]}  # nothing had to be located by reading forward


@hsettings(max_examples=200, deadline=None)
@given(
    lines=lines_st,
    line=st.integers(2, 160),
    count=st.integers(1, 60),
    block=st.sampled_from([1, 7, 64, 1024]),
    budget=st.sampled_from([64, 4096, 1 << 20]),
)
def test_reading_backwards_in_small_blocks_equals_reading_forwards(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], line: int, count: int, block: int, budget: int
) -> None:
    path, offsets = _write(tmp_path_factory.mktemp("back"), lines, True)
    if line > len(lines):
        return
    bundle = Bundle(path.parent, [], {path.name: path}, [], None, LIMITS, [], 2026)
    want = bundle.read_lines(path.name, max(1, line - count), line - 1)
    fd = os.open(path, os.O_RDONLY)
    try:
        raw = _read_back(fd, offsets[line - 1], line - max(1, line - count), block=block, budget=budget)
    finally:
        os.close(fd)
    got = None if raw is None else [canonical_line(r, MAX_LINE) for r in raw]
    assert got is None or got == want
    if budget >= 1 << 20:
        assert got == want
