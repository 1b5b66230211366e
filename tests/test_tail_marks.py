"""The hang-evidence pass skips a large log's tail that the scan's threads already looked at and found without
a mark (``analyse.tail_marks``): the findings, failures and notes are those of the pass that reads every tail.
``Literals`` (one hyperscan pass for a few words) answers what ``in`` answers. A scan that starts while numpy is
still being imported takes it up from a later buffer on and finds what a scan with or without numpy finds."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crashcart.ingest.bundle import open_bundle
from crashcart.scan import lazy, reader
from crashcart.scan.findings import IdSource
from crashcart.scan.hang_evidence import analyse
from crashcart.scan.matcher import Buffer, Literals, MatcherName, hyperscan_available
from crashcart.scan.run import open_scanning, scan
from crashcart.settings import Settings
from tests.test_h2_horovod import V021  # Horovod v0.21-v0.28 common/stall_inspector.cc

# Megatron-LM megatron/training/training.py training_log and NCCL's INFO lines (src/init.cc, enqueue.cc)
LOG = [
    " [2026-12-01 00:28:21] iteration     1002/  250000 | consumed samples:       513024 | lm loss: 3.18 |",
    "gpu-node-003:9000:9100 [3] NCCL INFO AllReduce: opCount 1f sendbuff 0x7f00 recvbuff 0x7f01 count 1048576",
]
# CPython Python/traceback.c (dump_traceback / faulthandler_dump_traceback_later): "Timeout (H:MM:SS)!", then
# "Thread 0x%lx (most recent call first):" / "Current thread 0x%lx ..." and '  File "%s", line %d in %s'
FAULTHANDLER = [
    "Timeout (0:10:00)!",
    "Thread 0x00007f3a2c1ff740 (most recent call first):",
    '  File "/usr/lib/python3.10/threading.py", line 324 in wait',
    '  File "/workspace/train.py", line 88 in step',
    "",
    "Current thread 0x00007f3a2d000000 (most recent call first):",
    '  File "/workspace/train.py", line 12 in <module>',
]
# py-spy src/dump.rs: "Process <pid>: <cmdline>", "Python v<version> (<exe>)", 'Thread 0x<tid> (<state>): "<name>"'
PYSPY = [
    "Process 4012: python train.py --local_rank=5",
    "Python v3.10.12 (/usr/bin/python3.10)",
    "",
    'Thread 0x7F3A2C1FF740 (active): "MainThread"',
    "    all_reduce (torch/distributed/distributed_c10d.py:2050)",
    "    step (train.py:88)",
]
WORDS = (b"Python v", b'"MainThread"', b"(most recent call first):", b"waiting for remainder of ranks")


def _log(end: list[str], lines: int = 400) -> str:
    return "\n".join([LOG[i % 2] for i in range(lines)] + end) + "\n"


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Logs of a few KiB count as large: tails of 3 KiB, five of them read at most."""
    monkeypatch.setattr(analyse, "MAX_LOG_READ", 4096)
    monkeypatch.setattr(analyse, "TAIL_BYTES", 3072)
    monkeypatch.setattr(analyse, "MAX_TAIL_TOTAL", 5 * 3072)


def _bundle(root: Path) -> Path:
    ends = {
        0: [],  # unmarked tails before and between the marked ones: the budget counts them as read
        1: FAULTHANDLER,
        2: [],
        3: PYSPY,
        4: V021.splitlines(),
        5: FAULTHANDLER,  # past the budget of five tails: read by neither pass
        6: [],
    }
    for rank, end in ends.items():
        p = root / "ranks" / f"rank-{rank}.log"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(_log(end))
    return root


def _answer(result: object) -> tuple[object, ...]:
    findings = [f.model_dump() for f in result.findings]  # type: ignore[attr-defined]
    failures = [f.model_dump() for f in result.failures]  # type: ignore[attr-defined]
    return findings, failures, result.notes  # type: ignore[attr-defined]


@pytest.mark.usefixtures("small_limits")
def test_unmarked_tails_skipped_give_the_answer_of_reading_every_tail(tmp_path: Path, settings: Settings) -> None:
    root = _bundle(tmp_path / "b")
    bundle, pool = open_scanning(root, settings.work_dir, settings.bundle_limits, settings.scan)
    with bundle:
        skipping = scan(bundle, settings.scan, pool=pool)
        marks = dict(pool.tail_marks)
    with open_bundle(root, settings.work_dir, settings.bundle_limits) as bundle:
        reading = scan(bundle, settings.scan)  # one thread, no pool: every tail read by the pass itself
    assert marks["ranks/rank-0.log"] == analyse.TailMarks(present=True, marked=False)
    assert marks["ranks/rank-1.log"] == analyse.TailMarks(present=True, marked=True)
    assert _answer(skipping) == _answer(reading)
    sigs = {f.signature for f in skipping.findings}
    assert any(s.startswith("hang.horovod") for s in sigs)  # rank 4, the fifth tail: still within the budget
    stacked = {f.evidence[0].file for f in skipping.findings if f.signature.startswith("hang.stack")}
    assert "ranks/rank-5.log" not in stacked


