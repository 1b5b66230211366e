"""Ingest helper: the clocks of GPU-cluster log lines (ISO-8601, glog/c10d, syslog, dmesg, Slurm, JSON).

Input is one line (or a sample of lines) and a ``ClockContext``; output is a ``ParsedTime`` in UTC,
a ``ClockKind``, a year or an ISO-8601 string. Pure functions, no I/O; one compiled regex pass per
line, cheap enough to run on every line of a bundle.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import NamedTuple

from crashcart.models import ClockKind
from crashcart.text.prefix import split_prefix

__all__ = [
    "INHERIT_LIMIT",
    "ClockContext",
    "ParsedTime",
    "detect_clock",
    "infer_year",
    "inherited_is_stale",
    "parse_time",
    "to_iso",
]


@dataclass(frozen=True)
class ClockContext:
    """What a line alone cannot tell: the year, a reference instant and the host's boot time."""

    year: int | None = None  # for formats without a year
    reference: datetime | None = None  # e.g. bundle collected_at: no time lands > reference + 1 day
    boot_time: datetime | None = None  # turns dmesg seconds-since-boot into wall time


class ParsedTime(NamedTuple):
    """A timestamp found in a line: ``time`` is UTC-aware, or None when it cannot be resolved."""

    time: datetime | None
    kind: ClockKind  # "absolute" | "no_year" | "boot_relative"; never "none"
    boot_seconds: float | None  # seconds since boot, for "boot_relative"
    span: tuple[int, int]  # characters of the timestamp in the line (no brackets or quotes)


_DEFAULT_CONTEXT = ClockContext()
_MAX_SCAN = 8192  # characters of a line searched for a timestamp
_SAMPLE = 2000  # non-blank lines looked at by detect_clock
_ONE_DAY = timedelta(days=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_MIN, _EPOCH_MAX = 946_684_800, 4_102_444_800  # 2000-01-01 .. 2100-01-01

_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTHS = {name: i for i, name in enumerate(_MONTH_NAMES, 1)}
_MON = "|".join(_MONTHS)
_WDAY = "Mon|Tue|Wed|Thu|Fri|Sat|Sun"
_EPOCH_KEYS = "ts|time|timestamp|@timestamp|epoch|t"  # JSON fields that may hold epoch seconds

# One alternation, so a single left-to-right pass finds the earliest timestamp of any format.
_TIME = re.compile(
    # ISO-8601 / RFC 3339 / Python logging / Slurm / sacct / journalctl short-iso / RFC 5424 / Go log, and
    # torchelastic's failure summary "time : 2026-12-01_22:02:37" (errors/__init__.py: "%Y-%m-%d_%H:%M:%S")
    r"(?P<iso>(?<!\d)(?P<iY>\d{4})(?P<isep>[-/])(?P<im>\d\d)(?P=isep)(?P<id>\d\d)[T _]"
    r"(?P<iH>\d\d):(?P<iM>\d\d):(?P<iS>\d\d)(?:[.,](?P<iF>\d{1,9}))?"
    r"(?:(?P<iZ>Z)|[ ]?(?P<iO>[+-]\d\d:?\d\d|UTC|GMT)(?![\w:]))?(?!\d))"
    # glog / klog / torchrun / PyTorch c10d: E1130 02:13:07.408271257, [E626 ...] (month unpadded)
    r"|(?P<glog>(?<![A-Za-z0-9])[IWEF](?P<gD>\d{3,8}) (?P<gH>\d\d):(?P<gM>\d\d):(?P<gS>\d\d)"
    r"\.(?P<gF>\d{1,9})(?!\d))"
    # syslog RFC 3164, journalctl short/short-precise, dmesg -T / ctime (with year)
    rf"|(?P<sys>(?<![A-Za-z])(?:(?:{_WDAY}) )?(?P<sMon>{_MON}) {{1,2}}(?P<sD>\d{{1,2}}) "
    r"(?P<sH>\d\d):(?P<sM>\d\d):(?P<sS>\d\d)(?:\.(?P<sF>\d{1,9}))?(?: (?P<sY>\d{4})(?![\w.:]))?(?!\d))"
    # epoch seconds (or ms, us, ns) in a JSON field
    rf'|(?:"(?:{_EPOCH_KEYS})"\s*:\s*"?'
    r"(?P<ep>(?P<eS>\d{10})(?:\.(?P<eF>\d{1,9}))?|\d{13}|\d{16}|\d{19})(?![\d.]))"
)
# Every format but the epoch one holds hh:mm:ss at most 11 characters after its start: searching
# for that first is much cheaper than running the alternation over a long line.
_HMS = re.compile(r"\d\d:\d\d:\d\d")
_HMS_COLON = re.compile(r":(?=\d\d:\d\d)")  # led by a literal: the regex engine skips to each ':' at once
_TWO_DIGITS = re.compile(r"\d\d")
_HMS_LEAD = 16
_EPOCH_KEY = re.compile(rf'"(?:{_EPOCH_KEYS})"\s*:')
# dmesg / journalctl short-monotonic: "[  12345.678901] ", optionally after dmesg -x "kern  :err   : "
_BOOT = re.compile(r"[ \t]*(?:[a-z]+ *:[a-z]+ *: )?\[ *(?P<bS>\d{1,10})\.(?P<bF>\d{6})\]")
_BOOT_ANYWHERE = re.compile(r"\[ *\d{1,10}\.\d{6}\]")  # what every _BOOT match holds: none, no _BOOT at any offset


def _micro(frac: str | None) -> int:
    return int((frac + "00000")[:6]) if frac else 0


def _aware(t: datetime) -> datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def _offset(zone: str | None) -> timezone:
    if zone is None or zone in ("UTC", "GMT"):
        return UTC
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))


