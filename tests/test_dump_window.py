"""A large log's tail is parsed for stack dumps from shortly before its first header word on: the processes,
threads and frames found (with their line numbers) are the ones a parse of the whole tail finds."""

from __future__ import annotations

import dataclasses
import random

import pytest

from crashcart.scan.hang_evidence import analyse, stacks

LOG = [
    "gpu-node-003:9000:9100 [3] NCCL INFO AllReduce: opCount 1f sendbuff 0x7f00 recvbuff 0x7f01 count 1048576",
    " [2026-12-01 00:28:21] iteration     1002/  250000 | consumed samples:       513024 | lm loss: 3.18 |",
    "[rank3]:[W1201 00:28:22.123456 ProcessGroupNCCL.cpp:1234] Warning: something benign",
    "Traceback (most recent call last):",
    '  File "/workspace/train.py", line 10, in <module>',
    "RuntimeError: retrying",
]
FAULTHANDLER = [
    "Timeout (0:10:00)!",
    "Thread 0x00007f3a2c1ff740 (most recent call first):",
    '  File "/usr/lib/python3.10/threading.py", line 324 in wait',
    '  File "/workspace/train.py", line 88 in step',
    "",
    "Current thread 0x00007f3a2d000000 (most recent call first):",
    '  File "/workspace/train.py", line 12 in <module>',
]
PYSPY = [
    "user@gpu46:~$ py-spy dump --pid 4012",
    "Process 4012: python train.py --local_rank=3",
    "Python v3.10.12 (/usr/bin/python3.10)",
    "",
    'Thread 0x7F3A2C1FF740 (active): "MainThread"',
    "    all_reduce (torch/distributed/distributed_c10d.py:2050)",
    "    step (train.py:88)",
]


def _project(procs: list[stacks.Process]) -> list[object]:
    out: list[object] = []
    for p in procs:
        fields = {k: v for k, v in dataclasses.asdict(p).items() if k not in ("lines", "threads")}
        threads = [
            (t.name, t.header, t.current, [(f.func, f.file, f.line, f.src) for f in t.frames]) for t in p.threads
        ]
        out.append((tuple(sorted(fields.items())), threads))
    return out


def _tail(seed: int) -> tuple[bytes, int]:
    rng = random.Random(seed)
    lines: list[str] = []
    for _ in range(rng.randrange(0, 400)):
        lines.append(rng.choice(LOG))
    for _ in range(rng.randrange(1, 4)):
        lines += rng.choice([FAULTHANDLER, PYSPY])
        lines += [rng.choice(LOG) for _ in range(rng.randrange(0, 30))]
    return ("\n".join(lines) + "\n").encode(), rng.randrange(2, 50_000)


@pytest.mark.parametrize("seed", range(40))
def test_a_tail_from_its_first_header_finds_what_the_whole_tail_finds(seed: int) -> None:
    data, first = _tail(seed)
    whole = stacks.parse("rank-3.log", analyse._window(data, first, 65536), 3)
    part, at = analyse._from_first_header(data, first)
    assert at >= first and data.endswith(part)
    narrowed = stacks.parse("rank-3.log", analyse._window(part, at, 65536), 3)
    assert _project(narrowed) == _project(whole)
    assert whole  # every tail holds a dump


def test_a_tail_without_a_header_word_is_empty() -> None:
    data = ("\n".join(LOG) + "\n").encode()
    assert analyse._from_first_header(data, 10) == (b"", 10 + len(LOG))


def test_the_kept_part_starts_on_a_line_boundary_before_the_header() -> None:
    data = ("\n".join(LOG * 100 + FAULTHANDLER) + "\n").encode()
    part, at = analyse._from_first_header(data, 1)
    lines = data.split(b"\n")
    assert lines[at - 1 :] == part.split(b"\n")
    header_at = 1 + len(LOG) * 100
    assert at == header_at - analyse.HEAD_CONTEXT
