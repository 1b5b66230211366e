"""Stream one file through a matcher in newline-aligned buffers, never holding the whole file.

Input: a path on disk and a ``Matcher``. Output: a ``FileScan`` with exact 1-based line numbers of
every hit, the raw bytes of each hit line, a sparse line index (checkpoints), the line count, the
file's sha256 and its last lines. I/O: reads the file. Runs in worker threads: the heavy steps
(``readinto``, sha256, hyperscan, numpy newline counting) release the GIL.

Per buffer the bytes are touched by: one ``readinto`` into a reused ``bytearray`` (no concatenation
of a carried partial line with the next block), sha256, the matcher, and one newline count (numpy,
about 20 GB/s; ``bytes.count`` manages 3 GB/s and holds the GIL). Hit lines are located with a
vectorised search when a buffer has many hits.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from io import FileIO
from pathlib import Path
from types import ModuleType
from typing import Any

from crashcart.scan.matcher import Matcher

TAIL_BYTES = 64 * 1024
TAIL_LINES = 60
GIANT = 4  # a line longer than this many buffers is scanned in buffer-sized pieces
NUMPY_MIN_BYTES = 64 * 1024  # below this, bytes.count beats numpy's call overhead
MANY_HITS = 64  # from this many matches in one buffer, map them to lines with numpy


@dataclass
class FileScan:
    path: str
    lines: int = 0
    nbytes: int = 0
    sha256: str = ""
    checkpoints: list[tuple[int, int]] = field(default_factory=list)
    hits: list[tuple[int, int, bytes | None]] = field(default_factory=list)  # (sig, line, raw or None)
    tail: list[tuple[int, bytes]] = field(default_factory=list)
    error: str | None = None


def _numpy() -> ModuleType | None:
    try:
        import numpy
    except ImportError:  # numpy comes with matplotlib; the scanner works without it, slower
        return None
    return numpy


def scan_file(matcher: Matcher, physical: Path, path: str, *, buffer_bytes: int, max_line_bytes: int) -> FileScan:
    """Scan ``physical`` (shown as ``path``); OS errors become ``FileScan.error``, never exceptions."""
    out = FileScan(path=path)
    try:
        with physical.open("rb", buffering=0) as fh:
            ends_with_newline = _Scanner(matcher, out, buffer_bytes, max_line_bytes).run(fh)
            out.tail = _tail(fh, out.nbytes, out.lines, ends_with_newline)
    except OSError as exc:
        out.error = f"unreadable: {exc.strerror or exc}"
    return out


class _Scanner:
    """State of one pass over one file."""

    def __init__(self, matcher: Matcher, out: FileScan, buffer_bytes: int, max_line_bytes: int) -> None:
        self.matcher, self.out = matcher, out
        self.buffer_bytes = max(1, buffer_bytes)
        self.max_line_bytes = max_line_bytes
        self.np = _numpy() if buffer_bytes >= NUMPY_MIN_BYTES else None
        self.line = 1  # line number of the first byte of the next piece
        self.offset = 0  # file offset of the first byte of the next piece
        self.at_line_start = True
        self.seen: set[tuple[int, int]] = set()

    def run(self, fh: FileIO) -> bool:
        """Read ``fh`` to the end, filling ``self.out``; True when the file ends with a newline."""
        size = self.buffer_bytes
        buf = bytearray(size)
        digest = hashlib.sha256()
        have = 0  # bytes at the front of ``buf`` carried over: a partial line, never a newline
        last = -1
        while True:
            if have + size > len(buf):
                buf.extend(bytes(have + size - len(buf)))  # a long line: grow (no view is alive here)
            with memoryview(buf) as mv:
                n = fh.readinto(mv[have : have + size])
                if n:
                    digest.update(mv[have : have + n])
                    last = buf[have + n - 1]
                end = have + n
                if n == 0:
                    stop = end
                else:
                    cut = buf.rfind(b"\n", have, end)
                    if cut == -1 and end < GIANT * size:
                        have = end
                        continue
                    stop = end if cut == -1 else cut + 1
                if stop:
                    self._piece(buf, mv, stop)
                rest = end - stop
                if rest:
                    buf[:rest] = mv[stop:end].tobytes()
                have = rest
            if n == 0:
                break
        out = self.out
        out.nbytes = self.offset
        out.lines = self.line - 1 + (1 if self.offset and last != 0x0A else 0)
        out.sha256 = digest.hexdigest()
        return last == 0x0A

    def _piece(self, buf: bytearray, mv: memoryview, stop: int) -> None:
        """Scan ``buf[:stop]``, which starts at ``self.line`` and ends at a newline (or a giant line's cut)."""
        if self.at_line_start:
            self.out.checkpoints.append((self.line, self.offset))
        piece = mv[:stop]
        matches = self.matcher.scan(piece)
        if self.np is not None and stop >= NUMPY_MIN_BYTES:
            arr = self.np.frombuffer(piece, dtype=self.np.uint8)
            newlines = int(self.np.count_nonzero(arr == 0x0A))
            if len(matches) >= MANY_HITS:
                self._many(buf, arr, stop, matches)
                matches = []
            del arr
        else:
            newlines = buf.count(b"\n", 0, stop)
        if matches:
            self._few(buf, stop, matches)
        del piece
        self.line += newlines
        self.offset += stop
        self.at_line_start = buf[stop - 1] == 0x0A

    def _raw(self, buf: bytearray, start: int, stop: int) -> bytes | None:
        if start == 0 and not self.at_line_start:
            return None  # the line began in an earlier piece (a giant line): read it back later
        nl = buf.find(b"\n", start, stop)
        return bytes(buf[start : min(stop if nl == -1 else nl, start + self.max_line_bytes + 1)])

    def _few(self, buf: bytearray, stop: int, matches: list[tuple[int, int]]) -> None:
        positions = sorted((_last_byte(buf, end), sig) for sig, end in matches)
        cur_line, cur_pos = self.line, 0
        hits, seen = self.out.hits, self.seen
        for pos, sig in positions:
            start = buf.rfind(b"\n", 0, pos + 1) + 1
            if start > cur_pos:
                cur_line += buf.count(b"\n", cur_pos, start)
                cur_pos = start
            key = (sig, cur_line)
            if key in seen:
                continue
            seen.add(key)
            hits.append((sig, cur_line, self._raw(buf, start, stop)))

    def _many(self, buf: bytearray, arr: Any, stop: int, matches: list[tuple[int, int]]) -> None:
        """Like ``_few``, vectorised: one pass finds every newline, one search maps every hit to its line."""
        np = self.np
        assert np is not None
        nl = np.flatnonzero(arr == 0x0A)
        sig = np.fromiter((s for s, _ in matches), dtype=np.int64, count=len(matches))
        last = np.maximum(np.fromiter((e for _, e in matches), dtype=np.int64, count=len(matches)) - 1, 0)
        last -= (arr[last] == 0x0A) & (last > 0)  # a match ending on a newline belongs to the line before it
        idx = np.searchsorted(nl, last, side="left")  # newlines before the hit's last byte = line within piece
        order = np.lexsort((sig, last, idx))  # like _few: by position, then signature
        idx, sig = idx[order], sig[order]
        _, first = np.unique(idx * (int(sig.max()) + 1) + sig, return_index=True)
        first.sort()
        starts = np.concatenate(([0], nl + 1))
        hits, seen = self.out.hits, self.seen
        for k, s in zip(idx[first].tolist(), sig[first].tolist(), strict=True):
            key = (s, self.line + k)
            if key in seen:
                continue
            seen.add(key)
            hits.append((s, self.line + k, self._raw(buf, int(starts[k]), stop)))


def _last_byte(buf: bytearray, end: int) -> int:
    pos = max(end - 1, 0)
    if pos > 0 and buf[pos] == 0x0A:
        pos -= 1
    return pos


def _tail(f: FileIO, size: int, lines: int, ends_with_newline: bool) -> list[tuple[int, bytes]]:
    """The last ``TAIL_LINES`` complete lines with their line numbers."""
    start = max(0, size - TAIL_BYTES)
    f.seek(start)
    data = f.read(TAIL_BYTES)
    parts = data.split(b"\n")
    if ends_with_newline:
        parts = parts[:-1]
    if start > 0:
        parts = parts[1:]  # first piece may be a partial line
    parts = parts[-TAIL_LINES:]
    first = lines - len(parts) + 1
    return [(first + i, p) for i, p in enumerate(parts)]