def _no_year(month: int, day: int, hms: tuple[int, int, int, int], ctx: ClockContext) -> datetime | None:
    """Resolve a month/day with no year from the context; None when no year can be chosen."""
    hour, minute, second, micro = hms

    def build(year: int) -> datetime | None:
        try:
            return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
        except ValueError:  # Feb 29 of a common year
            return None

    if ctx.reference is None:
        return None if ctx.year is None else build(ctx.year)
    ref = _aware(ctx.reference)
    # a year inferred from the earlier side of a New Year run may be one behind the reference's
    start = ref.year if ctx.year is None or ctx.year + 1 == ref.year else ctx.year
    for year in (start, start - 1):
        t = build(year)
        if t is not None and t <= ref + _ONE_DAY:
            return t
    return build(start)


def _from_match(m: re.Match[str], ctx: ClockContext) -> ParsedTime | None:
    """Turn one regex match into a ParsedTime; None for impossible dates (Feb 30, 25:00)."""
    if (iso := m.group("iso")) is not None:
        return ParsedTime(_ISO.get(iso) or _iso_time(m, iso), "absolute", None, m.span("iso"))
    if m.group("glog") is not None:
        digits = m["gD"]
        hms = (int(m["gH"]), int(m["gM"]), int(m["gS"]), _micro(m["gF"]))
        span = (m.start("gD"), m.end("glog"))
        if len(digits) == 8:  # glog's log_year_in_prefix: E20261130
            t = datetime(int(digits[:4]), int(digits[4:6]), int(digits[6:]), *hms, tzinfo=UTC)
            return ParsedTime(t, "absolute", None, span)
        if len(digits) > 4:
            return None
        month, day = int(digits[:-2]), int(digits[-2:])
        datetime(2000, month, day, *hms)  # validates month/day/time (2000 is a leap year)
        return ParsedTime(_no_year(month, day, hms, ctx), "no_year", None, span)
    if m.group("sys") is not None:
        month, day = _MONTHS[m["sMon"]], int(m["sD"])
        hms = (int(m["sH"]), int(m["sM"]), int(m["sS"]), _micro(m["sF"]))
        year = m["sY"]
        if year is not None and 1970 <= int(year) < 2100:
            t = datetime(int(year), month, day, *hms, tzinfo=UTC)
            return ParsedTime(t, "absolute", None, m.span("sys"))
        datetime(2000, month, day, *hms)
        end = m.end("sF") if m["sF"] is not None else m.end("sS")
        return ParsedTime(_no_year(month, day, hms, ctx), "no_year", None, (m.start("sys"), end))
    value = m["ep"]
    if m["eS"] is not None:
        seconds, micro = int(m["eS"]), _micro(m["eF"])
    else:
        scale = 10 ** (len(value) - 10)
        seconds, micro = divmod(int(value), scale)
        micro = micro * 1_000_000 // scale
    if not _EPOCH_MIN <= seconds < _EPOCH_MAX:
        return None
    t = _EPOCH + timedelta(seconds=seconds, microseconds=micro)
    return ParsedTime(t, "absolute", None, m.span("ep"))


