"""What the first lines of a file say about its kind: kernel lines, ranks named in prefixes.

Each question is asked of all the lines at once first (a literal search over them joined), and of each line only
when that search finds something: a bundle of 10,000 rank files classifies 10,000 heads of 200 lines, and most of
those lines are neither kernel lines nor rank-prefixed. Pure.
"""

from __future__ import annotations

import re

from crashcart.text import prefix

_KERNEL_CONTENT = re.compile(r"\bkernel: |NVRM: |^\[\s*\d+\.\d{6}\] |^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ")
# a line whose first character after blanks is an ASCII digit or not ASCII (``str.isdigit`` is true only for those)
_LEAD_DIGIT = re.compile(r"\n[ \t]*[^\x00-\x2f\x3a-\x7f]")


def kernel_line(line: str) -> bool:
    """``_KERNEL_CONTENT.search(line)``, skipping the regex (which has no literal to look for first) on the
    lines that hold none of the texts every one of its matches holds."""
    return ("kernel: " in line or "NVRM: " in line or line.startswith("[")) and bool(_KERNEL_CONTENT.search(line))


def kernel_lines(lines: list[str]) -> int:
    """How many of ``lines`` are kernel lines (``kernel_line``); 0 at once when no line holds what each must."""
    joined = "\n".join(lines)
    if "kernel: " not in joined and "NVRM: " not in joined and not joined.startswith("[") and "\n[" not in joined:
        return 0  # none of the three literals is in any line (none holds a newline)
    return sum(1 for ln in lines if kernel_line(ln))


def named_ranks(lines: list[str]) -> set[int]:
    """The ranks the prefixes of ``lines`` name (``prefix.view``, asked of the lines ``may_name_rank`` lets by);
    the empty set at once when no line holds what ``may_name_rank`` looks for."""
    joined = "\n" + "\n".join(lines)
    if "[rank" not in joined and "]<std" not in joined and "\n{" not in joined and not _LEAD_DIGIT.search(joined):
        return set()
    return {p.rank for p in map(prefix.view, filter(prefix.may_name_rank, lines)) if p.rank is not None}
