"""Scan stage: messages that a terminal or a paste wrapped onto two or three lines.

A watchdog line cut at 80 or 120 columns, or a paste that broke a long line at a space, leaves a head line
that no signature matches and a continuation that starts mid-message. Here, in small files (pastes are
small; the fast scanner stays line-oriented), each line is joined with the one or two after it, the joined
texts are matched with the same catalogue, and a signature that matches across the junction (and on neither
line alone) becomes a finding citing the whole span. Pure apart from reading bundle lines.
"""

from __future__ import annotations

import bisect
import re
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


def _could_continue(raw: str) -> bool:
    """A terminal's continuation starts at column 0 and is not a new record (clock, prefix, traceback)."""
    return bool(raw) and not raw[0].isspace() and not _NEW_RECORD.match(raw)


def _joinable(head: str, cont: str) -> bool:
    return len(head.rstrip()) >= MIN_HEAD and bool(cont.strip()) and not _NEW_RECORD.match(cont)


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

    joined: list[tuple[str, int, int, int, int]] = []  # (text, head line, span, last junction, head length)
    for i in range(len(lines) - 1):
        if len(lines[i]) < MIN_HEAD or not _could_continue(lines[i + 1]) or not _hinted(lines[i]):
            continue  # cheap tests on the raw lines first: most pairs stop here
        head = view(i)
        if len(head.rest.rstrip()) < MIN_HEAD:
            continue
        parts = [head.rest.rstrip()]
        for k in range(1, MAX_SPAN):
            j = i + k
            if j >= len(lines) or not _could_continue(lines[j]):
                break
            cont = view(j)
            if cont.rank not in (None, head.rank) or not _joinable(parts[-1], cont.rest):
                break
            nxt = cont.rest.strip()
            for sep in ("", " "):
                before = sep.join(parts)
                joined.append((f"{before}{sep}{nxt}", i + 1, k, len(before), len(parts[0])))
            parts.append(nxt)
    if not joined:
        return findings
    found = _matches(cat, joined, lines)
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
    cat: Catalogue, joined: list[tuple[str, int, int, int, int]], lines: list[str]
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
        if (head_line, sig) in found:
            continue
        m = cat.regex(sig).search(text)
        if m is None or m.start() >= head_len or m.end() <= junction + 1:
            continue
        if any(cat.regex(sig).search(t) for t in lines[head_line - 1 : head_line + span]):
            continue  # a line alone already says it
        found[(head_line, sig)] = (span, {k: v for k, v in m.groupdict().items() if v is not None})
    return found


def _explained(cat: Catalogue, f: Finding, made: Finding, prio: int) -> bool:
    """A non-context finding inside the wrapped span that is generic or weaker in the same class."""
    ev, span = f.evidence[0], made.evidence[0]
    if f.role == "context" or ev.file != span.file or not (span.line <= ev.line <= (span.end_line or span.line)):
        return False
    idx = cat.index.get(f.signature)
    weaker = idx is not None and cat.signatures[idx].priority < prio
    return f.signature.startswith("generic.") or (f.class_id == made.class_id and weaker)