_ISO: dict[str, datetime] = {}  # ISO text -> its UTC time (``_iso_time``)
_ISO_MAX = 65536


def _iso_time(m: re.Match[str], iso: str) -> datetime:
    """The UTC time of an ISO match, remembered by its text (which alone gives every group of the match, the
    context only decides where it ends): ranks write the same seconds, and a bundle of 10,000 rank files parses
    the same few thousand again and again. Raises ValueError for an impossible date, as before (not remembered)."""
    ymd = (int(m["iY"]), int(m["im"]), int(m["id"]))
    hms = (int(m["iH"]), int(m["iM"]), int(m["iS"]), _micro(m["iF"]))
    t = datetime(*ymd, *hms, tzinfo=_offset(m["iO"])).astimezone(UTC)
    if len(_ISO) >= _ISO_MAX:
        _ISO.clear()  # a bound on memory; the answer is the same either way
    _ISO[iso] = t
    return t


def parse_time(line: str, ctx: ClockContext = _DEFAULT_CONTEXT) -> ParsedTime | None:
    """The earliest timestamp of ``line`` (after any per-rank prefix), or None; never raises.

    Times without a zone are UTC; offsets are converted to UTC. Formats without a year take it
    from ``ctx`` (``kind="no_year"``, ``time=None`` when unknown); dmesg seconds need
    ``ctx.boot_time`` (``kind="boot_relative"``). NCCL lines, PCI ids and counters are not times.
    """
    head = line[:_MAX_SCAN]
    boot = None
    if _BOOT_ANYWHERE.search(head) is not None:  # most lines: no dmesg stamp, so no per-rank prefix to strip
        boot = _BOOT.match(head)
        if boot is None:
            skip = split_prefix(head).length
            boot = _BOOT.match(head, skip) if skip else None
    if boot is not None:
        seconds = int(boot["bS"]) + int(boot["bF"]) / 1_000_000
        t: datetime | None = None
        if ctx.boot_time is not None:
            try:
                t = _aware(ctx.boot_time) + timedelta(seconds=int(boot["bS"]), microseconds=int(boot["bF"]))
            except OverflowError:
                t = None
        return ParsedTime(t, "boot_relative", seconds, (boot.start("bS"), boot.end("bF")))
    hms = hms_start(head)
    if hms is None:
        if _EPOCH_KEY.search(head) is None:
            return None
        start = 0
    else:
        start = max(0, hms - _HMS_LEAD)
        if start and _EPOCH_KEY.search(head, 0, hms) is not None:
            start = 0
    for m in _TIME.finditer(head, start):
        try:
            found = _from_match(m, ctx)
        except (ValueError, OverflowError):  # impossible date or time: look further
            continue
        if found is not None:
            return found
    return None


def hms_start(text: str) -> int | None:
    """Where ``_HMS`` (hh:mm:ss) first matches in ``text``, or None: the first ':' that starts ``:mm:ss`` with two
    digits before it. The same answer as ``_HMS.search``, which, led by ``\\d``, tries every position (on a tenth
    of the 10,000-rank bundle ~2 % of a diagnose; this is 8x faster on its lines)."""
    pos = 0
    while (m := _HMS_COLON.search(text, pos)) is not None:
        at = m.start()
        if at >= 2 and _TWO_DIGITS.fullmatch(text, at - 2, at):
            return at - 2
        pos = at + 1
    return None


def detect_clock(lines: Iterable[str]) -> ClockKind:
    """The majority clock kind over (up to 2000 non-blank) ``lines``; "none" when < 20% carry a time.

    Stops parsing as soon as the lines not parsed yet can no longer change the answer (the same answer as
    parsing them all: a log whose every line has a date is decided half way)."""
    sample = list(itertools.islice((line for line in lines if line.strip()), _SAMPLE))
    total = len(sample)
    maybe = _may_have_clock(sample)
    if len(maybe) * 5 < total:
        return "none"  # fewer than 20% of the lines can hold a time, whatever parsing them says
    counts: Counter[ClockKind] = Counter()
    order: tuple[ClockKind, ...] = ("absolute", "no_year", "boot_relative")
    timed = 0
    for seen, line in enumerate(sample, 1):
        if seen - 1 not in maybe:
            continue  # parse_time would find nothing
        parsed = parse_time(line)
        if parsed is None:
            continue
        counts[parsed.kind] += 1
        timed += 1
        if timed * 5 >= total and _decided(counts, parsed.kind, total - seen, order):
            return parsed.kind
    if total == 0 or timed * 5 < total:
        return "none"
    return max(order, key=lambda kind: counts[kind])


