"""Hang evidence files -> Findings with Evidence that ``verify`` can re-check.

Input: the opened bundle (its ``hang_evidence`` files, and rank logs that may hold a faulthandler dump) and the
scan's id source. Output: ``HangScan`` (findings, files refused with a reason, notes). Findings:

- ``hang.fr.missing`` / ``hang.fr.not_started`` (``rank_hang_or_missing_rank``), ``hang.fr.mismatch``
  (``collective_mismatch_desync``), ``hang.fr.straggler`` (``straggler_fail_slow``): one per culprit rank, the
  reasoning as the summary, citing the culprit's last entry and the entry of the collective the others wait in;
- ``hang.fr.consistent`` (context): a process group where every rank stopped at the same collective;
- ``hang.fr.stop`` (context): where each rank stopped in each PG (its last entry), for the timeline;
- ``hang.stack.minority``: the process whose main thread is not where the others' are (built in ``build``);
- ``hang.stack.all_stuck``: every rank blocked in the same wait outside any collective (a DataLoader fetch, a lock);
- ``hang.stack.where`` (context): where a dumped rank is, outside any collective, when nothing else stands out;
- ``hang.ras.dead`` / ``hang.ras.missing`` / ``hang.ras.behind``: what an NCCL RAS report says;
- ``hang.horovod.missing`` / ``hang.horovod.mismatch``: Horovod's stall inspector in a rank's log (``horovod``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from crashcart.ingest.bundle import Bundle, canonical_line
from crashcart.ingest.hang_kinds import flight_recorder_form
from crashcart.models import BundleFile, Evidence, Finding, Severity, SkippedFile
from crashcart.scan.findings import IdSource
from crashcart.scan.hang_evidence import build, collectives, fr, horovod, pyspy_json, ras, stacks
from crashcart.scan.hang_evidence.build import MAX_CULPRITS, finding
from crashcart.scan.hang_evidence.collectives import KIND_CLASS, Verdict, ranks_text
from crashcart.scan.matcher import Literals

HANG_KIND = "hang_evidence"
LOG_KINDS = frozenset({"rank_log", "combined_log", "log"})
MAX_LOG_READ = 8 * 1024 * 1024  # rank logs larger than this are not searched for faulthandler dumps
MAX_LOG_TOTAL = 256 * 1024 * 1024
TAIL_BYTES = 4 * 1024 * 1024  # of a larger log, its end is searched (where a hung job's dump lands)
MAX_TAIL_TOTAL = 128 * 1024 * 1024
_FH_MARK = b"(most recent call first):"
HEAD_CONTEXT = 64  # lines of a large log's tail kept before its first dump header (what precedes a dump)
# py-spy's dump (src/dump.rs): "Process <pid>: <cmdline>", "Python v<version> (<exe>)", "Thread <tid> (<state>)...": a
# log that a dump was pasted into (or redirected into) is read for it too (issue 14, plain-log hang evidence)
_PYSPY_MARK = re.compile(
    rb"Process \d+: [^\n]*\n(?:[^\n]*: )?Python v\d|^(?:[^\n]*: )?Python version \d"
    rb'|^(?:[^\n]*: )?Thread (?:0x[0-9A-Fa-f]+|\d+)(?: \((?:active|idle|active\+gil|gil)\))?: "MainThread"',
    re.MULTILINE,
)
_PYSPY_WORDS = frozenset({b"Python v", b'"MainThread"'})  # in every text _PYSPY_MARK matches
_MARKS = Literals((*sorted(_PYSPY_WORDS), _FH_MARK, horovod.MARK))  # what a log is parsed for if it holds one


@dataclass
class HangScan:
    findings: list[Finding] = field(default_factory=list)
    failures: list[SkippedFile] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)


def scan_hang_evidence(bundle: Bundle, ids: IdSource, tail_marks: Mapping[str, TailMarks] | None = None) -> HangScan:
    """Every hang-evidence file of ``bundle`` read and reasoned over; a bad file is a failure, not an exception.

    :param tail_marks: what the scan found in large logs' tails (``tail_marks``), by path: a tail without a
        mark is not read again (the same answer: nothing in it is parsed)."""
    out = HangScan()
    dumps: list[fr.Dump] = []
    procs: list[stacks.Process] = []
    reports: list[tuple[str, ras.RasReport]] = []
    max_line = bundle.limits.max_line_bytes
    budget = MAX_LOG_TOTAL
    stalls: list[tuple[str, Sequence[str], horovod.Stall]] = []
    tails = MAX_TAIL_TOTAL
    for bf in sorted(bundle.files, key=lambda f: f.path):
        phys = bundle.physical(bf.path)
        if phys is None:
            continue
        if bf.kind == HANG_KIND:
            _read_one(bf, phys, max_line, dumps, procs, reports, out)
            continue
        if bf.kind not in LOG_KINDS:
            continue
        first = 1
        if bf.size <= MAX_LOG_READ and budget > 0:
            budget -= bf.size
            data = phys.read_bytes()
        elif bf.size > MAX_LOG_READ and tails > 0:
            known = tail_marks.get(bf.path) if tail_marks else None
            if known is not None and not known.marked:  # the scan looked: nothing below parses this tail
                tails -= TAIL_BYTES if known.present else 0  # counted as if read
                continue
            if (tail := _tail(bundle, bf.path, phys)) is None:
                continue
            tails -= TAIL_BYTES
            first, data = tail
        else:
            continue
        # literal tests first (one pass for all four): the regex runs at a tenth of their speed, over every small log
        marks = _MARKS.found(data)
        pyspy = bool(marks & _PYSPY_WORDS) and _PYSPY_MARK.search(data) is not None
        lines: Sequence[str] | None = None
        if _FH_MARK in marks or pyspy:
            dumped = _window(
                *_from_first_header(data, first, pyspy), max_line
            )  # a small log too: no line before counts
            tools = {"faulthandler", "py-spy"} if pyspy else {"faulthandler"}
            procs.extend(_on(bf, p) for p in stacks.parse(bf.path, dumped, bf.rank) if p.tool in tools)
        if horovod.MARK in marks:
            lines = lines or _window(data, first, max_line)
            stalls.extend((bf.path, lines, st) for st in horovod.parse(lines)[-1:])  # it repeats: the last
    verdicts = collectives.analyse(dumps)
    no_dump = _ranks_without_dump(dumps)
    for v in verdicts:
        out.findings.extend(_fr_findings(v, ids, no_dump))
    out.findings.extend(build.stack_findings(procs, ids))
    for path, rep in reports:
        out.findings.extend(_ras_findings(path, rep, ids, max_line, bundle))
    ranks = [bf.rank for bf in bundle.files if bf.rank is not None]
    out.findings.extend(horovod.findings(stalls, ids, max(ranks) + 1 if ranks else None))
    if no_dump:
        for d in dumps[:1]:
            out.notes[d.path] = (
                f"no Flight Recorder dump for rank{'s' if len(no_dump) > 1 else ''} {ranks_text(no_dump)}"
            )
    return out


def _read_one(
    bf: BundleFile,
    phys: Path,
    max_line: int,
    dumps: list[fr.Dump],
    procs: list[stacks.Process],
    reports: list[tuple[str, ras.RasReport]],
    out: HangScan,
) -> None:
    note = bf.note or ""
    try:
        if note.startswith("Flight Recorder"):
            with phys.open("rb") as fh:
                form = flight_recorder_form(fh.read(65536))
            if form is None:
                raise fr.DumpRefused("not a Flight Recorder dump")
            dump = fr.load(phys, bf.path, form)
            if dump.rank is None:
                raise fr.DumpRefused("Flight Recorder dump whose file name gives no rank (expected <prefix><rank>)")
            dumps.append(dump)
            return
        lines = stacks.read_text_lines(phys, canonical_line, max_line)
        if lines is None:
            raise fr.DumpRefused(
                f"{note} of {bf.size:,} bytes, over the {stacks.MAX_STACK_FILE:,}-byte limit: not read"
            )
        if note == "NCCL RAS report":
            reports.append((bf.path, ras.parse(lines)))
        else:
            read = pyspy_json.parse if pyspy_json.looks_like(lines) else stacks.parse
            got = [_on(bf, p) for p in read(bf.path, lines, bf.rank)]
            if not got:
                raise fr.DumpRefused(f"{note} with no thread in it")
            procs.extend(got)
    except fr.DumpRefused as exc:
        out.failures.append(SkippedFile(path=bf.path, reason=str(exc)))
    except OSError as exc:
        out.failures.append(SkippedFile(path=bf.path, reason=f"unreadable: {exc.strerror or exc}"))


@dataclass(frozen=True)
class TailMarks:
    """A large log's tail as ``scan_hang_evidence`` would read it (``_tail``), looked at beforehand: whether it
    has one (``present``) and whether it holds a word that anything below parses for (``marked``)."""

    present: bool
    marked: bool


def tail_marks(phys: Path, lines: int, nbytes: int) -> TailMarks | None:
    """``TailMarks`` of a log of ``lines`` lines and ``nbytes`` bytes (as scanned); None when the file is no longer
    that size (the pass reads it as before). Run by the scan's threads right after each large file, while the page
    cache holds its end, so that the pass over the bundle need not read unmarked tails. The tail ``_read_tail``
    would give is looked at through a view and its lines are not counted: a suffix of the file the scan counted
    ``lines`` in never holds more, so only an empty tail has none (microseconds holding the GIL, not milliseconds)."""
    if not lines:
        return TailMarks(present=False, marked=False)
    with phys.open("rb") as fh:
        size = fh.seek(0, 2)
        if size != nbytes:
            return None
        fh.seek(max(size - TAIL_BYTES, 0))
        data = fh.read()
    start = 0
    if size > TAIL_BYTES:
        start = data.find(b"\n") + 1  # from the first whole line on; none: no tail
    view = memoryview(data)[start:] if start or size <= TAIL_BYTES else memoryview(b"")
    if not len(view):
        return TailMarks(present=False, marked=False)
    return TailMarks(present=True, marked=bool(_MARKS.found(view)))


def _tail(bundle: Bundle, path: str, phys: Path) -> tuple[int, bytes] | None:
    return _read_tail(phys, bundle.line_count(path))


def _read_tail(phys: Path, total: int | None) -> tuple[int, bytes] | None:
    """(the file's line number of its first whole line in the last ``TAIL_BYTES``, those bytes from it), from the
    scan's line count ``total``; None when it has none."""
    if not total:
        return None
    with phys.open("rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(size - TAIL_BYTES, 0))
        data = fh.read()
    if size > TAIL_BYTES:
        data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""  # from the first whole line on
    count = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    return (total - count + 1, data) if data and count <= total else None


def _from_first_header(data: bytes, first: int, pyspy: bool) -> tuple[bytes, int]:
    """A log tail from ``HEAD_CONTEXT`` lines before its first faulthandler header on, with that line's number
    (a 4 MiB tail is ~20 k lines, a dump at its end a few hundred). Only faulthandler's processes are kept
    from a tail without a py-spy dump, and each of them starts at a header holding ``_FH_MARK`` (its
    ``Timeout (...)!`` line just above), so the lines before change nothing; with a py-spy dump, all of it."""
    at = -1 if pyspy else data.find(_FH_MARK)
    if at < 0:
        return data, first
    start = data.rfind(b"\n", 0, at) + 1
    for _ in range(HEAD_CONTEXT):
        if start == 0:
            break
        start = data.rfind(b"\n", 0, start - 1) + 1
    return data[start:], first + data.count(b"\n", 0, start)


def _window(data: bytes, first: int, max_line: int) -> Sequence[str]:
    lines = _canonical_lines(data, max_line)
    return lines if first == 1 else stacks.Window(first, lines)


def _canonical_lines(data: bytes, max_line: int) -> list[str]:
    """``canonical_line`` of every piece of ``data`` between newlines; in one decode where it has nothing to
    strip or cut and is valid UTF-8 (a 4 MiB tail: 20 k calls of ``canonical_line`` otherwise)."""
    raws = data.split(b"\n")
    if b"\r" not in data and b"\x1b" not in data and max(map(len, raws)) <= max_line:
        try:
            return data.decode("utf-8").split("\n")  # a newline byte is never inside a UTF-8 sequence
        except UnicodeDecodeError:
            pass
    return [canonical_line(raw, max_line) for raw in raws]


def _on(bf: BundleFile, p: stacks.Process) -> stacks.Process:
    p.host = p.host or bf.host
    return p


def _ranks_without_dump(dumps: list[fr.Dump]) -> list[int]:
    have = {d.rank for d in dumps if d.rank is not None}
    if not have:
        return []
    expected: set[int] = set(range(max(have) + 1))
    for d in dumps:
        for ranks in d.pg_ranks.values():
            expected.update(ranks)
    return sorted(expected - have)


def _time(ns: int | None) -> datetime | None:
    if ns is None or ns <= 0 or ns > 4_102_444_800 * 10**9:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC)


def _entry_ev(ids: IdSource, dump: fr.Dump, e: fr.Entry) -> Evidence:
    return Evidence(
        id=ids.evidence_id(), file=dump.path, line=e.line, text=fr.entry_text(dump, e), locator=f"entries[{e.index}]"
    )


def _fr_findings(v: Verdict, ids: IdSource, no_dump: list[int]) -> list[Finding]:
    out: list[Finding] = []
    fields = {
        "pg": v.pg,
        "pg_desc": v.desc,
        "seq": str(v.seq),
        "op": v.op or "",
        "others": ranks_text(v.others),
        "culprits": str(len(v.culprits)),
    }
    if no_dump:
        fields["no_dump"] = ranks_text(no_dump)
    if v.kind == "ok":
        if v.evidence:
            dump, e = v.evidence[0]
            out.append(
                finding(
                    ids,
                    v.summary,
                    "context",
                    "info",
                    "hang.fr.consistent",
                    KIND_CLASS["ok"],
                    None,
                    _time(e.time_ns),
                    fields,
                    [_entry_ev(ids, dump, e)],
                )
            )
    else:
        severity: Severity = "P2" if v.kind == "mismatch" else "P1"
        for r in v.culprits[:MAX_CULPRITS]:
            own = [(d, e) for d, e in v.evidence if d.rank == r]
            rest = [(d, e) for d, e in v.evidence if d.rank != r][:1]
            if not own:  # a rank that entered no collective of the PG: cite its dump's last entry, if any
                own = [(s.dump, s.dump.entries[-1]) for s in v.stops if s.rank == r and s.dump.entries]
            evidence = [_entry_ev(ids, d, e) for d, e in [*own[:1], *rest]]
            if not evidence:
                continue
            out.append(
                finding(
                    ids,
                    v.summary,
                    "root_candidate",
                    severity,
                    f"hang.fr.{v.kind}",
                    KIND_CLASS[v.kind],
                    r,
                    _time(v.time_ns),
                    {**fields, "culprit": str(r)},
                    evidence,
                )
            )
    for s in v.stops:
        if s.entry is None:
            continue
        stop_fields = {
            "pg": v.pg,
            "pg_desc": v.desc,
            "seq": str(s.entry.seq),
            "op": collectives._op(s.entry),
            "state": s.entry.state,
            "behind": str(s.behind),
        }
        summary = (
            f"rank {s.rank} last entered {collectives._op(s.entry)} collective_seq_id {s.entry.seq} of PG "
            f"{v.pg}" + (f", {s.behind} behind" if s.behind else "")
        )
        out.append(
            finding(
                ids,
                summary,
                "context",
                "info",
                "hang.fr.stop",
                KIND_CLASS["ok"],
                s.rank,
                _time(s.entry.time_ns),
                stop_fields,
                [_entry_ev(ids, s.dump, s.entry)],
            )
        )
    return out


def _ras_findings(path: str, rep: ras.RasReport, ids: IdSource, max_line: int, bundle: Bundle) -> list[Finding]:
    out: list[Finding] = []
    for fact in rep.facts[:64]:
        text = bundle.read_lines(path, fact.line)
        if not text:
            continue
        ev = Evidence(id=ids.evidence_id(), file=path, line=fact.line, text=text[0])
        out.append(
            finding(
                ids,
                fact.detail,
                "root_candidate",
                "P1",
                f"hang.ras.{fact.kind}",
                "rank_hang_or_missing_rank",
                fact.rank,
                None,
                {"comm": fact.comm or "", "pid": fact.pid or "", "source": "ncclras"},
                [ev],
                node=fact.host,
            )
        )
    return out


def reread(physical: Path, path: str, locator: str) -> tuple[int, str] | None:
    """``verify``'s hook: (line, text) of a located entry, parsed afresh from the file."""
    return fr.reread(physical, path, locator)
