"""The streaming reader: exact line numbers at buffer boundaries, giant lines, tails, hashes."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crashcart.scan.matcher import MatcherName
from crashcart.scan.reader import scan_file


class LiteralMatcher:
    """A matcher for one literal word: a test double at the designed ``Matcher`` seam."""

    name: MatcherName = "re"

    def __init__(self, word: bytes) -> None:
        self._re = re.compile(re.escape(word))

    def scan(self, buf: bytes) -> list[tuple[int, int]]:
        return [(0, m.end()) for m in self._re.finditer(buf)]


def _naive(data: bytes, word: bytes) -> list[int]:
    return [
        i + 1 for i, line in enumerate(data.split(b"\n")) if word in line and (i + 1 < len(data.split(b"\n")) or line)
    ]


@pytest.mark.parametrize("buffer_bytes", [7, 16, 64, 1024], ids=lambda b: f"buf{b}")
def test_line_numbers_exact_at_boundaries(tmp_path: Path, buffer_bytes: int) -> None:
    lines = [b"needle here" if i % 5 == 0 else b"hay %d" % i for i in range(1, 300)]
    data = b"\n".join(lines) + b"\n"
    p = tmp_path / "f.log"
    p.write_bytes(data)
    fs = scan_file(LiteralMatcher(b"needle"), p, "f.log", buffer_bytes=buffer_bytes, max_line_bytes=1000)
    assert [h[1] for h in fs.hits] == _naive(data, b"needle")
    assert all(h[2] == b"needle here" for h in fs.hits)
    assert fs.lines == 299
    assert fs.sha256 == hashlib.sha256(data).hexdigest()
    assert fs.tail[-1] == (299, lines[-1])


@hsettings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([b"", b"x", b"needle", b"a needle b", b"\r", b"nee", b"dle"]), max_size=60),
    st.integers(min_value=3, max_value=40),
    st.booleans(),
)
def test_line_numbers_property(
    tmp_path_factory: pytest.TempPathFactory, parts: list[bytes], buf: int, eol: bool
) -> None:
    data = b"\n".join(parts) + (b"\n" if eol and parts else b"")
    p = tmp_path_factory.mktemp("r") / "f.log"
    p.write_bytes(data)
    fs = scan_file(LiteralMatcher(b"needle"), p, "f.log", buffer_bytes=buf, max_line_bytes=1000)
    expected = [i + 1 for i, line in enumerate(data.split(b"\n")) if b"needle" in line]
    assert sorted(h[1] for h in fs.hits) == expected
    assert fs.lines == data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    for _, line, raw in fs.hits:
        if raw is not None:
            assert raw == data.split(b"\n")[line - 1]


def test_giant_line_keeps_following_line_numbers(tmp_path: Path) -> None:
    data = b"before\n" + b"z" * 200_000 + b" needle\n" + b"after needle\n"
    p = tmp_path / "big.log"
    p.write_bytes(data)
    fs = scan_file(LiteralMatcher(b"needle"), p, "big.log", buffer_bytes=4096, max_line_bytes=1000)
    assert [h[1] for h in fs.hits] == [2, 3]
    assert fs.hits[0][2] is None or len(fs.hits[0][2]) <= 1001
    assert fs.hits[1][2] == b"after needle"
    assert fs.lines == 3


def test_unreadable_file_is_data_not_exception(tmp_path: Path) -> None:
    fs = scan_file(LiteralMatcher(b"x"), tmp_path / "missing.log", "missing.log", buffer_bytes=64, max_line_bytes=100)
    assert fs.error is not None and "unreadable" in fs.error
