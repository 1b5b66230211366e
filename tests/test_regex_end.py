"""``text.regex_end.ends_on_literal``: which expressions end on a literal character whichever way they match (and so
need no "to the end of the line" wrapper for hyperscan to end once per occurrence), checked on a table of shapes
and, with hyperscan itself, on the catalogue's own examples."""

from __future__ import annotations

import pytest

from crashcart.catalogue import hyperscan_expressions, line_pattern, load_catalogue
from crashcart.text.regex_end import ends_on_literal

SHAPES = [
    ("Watchdog caught collective operation timeout", True),
    (r"\bOOMKill(?:ed|ing)\b", True),
    (r"failed: (?P<why>invalid argument|out of memory)", True),
    (r"CUDA error: (?:an illegal memory access|misaligned address) was encountered\.", True),
    (r"exit code \(\d+\)", True),
    (r"Killed process \d+", False),
    (r"scale (?:reduced|lowered) to \d+(?:\.\d+)?", False),
    (r"(?:a|b\d*)", False),
    (r"error: [^,]*", False),
    (r"NCCL WARN .*", False),
    (r"value=\w", False),
    (r"host [a-z]", False),
    (r"ends with a dot.", False),
    (r"repeat{2,3}", False),
    (r"(a)\1", False),
    (r"(?=lookahead)", False),
    (r"(?i:Case)", False),
    (r"trailing \\b", True),  # an escaped backslash, then a literal b
    (r"a literal \)", True),
    (r"tab\t", True),
    (r"unbalanced (", False),
    ("", False),
]


@pytest.mark.parametrize(("expression", "literal"), SHAPES)
def test_each_shape(expression: str, literal: bool) -> None:
    assert ends_on_literal(expression) is literal


def test_a_literal_ending_signature_ends_once_per_line_on_its_examples() -> None:
    """Compiled as the scanner compiles them, the signatures said to end on a literal report few match ends on each
    of their example lines (a trailing repetition would report one per character it can take)."""
    hyperscan = pytest.importorskip("hyperscan")
    cat = load_catalogue()
    expressions, ids, flags = hyperscan_expressions(cat)
    literal = [k for k, s in enumerate(cat.signatures) if ends_on_literal(line_pattern(s.pattern))]
    assert len(literal) > 100
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(
        expressions=[expressions[k] for k in literal],
        ids=[ids[k] for k in literal],
        flags=[flags[k] | hyperscan.HS_FLAG_MULTILINE for k in literal],
    )
    checked = 0
    for k in literal:
        for example in cat.signatures[k].examples:
            found: list[tuple[int, int]] = []
            db.scan(example.text.encode(), match_event_handler=lambda i, _f, to, _fl, _c: found.append((i, to)))  # noqa: B023
            ends = [to for i, to in found if i == k]
            assert ends, (cat.signatures[k].id, example.text)
            assert len(ends) <= 3, (cat.signatures[k].id, example.text, ends)
            checked += 1
    assert checked > 100
