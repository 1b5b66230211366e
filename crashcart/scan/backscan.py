"""The last hits of signatures that stopped being scanned: read a file backwards from its end.

A signature that fires on most lines of a big file (a progress line every step, a warning repeated on every
step) costs the forward scan one call into Python per line. The reader keeps only its first and last few
hits per file, so once the first ones are held it stops scanning for it (``reader._Scanner``) and, at the
end, finds the last ones here: buffers read backwards from the end of the file, scanned for those
signatures only, until each has its last ``need`` hits or the offset where its forward scan stopped is
reached. Exact line numbers come from the line count the forward pass made. Pure apart from ``os.pread``.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

from crashcart.scan.matcher import Matcher


@dataclass(frozen=True)
class BackHit:
    sig: int
    line: int
    offset: int  # byte offset of the line's start
    raw: bytes  # the line, cut at max_line_bytes + 1


def last_hits(
    fd: int,
    size: int,
    next_line: int,
    matcher: Matcher,
    stopped: dict[int, int],
    need: dict[int, int],
    *,
    block: int,
    max_line_bytes: int,
) -> tuple[dict[int, list[BackHit]], bool]:
    """Per signature of ``stopped`` (sig -> offset of the line start where its forward scan stopped), its
    last ``need[sig]`` hits at or after that offset, in file order; and whether every region was read
    (False: a line longer than ``block`` * 4 stopped the reading early; the hits found are still exact).

    :param next_line: line number a line starting at ``size`` would have (1 + the newlines of the file,
        + 1 more when the file does not end with a newline).
    """
    got: dict[int, list[BackHit]] = {s: [] for s in stopped}  # newest first while reading
    floor = min(stopped.values())
    pos, complete = size, True
    while pos > floor and any(len(got[s]) < need[s] and stopped[s] < pos for s in got):
        start = max(floor, pos - block)
        data = os.pread(fd, pos - start, start)
        # begin at a line start: the partial first line belongs to the next read, so there must be a newline
        # before the block's last byte (which ends the line before ``pos``); a long line: read more
        while start > floor and data.find(b"\n", 0, len(data) - 1) == -1 and pos - start < 4 * block:
            start = max(floor, start - block)
            data = os.pread(fd, pos - start, start)
        if start > floor:
            nl = data.find(b"\n", 0, len(data) - 1)
            if nl == -1:
                complete = False
                break
            start, data = start + nl + 1, data[nl + 1 :]
        if not data:
            pos = start
            continue
        newlines = _newlines(data)
        starts = len(newlines) + (0 if data.endswith(b"\n") else 1)
        first = next_line - starts
        seen: set[tuple[int, int]] = set()
        block_hits: list[tuple[int, int]] = []  # (line index in block, sig)
        for sig, end in matcher.scan(data):
            last = max(end - 1, 0)
            if last > 0 and data[last] == 0x0A:
                last -= 1
            k = bisect.bisect_left(newlines, last)
            if (k, sig) not in seen:
                seen.add((k, sig))
                block_hits.append((k, sig))
        for k, sig in sorted(block_hits, reverse=True):
            if sig not in got or len(got[sig]) >= need[sig]:
                continue
            line_start = 0 if k == 0 else newlines[k - 1] + 1
            if start + line_start < stopped[sig]:
                continue
            line_end = newlines[k] if k < len(newlines) else len(data)
            raw = data[line_start : min(line_end, line_start + max_line_bytes + 1)]
            got[sig].append(BackHit(sig, first + k, start + line_start, raw))
        pos, next_line = start, first
    for hits in got.values():
        hits.reverse()
    return got, complete


def _newlines(data: bytes) -> list[int]:
    try:
        import numpy
    except ImportError:
        out, i = [], data.find(b"\n")
        while i != -1:
            out.append(i)
            i = data.find(b"\n", i + 1)
        return out
    arr = numpy.frombuffer(data, dtype=numpy.uint8)
    return list(numpy.flatnonzero(arr == 0x0A).tolist())
