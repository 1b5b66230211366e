"""The stack-dump parser skips a line outside a dump unless it holds one of ``stacks.HEADER_WORDS``: every
line any header pattern takes, in every log the project holds, must hold one."""

from __future__ import annotations

from pathlib import Path

from crashcart.ingest.hang_kinds import PYSPY_PYTHON
from crashcart.scan.hang_evidence import stacks
from crashcart.text.prefix import split_prefix

ROOT = Path(__file__).resolve().parent.parent
ON_REST = (
    stacks._PYSPY_PROC,
    stacks._PYSPY_THREAD,
    stacks._PYSPY_PARENT,
    PYSPY_PYTHON,
    stacks._FH_THREAD,
    stacks._FH_STACK,
    stacks._FH_TIMEOUT,
    stacks._GDB_THREAD,
)


def _corpus_lines() -> list[str]:
    lines: set[str] = set()
    for base in (ROOT / "incidents", ROOT / "tests"):
        for path in base.rglob("*"):
            if path.is_file() and path.suffix not in (".py", ".pyc", ".gz", ".zip", ".tar", ".pkl", ".bin"):
                try:
                    lines.update(path.read_text(encoding="utf-8", errors="replace").splitlines())
                except OSError:
                    continue
    return sorted(lines)


def test_every_header_line_in_the_corpus_holds_a_header_word() -> None:
    headers = 0
    for raw in _corpus_lines():
        rest = split_prefix(raw).rest
        if any(p.match(rest) for p in ON_REST) or stacks._PROMPT.search(raw):
            headers += 1
            assert stacks.HEADER_WORDS.search(raw), raw
    assert headers > 30  # the corpus holds py-spy, faulthandler and gdb dumps (42 header lines on 2026-12-02)


def test_header_words_of_each_format() -> None:
    examples = [
        "Process 4012: python train.py --local_rank=3",  # py-spy 0.3-0.4
        "Python v3.10.12 (/usr/bin/python3.10)",
        "Python version 3.6.9",  # py-spy 0.1
        'Thread 0x7F3A2C1FF740 (active): "MainThread"',
        "Thread 4012 (idle)",
        "Parent Process 4000: torchrun --nproc-per-node 8 train.py",
        "Current thread 0x00007f3a2c1ff740 (most recent call first):",  # CPython faulthandler
        "Thread 0x00007f3a2c1ff740 (most recent call first):",
        "Stack (most recent call first):",
        "Timeout (0:10:00)!",  # faulthandler.dump_traceback_later
        'Thread 1 (Thread 0x7f3a2c1ff740 (LWP 4012) "python"):',  # gdb
        "user@gpu46:~$ sudo py-spy dump --pid 4012",
    ]
    for line in examples:
        rest = split_prefix(line).rest
        assert any(p.match(rest) for p in ON_REST) or stacks._PROMPT.search(line), line
        assert stacks.HEADER_WORDS.search(line), line
