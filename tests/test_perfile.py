"""The per-file shortcuts of a bundle of thousands of files give the answers of the work they skip.

- ``clock.detect_clock`` parses only the lines one joined search says may hold a time (and none when too few
  may): the oracle is the old loop that parses every line;
- ``prefix.may_name_rank`` is False only where ``prefix.view`` finds no rank;
- ``scan.run.Tails`` reads a file's last lines back: the same as the reader's ``FileScan.tail``;
- classification keeps no heads: the bundle's year is that of the first file whose head gives one;
- past 128 files the pool holds of a scan only what is itemised (``scan.run.trim``).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crashcart.ingest.bundle import canonical_line, open_bundle
from crashcart.models import ClockKind
from crashcart.scan.matcher import MatcherName
from crashcart.scan.reader import FileScan, scan_file
from crashcart.scan.run import Tails, itemised_per_file, trim
from crashcart.settings import Settings
from crashcart.text import clock, prefix


def old_detect_clock(lines: list[str]) -> ClockKind:
    """``detect_clock`` before it skipped lines: every sampled line through ``parse_time``."""
    sample = list(itertools.islice((line for line in lines if line.strip()), 2000))
    total = len(sample)
    counts: Counter[ClockKind] = Counter()
    order: tuple[ClockKind, ...] = ("absolute", "no_year", "boot_relative")
    timed = 0
    for seen, line in enumerate(sample, 1):
        parsed = clock.parse_time(line)
        if parsed is None:
            continue
        counts[parsed.kind] += 1
        timed += 1
        if timed * 5 >= total and clock._decided(counts, parsed.kind, total - seen, order):
            return parsed.kind
    if total == 0 or timed * 5 < total:
        return "none"
    return max(order, key=lambda kind: counts[kind])


PIECES = [
    "2026-12-01 08:00:03,123 INFO step",
    "[2026-12-01 00:00:03] iteration 3/ 250000 |",
    "E1130 02:13:07.408271 123 ProcessGroupNCCL.cpp:1",
    "Nov 30 02:13:07 gpu-node-017 kernel: NVRM: Xid",
    "[ 1234.567890] NVRM: Xid (PCI:0000:18:00): 79",
    "kern  :err   : [  12.000001] oops",
    '{"ts": 1764555187.5, "msg": "x"}',
    '{"time"\u2028: 1764555187}',
    '"t" : "1764555187123"',
    "gpu-node-002:9017:9117 [1] NCCL INFO Channel 03/0 : 17[1] -> 20[4]",
    "12:34:56",
    "1:2:3 not a time",
    "99:99:99",
    "Feb 30 25:61:00 nothing",
    "[rank3]: 2026-12-01T00:00:01Z up",
    "   ",
    "",
    "plain words",
    "x" * 9000 + " 2026-12-01 00:00:00",
]
LINES = st.lists(
    st.one_of(st.sampled_from(PIECES), st.text(alphabet='0123456789:[]. "tsime{}Tx-\u2028', max_size=40)),
    max_size=60,
)


@hsettings(max_examples=400, deadline=None)
@given(LINES)
def test_detect_clock_is_the_parse_every_line_answer(lines: list[str]) -> None:
    assert clock.detect_clock(lines) == old_detect_clock(lines)


def test_detect_clock_on_a_mostly_unclocked_head() -> None:
    nccl = ["gpu-node-002:9017:9117 [1] NCCL INFO Channel 03/0 : 17[1] -> 20[4] via P2P/IPC/read"] * 90
    clocked = ["[2026-12-01 00:00:03] iteration 3/ 250000 |"] * 19
    for lines in (nccl + clocked, nccl + clocked * 2, clocked + nccl, nccl[:10] + clocked):
        assert clock.detect_clock(lines) == old_detect_clock(lines)


RANKISH = st.one_of(
    st.sampled_from(
        [
            "[rank12]: boom",
            "  3: [default1]:[rank7]: x",
            "[default2]: y",
            "[1,27]<stderr>: z",
            "gpu-node-017: [rank4]: up",
            "(Worker pid=1, ip=10.0.0.1) [rank2]: w",
            "[pod/trainer-0/main] [rank5]: v",
            "10.0.0.1: 12: no",
            '{"log": "7: from srun"}',
            '{"log": "[1,3]\\u003cstdout\\u003e: mpi"}',
            "gpu-node-002:9017:9117 [1] NCCL INFO",
        ]
    ),
    st.text(alphabet='[]rank0123456789:,<>stdoue{}"log \t-', max_size=30),
)


@hsettings(max_examples=500, deadline=None)
@given(RANKISH)
def test_a_line_said_to_name_no_rank_names_none(line: str) -> None:
    if not prefix.may_name_rank(line):
        assert prefix.view(line).rank is None
    assert prefix.may_name_rank(json.dumps({"log": line}))


class _NoHits:
    name: MatcherName = "re"

    def scan(self, buf: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
        return []

    def only(self, sigs: frozenset[int]) -> _NoHits:
        return self


class _Files:
    """Just what ``Tails`` asks of a bundle."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self._paths = paths
        self.limits = Settings().bundle_limits

    def physical(self, path: str) -> Path | None:
        return self._paths.get(path)


