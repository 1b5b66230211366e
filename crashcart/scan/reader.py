"""Stream one file through a matcher in newline-aligned buffers, never holding the whole file.

Input: a path on disk and a ``Matcher``. Output: a ``FileScan`` with exact 1-based line numbers of
every hit, the raw bytes of each hit line, a sparse line index (checkpoints), the line count, the
file's sha256 and its last lines. I/O: reads the file. Runs in worker processes (picklable data).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from crashcart.scan.matcher import Matcher

TAIL_BYTES = 64 * 1024
TAIL_LINES = 60


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


def scan_file(matcher: Matcher, physical: Path, path: str, *, buffer_bytes: int, max_line_bytes: int) -> FileScan:
    """Scan ``physical`` (shown as ``path``); OS errors become ``FileScan.error``, never exceptions."""
    out = FileScan(path=path)
    digest = hashlib.sha256()
    line = 1  # line number of the first byte of the next piece
    offset = 0
    at_line_start = True
    carry = b""
    seen: set[tuple[int, int]] = set()
    last_byte = b""
    try:
        with physical.open("rb") as fh:
            while True:
                block = fh.read(buffer_bytes)
                if block:
                    digest.update(block)
                    last_byte = block[-1:]
                data = carry + block if carry else block
                if not data:
                    break
                if block:
                    cut = data.rfind(b"\n")
                    if cut == -1 and len(data) < 4 * buffer_bytes:
                        carry = data
                        continue
                    piece, carry = (data, b"") if cut == -1 else (data[: cut + 1], data[cut + 1 :])
                else:
                    piece, carry = data, b""
                if at_line_start:
                    out.checkpoints.append((line, offset))
                _collect(matcher, piece, line, at_line_start, max_line_bytes, out.hits, seen)
                line += piece.count(b"\n")
                offset += len(piece)
                at_line_start = piece.endswith(b"\n")
                if not block:
                    break
            out.nbytes = offset
            out.lines = line - 1 + (1 if offset and last_byte != b"\n" else 0)
            out.sha256 = digest.hexdigest()
            out.tail = _tail(fh, offset, out.lines, last_byte == b"\n")
    except OSError as exc:
        out.error = f"unreadable: {exc.strerror or exc}"
    return out


def _collect(
    matcher: Matcher,
    piece: bytes,
    first_line: int,
    at_line_start: bool,
    max_line_bytes: int,
    hits: list[tuple[int, int, bytes | None]],
    seen: set[tuple[int, int]],
) -> None:
    matches = matcher.scan(piece)
    if not matches:
        return
    positions = []
    for sig, end in matches:
        pos = max(end - 1, 0)
        if piece[pos : pos + 1] == b"\n" and pos > 0:
            pos -= 1
        positions.append((pos, sig))
    positions.sort()
    cur_line, cur_pos = first_line, 0
    for pos, sig in positions:
        start = piece.rfind(b"\n", 0, pos + 1) + 1
        if start > cur_pos:
            cur_line += piece.count(b"\n", cur_pos, start)
            cur_pos = start
        key = (sig, cur_line)
        if key in seen:
            continue
        seen.add(key)
        raw: bytes | None
        if start == 0 and not at_line_start:
            raw = None  # the line began in an earlier piece (a giant line): read it back later
        else:
            stop = piece.find(b"\n", start)
            limit = start + max_line_bytes + 1
            raw = piece[start : limit if stop == -1 else min(stop, limit)]
        hits.append((sig, cur_line, raw))


def _tail(fh: object, size: int, lines: int, ends_with_newline: bool) -> list[tuple[int, bytes]]:
    """The last ``TAIL_LINES`` complete lines with their line numbers."""
    from typing import BinaryIO, cast

    f = cast(BinaryIO, fh)
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
