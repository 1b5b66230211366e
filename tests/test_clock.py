"""Tests for crashcart.text.clock: timestamps of real GPU-cluster log formats, years, boot time, kinds.

Every format is checked against an exact UTC datetime; hypothesis checks parse_time never raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crashcart.models import ClockKind
from crashcart.text.clock import ClockContext, ParsedTime, detect_clock, infer_year, parse_time, to_iso


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


T = utc(2026, 11, 30, 2, 13, 7)
YEAR = ClockContext(year=2026)

ABSOLUTE = [
    ("iso-z", "2026-11-30T02:13:07Z hello", T, "2026-11-30T02:13:07Z"),
    ("iso-micro", "2026-11-30T02:13:07.123456Z x", utc(2026, 11, 30, 2, 13, 7, 123456), None),
    ("iso-offset-colon", "2026-11-30T02:13:07+00:00 x", T, None),
    ("iso-offset-plain", "2026-11-30T02:13:07+0000 x", T, None),
    ("iso-offset-converted", "2026-11-30T04:13:07+02:00 x", T, None),
    ("iso-negative-offset", "2026-11-29T21:13:07-05:00 x", T, None),
    ("iso-space", "2026-11-30 02:13:07 x", T, None),
    ("iso-space-offset", "2026-11-30 02:13:07 +0000 x", T, None),
    ("iso-utc-word", "2026-11-30 02:13:07 UTC x", T, None),
    (
        "python-logging",
        "2026-11-30 02:13:07,123 - root - ERROR - boom",
        utc(2026, 11, 30, 2, 13, 7, 123000),
        None,
    ),
    ("go-log", "2026/11/30 02:13:07 dial tcp: timeout", T, None),
    ("journal-short-iso", "2026-11-30T02:13:07+0000 gpu-node-017 kernel: NVRM: Xid", T, None),
    (
        "journal-short-iso-precise",
        "2026-11-30T02:13:07.123456+0000 gpu-node-017 kernel: x",
        utc(2026, 11, 30, 2, 13, 7, 123456),
        None,
    ),
    ("rfc5424", "<34>1 2026-11-30T02:13:07.003Z host app 1 - - x", utc(2026, 11, 30, 2, 13, 7, 3000), None),
    ("dmesg-T", "[Mon Nov 30 02:13:07 2026] NVRM: Xid (PCI:0000:3b:00): 79", T, "Mon Nov 30 02:13:07 2026"),
    ("dmesg-T-padded-day", "[Tue Nov  3 02:13:07 2026] x", utc(2026, 11, 3, 2, 13, 7), None),
    ("dmesg-iso", "2026-11-30T02:13:07,123456+00:00 NVRM: x", utc(2026, 11, 30, 2, 13, 7, 123456), None),
    (
        "slurm-bracket",
        "[2026-11-30T02:13:07.123] error: Node failure",
        utc(2026, 11, 30, 2, 13, 7, 123000),
        None,
    ),
    (
        "slurmstepd-cancelled",
        "slurmstepd: error: *** JOB 1 ON h CANCELLED AT 2026-11-30T02:13:07 ***",
        T,
        "2026-11-30T02:13:07",
    ),
    (
        "srun-slurmstepd",
        "3: slurmstepd: error: *** STEP 12.0 ON gpu-node-017 CANCELLED AT 2026-11-30T02:13:07 DUE TO TIME LIMIT ***",
        T,
        None,
    ),
    (
        "sacct",
        "123456       train   FAILED  2026-11-30T01:00:00 2026-11-30T02:13:07",
        utc(2026, 11, 30, 1),
        None,
    ),
    ("k8s-json", '{"time":"2026-11-30T02:13:07.123Z","msg":"x"}', utc(2026, 11, 30, 2, 13, 7, 123000), None),
    ("k8s-event", '"lastTimestamp": "2026-11-30T02:13:07Z",', T, None),
    (
        "epoch-float",
        '{"ts": 1764468787.12, "msg": "x"}',
        utc(2025, 11, 30, 2, 13, 7, 120000),
        "1764468787.12",
    ),
    ("epoch-int", '{"time": 1764468787}', utc(2025, 11, 30, 2, 13, 7), None),
    ("epoch-ms", '{"timestamp": 1764468787123}', utc(2025, 11, 30, 2, 13, 7, 123000), None),
    ("epoch-ns", '{"ts": 1764468787123456789}', utc(2025, 11, 30, 2, 13, 7, 123456), None),
    ("megatron", "[2026-11-30 02:13:07] iteration 100/1000 | loss 2.1", T, "2026-11-30 02:13:07"),
    ("after-rank-prefix", "[rank3]:2026-11-30 02:13:07,000 INFO x", T, None),
    ("after-srun-prefix", "27: 2026-11-30 02:13:07 x", T, None),
    ("after-tee-prefix", "[default0]:[rank12]:[2026-11-30 02:13:07] x", T, None),
    ("glog-with-year", "E20261130 02:13:07.408271 1 f.cc:1] x", utc(2026, 11, 30, 2, 13, 7, 408271), None),
    ("earliest-wins", "2026-11-30T02:13:07Z job ended at 2026-12-01T00:00:00Z", T, None),
    # torchelastic's failure summary (multiprocessing/errors/__init__.py: time.strftime("%Y-%m-%d_%H:%M:%S"))
    ("torchelastic-summary", "  time      : 2026-11-30_02:13:07", T, "2026-11-30_02:13:07"),
]


@pytest.mark.parametrize(("line", "expected", "text"), [c[1:] for c in ABSOLUTE], ids=[c[0] for c in ABSOLUTE])
def test_absolute_formats(line: str, expected: datetime, text: str | None) -> None:
    got = parse_time(line)
    assert got is not None
    assert got.kind == "absolute"
    assert got.time == expected
    assert got.time is not None and got.time.utcoffset() == timedelta(0)
    assert got.boot_seconds is None
    if text is not None:
        assert line[got.span[0] : got.span[1]] == text


NO_YEAR = [
    (
        "glog",
        "E1130 02:13:07.408271 4015698 file.cc:12] x",
        utc(2026, 11, 30, 2, 13, 7, 408271),
        "1130 02:13:07.408271",
    ),
    (
        "c10d-nanoseconds",
        "[rank0]:[E1130 02:13:07.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, Timeout(ms)=600000)",
        utc(2026, 11, 30, 2, 13, 7, 408271),
        "1130 02:13:07.408271257",
    ),
    (
        "c10d-unpadded-month",
        "[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] x",
        utc(2026, 6, 26, 6, 24, 44, 903881),
        None,
    ),
    (
        "c10d-warning",
        "[rank4]:[W321 02:07:08.414640780 ProcessGroupNCCL.cpp:1] x",
        utc(2026, 3, 21, 2, 7, 8, 414640),
        None,
    ),
    (
        "torchrun",
        "W0616 00:37:22.830000 4015698 torch/distributed/elastic/agent/server/api.py:719] "
        "Received Signals.SIGTERM death signal, shutting down workers",
        utc(2026, 6, 16, 0, 37, 22, 830000),
        None,
    ),
    ("glog-info", "I1130 02:13:07.000001 1 f.cc:1] x", utc(2026, 11, 30, 2, 13, 7, 1), None),
    ("glog-fatal", "F1130 02:13:07.5 1 f.cc:1] x", utc(2026, 11, 30, 2, 13, 7, 500000), None),
    (
        "nested-srun-c10d",
        "27: [rank27]:[E1130 02:13:07.408271257 ProcessGroupNCCL.cpp:607] x",
        utc(2026, 11, 30, 2, 13, 7, 408271),
        None,
    ),
    (
        "syslog",
        "Nov 30 02:13:07 gpu-node-017 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
        T,
        "Nov 30 02:13:07",
    ),
    (
        "syslog-padded-day",
        "Nov  3 02:13:07 gpu-node-017 systemd[1]: x",
        utc(2026, 11, 3, 2, 13, 7),
        "Nov  3 02:13:07",
    ),
    (
        "journal-short-precise",
        "Nov 30 02:13:07.123456 gpu-node-017 kernel: x",
        utc(2026, 11, 30, 2, 13, 7, 123456),
        None,
    ),
    ("kern-log-with-dmesg-stamp", "Nov 30 02:13:07 h kernel: [12345.678901] NVRM: x", T, None),
    ("pdsh-syslog", "gpu-node-017: Nov 30 02:13:07 gpu-node-017 kernel: x", T, None),
    # c10d's glog prefix after the rank prefix, with nanoseconds (ProcessGroupNCCL, socket.cpp) and torchrun's
    # microseconds (torch/distributed/elastic/utils/logging.py): the clocks of real PyTorch logs
    (
        "c10d-rank-prefix",
        "[rank3]:[E1130 02:13:07.519017581 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation",
        utc(2026, 11, 30, 2, 13, 7, 519017),
        None,
    ),
    (
        "c10d-socket",
        "[I1130 02:13:07.330758816 socket.cpp:955] [c10d] The client socket has timed out after 900000ms",
        utc(2026, 11, 30, 2, 13, 7, 330758),
        None,
    ),
    (
        "torchrun-agent",
        "W1130 02:13:07.281000 1234 torch/distributed/run.py:793] ",
        utc(2026, 11, 30, 2, 13, 7, 281000),
        None,
    ),
]


@pytest.mark.parametrize(("line", "expected", "text"), [c[1:] for c in NO_YEAR], ids=[c[0] for c in NO_YEAR])
def test_no_year_formats(line: str, expected: datetime, text: str | None) -> None:
    got = parse_time(line, YEAR)
    assert got is not None
    assert got.kind == "no_year"
    assert got.time == expected
    if text is not None:
        assert line[got.span[0] : got.span[1]] == text
    unresolved = parse_time(line)
    assert unresolved is not None
    assert unresolved == ParsedTime(None, "no_year", None, got.span)


ROLLOVER = [
    # (line, context, expected)
    (
        "dec-before-new-year",
        "Dec 31 23:59:59 h kernel: x",
        ClockContext(reference=utc(2027, 1, 1, 3)),
        utc(2026, 12, 31, 23, 59, 59),
    ),
    (
        "jan-after-new-year",
        "Jan  1 00:05:00 h kernel: x",
        ClockContext(reference=utc(2027, 1, 1, 3)),
        utc(2027, 1, 1, 0, 5),
    ),
    (
        "year-rolled-back",
        "E1231 23:59:59.000000 1 f.cc:1] x",
        ClockContext(year=2027, reference=utc(2027, 1, 1, 3)),
        utc(2026, 12, 31, 23, 59, 59),
    ),
    (
        "year-behind-reference",
        "E0101 00:05:00.000000 1 f.cc:1] x",
        ClockContext(year=2026, reference=utc(2027, 1, 1, 3)),
        utc(2027, 1, 1, 0, 5),
    ),
    (
        "within-one-day",
        "Jan  2 01:00:00 h kernel: x",
        ClockContext(reference=utc(2027, 1, 1, 3)),
        utc(2027, 1, 2, 1),
    ),
    ("stale-reference", "Nov 30 02:13:07 h kernel: x", ClockContext(year=2026, reference=utc(2029, 5, 1)), T),
    ("naive-reference", "Nov 30 02:13:07 h kernel: x", ClockContext(reference=datetime(2026, 12, 1)), T),
    ("year-only", "Dec 31 23:59:59 h kernel: x", ClockContext(year=2027), utc(2027, 12, 31, 23, 59, 59)),
    ("leap-day", "Feb 29 12:00:00 h kernel: x", ClockContext(year=2028), utc(2028, 2, 29, 12)),
]


@pytest.mark.parametrize(("line", "ctx", "expected"), [c[1:] for c in ROLLOVER], ids=[c[0] for c in ROLLOVER])
def test_year_resolution(line: str, ctx: ClockContext, expected: datetime) -> None:
    got = parse_time(line, ctx)
    assert got is not None and got.kind == "no_year"
    assert got.time == expected


def test_leap_day_in_common_year_is_unresolved() -> None:
    got = parse_time("Feb 29 12:00:00 h kernel: x", ClockContext(year=2027))
    assert got is not None and got.kind == "no_year" and got.time is None


BOOT = [
    ("dmesg", "[  12345.678901] NVRM: Xid (PCI:0000:3b:00): 79", 12345.678901, "12345.678901"),
    ("dmesg-zero", "[    0.000000] Linux version 6.8.0", 0.0, None),
    ("dmesg-x", "kern  :err   : [  12345.678901] NVRM: x", 12345.678901, None),
    ("journal-monotonic", "[12345.678901] gpu-node-017 kernel: x", 12345.678901, None),
    ("pdsh-dmesg", "gpu-node-017: [  12345.678901] NVRM: x", 12345.678901, None),
    ("srun-dmesg", "3: [  12345.678901] NVRM: x", 12345.678901, None),
]


@pytest.mark.parametrize(("line", "seconds", "text"), [c[1:] for c in BOOT], ids=[c[0] for c in BOOT])
def test_boot_relative(line: str, seconds: float, text: str | None) -> None:
    got = parse_time(line)
    assert got is not None
    assert got.kind == "boot_relative"
    assert got.time is None
    assert got.boot_seconds == pytest.approx(seconds)
    if text is not None:
        assert line[got.span[0] : got.span[1]] == text
    boot = utc(2026, 11, 30)
    aligned = parse_time(line, ClockContext(boot_time=boot))
    assert aligned is not None and aligned.kind == "boot_relative"
    assert aligned.time == boot + timedelta(seconds=int(seconds), microseconds=round(seconds % 1 * 1e6))


def test_boot_relative_exact_wall_time() -> None:
    got = parse_time("[ 8587.000001] NVRM: Xid", ClockContext(boot_time=utc(2026, 11, 30)))
    assert got is not None and got.time == utc(2026, 11, 30, 2, 23, 7, 1)


def test_boot_time_with_offset_is_converted() -> None:
    boot = datetime(2026, 11, 30, 5, 0, tzinfo=timezone(timedelta(hours=3)))
    got = parse_time("[   10.000000] x", ClockContext(boot_time=boot))
    assert got is not None and got.time == utc(2026, 11, 30, 2, 0, 10)


NOT_TIMES = [
    (
        "nccl-warn",
        "H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion with error 12",
    ),
    ("nccl-info", "gpu-node-017:1234:1234 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>"),
    ("pci-id", "NVRM: GPU at PCI:0000:3b:00: GPU-1234"),
    ("pci-full", "0000:3b:00.0 3D controller: NVIDIA Corporation"),
    ("pci-numeric", "GPU 00000000:18:00.0 has fallen off the bus; 0000:18:00:00"),
    ("seqnum", "WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, Timeout(ms)=600000)"),
    ("short-time", "elapsed 02:13 since start"),
    ("old-c10d", "[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout"),
    ("feb-30-iso", "2026-02-30T01:00:00Z x"),
    ("feb-30-syslog", "Feb 30 01:00:00 h kernel: x"),
    ("month-13", "2026-13-01 00:00:00 x"),
    ("hour-25", "2026-11-30 25:00:00 x"),
    ("glog-bad-month", "E1330 02:13:07.408271 1 f.cc:1] x"),
    ("glog-5-digits", "E12345 02:13:07.408271 1 f.cc:1] x"),
    ("glog-no-fraction", "E1130 02:13:07 1 f.cc:1] x"),
    ("word-before-glog", "FOOE1130 02:13:07.408271"),
    ("epoch-not-json", "step 1764468787 done"),
    ("epoch-out-of-range", '{"ts": 9999999999}'),
    ("epoch-other-key", '{"step": 1764468787}'),
    ("tensor", "tensor([1.000000]) loss"),
    ("bracket-float-mid-line", "value [  12345.678901] mid-line"),
    ("version", "NCCL version 2.21.5+cuda12.4"),
    ("traceback", 'File "/usr/lib/python3.10/site-packages/torch/distributed/c10d.py", line 12'),
    ("empty", ""),
    ("long-digits", "12026-11-30T02:13:07Z"),
]


@pytest.mark.parametrize("line", [c[1] for c in NOT_TIMES], ids=[c[0] for c in NOT_TIMES])
def test_not_times(line: str) -> None:
    assert parse_time(line, YEAR) is None


def test_invalid_timestamp_skipped_for_a_later_valid_one() -> None:
    got = parse_time("2026-02-30T01:00:00Z then 2026-11-30T02:13:07Z")
    assert got is not None and got.time == T and got.span == (26, 46)


def test_long_line_finds_late_timestamp() -> None:
    line = "x" * 5000 + " CANCELLED AT 2026-11-30T02:13:07 ***"
    got = parse_time(line)
    assert got is not None and got.time == T


def test_epoch_field_before_later_clock() -> None:
    line = '{"msg": "' + "y" * 200 + '", "ts": 1764468787, "note": "at 2026-11-30T09:00:00Z"}'
    got = parse_time(line)
    assert got is not None and got.time == utc(2025, 11, 30, 2, 13, 7)


@given(st.text())
def test_parse_time_never_raises(line: str) -> None:
    got = parse_time(line, ClockContext(year=2026, reference=utc(2026, 12, 1), boot_time=utc(2026, 11, 30)))
    if got is not None:
        assert got.kind in ("absolute", "no_year", "boot_relative")
        assert 0 <= got.span[0] < got.span[1] <= len(line)


DIGITS_AND_PUNCT = st.text(alphabet='0123456789:-.,T Z+[]EIWF/"tsNovDec', max_size=60)


@given(DIGITS_AND_PUNCT, st.sampled_from([None, 1, 2026, 9999]))
def test_parse_time_never_raises_on_time_like_text(line: str, year: int | None) -> None:
    ctx = ClockContext(year=year, reference=datetime(9999, 12, 31), boot_time=datetime(9999, 12, 31))
    got = parse_time(line, ctx)
    if got is not None and got.time is not None:
        assert got.time.tzinfo is not None


DETECT = [
    (
        "absolute",
        ["2026-11-30 02:13:07,123 INFO x", "2026-11-30 02:13:08,123 INFO y", "  continued"],
        "absolute",
    ),
    (
        "no-year",
        ["[rank0]:[E1130 02:13:07.408271257 P.cpp:1] x", "[rank0]:[E1130 02:13:08.1 P.cpp:1] y"],
        "no_year",
    ),
    ("syslog", ["Nov 30 02:13:07 h kernel: x", "Nov 30 02:13:08 h kernel: [ 12.000000] y"], "no_year"),
    (
        "dmesg",
        ["[    0.000000] Linux version", "[   12.345678] NVRM: x", "[   13.000000] y"],
        "boot_relative",
    ),
    ("dmesg-T", ["[Mon Nov 30 02:13:07 2026] x", "[Mon Nov 30 02:13:08 2026] y"], "absolute"),
    ("nccl-only", ["h:1:1 [0] NCCL INFO x", "h:1:1 [0] NCCL INFO y", "h:1:1 [0] NCCL WARN z"], "none"),
    ("sparse", ["2026-11-30T02:13:07Z start"] + ["Traceback line"] * 9, "none"),
    ("just-enough", ["2026-11-30T02:13:07Z start"] + ["Traceback line"] * 4, "absolute"),
    ("blank-lines-ignored", ["", "  ", "2026-11-30T02:13:07Z start"], "absolute"),
    ("empty", [], "none"),
    ("mixed-majority", ["[ 1.000000] a", "[ 2.000000] b", "Nov 30 02:13:07 h kernel: c"], "boot_relative"),
]


@pytest.mark.parametrize(("lines", "kind"), [c[1:] for c in DETECT], ids=[c[0] for c in DETECT])
def test_detect_clock(lines: list[str], kind: ClockKind) -> None:
    assert detect_clock(lines) == kind
    assert detect_clock(iter(lines)) == kind


def test_detect_clock_samples_a_bounded_prefix() -> None:
    def lines() -> Iterator[str]:
        yield from ["2026-11-30T02:13:07Z x"] * 3000
        raise AssertionError("read past the sample")

    assert detect_clock(lines()) == "absolute"


_KINDS_OF_LINE = [
    "2026-11-30T02:13:07Z absolute",
    "Nov 30 02:13:07 h kernel: no year",
    "[   12.345678] NVRM: boot relative",
    "h:1:1 [0] NCCL INFO no clock",
    "",
]


def _majority_of_all(lines: list[str]) -> ClockKind:
    """detect_clock without stopping early: every sampled line parsed, then the majority."""
    sample = [ln for ln in lines if ln.strip()][:2000]
    counts = {"absolute": 0, "no_year": 0, "boot_relative": 0}
    for ln in sample:
        parsed = parse_time(ln)
        if parsed is not None:
            counts[parsed.kind] += 1
    if not sample or sum(counts.values()) * 5 < len(sample):
        return "none"
    return max(("absolute", "no_year", "boot_relative"), key=lambda k: counts[k])  # type: ignore[return-value]


@given(st.lists(st.sampled_from(_KINDS_OF_LINE), max_size=60))
def test_detect_clock_stopping_early_gives_the_same_answer(lines: list[str]) -> None:
    assert detect_clock(lines) == _majority_of_all(lines)


def test_detect_clock_ties_go_to_the_earlier_kind() -> None:
    tie = ["[ 1.000000] a", "Nov 30 02:13:07 h kernel: b", "2026-11-30T02:13:07Z c", "[ 2.000000] d"]
    assert detect_clock(tie) == "boot_relative"
    assert detect_clock([*tie, "2026-11-30T02:13:08Z e"]) == "absolute"  # absolute before boot_relative


@pytest.mark.parametrize(
    ("lines", "year"),
    [
        (["2026-11-30T02:13:07Z a", "2026-11-30T02:14:07Z b", "2027-01-01T00:00:00Z c"], 2026),
        (["2026-12-31T23:59:59Z a", "2027-01-01T00:00:00Z b"], 2027),
        (["[Mon Nov 30 02:13:07 2026] x", "Nov 30 02:13:07 h kernel: y"], 2026),
        (["Nov 30 02:13:07 h kernel: y", "[ 1.000000] x"], None),
        ([], None),
    ],
    ids=["majority", "tie-latest", "dmesg-T", "no-absolute", "empty"],
)
def test_infer_year(lines: list[str], year: int | None) -> None:
    assert infer_year(lines) == year


@pytest.mark.parametrize(
    ("t", "text"),
    [
        (T, "2026-11-30T02:13:07Z"),
        (utc(2026, 11, 30, 2, 13, 7, 123456), "2026-11-30T02:13:07.123Z"),
        (utc(2026, 11, 30, 2, 13, 7, 500), "2026-11-30T02:13:07.000Z"),
        (datetime(2026, 11, 30, 5, 13, 7, tzinfo=timezone(timedelta(hours=3))), "2026-11-30T02:13:07Z"),
        (datetime(2026, 11, 30, 2, 13, 7), "2026-11-30T02:13:07Z"),
        (utc(1, 1, 1), "0001-01-01T00:00:00Z"),
        (None, None),
    ],
    ids=["whole-second", "millis", "sub-milli", "offset", "naive", "year-1", "none"],
)
def test_to_iso(t: datetime | None, text: str | None) -> None:
    assert to_iso(t) == text


def test_to_iso_round_trips_parse_time() -> None:
    got = parse_time("[2026-11-30T02:13:07.123] x")
    assert got is not None
    assert to_iso(got.time) == "2026-11-30T02:13:07.123Z"