LINE = st.one_of(
    st.sampled_from([b"", b"short", b"\x1b[31mred\x1b[0m", b"caf\xc3\xa9 \xff", b"a\r"]),
    st.binary(max_size=3000).map(lambda b: b.replace(b"\n", b" ")),
    st.integers(min_value=60_000, max_value=70_000).map(lambda n: b"y" * n),
)


@hsettings(max_examples=60, deadline=None)
@given(st.lists(LINE, max_size=120), st.booleans())
def test_tails_read_back_are_the_readers_tails(tmp_path_factory: object, lines: list[bytes], newline: bool) -> None:
    root = tmp_path_factory.mktemp("tails")  # type: ignore[attr-defined]
    data = b"\n".join(lines) + (b"\n" if newline and lines else b"")
    phys = root / "rank-0.log"
    phys.write_bytes(data)
    fs = scan_file(_NoHits(), phys, "rank-0.log", buffer_bytes=4096, max_line_bytes=65536)
    tails = Tails(_Files({"rank-0.log": phys}))  # type: ignore[arg-type]
    tails.add("rank-0.log", fs.nbytes, fs.lines)
    assert tails["rank-0.log"] == [(n, canonical_line(raw, 65536)) for n, raw in fs.tail]
    assert dict(tails) == {"rank-0.log": tails["rank-0.log"]} and len(tails) == 1


def test_the_year_is_the_first_head_that_gives_one(tmp_path: Path, settings: Settings) -> None:
    root = tmp_path / "b"
    root.mkdir()
    (root / "a.log").write_text("no clock here\n" * 10)
    (root / "b.log").write_text("Nov 30 02:13:07 no year\n" * 10)
    (root / "c.log").write_text("2024-11-30 02:13:07 first with a year\n" * 10)
    (root / "d.log").write_text("2025-11-30 02:13:07 later\n" * 10)
    with open_bundle(root, settings.work_dir, settings.bundle_limits) as b:
        assert b.year == 2024


HITS = st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=80)


@hsettings(max_examples=300, deadline=None)
@given(HITS, st.lists(st.integers(0, 5), min_size=4, max_size=4))
def test_trim_keeps_each_signatures_first_and_last(hits: list[tuple[int, bool]], keep: list[int]) -> None:
    fs = FileScan(path="r.log")
    for n, (sig, raw) in enumerate(hits, start=1):
        fs.hits.append((sig, n, b"x" if raw else None))
        fs.offsets[n] = 10 * n
    before = list(fs.hits)
    trim(fs, keep)
    want = []
    for sig in range(4):
        mine = [h for h in before if h[0] == sig]
        k = keep[sig]
        want += mine if len(mine) <= 2 * k else mine[:k] + mine[len(mine) - k :]
    assert fs.hits == sorted(want, key=lambda h: h[1])  # file order kept
    assert fs.dropped == len(before) - len(fs.hits)
    assert fs.offsets == {h[1]: 10 * h[1] for h in fs.hits}


@hsettings(max_examples=300, deadline=None)
@given(HITS, st.lists(st.integers(0, 5), min_size=4, max_size=4), st.lists(st.integers(0, 3), min_size=4, max_size=4))
def test_a_trim_of_a_trim_is_the_one_trim(hits: list[tuple[int, bool]], keep: list[int], more: list[int]) -> None:
    """Why ``scan`` may trim again for the final count a scan the pool trimmed while fewer files were offered."""
    once, twice = FileScan(path="r.log"), FileScan(path="r.log")
    for fs in (once, twice):
        for n, (sig, raw) in enumerate(hits, start=1):
            fs.hits.append((sig, n, b"x" if raw else None))
            fs.offsets[n] = 10 * n
    trim(twice, [k + m for k, m in zip(keep, more, strict=True)])
    trim(twice, keep)
    trim(once, keep)
    assert (twice.hits, twice.offsets, twice.dropped) == (once.hits, once.offsets, once.dropped)


def test_more_files_never_itemise_more() -> None:
    """Why a scan trimmed while fewer files were offered holds all that the final count itemises."""
    last = itemised_per_file(1, 200)
    for files in range(2, 20_000, 7):
        now = itemised_per_file(files, 200)
        assert now[0] <= last[0] and now[1] <= last[1] and min(now) >= 2
        last = now
