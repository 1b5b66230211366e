"""Does a regular expression end on a literal character, whichever way it matches?

Hyperscan reports every offset where a match can end. An expression whose every alternative ends on a literal
character (``... failed: invalid argument``, ``\\bcudaErrorInvalidValue\\b``) ends once per occurrence of that
character on a line; one that ends on a quantifier, a class, ``.`` or ``\\d``-like escape (``scale \\d+``,
``[^,]*``) ends after each character that repetition can take. Only the second kind needs the catalogue's
"extend the match to the end of its line" wrapper (``catalogue._one_end_per_line``), and the wrapper is not free:
on an expression with a long alternation after a ``.+`` it made hyperscan's compile of the whole catalogue about
seven times slower (30 s against 4.4 s, 2026-12-04). Conservative: anything not understood is "not literal".
"""

from __future__ import annotations

_CLASS_ESCAPES = frozenset("dDwWsSbBAzZ")  # escapes that are not one literal character (\b handled apart)
_QUANTIFIERS = frozenset("+*?}")


def ends_on_literal(expression: str) -> bool:
    """True when every alternative of ``expression`` ends on a literal character (a trailing ``\\b`` is looked
    through); False for a trailing quantifier, class, ``.``, class escape, anchor, lookaround or back-reference."""
    try:
        return _alternatives_end_literal(expression)
    except (IndexError, ValueError):
        return False


def _alternatives_end_literal(p: str) -> bool:
    return all(_ends_literal(alt) for alt in _top_level_alternatives(p))


def _ends_literal(p: str) -> bool:
    while p.endswith("\\b") and not _escaped(p, len(p) - 2):
        p = p[:-2]
    if not p:
        return False
    last = len(p) - 1
    c = p[last]
    if _escaped(p, last):
        return p[last] not in _CLASS_ESCAPES and not p[last].isdigit()
    if c in _QUANTIFIERS or c in ".]$^|(":
        return False
    if c == ")":
        start = _opening(p, last)
        inner = p[start + 1 : last]
        if inner.startswith("?"):
            if inner.startswith("?:"):
                inner = inner[2:]
            elif inner.startswith("?P<"):
                inner = inner[inner.index(">") + 1 :]
            else:
                return False  # lookaround, inline flags, a conditional: not understood here
        return bool(inner) and _alternatives_end_literal(inner)
    return True


def _escaped(p: str, i: int) -> bool:
    """The character at ``i`` follows an odd number of backslashes."""
    n = 0
    while i - 1 - n >= 0 and p[i - 1 - n] == "\\":
        n += 1
    return n % 2 == 1


def _spans(p: str) -> tuple[dict[int, int], list[int]]:
    """Each ``)``'s opening ``(``, and the positions of top-level ``|``, skipping escapes and classes."""
    opening: dict[int, int] = {}
    bars: list[int] = []
    stack: list[int] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(p, i) + 1
            continue
        if c == "(":
            stack.append(i)
        elif c == ")":
            opening[i] = stack.pop()
        elif c == "|" and not stack:
            bars.append(i)
        i += 1
    if stack:
        raise ValueError("unbalanced parentheses")
    return opening, bars


def _class_end(p: str, i: int) -> int:
    """The index of the ``]`` that closes the class opened at ``i``."""
    j = i + 1
    if j < len(p) and p[j] == "^":
        j += 1
    if j < len(p) and p[j] == "]":
        j += 1  # a leading ] is a literal
    while p[j] != "]":
        j += 2 if p[j] == "\\" else 1
    return j


def _opening(p: str, close: int) -> int:
    return _spans(p)[0][close]


def _top_level_alternatives(p: str) -> list[str]:
    bars = _spans(p)[1]
    out, start = [], 0
    for b in bars:
        out.append(p[start:b])
        start = b + 1
    out.append(p[start:])
    return out
