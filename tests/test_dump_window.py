"""A large log's tail without a py-spy dump is parsed for faulthandler dumps from shortly before its first
faulthandler header on: the processes, threads and frames kept (with their line numbers) are the ones a parse
of the whole tail keeps; a tail with a py-spy dump is parsed whole."""

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


def _kept(data: bytes, first: int, pyspy: bool) -> list[object]:
    tools = {"faulthandler", "py-spy"} if pyspy else {"faulthandler"}
    procs = stacks.parse("rank-3.log", analyse._window(data, first, 65536), 3)
    return _project([p for p in procs if p.tool in tools])


@pytest.mark.parametrize("seed", range(40))
def test_a_tail_from_its_first_header_keeps_what_the_whole_tail_keeps(seed: int) -> None:
    data, first = _tail(seed)
    pyspy = b"Python v" in data and analyse._PYSPY_MARK.search(data) is not None
    part, at = analyse._from_first_header(data, first, pyspy)
    assert at >= first and data.endswith(part)
    assert _kept(part, at, pyspy) == _kept(data, first, pyspy)
    assert _kept(data, first, pyspy)  # every tail holds a dump


def test_a_tail_with_a_py_spy_dump_is_kept_whole() -> None:
    data = ("\n".join(LOG * 50 + FAULTHANDLER + PYSPY) + "\n").encode()
    assert analyse._from_first_header(data, 7, True) == (data, 7)


def test_the_kept_part_starts_on_a_line_boundary_before_the_header() -> None:
    data = ("\n".join(LOG * 100 + FAULTHANDLER) + "\n").encode()
    part, at = analyse._from_first_header(data, 1, False)
    lines = data.split(b"\n")
    assert lines[at - 1 :] == part.split(b"\n")
    header_at = 2 + len(LOG) * 100  # the thread header under faulthandler's "Timeout (...)!" line
    assert at == header_at - analyse.HEAD_CONTEXT


def test_a_tail_without_a_faulthandler_header_is_kept_whole() -> None:
    data = ("\n".join(LOG) + "\n").encode()
    assert analyse._from_first_header(data, 10, False) == (data, 10)
