"""A signature that stopped being scanned for keeps the same first and last hits as a scan of every line.

The oracle is the same reader with every hit kept (``keep_hits`` huge): the hits the bounded reader keeps
must be exactly the oracle's first and last ``keep`` per signature, with the same line numbers, raw bytes
and offsets, in file order, for any mix of lines, buffer size and file ending.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crashcart.scan.matcher import MatcherName
from crashcart.scan.reader import scan_file

WORDS = [rb"tick", rb"warn", rb"boom"]


class Words:
    """Signature i matches lines holding WORDS[i]; ``only`` reports a subset, like the real matchers."""

    name: MatcherName = "re"

    def __init__(self, sigs: frozenset[int] = frozenset(range(len(WORDS)))) -> None:
        self.sigs = sigs

    def scan(self, buf: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
        data = bytes(buf)
        return [(i, m.end()) for i in sorted(self.sigs) for m in re.finditer(WORDS[i], data)]

    def only(self, sigs: frozenset[int]) -> Words:
        return Words(sigs)


LINE = st.one_of(
    st.sampled_from([b"tick step", b"warn skip", b"boom", b"tick warn", b"", b"plain text", b"x" * 300]),
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" ")),
)


def _expected(all_hits: list[tuple[int, int, bytes | None]], keep: list[int]) -> list[tuple[int, int]]:
    by_sig: dict[int, list[int]] = {}
    for sig, line, _ in all_hits:
        by_sig.setdefault(sig, []).append(line)
    out = []
    for sig, lines in by_sig.items():
        k = keep[sig]
        out += [(sig, n) for n in (lines if len(lines) <= 2 * k else lines[:k] + lines[len(lines) - k :])]
    return sorted(out, key=lambda x: (x[1], x[0]))


@hsettings(max_examples=60, deadline=None)
@given(
    lines=st.lists(LINE, min_size=1, max_size=400),
    newline_at_end=st.booleans(),
    buffer=st.sampled_from([64, 257, 4096]),
    keep=st.lists(st.integers(min_value=0, max_value=6), min_size=3, max_size=3),
)
def test_backscan_keeps_the_same_first_and_last_hits(
    tmp_path_factory, lines: list[bytes], newline_at_end: bool, buffer: int, keep: list[int]
) -> None:
    data = b"\n".join(lines) + (b"\n" if newline_at_end else b"")
    p = tmp_path_factory.mktemp("b") / "f.log"
    p.write_bytes(data)
    every = scan_file(Words(), p, "f.log", buffer_bytes=buffer, max_line_bytes=100, keep_hits=1 << 40)
    got = scan_file(Words(), p, "f.log", buffer_bytes=buffer, max_line_bytes=100, keep_hits=keep, backscan_min_bytes=0)
    assert sorted(((s, n) for s, n, _ in got.hits), key=lambda x: (x[1], x[0])) == _expected(every.hits, keep)
    assert [n for _, n, _ in got.hits] == sorted(n for _, n, _ in got.hits)  # file order
    raw = {(s, n): r for s, n, r in every.hits}
    assert all(raw[s, n] == r for s, n, r in got.hits if r is not None)
    assert all(every.offsets[n] == got.offsets[n] for _, n, _ in got.hits if n in got.offsets)
    assert (got.lines, got.nbytes, got.sha256) == (every.lines, every.nbytes, every.sha256)


def test_a_saturated_signature_stops_being_scanned_for(tmp_path: Path) -> None:
    """The point of it: after its first hits, the frequent signature is no longer asked for in the middle."""
    asked: list[frozenset[int]] = []

    class Recording(Words):
        def scan(self, buf: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
            asked.append(self.sigs)
            return super().scan(buf)

        def only(self, sigs: frozenset[int]) -> Recording:
            return Recording(sigs)

    data = b"".join(b"tick %d\n" % i for i in range(5000)) + b"boom\n"
    p = tmp_path / "f.log"
    p.write_bytes(data)
    fs = scan_file(
        Recording(), p, "f.log", buffer_bytes=1024, max_line_bytes=100, keep_hits=[3, 3, 3], backscan_min_bytes=0
    )
    assert [n for s, n, _ in fs.hits if s == 0] == [1, 2, 3, 4998, 4999, 5000]
    assert [n for s, n, _ in fs.hits if s == 2] == [5001]
    assert fs.uncounted == [0]
    assert sum(1 for a in asked if 0 in a) < 10  # not once per buffer (about 45 buffers)


def test_a_stream_reads_its_last_hits_back_from_the_member_written(tmp_path: Path) -> None:
    """An archive member scanned while decompressed gets the same hits as the file, from what was written."""
    import io
    import os

    from crashcart.scan.reader import scan_stream

    data = b"".join(b"tick %d warn\n" % i if i % 3 else b"boom %d\n" % i for i in range(20000))
    p = tmp_path / "member.log"
    p.write_bytes(data)
    opened: list[int] = []

    def reread() -> int:
        opened.append(os.open(p, os.O_RDONLY))
        return opened[-1]

    kw = {"buffer_bytes": 4096, "max_line_bytes": 100, "keep_hits": [4, 4, 4], "backscan_min_bytes": 8192}
    streamed = scan_stream(Words(), io.BytesIO(data), "member.log", reread=reread, **kw)  # type: ignore[arg-type]
    whole = scan_file(Words(), p, "member.log", **kw)  # type: ignore[arg-type]
    for fd in opened:
        os.close(fd)
    assert streamed.hits == whole.hits and streamed.uncounted == whole.uncounted == [0, 1, 2]
    assert len(opened) == 1
    assert [n for s, n, _ in whole.hits if s == 0][-1] == 20000
