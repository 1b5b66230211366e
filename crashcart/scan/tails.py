"""Scan stage: each scanned file's last lines, read back from the file when asked (``Tails``).

Input: the bundle and each file's size and line count as scanned. Output: (line number, canonical text) of its
last ``lines.TAIL_LINES`` lines. Reads files; no other state.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import BinaryIO

from crashcart.ingest.bundle import Bundle, canonical_line
from crashcart.scan.lines import tail_lines
from crashcart.scan.reader import TAIL_BYTES


class Tails(Mapping[str, list[tuple[int, str]]]):
    """Each scanned file's last lines (``lines.TAIL_LINES``, canonical text, with their line numbers), read back
    from the file when asked, the bytes ``FileScan.tail`` would have held: a bundle of 10,000 files does not
    hold 600,000 lines for the few files whose ends are looked at twice."""

    def __init__(self, bundle: Bundle) -> None:
        self._bundle = bundle
        self._sizes: dict[str, tuple[int, int]] = {}  # path -> (bytes, lines) as scanned

    def add(self, path: str, nbytes: int, lines: int) -> None:
        self._sizes[path] = (nbytes, lines)

    def __getitem__(self, path: str) -> list[tuple[int, str]]:
        size, lines = self._sizes[path]
        phys = self._bundle.physical(path)
        try:
            with open(phys or "", "rb") as fh:
                raw = file_tail(fh, size, lines)
        except OSError:
            return []
        return [(n, canonical_line(r, self._bundle.limits.max_line_bytes)) for n, r in raw]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sizes)

    def __len__(self) -> int:
        return len(self._sizes)


def file_tail(fh: BinaryIO, size: int, lines: int) -> list[tuple[int, bytes]]:
    """``FileScan.tail`` of a file of ``size`` bytes and ``lines`` lines (as scanned), read from its end."""
    fh.seek(max(0, size - TAIL_BYTES))
    data = fh.read(min(size, TAIL_BYTES))
    return tail_lines(data, size, lines, data.endswith(b"\n"))