@pytest.mark.usefixtures("small_limits")
def test_marked_tails_are_read_as_without_marks(tmp_path: Path, settings: Settings) -> None:
    """Marks are only ever a reason to skip: a marked (or unknown) tail is read and parsed as before."""
    root = _bundle(tmp_path / "b")
    with open_bundle(root, settings.work_dir, settings.bundle_limits) as bundle:
        scan(bundle, settings.scan)  # the line counts the pass reads tails by
        every = {f.path: analyse.TailMarks(present=True, marked=True) for f in bundle.files}
        marked = analyse.scan_hang_evidence(bundle, IdSource(), every)
        unmarked = analyse.scan_hang_evidence(bundle, IdSource(), {})
    assert [f.model_dump() for f in marked.findings] == [f.model_dump() for f in unmarked.findings]
    assert marked.findings


def test_tail_marks_of_a_log_without_lines() -> None:
    assert analyse.tail_marks(Path("/nonexistent"), 0, 0) == analyse.TailMarks(present=False, marked=False)


@pytest.mark.usefixtures("small_limits")
@pytest.mark.parametrize(
    "text",
    ["", "no newline at all " * 400, "x" * 5000 + "\nshort end", "a\n" * 3000, _log(FAULTHANDLER), _log([], 10)],
)
def test_tail_marks_agree_with_the_tail_the_pass_reads(tmp_path: Path, text: str) -> None:
    p = tmp_path / "rank-0.log"
    p.write_text(text)
    data = p.read_bytes()
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    tail = analyse._read_tail(p, lines)
    want = analyse.TailMarks(tail is not None, tail is not None and any(w in tail[1] for w in WORDS))
    assert analyse.tail_marks(p, lines, len(data)) == want
    if lines:  # (no lines: no tail, whatever the file holds now)
        assert analyse.tail_marks(p, lines, len(data) + 1) is None  # not the file that was scanned


def test_an_empty_word_is_refused() -> None:
    with pytest.raises(ValueError):
        Literals((b"x", b""))


_PIECES = [b"", b"\n", b"Python", b" v", b"Python v3", b'"Main', b'Thread"', b"(most recent call first):"]
_PIECES += [b"waiting for remainder", b" of ranks", b"x" * 40, b"\x00\xff", b"(most recent"]


@hsettings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=30))
def test_literals_find_what_in_finds(parts: list[bytes]) -> None:
    data = b"".join(parts)
    want = frozenset(w for w in WORDS if w in data)
    assert Literals(WORDS, use_hyperscan=False).found(data) == want
    if hyperscan_available():
        assert Literals(WORDS, use_hyperscan=True).found(data) == want


class _Releasing:
    """A one-word matcher (the ``Matcher`` seam) that lets go of numpy's import lock after the first buffer."""

    name: MatcherName = "re"

    def __init__(self, word: bytes, lock: threading.Lock | None) -> None:
        self._re, self._lock = re.compile(re.escape(word)), lock

    def scan(self, buf: Buffer) -> list[tuple[int, int]]:
        if self._lock is not None and self._lock.locked():
            self._lock.release()
        return [(0, m.end()) for m in self._re.finditer(buf)]

    def only(self, sigs: frozenset[int]) -> _Releasing:
        return self


def test_numpy_taken_up_mid_file_finds_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numpy")
    monkeypatch.setattr(reader, "NUMPY_MIN_BYTES", 1)
    monkeypatch.setattr(reader, "MANY_HITS", 1)
    lines = [b"needle %d needle" % i if i % 3 == 0 else b"hay %d" % i for i in range(3000)]
    p = tmp_path / "f.log"
    p.write_bytes(b"\n".join(lines) + b"\n")

    def run(lock: threading.Lock | None) -> reader.FileScan:
        return reader.scan_file(_Releasing(b"needle", lock), p, "f.log", buffer_bytes=1024, max_line_bytes=1000)

    with_numpy = run(None)
    lock = threading.Lock()
    monkeypatch.setattr(lazy, "_NUMPY_LOCK", lock)
    monkeypatch.setattr(lazy, "_NUMPY", [])
    lock.acquire()  # as if another thread were importing numpy
    assert lazy.numpy_module(wait=False) is None
    switched = run(lock)
    assert lazy._NUMPY and lazy._NUMPY[0] is not None  # taken up after the first buffer
    assert switched == with_numpy
    assert [h[1] for h in switched.hits] == [i + 1 for i in range(3000) if i % 3 == 0]


_LINE_PIECES = [b"", b"abc", b"\r", b"\x1b[31m", b"\xff", "é".encode(), b"x" * 30, b"\n", b"\n", b"\xe2\x82"]


@hsettings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_LINE_PIECES), max_size=40), st.sampled_from([8, 25, 1000]))
def test_canonical_lines_in_one_decode_are_canonical_line_of_each(parts: list[bytes], max_line: int) -> None:
    from crashcart.ingest.bundle import canonical_line

    data = b"".join(parts)
    assert analyse._canonical_lines(data, max_line) == [canonical_line(r, max_line) for r in data.split(b"\n")]
