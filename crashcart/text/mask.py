"""Masking: turn a log line into a template by hiding volatile tokens (ranks, pids, hosts, times).

Input: one line of text. Output: its template, e.g. ``[Rank <N>] Watchdog caught ... SeqNum=<N>``.
Two lines that differ only in such tokens get the same template. Pure and idempotent.
"""

from __future__ import annotations

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
    out = text
    for pattern, repl in _RULES:
        out = pattern.sub(repl, out)
    return out.strip()
