"""Python tracebacks in a log: followed from their header to the final exception line (same rank prefix only), read
in growing blocks, and the carried class a traceback reports (a memory kill that Ray re-raises wrapped). Pure apart
from reading bundle lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from crashcart.catalogue import Catalogue, Signature
from crashcart.ingest.bundle import Bundle
from crashcart.models import BundleFile, Evidence
from crashcart.text import clock, prefix

TRACEBACK_FIRST_READ = 16  # lines of a traceback read at first (then 4x more at a time, up to the limit)
_TB_HEADERS = ("Traceback (most recent call last)", "During handling of", "The above exception")
# A Ray task's error is re-raised as "RayTaskError(<cause class>)" (python/ray/exceptions.py as_instanceof_cause).
_EXC_LINE = re.compile(
    r"^(?P<exception>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Warning)?(?:\([A-Za-z_][\w.]*\))?)"
    r"(?::\s?(?P<message>.*))?$"
)
#: Classes whose line inside a Python exception makes the traceback that carries it that class, not a Python
#: exception of the work's own (TAXONOMY class 20 over class 18): Ray re-raises a memory kill wrapped (a RayTaskError
#: over the cause's own traceback and exception line, an ActorDiedError with the death's context lines, a Train/Tune
#: aggregate chained over the cause), and the wrapper's exception line names no error of its own.
CARRIED_CLASSES = frozenset({"host_oom_kill"})
#: Lines of a final exception's message read below its exception line for a carried line (python/ray/exceptions.py
#: RayTaskError.__str__: the cause's traceback, then its exception line; the memory monitor's message after it).
MESSAGE_LINES = 64
CARRIED_FIELD = "_carried_line"  # the line number of the carried line, on a traceback finding that carries one


def _carried_lines(cat: Catalogue, chosen: list[tuple[int, int, bytes | None]]) -> dict[int, int]:
    """line -> signature of the root-candidate lines of a carried class (usually none: then nothing is read)."""
    out: dict[int, int] = {}
    for sig, line, _ in chosen:
        s = cat.signatures[sig]
        if s.class_id in CARRIED_CLASSES and s.role == "root_candidate":
            out.setdefault(line, sig)
    return out


def _traceback(
    cat: Catalogue,
    bundle: Bundle,
    bf: BundleFile,
    start: int,
    max_lines: int,
    hits: dict[tuple[int, int], bytes | None],
    carried: dict[int, int] | None = None,
    ctx: clock.ClockContext | None = None,
) -> tuple[list[Evidence], Signature, dict[str, str], int] | None:
    """Follow a traceback from ``start`` to its final exception line (same rank prefix only)."""
    source = _lines_from(bundle, bf.path, start, max_lines + 1)
    first = next(source, None)
    if first is None:
        return None
    lines = [first]
    want = prefix.view(first).rank
    body_seen = False
    pending: int | None = None
    exc_at: int | None = None
    for offset, text in enumerate(source, start=1):
        lines.append(text)
        p = prefix.view(text)
        if p.rank != want:
            continue  # another rank's line interleaved in a combined log
        body = p.rest
        if pending is not None:
            if not body.strip():
                continue
            if body.startswith(_TB_HEADERS[1:]):
                pending = None  # a chained exception follows; keep going to the last one
                continue
            exc_at = pending
            break
        if body.startswith((" ", "\t")):
            body_seen = body_seen or body.lstrip().startswith("File ")
        elif body.startswith(_TB_HEADERS) or not body.strip():
            continue
        elif body_seen:
            pending = offset
        else:
            return None
    if exc_at is None:
        exc_at = pending
    if exc_at is None:
        return None
    exc_line_no = start + exc_at
    exc_text = lines[exc_at]
    m = _EXC_LINE.match(prefix.view(exc_text).rest)
    fields = {"exception": m.group("exception"), "message": (m.group("message") or "")[:300]} if m else {}
    sig_obj = _generic_traceback_sig(cat)
    for idx, s in enumerate(cat.signatures):
        # a wrapper's signature, ranked no higher than a bare traceback (RayTaskError(<cause>)), names no error of
        # its own: the traceback stays generic, so the line it carries (a memory kill) or the cause's own line decides
        if (
            (exc_line_no, idx) in hits
            and s.role != "context"
            and not s.id.startswith("generic.")
            and s.priority > sig_obj.priority
        ):
            extra = cat.extract(idx, exc_text)
            if extra is not None:
                sig_obj, fields = s, {**fields, **extra}
                break
    block = lines[: exc_at + 1]
    if carried and (sig_obj.id.startswith("generic.") or sig_obj.class_id == "unknown"):
        got = _carrier(cat, bundle, bf, start, block, carried, ctx)
        if got is not None:
            sig_obj, extra, block, carrier_line = got
            fields = {**fields, **{k: v for k, v in extra.items() if k not in fields}, CARRIED_FIELD: str(carrier_line)}
    evidence = [
        Evidence(id="", file=bf.path, line=exc_line_no, text=exc_text),
        Evidence(id="", file=bf.path, line=start, end_line=start + len(block) - 1, text="\n".join(block)),
    ]
    return evidence, sig_obj, fields, exc_line_no


def _carrier(
    cat: Catalogue,
    bundle: Bundle,
    bf: BundleFile,
    start: int,
    block: list[str],
    carried: dict[int, int],
    ctx: clock.ClockContext | None,
) -> tuple[Signature, dict[str, str], list[str], int] | None:
    """The carried-class line a traceback reports, its fields, the block extended to the last such line, and the
    first such line's number.

    Searched: the exception lines of the chain above the final one (not indented: a frame's source line
    ``except MemoryError:`` is code, not an error), then the final exception's message below it, from the same
    process (rank and host prefix) until a new record (a line with a clock, a new traceback, two blank lines):
    there only Ray's own lines count, as Ray composes those messages (a scheduler's line printed just after
    the traceback is its own record, not the message)."""
    exc_line_no = start + len(block) - 1
    head = prefix.view(block[0])
    found: list[tuple[int, int, str]] = []  # (line, signature, text)
    for offset, text in enumerate(block[:-1]):
        ln = start + offset
        if ln in carried:
            p = prefix.view(text)
            if p.rank == head.rank and p.host == head.host and not p.rest.startswith((" ", "\t")):
                found.append((ln, carried[ln], text))
    below = [ln for ln in carried if exc_line_no < ln <= exc_line_no + MESSAGE_LINES]
    extended = list(block)
    if below:
        last = max(below)
        blank = 0
        for offset, text in enumerate(bundle.read_lines(bf.path, exc_line_no + 1, last), start=1):
            ln = exc_line_no + offset
            p = prefix.view(text)
            if p.rank != head.rank or p.host != head.host:
                extended.append(text)
                continue  # another process's line interleaved
            body = p.rest
            blank = blank + 1 if not body.strip() else 0
            if blank >= 2 or body.startswith(_TB_HEADERS[0]):
                break
            if ctx is not None and body.strip() and clock.parse_time(body, ctx) is not None:
                break
            extended.append(text)
            if ln in carried and cat.signatures[carried[ln]].id.startswith("ray."):
                found.append((ln, carried[ln], text))
    if not found:
        return None
    sig = found[0][1]
    fields: dict[str, str] = {}
    for _, idx, text in found:
        for k, v in (cat.extract(idx, text) or {}).items():
            fields.setdefault(k, v)
    last_line = max(ln for ln, _, _ in found)
    return cat.signatures[sig], fields, extended[: max(len(block), last_line - start + 1)], found[0][0]


def _lines_from(bundle: Bundle, path: str, start: int, count: int) -> Iterator[str]:
    """Lines ``start`` .. ``start + count - 1`` of ``path``, read in growing blocks as they are used: most
    tracebacks end within a few lines, and reading ``count`` lines for each of hundreds of them took a
    second of a 1 GB bundle's scan."""
    got, block = 0, TRACEBACK_FIRST_READ
    while got < count:
        want = min(block, count - got)
        chunk = bundle.read_lines(path, start + got, start + got + want - 1)
        yield from chunk
        if len(chunk) < want:
            return
        got, block = got + want, block * 4


def _generic_traceback_sig(cat: Catalogue) -> Signature:
    for s in cat.signatures:
        if s.block == "traceback":
            return s
    raise LookupError("catalogue has no traceback signature")
