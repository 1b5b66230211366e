"""Scan stage: messages that a terminal or a paste wrapped onto two or three lines.

A watchdog line cut at 80 or 120 columns, or a paste that broke a long line at a space, leaves a head line
that no signature matches and a continuation that starts mid-message. Here, in small files (pastes are
small; the fast scanner stays line-oriented), each line is joined with the one or two after it, the joined
texts are matched with the same catalogue, and a signature that matches across the junction (and on neither
line alone, or with more fields than a line alone gives) becomes a finding citing the whole span.

A paste hard-wrapped at a fixed column (an issue tracker's copy, ``fold -w``) cuts anywhere, just before a space
too: its lines of exactly that width (``wrap_width``) are joined to the next line as they are, whatever it starts
with. Pure apart from reading bundle lines.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter
from collections.abc import Callable

from crashcart.catalogue import Catalogue
from crashcart.ingest.bundle import Bundle
from crashcart.models import BundleFile, Evidence, Finding
from crashcart.text import prefix

#: (signature index, head line text, evidence without ids, fields) -> a numbered Finding
Maker = Callable[[int, str, list[Evidence], dict[str, str]], Finding]

MAX_BYTES = 256 * 1024  # only small files (pasted logs); large logs are written by programs, not terminals
MAX_FILES = 128  # nor a bundle of many files: thousands of rank files are written by programs, not pasted
MAX_SPAN = 3  # lines one wrapped message may cover
MIN_HEAD = 30  # a wrapped head line is long
MIN_WIDTH = 60  # a hard wrap's column: narrower lines of one length are a table or a banner
MIN_CUT_LINES = 3  # lines of exactly one width that make it a hard wrap's column
_NEW_RECORD = re.compile(
    r"^(?:\[?\d{4}-\d\d-\d\d[ T]|\[?[A-Z][a-z]{2} [ \d]?\d \d\d:|[IWEF]\d{4} \d\d:|\[ *\d+\.\d+\]|"
    r"[\w.-]+:\d+:\d+ \[\d+\] |Traceback |During handling|The above exception|\S+Error\b|\S+Exception\b)"
)

# A failure message's head names what failed: every signature worth joining for has one of these words in
# its first part (NCCL/c10d/NVRM/Slurm/CUDA wordings). Lines without any are never joined.
_HINTS = (
    "error", "fail", "warn", "timeout", "timed out", "watchdog", "xid", "nccl", "kill", "exception", "abort",
    "oom", "memory", "denied", "refused", "cannot", "unable", "fatal", "panic", "nan", "inf", "overflow",
    "slurm", "signal", "cuda", "gpu", "lost", "closed", "reset",
)  # fmt: skip


def _hinted(raw: str) -> bool:
    low = raw.lower()
    return any(k in low for k in _HINTS)


def _could_continue(raw: str, pasted: bool = False) -> bool:
    """A terminal's continuation starts at column 0 and is not a new record (clock, prefix, traceback); in a
    hard-wrapped paste (``pasted``) it may start with the one space a cut fell before (an indent is two or more)."""
    spaced = pasted and raw[:1] == " " and raw[1:2] not in ("", " ", "\t")
    return bool(raw) and (not raw[0].isspace() or spaced) and not _NEW_RECORD.match(raw.lstrip(" "))


def _joinable(head: str, cont: str) -> bool:
    return len(head.rstrip()) >= MIN_HEAD and bool(cont.strip()) and not _NEW_RECORD.match(cont)


def wrap_width(lines: list[str]) -> int | None:
    """The column a paste was hard-wrapped at: the longest line length (at least ``MIN_WIDTH``) that at least
    ``MIN_CUT_LINES`` lines have exactly and no line exceeds; None when the lines show no such column."""
    if not lines:
        return None
    counts = Counter(len(line) for line in lines)
    width = max(counts)
    return width if width >= MIN_WIDTH and counts[width] >= MIN_CUT_LINES else None


def _junctions(head: str, conts: list[tuple[str, bool]]) -> list[tuple[str, int]]:
    """Every reading of ``head`` continued by ``conts`` ((text, cut at the column)), as (text, offset of the last
    junction): a line cut at the column goes on with the next line as it is; a paste's own break at a space is
    read with and without the space."""
    options: list[list[tuple[str, str]]] = []
    for text, cut in conts:
        options.append([("", text)] if cut else [("", text.strip()), (" ", text.strip())])
    out: list[tuple[str, int]] = []
    for choice in itertools.product(*options):
        before = head + "".join(sep + text for sep, text in choice[:-1])
        sep, last = choice[-1]
        out.append((f"{before}{sep}{last}", len(before)))
    return out


def add_wrapped(cat: Catalogue, bundle: Bundle, bf: BundleFile, findings: list[Finding], make: Maker) -> list[Finding]:
    """``findings`` plus findings for wrapped messages; a generic finding on a head line they explain goes."""
    if bf.size > MAX_BYTES or bf.size == 0 or len(bundle.files) > MAX_FILES:
        return findings
    lines = bundle.read_lines(bf.path, 1, 1_000_000)
    if len(lines) < 2:
        return findings
    views: dict[int, prefix.Prefix] = {}

    def view(i: int) -> prefix.Prefix:
        got = views.get(i)
        if got is None:
            got = views[i] = prefix.view(lines[i])
        return got

    width = wrap_width(lines)
    pasted = width is not None

    def cut(i: int) -> bool:  # line i was cut at the paste's column: line i + 1 goes on with it
        return width is not None and len(lines[i]) == width and bool(lines[i + 1].strip())

    joined: list[tuple[str, int, int, int, int]] = []  # (text, head line, span, last junction, head length)
    for i in range(len(lines) - 1):
        if len(lines[i]) < MIN_HEAD or not (cut(i) or _could_continue(lines[i + 1], pasted)):
            continue  # cheap tests on the raw lines first: most pairs stop here
        if not _hinted(lines[i]) and not (pasted and _hinted(lines[i + 1])):  # a paste's cut falls anywhere, a hint too
            continue
        head = view(i)
        first = head.rest if cut(i) else head.rest.rstrip()
        if len(first.rstrip()) < MIN_HEAD:
            continue
        conts: list[tuple[str, bool]] = []
        for k in range(1, MAX_SPAN):
            j = i + k
            if j >= len(lines):
                break
            if cut(j - 1):
                conts.append((lines[j], True))
            else:
                if not _could_continue(lines[j], pasted):
                    break
                cont = view(j)
                if cont.rank not in (None, head.rank) or not _joinable(conts[-1][0] if conts else first, cont.rest):
                    break
                conts.append((cont.rest, False))
            joined.extend((text, i + 1, k, junction, len(first)) for text, junction in _junctions(first, conts))
    if not joined:
        return findings
    found = _matches(cat, joined, lines, pasted)
    if not found:
        return findings
    out = list(findings)
    for (head_line, sig), (span, fields) in sorted(found.items()):
        end = head_line + span
        ev = Evidence(id="", file=bf.path, line=head_line, end_line=end, text="\n".join(lines[head_line - 1 : end]))
        made = make(sig, lines[head_line - 1], [ev], {**fields, "_wrapped": f"lines {head_line}-{end}"})
        prio = cat.signatures[sig].priority
        out = [f for f in out if not _explained(cat, f, made, prio)]
        out.append(made)
    return out


def _matches(
    cat: Catalogue, joined: list[tuple[str, int, int, int, int]], lines: list[str], pasted: bool = False
) -> dict[tuple[int, int], tuple[int, dict[str, str]]]:
    """(head line, signature) -> (span, fields) for signatures that match across a junction only: the match
    starts on the head line (a record the head does not take part in is not cited from it) and ends on the last."""
    from crashcart.scan.matcher import make_matcher

    encoded = [t.encode("utf-8", "replace") for t, _, _, _, _ in joined]
    ends: list[int] = []
    pos = 0
    for b in encoded:
        pos += len(b) + 1
        ends.append(pos)
    hits = make_matcher().scan(b"\n".join(encoded))
    found: dict[tuple[int, int], tuple[int, dict[str, str]]] = {}
    for sig, end in sorted(hits):
        s = cat.signatures[sig]
        if s.role == "context" or s.block or s.sampled or s.id.startswith("generic."):
            continue
        text, head_line, span, junction, head_len = joined[bisect.bisect_left(ends, end)]
        m = cat.regex(sig).search(text)
        if m is None or m.start() >= head_len or m.end() <= junction + 1:
            continue
        fields = _named(m)
        alone = (cat.regex(sig).search(t) for t in lines[head_line - 1 : head_line + span])
        if any(a is not None and (not pasted or fields.keys() <= _named(a).keys()) for a in alone):
            continue  # a line alone already says it (in a hard-wrapped paste: all that the joined lines say)
        had = found.get((head_line, sig))
        if had is None or len(fields) > len(had[1]):  # the reading that says most; of equals, the shortest
            found[(head_line, sig)] = (span, fields)
    return found


def _named(m: re.Match[str]) -> dict[str, str]:
    return {k: v for k, v in m.groupdict().items() if v is not None}


def _explained(cat: Catalogue, f: Finding, made: Finding, prio: int) -> bool:
    """A non-context finding inside the wrapped span that is generic or weaker in the same class."""
    ev, span = f.evidence[0], made.evidence[0]
    if f.role == "context" or ev.file != span.file or not (span.line <= ev.line <= (span.end_line or span.line)):
        return False
    idx = cat.index.get(f.signature)
    weaker = idx is not None and cat.signatures[idx].priority < prio
    same = f.signature == made.signature  # the same message read from one of its lines: fewer fields
    return f.signature.startswith("generic.") or same or (f.class_id == made.class_id and weaker)
