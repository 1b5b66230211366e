"""Shortcuts taken for speed answer as the slower code they stand for (issue 16, pass 10)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crashcart.catalogue import load_catalogue
from crashcart.ingest import heads
from crashcart.scan import lines as scan_lines
from crashcart.text import clock, prefix, template

_TEMPLATES = sorted({s.summary for s in load_catalogue().signatures})
values = st.one_of(st.none(), st.text(alphabet="ab0 :(),;%#", max_size=8))


@given(st.sampled_from(_TEMPLATES), st.data())
def test_a_remembered_summary_is_the_one_filled_from_these_fields(tpl: str, data: st.DataObject) -> None:
    names = template._names(tpl)
    first = {n: v for n in names if (v := data.draw(values)) is not None}
    first["_extra"] = data.draw(st.text(max_size=4))  # not named by the template: not part of the key
    assert template.fill(tpl, first) == template._fill(tpl, first)
    again = {**first, "_extra": "other", "_more": "x"}
    assert template.fill(tpl, again) == template._fill(tpl, again)
    changed = dict(first)
    if names:  # one named field changed: the remembered answer must not be reused
        changed[names[-1]] = data.draw(st.text(alphabet="xyz9", min_size=1, max_size=5))
    assert template.fill(tpl, changed) == template._fill(tpl, changed)


def test_the_names_are_the_fields_the_template_names_in_order() -> None:
    assert template._names("{a} at {b}{a} ({c})") == ("a", "b", "a", "c")
    assert template._names("no fields") == ()


def _every_search(lines: list[str]) -> set[int]:
    """``clock._may_have_clock`` as it was: every pattern run over the joined lines."""
    import bisect
    import itertools

    starts = list(itertools.accumulate((len(line) + 1 for line in lines), initial=0))
    text = "\n".join(lines)
    return {bisect.bisect_right(starts, m.start()) - 1 for p in clock._MAYBE for m in p.finditer(text)}


clock_lines = st.lists(
    st.one_of(
        st.text(alphabet='0123456789[] .:"tsime\t', max_size=30),
        st.sampled_from(["[  12.123456] x", '{"ts": 1', '"time" :', "10:11:12", "[1.1234567]", "a.123456] b"]),
    ),
    max_size=12,
)


@given(clock_lines)
def test_the_lines_that_may_hold_a_clock_are_those_every_search_finds(lines: list[str]) -> None:
    assert clock._may_have_clock(lines) == _every_search(lines)


def test_a_pattern_is_skipped_only_where_it_cannot_match() -> None:
    assert not clock._runs(clock._EPOCH_KEY, "[0] NCCL INFO 12:00:00")
    assert clock._runs(clock._EPOCH_KEY, '{"ts": 1700000000}')
    assert not clock._runs(clock._BOOT_ANYWHERE, "[0] NCCL INFO [1] 10.0.0.1")
    assert clock._runs(clock._BOOT_ANYWHERE, "[  123.456789] kernel: x")
    assert clock._may_have_clock(["[  123.456789] kernel: x", "plain", '{"ts": 1}']) == {0, 2}


head_lines = st.lists(
    st.one_of(
        st.text(alphabet=" \t[]{}<>0123456789²٣rankNVRM:kelstd", max_size=24),
        st.sampled_from(
            [
                "[rank3]: x",
                "[1,2]<stdout>: y",
                "  7: srun",
                '{"rank": 4}',
                "Dec 1 00:00:00 h kernel: NVRM: Xid",
                "[  12.123456] x",
                "² x",
                "\t٣ y",
                "gpu-node-000:9000:9100 [0] NCCL INFO Bootstrap",
                '{"message": "7: x"}',
                '{"log": "\\u005brank3]: x"}',
            ]
        ),
    ),
    max_size=10,
)


@given(head_lines)
def test_the_kernel_lines_counted_at_once_are_those_counted_one_by_one(lines: list[str]) -> None:
    assert heads.kernel_lines(lines) == sum(1 for ln in lines if heads.kernel_line(ln))


@given(head_lines)
def test_the_ranks_named_at_once_are_those_each_line_names(lines: list[str]) -> None:
    want = {p.rank for p in map(prefix.view, filter(prefix.may_name_rank, lines)) if p.rank is not None}
    assert heads.named_ranks(lines) == want


def test_the_head_checks_let_by_a_line_that_names_a_rank_or_a_kernel_line() -> None:
    assert heads.named_ranks(["x", "[rank3]: y"]) == {3}
    assert heads.named_ranks(["gpu-node-000:9000:9100 [0] NCCL INFO x"]) == set()
    assert heads.named_ranks(["x", '{"message": "7: x"}']) == {7}
    assert heads.named_ranks(["x", "  ٣: srun"]) == {3}  # a digit not ASCII: view reads it
    assert heads.kernel_lines(["[  12.123456] NVRM: Xid", "x"]) == 1
    assert heads.kernel_lines(["gpu-node-000:9000:9100 [0] NCCL INFO x"]) == 0


def _iso_as_before(line: str) -> clock.ParsedTime | None:
    """``parse_time``'s ISO branch as it was (every match parsed afresh), for a line whose first time is ISO."""
    from datetime import UTC, datetime

    for m in clock._TIME.finditer(line):
        if m.group("iso") is None:
            return None
        try:
            ymd = (int(m["iY"]), int(m["im"]), int(m["id"]))
            hms = (int(m["iH"]), int(m["iM"]), int(m["iS"]), clock._micro(m["iF"]))
            t = datetime(*ymd, *hms, tzinfo=clock._offset(m["iO"]))
        except (ValueError, OverflowError):
            continue
        return clock.ParsedTime(t.astimezone(UTC), "absolute", None, m.span("iso"))
    return None


