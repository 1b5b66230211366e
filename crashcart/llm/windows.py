"""What the swarm model is shown: windows of log lines, never the whole bundle.

Windows open around rule hits and generic error lines (tracebacks, ERROR/FATAL, signals) and over each
rank's last lines. Windows whose lines have the same masked templates are one window: one exemplar
plus "seen on 511 ranks"; and a line whose template was already shown in an earlier window is folded
into a count, so the text sent grows with the number of distinct templates, not with the number of
ranks. Every line is redacted before it is shown, and shown as ``FILE:LINE| TEXT``. ``occurrences``
maps each template to every place it was read, so an answer on one exemplar line becomes evidence on
every rank that printed it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from crashcart.ingest.bundle import Bundle
from crashcart.models import Finding, RankLast
from crashcart.text import prefix
from crashcart.text.mask import template
from crashcart.text.redact import redact_text

BEFORE, AFTER = 2, 2  # lines of context around a hit
TAIL = 6  # a rank's last lines
MAX_WINDOW_LINES = 40
MAX_WINDOWS_PER_FILE = 24
CHUNK_CHARS = 24_000  # about 6k tokens of data per swarm call
_SEVERITY = {"P0": 0, "P1": 1, "P2": 2, "P3": 3, "info": 4}


@dataclass
class Window:
    """Lines ``start``.. of ``file`` (real text), and the other places where the same lines were printed."""

    file: str
    start: int
    lines: list[str]
    keys: tuple[str, ...]  # the template of each line
    priority: int
    rank: int | None
    members: list[tuple[str, int, list[str], int | None]] = field(default_factory=list)  # file, start, lines, rank

    @property
    def seen_on(self) -> int:
        ranks = {r for _, _, _, r in self.members if r is not None}
        return len(ranks) if ranks else len({f for f, _, _, _ in self.members})


@dataclass
class Chunk:
    text: str  # the data block as sent
    shown: dict[tuple[str, int], str]  # (file, line) -> its template, for every line shown
    redacted: dict[tuple[str, int], str]  # the shown (redacted) text of each line


def build_windows(bundle: Bundle, findings: list[Finding], last: dict[int, RankLast]) -> list[Window]:
    """Distinct windows, most severe first; each carries every place it was seen."""
    spans: dict[str, list[tuple[int, int, int]]] = {}
    for f in findings:
        if f.role == "context" and f.severity == "info":
            continue
        ev = f.evidence[0]
        end = (ev.end_line or ev.line) + AFTER
        spans.setdefault(ev.file, []).append((max(1, ev.line - BEFORE), end, _SEVERITY.get(f.severity, 4)))
    for rl in last.values():
        if rl.evidence is not None:
            n = rl.evidence.line
            spans.setdefault(rl.evidence.file, []).append((max(1, n - TAIL + 1), n, 5))
    distinct: dict[tuple[str, ...], Window] = {}
    for path, ranges in spans.items():
        bf = bundle.file(path)
        for a, b, prio in _merge(ranges)[:MAX_WINDOWS_PER_FILE]:
            lines = bundle.read_lines(path, a, min(b, a + MAX_WINDOW_LINES - 1))
            if not lines:
                continue
            rank = bf.rank if bf is not None and bf.rank is not None else prefix.view(lines[0]).rank
            key = tuple(template(t) for t in lines)
            w = distinct.get(key)
            if w is None:
                w = distinct[key] = Window(path, a, lines, key, prio, rank)
            w.priority = min(w.priority, prio)
            w.members.append((path, a, lines, rank))
    return sorted(distinct.values(), key=lambda w: (w.priority, w.file, w.start))


def _merge(ranges: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for a, b, p in sorted(ranges):
        if out and a <= out[-1][1] + 1 and b - out[-1][0] < MAX_WINDOW_LINES:
            pa, pb, pp = out[-1]
            out[-1] = (pa, max(pb, b), min(pp, p))
        else:
            out.append((a, b, p))
    return sorted(out, key=lambda r: (r[2], r[0]))


Occurrences = dict[str, list[tuple[str, int, str, int | None]]]  # template -> (file, line, text, rank)


def occurrences(windows: list[Window]) -> Occurrences:
    out: Occurrences = {}
    for w in windows:
        for path, start, lines, rank in w.members:
            for i, (key, text) in enumerate(zip(w.keys, lines, strict=False)):
                out.setdefault(key, []).append((path, start + i, text, rank))
    return out


def chunk_windows(windows: list[Window], limit: int = CHUNK_CHARS) -> list[Chunk]:
    """Pack windows into data blocks of about ``limit`` characters (a window is never split); lines whose
    template an earlier window already showed are folded, and a window with nothing new is left out."""
    chunks: list[Chunk] = []
    seen: set[str] = set()
    parts: list[str] = []
    shown: dict[tuple[str, int], str] = {}
    redacted: dict[tuple[str, int], str] = {}
    for w in windows:
        new = [i for i, k in enumerate(w.keys) if k not in seen and k]
        if not new:
            continue
        block, lines = _render(w, set(new))
        if parts and sum(map(len, parts)) + len(block) > limit:
            chunks.append(Chunk(data_block("".join(parts)), shown, redacted))
            parts, shown, redacted = [], {}, {}
        parts.append(block)
        for i in new:
            seen.add(w.keys[i])
            shown[(w.file, w.start + i)] = w.keys[i]
            redacted[(w.file, w.start + i)] = lines[i]
    if parts:
        chunks.append(Chunk(data_block("".join(parts)), shown, redacted))
    return chunks


def _render(w: Window, new: set[int]) -> tuple[str, dict[int, str]]:
    seen_on = w.seen_on
    head = (
        f"--- {w.file} (seen on {seen_on} ranks; this exemplar is one of them) ---"
        if seen_on > 1
        else f"--- {w.file} ---"
    )
    lines = {i: redact_text(w.lines[i]) for i in new}
    out: list[str] = [head]
    folded = 0
    for i in range(len(w.lines)):
        if i in lines:
            if folded:
                out.append(f"    ({folded} line(s) like ones shown above)")
                folded = 0
            out.append(f"{w.file}:{w.start + i}| {lines[i]}")
        else:
            folded += 1
    if folded:
        out.append(f"    ({folded} line(s) like ones shown above)")
    return "\n".join(out) + "\n", lines


def data_block(text: str) -> str:
    """Log text inside markers a log line cannot forge (the nonce hashes the text it encloses)."""
    nonce = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"<<<DATA {nonce}\n{text}DATA {nonce}>>>"
