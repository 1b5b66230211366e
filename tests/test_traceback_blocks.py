"""A traceback is followed to its final exception line however long it is: its lines are read in growing
blocks (``tracebacks.TRACEBACK_FIRST_READ``, then four times more), and the answer must not depend on where
a block ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.scan import tracebacks
from crashcart.settings import Settings
from tests.kit import run_files


def _log(frames: int, tail: str = "KeyError: 'shard-17'") -> tuple[str, int, int]:
    """A rank log with one traceback of ``frames`` frames; (text, traceback line, exception line)."""
    lines = [f"iteration {i} | loss 2.{i:03d}" for i in range(1, 6)]
    start = len(lines) + 1
    lines.append("Traceback (most recent call last):")
    for k in range(frames):
        lines.append(f'  File "/workspace/train.py", line {100 + k}, in step_{k}')
        lines.append(f"    return step_{k + 1}(batch)")
    lines.append(tail)
    end = len(lines)
    lines += ["after the crash", ""]
    return "\n".join(lines), start, end


def _exception_spans(root: Path, text: str, settings: Settings) -> set[tuple[int, int | None]]:
    out = run_files(root, {"rank-0.log": text}, settings)
    return {(e.line, e.end_line) for f in out.findings for e in f.evidence if e.end_line is not None}


@pytest.mark.parametrize("frames", [1, 7, 8, 9, 39, 40, 41, 99])
def test_the_whole_traceback_is_cited_wherever_a_block_ends(tmp_path: Path, settings: Settings, frames: int) -> None:
    # 2 lines per frame: with 16 lines first and 64 next, 7-9 and 39-41 frames put the exception line on
    # either side of a block's end
    text, start, end = _log(frames)
    assert (start, end) in _exception_spans(tmp_path, text, settings)


def test_a_traceback_longer_than_the_limit_is_not_followed_past_it(tmp_path: Path, settings: Settings) -> None:
    limit = settings.scan.traceback_max_lines
    text, start, end = _log(limit)  # 2 * limit frame lines: the exception line is beyond the limit
    assert end - start > limit
    assert all(s != start for s, _ in _exception_spans(tmp_path, text, settings))


def test_first_block_is_smaller_than_the_limit() -> None:
    assert Settings().scan.traceback_max_lines > tracebacks.TRACEBACK_FIRST_READ