# What a line must hold for ``parse_time`` to find a time in it: a dmesg stamp, hh:mm:ss (``:mm:ss`` is searched
# for: ten times faster than ``\d\d:`` first, and a superset) or a JSON epoch key
_MAYBE = (_BOOT_ANYWHERE, re.compile(r":\d\d:\d\d"), _EPOCH_KEY)
# What each of ``_MAYBE``'s matches holds, found faster than the pattern itself (a rank file's head: ``[`` on every
# line, no ``"``): when it is absent the pattern has no match, so it is not run (the same set, tested)
_BOOT_NEEDS = re.compile(r"\.\d{6}\]")  # led by ``.``, rarer than ``[``: 27 against 47 us on a 64 KiB head


def _runs(pattern: re.Pattern[str], text: str) -> bool:
    """Whether ``pattern`` may match ``text``: False only when something each of its matches holds is absent."""
    if pattern is _EPOCH_KEY:
        return '"' in text  # one memchr against the pattern's 25 us
    if pattern is _BOOT_ANYWHERE:
        return _BOOT_NEEDS.search(text) is not None
    return True


def _may_have_clock(lines: list[str]) -> set[int]:
    """Indices of ``lines`` in which ``parse_time`` may find a time (a superset: every line it finds one in),
    from three searches over the lines joined: a head whose lines mostly carry no clock costs three regex passes,
    not three searches per line. A match that spans a newline (``\\s`` in the epoch key) only adds a candidate."""
    starts = list(itertools.accumulate((len(line) + 1 for line in lines), initial=0))
    text = "\n".join(lines)
    return {
        bisect.bisect_right(starts, m.start()) - 1
        for pattern in _MAYBE
        if _runs(pattern, text)
        for m in pattern.finditer(text)
    }


def _decided(counts: Counter[ClockKind], leader: ClockKind, left: int, order: tuple[ClockKind, ...]) -> bool:
    """True when ``leader`` stays the majority whatever the ``left`` lines still to parse turn out to be
    (ties go to the kind earlier in ``order``, as in ``max``)."""
    lead = counts[leader]
    rank = order.index(leader)
    for i, kind in enumerate(order):
        if kind == leader:
            continue
        rival = counts[kind] + left
        if rival > lead or (rival == lead and i < rank):
            return False
    return True


def infer_year(lines: Iterable[str]) -> int | None:
    """The most common year among the absolute timestamps of ``lines`` (latest on ties), or None."""
    years: Counter[int] = Counter()
    for line in lines:
        parsed = parse_time(line)
        if parsed is not None and parsed.kind == "absolute" and parsed.time is not None:
            years[parsed.time.year] += 1
    if not years:
        return None
    return max(years, key=lambda year: (years[year], year))


INHERIT_LIMIT = timedelta(minutes=5)


def inherited_is_stale(inherited: datetime, next_own: datetime | None, limit: timedelta = INHERIT_LIMIT) -> bool:
    """Whether a time a clock-less line took from an earlier line is contradicted by the next line that has a clock.

    The rule both the scan's inheritance and its consumers apply: when the file's next own clock after the line is
    more than ``limit`` later than the inherited time, the earlier line (a launch banner, the last line before a long
    silence) says nothing about when this line was written. No next clock: nothing contradicts it."""
    return next_own is not None and next_own - inherited > limit


def to_iso(t: datetime | None) -> str | None:
    """``2026-11-30T02:13:07Z`` (``.123Z`` when sub-second) in UTC; naive times are taken as UTC."""
    if t is None:
        return None
    u = _aware(t)
    text = f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}"
    if u.microsecond:
        text += f".{u.microsecond // 1000:03d}"
    return text + "Z"


def from_iso(iso: str | None) -> datetime | None:
    """The inverse of ``to_iso``: an ISO-8601 string (as in ``diagnosis.json``) -> aware UTC, or None."""
    if not iso:
        return None
    try:
        t = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)
