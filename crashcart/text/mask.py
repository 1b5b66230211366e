"""Masking: turn a log line into a template by hiding volatile tokens (ranks, pids, hosts, times).

Input: one line of text. Output: its template, e.g. ``[Rank <N>] Watchdog caught ... SeqNum=<N>``.
Two lines that differ only in such tokens get the same template. Pure and idempotent.
"""

from __future__ import annotations

import functools
import re

from crashcart.text import clock, prefix

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
        "<UUID>",
    ),
    (re.compile(r"(?:PCI:)?\b[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?\b"), "<PCI>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<HEX>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<IP>"),
    (re.compile(r"(?<![<>\w])[A-Za-z][\w]*(?:[-_][\w]+)*[-_]?\d[\w-]*"), "<ID>"),
    (re.compile(r"(?<![<>\w])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"), "<N>"),
    (re.compile(r"[ \t]+"), " "),
)
# The rules tell ASCII digits apart only by the classes \d, \w, [0-9a-fA-F], [0-7] and the literal "0" of "0x":
# mapping 0 -> 0, 1-7 -> 1 and 8-9 -> 8 keeps every such class, so a line and its mapped form match at the same
# places and mask(mapped) is mask(line) with that mapping applied (no replacement holds a digit). Where
# mask(mapped) holds no 1 or 8, mask(line) holds no digit 1-9 and the two are equal: lines that differ only in
# their numbers (the ranks, sequence numbers and sizes of 512 identical timeouts) are masked once.
_DIGIT_CLASSES = str.maketrans("123456789", "111111188")
_DIGIT_BYTES = bytes.maketrans(b"123456789", b"111111188")  # the same on ASCII text, without a dict per char


def template(line: str) -> str:
    """The masked template of ``line`` (per-rank prefixes and the timestamp removed)."""
    rest = prefix.view(line).rest
    parsed = clock.parse_time(rest)
    if parsed is not None:
        a, b = parsed.span
        rest = rest[:a] + rest[b:]
    return mask(rest)


def mask(text: str) -> str:
    """Replace volatile tokens; ``mask(mask(x)) == mask(x)``."""
    mapped = text.encode().translate(_DIGIT_BYTES).decode() if text.isascii() else text.translate(_DIGIT_CLASSES)
    out = _mask_mapped(mapped)
    if "1" not in out and "8" not in out:
        return out
    return _mask(text)


@functools.lru_cache(maxsize=4096)
def _mask_mapped(mapped: str) -> str:
    return _mask(mapped)


def _mask(text: str) -> str:
    out = text
    for pattern, repl in _RULES:
        out = pattern.sub(repl, out)
    return out.strip()
