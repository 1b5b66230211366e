"""Text helper: fill a signature's summary template from the fields a line gave, leaving out what it did not give.

A signature's pattern has alternatives (each wording of a message names its own fields) and optional parts, so a
line rarely fills every field its summary names. A missing field renders as nothing, and the words that only
introduce it go with it:

- fields written side by side (``{symbol}{func}``) are alternatives: any one present stands for the run;
- a parenthesised clause, or a clause after ``, `` / ``; `` / `` / ``, whose fields are all missing goes whole
  (``(pid {pid})``, ``, exit code {exitcode}``), and so does a clause after ``: `` that ends in missing fields;
- otherwise the field goes with the characters stuck to it (``#{seq}``, ``{percent}%``), a unit after it (``ms``)
  and a preposition up to two words before it (``at {pci}``, ``on the node {node}``).

Pure.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Mapping

_MISS, _ON, _OFF = "\x00", "\x01", "\x02"  # a missing field; the start and end of a present value
_PAREN = re.compile(r" ?\([^()\x01]*\x00[^()\x01]*\)")
_SEP = r"(?:, |; | / )"
_IN = rf"(?:(?!{_SEP}|: )[^()\x01])"  # a character inside one clause, outside any present value
_CLAUSE = re.compile(rf"{_SEP}{_IN}*?\x00{_IN}*?(?={_SEP}| \(|\)|$)")
_TAIL = re.compile(rf": {_IN}*\x00\S*(?={_SEP}|: |$)")  # ": rank {rank} on {host}" at the end
_CONNECTOR = r"(?:at|on|by|from|for|of|in|with|to|after)"
_FIELD = re.compile(
    rf"(?:\s+{_CONNECTOR}(?:\s+[A-Za-z]+){{0,2}})?\s*[#@]?\x00%?(?:\s+(?:ms|s|seconds|min)\b)?(?=[\W]|$)"
)
_TIDY = ((re.compile(r"\s+([,;:)])"), r"\1"), (re.compile(r"\(\s+"), "("), (re.compile(r"\s{2,}"), " "))
_UNTIDY = re.compile(r"\s[,;:)]|\(\s|\s\s")  # what any of ``_TIDY`` matches: without it none changes the text
_DANGLING = re.compile(r"(?:\s*[:;,/]\s*)+(?=[:;,/)]|$)")


def fill(template: str, fields: Mapping[str, str]) -> str:
    """``template`` (``str.format`` names, no format specs) with ``fields``; missing fields left out, see above.

    Remembered by the values of the fields the template names (nothing else is read): a bundle of 10,000 rank
    files fills the same summaries again and again (a tenth of it: 27,963 fills, 8,020 distinct)."""
    key = (template, *map(fields.get, _names(template)))
    got = _FILLED.get(key)
    if got is None:
        got = _fill(template, fields)
        if len(_FILLED) >= _FILLED_MAX:
            _FILLED.clear()  # a bound on memory; the answer is the same either way
        _FILLED[key] = got
    return got


_FILLED: dict[tuple[str | None, ...], str] = {}
_FILLED_MAX = 32768


def _fill(template: str, fields: Mapping[str, str]) -> str:
    """``fill`` without remembering: the template filled from ``fields``."""
    out: list[str] = []
    run: list[str | None] = []  # values of the fields written side by side, None where missing

    def close() -> None:
        if run:
            present = [v for v in run if v is not None]
            out.append(_ON + "".join(present) + _OFF if present else _MISS)
            run.clear()

    for literal, name in _parsed(template):
        if literal:
            close()
            out.append(literal)
        if name is not None:
            run.append(fields.get(name))
    close()
    text = "".join(out)
    if _MISS in text:
        text = _PAREN.sub("", text)
        text = _CLAUSE.sub("", text)
        for _ in range(3):  # "Python exception: {exception}: {message}": one tail at a time
            text = _TAIL.sub("", text)
        text = _FIELD.sub("", text)
        text = _DANGLING.sub("", text.replace(_MISS, ""))
    text = text.replace(_ON, "").replace(_OFF, "")
    if _UNTIDY.search(text) is not None:  # most summaries need none of the three (each a pass over the text)
        for pattern, repl in _TIDY:
            text = pattern.sub(repl, text)
    return text.replace("()", "").strip().rstrip(":;,/").strip()


@functools.lru_cache(maxsize=4096)
def _parsed(template: str) -> tuple[tuple[str, str | None], ...]:
    """(literal, field name) pieces of ``template``, parsed once per template: a bundle of 10,000 rank files fills
    the same few hundred templates ~280,000 times."""
    return tuple((literal, name) for literal, name, _, _ in string.Formatter().parse(template))


@functools.lru_cache(maxsize=4096)
def _names(template: str) -> tuple[str, ...]:
    """The field names ``template`` reads, in order (``fill``'s key: its answer depends on their values only)."""
    return tuple(name for _, name in _parsed(template) if name is not None)
