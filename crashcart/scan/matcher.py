"""Multi-pattern matchers: run the whole signature catalogue over a large buffer in one call.

Input: a newline-aligned bytes buffer. Output: ``(signature index, end offset)`` pairs. Two engines
return the same set: hyperscan (one compiled database, the fast path) and Python ``re`` (one
``finditer`` per signature; the fallback where hyperscan has no wheel). Pure; no I/O.
"""

from __future__ import annotations

import re
from typing import Literal, Protocol

from crashcart.scan.catalogue import Catalogue, hyperscan_expressions, load_catalogue

MatcherName = Literal["hyperscan", "re"]


class Matcher(Protocol):
    name: MatcherName

    def scan(self, buf: bytes) -> list[tuple[int, int]]:
        """All (signature index, end offset) matches in ``buf``, in no particular order."""
        ...


class ReMatcher:
    """Pure-Python fallback: one compiled bytes regex per signature, multiline, same flags."""

    name: MatcherName = "re"

    def __init__(self, catalogue: Catalogue) -> None:
        self._patterns: list[tuple[re.Pattern[bytes], bool]] = []
        for sig in catalogue.signatures:
            flags = re.MULTILINE | (re.IGNORECASE if "i" in sig.flags else 0)
            self._patterns.append((re.compile(sig.pattern.encode("utf-8"), flags), sig.sampled))

    def scan(self, buf: bytes) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for i, (pat, sampled) in enumerate(self._patterns):
            if sampled:  # like hyperscan's SINGLEMATCH: the first match of the buffer only
                m = pat.search(buf)
                if m is not None:
                    out.append((i, m.end()))
            else:
                out.extend((i, m.end()) for m in pat.finditer(buf))
        return out


class HyperscanMatcher:
    """All signatures in one hyperscan block-mode database; the GIL is released while it scans."""

    name: MatcherName = "hyperscan"

    def __init__(self, catalogue: Catalogue) -> None:
        import hyperscan

        expressions, ids, flags = hyperscan_expressions(catalogue)
        flags = [f | hyperscan.HS_FLAG_MULTILINE for f in flags]
        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self._db.compile(expressions=expressions, ids=ids, flags=flags)
        self._hits: list[tuple[int, int]] = []

    def _on_match(self, sig: int, start: int, end: int, flags: int, ctx: object) -> None:
        self._hits.append((sig, end))

    def scan(self, buf: bytes) -> list[tuple[int, int]]:
        self._hits = []
        self._db.scan(buf, match_event_handler=self._on_match)
        hits, self._hits = self._hits, []
        return hits


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


def make_matcher(kind: Literal["auto", "hyperscan", "re"] = "auto") -> Matcher:
    """Build the matcher for this process. ``auto`` prefers hyperscan when it is installed."""
    cat = load_catalogue()
    if kind == "re" or (kind == "auto" and not hyperscan_available()):
        return ReMatcher(cat)
    return HyperscanMatcher(cat)
