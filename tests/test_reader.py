"""The streaming reader: exact line numbers at buffer boundaries, giant lines, tails, hashes."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
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


@pytest.fixture(params=["python", "numpy", "numpy-few"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test through every way of mapping hits to lines: per hit counting bytes, vectorised (numpy), and per
    hit from numpy's newline positions (a buffer with fewer than ``MANY_HITS`` hits)."""
    import crashcart.scan.reader as reader

    if request.param.startswith("numpy"):
        pytest.importorskip("numpy")
        monkeypatch.setattr(reader, "NUMPY_MIN_BYTES", 1)
        monkeypatch.setattr(reader, "MANY_HITS", 1 if request.param == "numpy" else 1 << 62)
    else:
        monkeypatch.setattr(reader, "NUMPY_MIN_BYTES", 1 << 62)
    return str(request.param)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.sampled_from([b"", b"x", b"needle", b"needle needle", b"a needle b", b"\r", b"nee", b"dle"]), max_size=60
    ),
    st.integers(min_value=4, max_value=40),  # no line longer than 4 buffers: a match never spans a giant-line cut
    st.booleans(),
    st.sampled_from([b"needle", b"dle\n", b"e"]),
)
def test_line_numbers_exact_in_both_modes(
    tmp_path_factory: pytest.TempPathFactory, mode: str, parts: list[bytes], buf: int, eol: bool, word: bytes
) -> None:
    """Matches ending on the newline byte, several per line, lines cut by buffer boundaries: exact lines."""
    data = b"\n".join(parts) + (b"\n" if eol and parts else b"")
    p = tmp_path_factory.mktemp("r") / "f.log"
    p.write_bytes(data)
    fs = scan_file(LiteralMatcher(word), p, "f.log", buffer_bytes=buf, max_line_bytes=1000)
    lines = data.split(b"\n")
    probe = word.rstrip(b"\n")
    expected = [
        i + 1
        for i, line in enumerate(lines)
        if (probe in line and not word.endswith(b"\n")) or (line.endswith(probe) and i + 1 < len(lines))
    ]
    assert [h[1] for h in fs.hits] == expected
    assert fs.lines == data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    for _, line, raw in fs.hits:
        assert raw is None or raw == lines[line - 1]


def test_many_hits_per_buffer_across_boundaries(tmp_path: Path, mode: str) -> None:
    """Hundreds of hits per 64 KiB buffer (the vectorised path in numpy mode), lines of every length."""
    rng = __import__("random").Random(5)
    lines = [b"needle %d" % i if rng.random() < 0.4 else b"h" * rng.randrange(0, 300) for i in range(6000)]
    data = b"\n".join(lines) + b"\n"
    p = tmp_path / "f.log"
    p.write_bytes(data)
    fs = scan_file(LiteralMatcher(b"needle"), p, "f.log", buffer_bytes=64 * 1024, max_line_bytes=1000)
    assert [h[1] for h in fs.hits] == _naive(data, b"needle")
    assert all(h[2] == lines[h[1] - 1] for h in fs.hits)
    assert fs.lines == 6000
    assert [cp for cp in fs.checkpoints if cp[1] == 0] == [(1, 0)]
    for n, off in fs.checkpoints:  # every checkpoint is a real line start
        assert off == 0 or data[off - 1 : off] == b"\n"
        assert data.count(b"\n", 0, off) == n - 1


def test_giant_lines_in_both_modes(tmp_path: Path, mode: str) -> None:
    data = b"needle first\n" + b"z" * 70_000 + b" needle\n" + b"needle\n" * 3 + b"tail without newline needle"
    p = tmp_path / "big.log"
    p.write_bytes(data)
    fs = scan_file(LiteralMatcher(b"needle"), p, "big.log", buffer_bytes=4096, max_line_bytes=1000)
    assert [h[1] for h in fs.hits] == [1, 2, 3, 4, 5, 6]
    assert fs.hits[1][2] is None or len(fs.hits[1][2]) <= 1001
    assert fs.hits[-1][2] == b"tail without newline needle"
    assert fs.lines == 6
    assert fs.sha256 == hashlib.sha256(data).hexdigest()
    assert fs.tail[-1] == (6, b"tail without newline needle")


