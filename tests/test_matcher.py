"""The two matchers (hyperscan, Python ``re``) agree on every signature and on random input; no match
spans two lines; the ripgrep export means the same; the compiled-database cache is safe."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import threading
from pathlib import Path
from re import _constants as C  # type: ignore[attr-defined]
from re import _parser as P  # type: ignore[attr-defined]
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crashcart.catalogue import CatalogueError, line_pattern, load_catalogue, ripgrep_patterns
from crashcart.scan import matcher as matcher_mod
from crashcart.scan.matcher import ReMatcher, make_matcher
from crashcart.scan.reader import scan_file

hyperscan = pytest.importorskip("hyperscan")

CAT = load_catalogue()
SIGS = list(enumerate(CAT.signatures))
SIG_IDS = [s.id for s in CAT.signatures]
HS = make_matcher("hyperscan")
RE = ReMatcher(CAT)
SAMPLED = {i for i, s in SIGS if s.sampled}

_NL_CATEGORIES = {C.CATEGORY_SPACE, C.CATEGORY_NOT_WORD, C.CATEGORY_NOT_DIGIT}


def can_match_newline(items: Any) -> bool:
    """Whether a parsed regex (``re._parser``) has a node that can consume ``\\n`` (no DOTALL used)."""
    for op, av in items:
        if (op is C.LITERAL and av == 10) or (op is C.NOT_LITERAL and av != 10):
            return True
        if op is C.IN:
            negated = any(o is C.NEGATE for o, _ in av)
            has_nl = any(
                (o is C.LITERAL and a == 10)
                or (o is C.RANGE and a[0] <= 10 <= a[1])
                or (o is C.CATEGORY and a in _NL_CATEGORIES)
                for o, a in av
            )
            if has_nl != negated:
                return True
        if op in (C.MAX_REPEAT, C.MIN_REPEAT) and can_match_newline(av[2]):
            return True
        if op is C.SUBPATTERN and can_match_newline(av[3]):
            return True
        if op is C.BRANCH and any(can_match_newline(b) for b in av[1]):
            return True
    return False


def hits(m: Any, data: bytes, tmp: Path, buffer_bytes: int) -> set[tuple[int, int, bytes | None]]:
    p = tmp / "f.log"
    p.write_bytes(data)
    fs = scan_file(m, p, "f.log", buffer_bytes=buffer_bytes, max_line_bytes=4096)
    assert fs.error is None
    return set(fs.hits)


# --- line_pattern ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("index", "sig"), SIGS, ids=SIG_IDS)
def test_line_pattern_cannot_match_a_newline_and_keeps_line_meaning(index: int, sig: Any) -> None:
    lp = line_pattern(sig.pattern)
    assert not can_match_newline(P.parse(lp.encode("ascii"), re.MULTILINE)), lp
    flags = re.ASCII | (re.IGNORECASE if "i" in sig.flags else 0)
    for ex in sig.examples:
        assert re.search(lp, ex.text, flags), ex.text
    for text in sig.counter_examples:
        assert not re.search(lp, text, flags), text


def test_original_catalogue_had_patterns_that_crossed_lines() -> None:
    """Why ``line_pattern`` exists: these could run from one line into the next in a buffer."""
    crossing = [s.id for s in CAT.signatures if can_match_newline(P.parse(s.pattern.encode(), re.MULTILINE))]
    assert "kernel.xid" in crossing
    buf = b"NVRM: Xid (PCI:0000:06:00): 79, pid=12\n34, GPU has fallen off the bus.\n"
    assert re.search(CAT.signatures[CAT.index["kernel.xid"]].pattern.encode(), buf, re.M).group(0).count(b"\n") == 1  # type: ignore[union-attr]
    ends = {e for s, e in HS.scan(buf) if s == CAT.index["kernel.xid"]}
    assert all(buf.count(b"\n", 0, e - 1) == 0 for e in ends)  # any hit now ends on the line it started


@pytest.mark.parametrize(
    ("pattern", "rewritten"),
    [
        (r"a[^,]*b", r"a[^,\n]*b"),
        (r"a\sb", r"a[\t\x0b\x0c\r ]b"),
        (r"[\s,]x", r"[\t\x0b\x0c\r ,]x"),
        (r"[^\s<]+", r"[^\s<\n]+"),
        (r"\W\D", r"[^\w\n][^\d\n]"),
        (r"[^]a]", r"[^\]a\n]"),
        (r"x\[^y", r"x\[^y"),
    ],
)
def test_line_pattern_rewrites(pattern: str, rewritten: str) -> None:
    assert line_pattern(pattern) == rewritten


def test_line_pattern_refuses_what_it_cannot_rewrite() -> None:
    for bad in [r"(?s)a.b", r"[\W]", r"[abc"]:
        with pytest.raises(CatalogueError):
            line_pattern(bad)


def test_line_pattern_strips_names_for_ripgrep() -> None:
    assert line_pattern(r"(?P<a>x)(?P<b_2>[^)]*)\(?P<c", strip_names=True) == r"(?:x)(?:[^)\n]*)\(?P<c"


# --- the two engines agree ------------------------------------------------------------------------


def _corpus(seed: int) -> bytes:
    rng = random.Random(seed)
    lines = [ex.text for _, s in SIGS for ex in s.examples] + [t for _, s in SIGS for t in s.counter_examples]
    lines += ["", "plain noise line", "\r", "x" * 300]
    rng.shuffle(lines)
    return "\n".join(lines).encode("utf-8") + b"\n"


@pytest.mark.parametrize("buffer_bytes", [512, 4096, 1 << 20])
def test_engines_agree_on_every_signature(tmp_path: Path, buffer_bytes: int) -> None:
    data = _corpus(buffer_bytes)
    fast, slow = hits(HS, data, tmp_path, buffer_bytes), hits(RE, data, tmp_path, buffer_bytes)
    assert fast == slow
    found = {sig for sig, _, _ in fast}
    assert found >= set(range(len(CAT.signatures)))  # every signature fired on its own examples
    # and every example line is reported for its signature (sampled ones: once per buffer, by design)
    lines = data.split(b"\n")
    for index, sig in SIGS:
        if index in SAMPLED:
            continue
        want = {n + 1 for n, text in enumerate(lines) if any(text == ex.text.encode() for ex in sig.examples)}
        assert want <= {line for s, line, _ in fast if s == index}, sig.id


_FRAGMENTS = [ex.text for _, s in SIGS for ex in s.examples[:2]]


@st.composite
def noisy_lines(draw: st.DrawFn) -> bytes:
    parts: list[bytes] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["example", "slice", "bytes", "join"]))
        text = draw(st.sampled_from(_FRAGMENTS)).encode()
        if kind == "slice":
            a = draw(st.integers(0, len(text)))
            text = text[a : a + draw(st.integers(0, 80))]
        elif kind == "bytes":
            text = draw(st.binary(max_size=40))
        elif kind == "join":
            text = (
                text
                + draw(st.sampled_from([b" ", b"\n", b"\r\n", b", ", b"\t"]))
                + draw(st.sampled_from(_FRAGMENTS)).encode()
            )
        parts.append(text)
    return b"\n".join(parts) + draw(st.sampled_from([b"", b"\n"]))


@hsettings(max_examples=80, deadline=None)
@given(noisy_lines(), st.sampled_from([64, 300, 4096]))
def test_engines_agree_on_random_input(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, buffer_bytes: int
) -> None:
    tmp = tmp_path_factory.mktemp("m")
    assert hits(HS, data, tmp, buffer_bytes) == hits(RE, data, tmp, buffer_bytes)


@hsettings(max_examples=40, deadline=None)
@given(noisy_lines())
def test_engines_agree_on_one_buffer(data: bytes) -> None:
    """Raw matcher output, one buffer: the same (signature, line) pairs, every match on one line."""

    def lines(m: Any) -> set[tuple[int, int]]:
        out = set()
        for sig, end in m.scan(data):
            assert end > 0 and b"\n" not in data[max(0, end - 1) : end]
            out.add((sig, data.count(b"\n", 0, end - 1)))
        return out

    assert lines(HS) == lines(RE)


# --- threads and the database cache ---------------------------------------------------------------


def test_clones_scan_in_parallel_threads(tmp_path: Path) -> None:
    data = _corpus(7) * 20
    p = tmp_path / "f.log"
    p.write_bytes(data)
    want = scan_file(HS, p, "f.log", buffer_bytes=8192, max_line_bytes=4096).hits
    results: list[Any] = []

    def work() -> None:
        m = HS.clone()
        results.append(scan_file(m, p, "f.log", buffer_bytes=8192, max_line_bytes=4096).hits)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [want] * 4


def test_database_cache_round_trip_and_corruption(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # the cache lives under ~/.cache/crashcart
    db = HS._db
    matcher_mod._store_cached("k", hyperscan.dumpb(db))
    loaded = matcher_mod._load_cached("k")
    assert loaded is not None
    m = matcher_mod.HyperscanMatcher(CAT, _db=loaded)
    line = CAT.signatures[0].examples[0].text.encode() + b"\n"
    assert sorted(m.scan(line)) == sorted(HS.scan(line))
    cached = tmp_path / ".cache" / "crashcart" / "hyperscan-k.db"
    raw = cached.read_bytes()
    cached.write_bytes(raw[:-100] + bytes(100))  # corrupt payload: refused, not loaded
    assert matcher_mod._load_cached("k") is None
    cached.write_bytes(b"junk")
    assert matcher_mod._load_cached("k") is None
    assert matcher_mod._load_cached("missing") is None


# --- ripgrep --------------------------------------------------------------------------------------


def test_ripgrep_export_shape() -> None:
    pats = ripgrep_patterns(CAT)
    assert len(pats) == len(CAT.signatures)
    assert len(ripgrep_patterns(CAT, sampled=False)) == len(CAT.signatures) - len(SAMPLED)
    assert all(p.startswith("(?-u:") and "(?P<" not in p and "\n" not in p for p in pats)


@pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep not installed (bench/run.py installs it)")
def test_ripgrep_finds_the_same_lines(tmp_path: Path) -> None:
    data = _corpus(3)
    (tmp_path / "f.log").write_bytes(data)
    (tmp_path / "sigs").write_text("\n".join(ripgrep_patterns(CAT, sampled=False)) + "\n")
    out = subprocess.run(
        ["rg", "--no-config", "-a", "-n", "--no-filename", "-f", str(tmp_path / "sigs"), str(tmp_path / "f.log")],
        capture_output=True,
        check=True,
    ).stdout
    rg_lines = {int(line.split(b":", 1)[0]) for line in out.splitlines()}
    ours = {line for sig, line, _ in hits(HS, data, tmp_path, 1 << 20) if sig not in SAMPLED}
    assert rg_lines == ours
