"""Scan stage: byte-level helpers of the reader that cut buffers into lines.

Pure functions on bytes; no state, no I/O.
"""

from __future__ import annotations

TAIL_LINES = 60  # a file's last lines kept for the report (``tail_lines``)


def mv_lines(buf: bytearray, stop: int) -> list[bytes]:
    """``buf[:stop]`` split at newlines (one copy, in C)."""
    with memoryview(buf) as mv:
        return mv[:stop].tobytes().split(b"\n")


def last_byte(buf: bytearray, end: int) -> int:
    """Where a match ending at ``end`` lies: its last byte, or the one before when that is the newline ending it."""
    pos = max(end - 1, 0)
    if pos > 0 and buf[pos] == 0x0A:
        pos -= 1
    return pos


def tail_lines(data: bytes, size: int, lines: int, ends_with_newline: bool) -> list[tuple[int, bytes]]:
    """The last ``TAIL_LINES`` complete lines with their line numbers, from the file's last ``data`` bytes.

    Only the end of ``data`` that holds them is split (a 64 KiB tail is ~350 lines, 60 are kept: the split of it
    all was most of the cost, at 10,000 rank files read back for their last lines)."""
    cut = len(data)
    for _ in range(TAIL_LINES + 1):  # the pieces after the newline found last: TAIL_LINES + 2 of them (one spare)
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            break
    parts = data.split(b"\n") if cut < 0 else data[cut + 1 :].split(b"\n")
    if ends_with_newline:
        parts = parts[:-1]
    if size > len(data) and cut < 0:
        parts = parts[1:]  # first piece may be a partial line (a later start leaves it out already)
    parts = parts[-TAIL_LINES:]
    first = lines - len(parts) + 1
    return [(first + i, p) for i, p in enumerate(parts)]