def test_hits_of_a_frequent_signature_are_bounded(tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory stays bounded on a log where every line matches: the first and last KEEP_HITS, in file order."""
    import crashcart.scan.reader as reader

    monkeypatch.setattr(reader, "KEEP_HITS", 5)
    lines = [b"needle %d" % i if i % 2 else b"other needle %d" % i for i in range(1, 201)]
    data = b"\n".join(lines) + b"\n"
    p = tmp_path / "f.log"
    p.write_bytes(data)

    class TwoWords:
        name: MatcherName = "re"

        def scan(self, buf: bytes) -> list[tuple[int, int]]:
            return [(0, m.end()) for m in re.finditer(rb"needle", buf)] + [
                (1, m.end()) for m in re.finditer(rb"other", buf)
            ]

    fs = scan_file(TwoWords(), p, "f.log", buffer_bytes=128, max_line_bytes=1000)
    sig0 = [line for sig, line, _ in fs.hits if sig == 0]
    sig1 = [line for sig, line, _ in fs.hits if sig == 1]
    assert sig0 == [1, 2, 3, 4, 5, 196, 197, 198, 199, 200]
    assert sig1 == [2, 4, 6, 8, 10, 192, 194, 196, 198, 200]
    assert [line for _, line, _ in fs.hits] == sorted(line for _, line, _ in fs.hits)  # file order kept
    assert fs.dropped == (200 - 10) + (100 - 10)
    assert all(raw == lines[line - 1] for _, line, raw in fs.hits)


@pytest.mark.parametrize("chunk", [7, 4096], ids=lambda c: f"chunk{c}")
def test_scan_stream_equals_scan_file_and_tees_every_byte(tmp_path: Path, mode: str, chunk: int) -> None:
    """An archive member scanned while it is decompressed: same result as the file, same bytes to the sink."""
    import io

    from crashcart.scan.feeds import ReadAhead
    from crashcart.scan.reader import TAIL_BYTES, scan_stream

    lines = [b"needle %d" % i if i % 7 == 0 else b"x" * (i % 50) for i in range(1, 4000)]
    data = b"\n".join(lines) + b"\nlast needle"
    assert len(data) > TAIL_BYTES
    p = tmp_path / "f.log"
    p.write_bytes(data)
    want = scan_file(LiteralMatcher(b"needle"), p, "f.log", buffer_bytes=1024, max_line_bytes=1000)
    copied = bytearray()
    ahead = ReadAhead(io.BytesIO(data), chunk=chunk, depth=2)
    got = scan_stream(
        LiteralMatcher(b"needle"), ahead, "f.log", buffer_bytes=1024, max_line_bytes=1000, sink=copied.extend
    )
    ahead.close()
    assert bytes(copied) == data
    assert (got.hits, got.lines, got.nbytes, got.sha256, got.checkpoints, got.tail) == (
        want.hits,
        want.lines,
        want.nbytes,
        want.sha256,
        want.checkpoints,
        want.tail,
    )


def test_read_ahead_passes_errors_to_the_reader() -> None:
    from crashcart.scan.feeds import ReadAhead

    class Broken:
        def __init__(self) -> None:
            self.calls = 0

        def read(self, n: int) -> bytes:
            self.calls += 1
            if self.calls > 2:
                raise OSError("truncated archive")
            return b"abc\n"

    ahead = ReadAhead(Broken(), chunk=4, depth=1)
    buf = bytearray(16)
    assert ahead.readinto(memoryview(buf)) == 4
    assert ahead.readinto(memoryview(buf)) == 4
    with pytest.raises(OSError, match="truncated"):
        ahead.readinto(memoryview(buf))
    assert ahead.readinto(memoryview(buf)) == 0
    ahead.close()


def test_feed_hands_bytes_over_and_a_failed_reader_unblocks_the_writer() -> None:
    import threading

    from crashcart.scan.feeds import Feed

    budget = threading.Semaphore(2)
    feed = Feed(budget)
    got = bytearray()

    def read() -> None:
        buf = bytearray(3)
        while n := feed.readinto(memoryview(buf)):
            got.extend(buf[:n])

    t = threading.Thread(target=read)
    t.start()
    for part in (b"abcd", b"ef", b"g" * 10):
        feed.write(part)
    feed.close(complete=True)
    t.join()
    assert bytes(got) == b"abcdef" + b"g" * 10

    failing = Feed(budget)
    failing.write(b"x")
    failing.write(b"y")  # the budget is spent: a third write would block until the reader takes one
    error = OSError("disk full")
    closer = threading.Timer(0.1, lambda: failing.close(complete=False))
    closer.start()
    failing.fail(error)  # drains (giving the budget back) until the writer's close
    closer.join()
    with pytest.raises(OSError, match="disk full"):
        failing.write(b"z")
    assert budget.acquire(blocking=False) and budget.acquire(blocking=False)
