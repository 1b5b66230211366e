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
        return canonical_tail(raw, self._bundle.limits.max_line_bytes)

    def __iter__(self) -> Iterator[str]:
        return iter(self._sizes)

    def __len__(self) -> int:
        return len(self._sizes)


def canonical_tail(raw: list[tuple[int, bytes]], max_bytes: int) -> list[tuple[int, str]]:
    """``canonical_line`` of each line of ``raw`` (line number, bytes without their newline), in one decode where none
    has anything to strip or cut and all are valid UTF-8 (as ``hang_evidence.analyse._canonical_lines``): ``locate``
    asks for every rank file's tail, 60 lines each, 600,000 calls at 10,000 rank files otherwise."""
    joined = b"\n".join(r for _, r in raw)
    if raw and b"\r" not in joined and b"\x1b" not in joined and max(len(r) for _, r in raw) <= max_bytes:
        try:
            texts = joined.decode("utf-8").split("\n")  # a newline byte is never inside a UTF-8 sequence
        except UnicodeDecodeError:
            texts = []
        if len(texts) == len(raw):
            return [(n, t) for (n, _), t in zip(raw, texts, strict=True)]
    return [(n, canonical_line(r, max_bytes)) for n, r in raw]


def file_tail(fh: BinaryIO, size: int, lines: int) -> list[tuple[int, bytes]]:
    """``FileScan.tail`` of a file of ``size`` bytes and ``lines`` lines (as scanned), read from its end."""
    fh.seek(max(0, size - TAIL_BYTES))
    data = fh.read(min(size, TAIL_BYTES))
    return tail_lines(data, size, lines, data.endswith(b"\n"))