iso_lines = st.builds(
    lambda lead, y, mo, d, sep, h, mi, s, frac, zone, tail: (
        f"{lead}{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}{frac}{zone}{tail}"
    ),
    st.sampled_from(["", " [", "x ", "1"]),
    st.integers(1990, 2030),
    st.integers(0, 13),
    st.integers(0, 32),
    st.sampled_from([" ", "T", "_"]),
    st.integers(0, 24),
    st.integers(0, 60),
    st.integers(0, 61),
    st.sampled_from(["", ".5", ",123456", ".123456789"]),
    st.sampled_from(["", "Z", " UTC", "+02:00", "-0530", " GMT", " UTC:"]),
    st.sampled_from(["", "] x", ":", "9", " 2026-01-01 00:00:00"]),
)


@given(st.lists(iso_lines, min_size=1, max_size=4))
def test_an_iso_time_remembered_is_the_time_parsed_afresh(lines: list[str]) -> None:
    for line in lines + lines:  # the second time round, from what the first remembered
        got = clock.parse_time(line)
        want = _iso_as_before(line)
        if want is not None:
            assert got == want
            assert got is not None and got.time is not None and got.time.tzinfo is not None
    clock._ISO.clear()
    assert [clock.parse_time(x) for x in lines] == [clock.parse_time(x) for x in lines]


def test_the_iso_memory_is_keyed_by_the_text_with_its_zone() -> None:
    a = clock.parse_time("2026-12-01 10:00:00+02:00 x")
    b = clock.parse_time("2026-12-01 10:00:00 x")
    assert a is not None and b is not None and a.time is not None and b.time is not None
    assert (b.time - a.time).total_seconds() == 7200


def _tail_lines_as_before(data: bytes, size: int, lines: int, ends_with_newline: bool) -> list[tuple[int, bytes]]:
    """``lines.tail_lines`` as it was: the whole of ``data`` split."""
    parts = data.split(b"\n")
    if ends_with_newline:
        parts = parts[:-1]
    if size > len(data):
        parts = parts[1:]
    parts = parts[-scan_lines.TAIL_LINES :]
    first = lines - len(parts) + 1
    return [(first + i, p) for i, p in enumerate(parts)]


@given(
    st.lists(st.sampled_from([b"", b"a", b"xy z", b"\r", b"line 7"]), max_size=140),
    st.booleans(),
    st.integers(0, 3),
    st.integers(0, 500),
)
def test_a_tail_split_from_its_end_is_the_tail_split_whole(
    pieces: list[bytes], newline_end: bool, more: int, lines: int
) -> None:
    data = b"\n".join(pieces) + (b"\n" if newline_end else b"")
    for size in (len(data), len(data) + more):
        for ends in (newline_end, data.endswith(b"\n")):
            assert scan_lines.tail_lines(data, size, lines, ends) == _tail_lines_as_before(data, size, lines, ends)


def test_a_tail_of_exactly_the_kept_lines_and_one_more() -> None:
    n = scan_lines.TAIL_LINES
    for count in (n - 1, n, n + 1, n + 2, n + 3):
        data = b"\n".join(b"l%d" % i for i in range(count)) + b"\n"
        for size in (len(data), len(data) + 1):
            want = _tail_lines_as_before(data, size, count, True)
            assert scan_lines.tail_lines(data, size, count, True) == want
