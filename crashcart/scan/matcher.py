"""Multi-pattern matchers: run the whole signature catalogue over a large buffer in one call.

Input: a newline-aligned buffer (``bytes``, ``bytearray`` or ``memoryview``). Output: ``(signature index,
end offset)`` pairs. Two engines find the same lines: hyperscan (one compiled database, the fast path)
and Python ``re`` (one ``finditer`` per signature; the fallback where hyperscan has no wheel). Both use
``catalogue.line_pattern``, so no match spans two lines. Pure; no I/O.

Threads: a matcher is not shared between threads; ``clone()`` gives another one for another thread
(hyperscan: the same compiled database, a new scratch space). Hyperscan and hashing release the GIL.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import threading
from pathlib import Path
from typing import Any, Literal, Protocol, Self

from crashcart.catalogue import Catalogue, hyperscan_expressions, line_pattern, load_catalogue, user_cache_dir

MatcherName = Literal["hyperscan", "re"]
Buffer = bytes | bytearray | memoryview


class Matcher(Protocol):
    name: MatcherName

    def scan(self, buf: Buffer) -> list[tuple[int, int]]:
        """All (signature index, end offset) matches in ``buf``, in no particular order."""
        ...

    def only(self, sigs: frozenset[int]) -> Matcher:
        """A matcher for this thread that reports only the signatures ``sigs`` (indices unchanged)."""
        ...


class ReMatcher:
    """Pure-Python fallback: one compiled bytes regex per signature, multiline, same flags."""

    name: MatcherName = "re"

    def __init__(self, catalogue: Catalogue, *, _patterns: list[tuple[int, re.Pattern[bytes], bool]] | None = None):
        self._catalogue = catalogue
        self._patterns: list[tuple[int, re.Pattern[bytes], bool]] = []
        if _patterns is not None:
            self._patterns = _patterns
            return
        for i, sig in enumerate(catalogue.signatures):
            flags = re.MULTILINE | (re.IGNORECASE if "i" in sig.flags else 0)
            self._patterns.append((i, re.compile(line_pattern(sig.pattern).encode("ascii"), flags), sig.sampled))

    def clone(self) -> Self:
        return self  # stateless

    def only(self, sigs: frozenset[int]) -> ReMatcher:
        return ReMatcher(self._catalogue, _patterns=[p for p in self._patterns if p[0] in sigs])

    def scan(self, buf: Buffer) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for i, pat, sampled in self._patterns:
            if sampled:  # like hyperscan's SINGLEMATCH: the first match of the buffer only
                m = pat.search(buf)
                if m is not None:
                    out.append((i, m.end()))
            else:
                out.extend((i, m.end()) for m in pat.finditer(buf))
        return out


_DATABASES: dict[tuple[int, frozenset[int] | None], tuple[Catalogue, Any]] = {}
_COMPILE_LOCK = threading.Lock()
_CACHE_MAGIC = b"crashcart-hsdb-1\n"


def _database(catalogue: Catalogue, sigs: frozenset[int] | None = None) -> Any:
    """The catalogue (or only the signatures ``sigs`` of it) compiled once per process, shared by every
    thread's matcher.

    Compiling the whole catalogue takes seconds (8.5 s for 524 signatures on a 2-core machine, 2026-12-04), so
    the serialized database is kept in ``~/.cache/crashcart``, named by a hash of the expressions, flags,
    hyperscan version and machine, and checked by its own sha256 before it is loaded; any problem with the
    cache (missing, corrupt, unwritable, another CPU) means compiling again, never a failure.
    """
    import hyperscan

    with _COMPILE_LOCK:
        got = _DATABASES.get((id(catalogue), sigs))
        if got is not None and got[0] is catalogue:
            return got[1]
        expressions, ids, flags = hyperscan_expressions(catalogue)
        if sigs is not None:
            chosen = [k for k, i in enumerate(ids) if i in sigs]
            expressions = [expressions[k] for k in chosen]
            ids, flags = [ids[k] for k in chosen], [flags[k] for k in chosen]
        flags = [f | hyperscan.HS_FLAG_MULTILINE for f in flags]
        key = hashlib.sha256(
            repr((expressions, ids, flags, getattr(hyperscan, "__version__", ""), platform.machine())).encode()
        ).hexdigest()[:32]
        db = _load_cached(key)
        if db is None:
            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            db.compile(expressions=expressions, ids=ids, flags=flags)
            _store_cached(key, hyperscan.dumpb(db))
        _DATABASES[id(catalogue), sigs] = (catalogue, db)
        return db


def _cache_file(key: str) -> Path:
    return user_cache_dir() / f"hyperscan-{key}.db"


def _load_cached(key: str) -> Any:
    import hyperscan

    try:
        data = _cache_file(key).read_bytes()
    except (OSError, RuntimeError):
        return None
    head = len(_CACHE_MAGIC)
    digest, payload = data[head : head + 32], data[head + 32 :]
    if not data.startswith(_CACHE_MAGIC) or hashlib.sha256(payload).digest() != digest:
        return None
    try:
        db = hyperscan.loadb(payload, hyperscan.HS_MODE_BLOCK)
        hyperscan.Scratch(db)  # fails here if this CPU cannot run it
    except hyperscan.error:
        return None
    return db


def _store_cached(key: str, payload: bytes) -> None:
    try:
        target = _cache_file(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(_CACHE_MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, target)
    except (OSError, RuntimeError):
        return


class HyperscanMatcher:
    """All signatures in one hyperscan block-mode database; the GIL is released while it scans."""

    name: MatcherName = "hyperscan"

    def __init__(self, catalogue: Catalogue, *, _db: Any = None) -> None:
        import hyperscan

        self._catalogue = catalogue
        self._db = _db if _db is not None else _database(catalogue)
        self._scratch = hyperscan.Scratch(self._db)

    def clone(self) -> HyperscanMatcher:
        """A matcher for another thread: same database, its own scratch space."""
        return HyperscanMatcher(self._catalogue, _db=self._db)

    def only(self, sigs: frozenset[int]) -> HyperscanMatcher:
        """Compiled once per process for each set (and kept on disk like the whole catalogue)."""
        return HyperscanMatcher(self._catalogue, _db=_database(self._catalogue, sigs))

    def scan(self, buf: Buffer) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []
        add = hits.append

        def on_match(sig: int, start: int, end: int, flags: int, ctx: object) -> None:
            add((sig, end))

        self._db.scan(buf, match_event_handler=on_match, scratch=self._scratch)
        return hits


class Literals:
    """Which of a few byte strings occur in a buffer, in one pass: a small hyperscan database (the GIL
    released while it runs) where hyperscan is installed, else one ``in`` per string. A 4 MiB log tail
    without any of four strings costs one 2 ms pass, where the four ``in`` took 13 ms holding the GIL.
    Safe to share between threads (a scratch space per thread)."""

    def __init__(self, words: tuple[bytes, ...], *, use_hyperscan: bool | None = None) -> None:
        if not all(words):
            raise ValueError("an empty word occurs everywhere")
        self.words = words
        self._db: Any = None
        self._lock = threading.Lock()
        self._local = threading.local()
        self._hyperscan = hyperscan_available() if use_hyperscan is None else use_hyperscan

    def found(self, buf: Buffer) -> frozenset[bytes]:
        """The words that occur in ``buf``."""
        if not self._hyperscan or not self.words or not len(buf):
            data = buf if isinstance(buf, bytes) else bytes(buf)
            return frozenset(w for w in self.words if w in data)
        db, scratch = self._compiled()
        ids: set[int] = set()

        def on_match(i: int, start: int, end: int, flags: int, ctx: object) -> None:
            ids.add(i)

        db.scan(buf, match_event_handler=on_match, scratch=scratch)
        return frozenset(self.words[i] for i in ids)

    def _compiled(self) -> tuple[Any, Any]:
        import hyperscan

        with self._lock:
            if self._db is None:
                db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
                exprs = ["".join(f"\\x{b:02x}" for b in w).encode("ascii") for w in self.words]
                # SINGLEMATCH: one report per word and buffer is all a presence test needs
                db.compile(expressions=exprs, ids=list(range(len(exprs))), flags=hyperscan.HS_FLAG_SINGLEMATCH)
                self._db = db
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self._db)
        return self._db, scratch


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


def matcher_name(kind: Literal["auto", "hyperscan", "re"] = "auto") -> MatcherName:
    """Which engine ``make_matcher(kind)`` builds, without building it."""
    return "re" if kind == "re" or (kind == "auto" and not hyperscan_available()) else "hyperscan"


def make_matcher(kind: Literal["auto", "hyperscan", "re"] = "auto") -> HyperscanMatcher | ReMatcher:
    """Build the matcher for this thread. ``auto`` prefers hyperscan when it is installed."""
    cat = load_catalogue()
    if matcher_name(kind) == "re":
        return ReMatcher(cat)
    return HyperscanMatcher(cat)
