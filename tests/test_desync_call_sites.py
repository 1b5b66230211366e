"""Ranks whose collective timed out at different call sites ran different collectives (TAXONOMY class 4; §1.3,
the minority of grouped stack traces). gloo raises its timeout as a Python exception, so each rank's traceback
says where it called the collective (gloo ``transport/tcp/unbound_buffer.cc``: "Timed out waiting <ms>ms for recv
operation to complete"; the frames as CPython 3.11 prints them, the rank prefix as torchrun ``--tee`` does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.reduce.desync import call_site
from crashcart.settings import Settings
from tests.kit import run_files

TB = """[rank{r}]: step 3 loss 1.25
[rank{r}]: Traceback (most recent call last):
[rank{r}]:   File "/work/job/train.py", line 140, in <module>
[rank{r}]:     main()
[rank{r}]:   File "/work/job/train.py", line {line}, in main
[rank{r}]:     dist.all_reduce({arg})
[rank{r}]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper
[rank{r}]:     return func(*args, **kwargs)
[rank{r}]:            ^^^^^^^^^^^^^^^^^^^^^
[rank{r}]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2810, in all_reduce
[rank{r}]:     work.wait()
[rank{r}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms \
for recv operation to complete
"""


def _logs(lines: list[int]) -> dict[str, str]:
    return {f"rank{r}.log": TB.format(r=r, line=n, arg=f"t{n}") for r, n in enumerate(lines)}


def test_the_call_site_is_the_frame_before_torch() -> None:
    assert call_site(TB.format(r=0, line=98, arg="g")) == "train.py:98"
    assert call_site('  File "/a/train.py", line 3, in <module>\n    main()\nValueError: x') is None
    ddp = r"""  File "C:\job\loop.py", line 7, in step
    out = model(x)
  File "C:\py\Lib\site-packages\torch\nn\parallel\distributed.py", line 1639, in forward"""
    assert call_site(ddp) == "loop.py:7"


@pytest.mark.parametrize(("odd", "world"), [(1, 4), (0, 3), (5, 8)])
def test_the_rank_at_another_call_site_is_the_desync_culprit(
    tmp_path: Path, settings: Settings, odd: int, world: int
) -> None:
    lines = [98] * world
    lines[odd] = 104
    root = run_files(tmp_path, _logs(lines), settings).document.root_cause
    assert root.class_ == "collective_mismatch_desync"
    assert root.culprit.rank == odd
    assert root.confidence <= 0.7  # where the ranks were is an inference: never shown as high
    assert any(c.file == f"rank{odd}.log" and "line 104, in main" in c.text for c in root.citations)


def test_two_ranks_at_two_sites_are_a_desync_without_a_culprit(tmp_path: Path, settings: Settings) -> None:
    root = run_files(tmp_path, _logs([98, 104]), settings).document.root_cause
    assert root.class_ == "collective_mismatch_desync"
    assert root.culprit.rank is None
    assert {c.file for c in root.citations} == {"rank0.log", "rank1.log"}


def test_unprefixed_tracebacks_at_two_sites_are_a_desync_without_a_culprit(tmp_path: Path, settings: Settings) -> None:
    console = "".join(TB.format(r=r, line=n, arg="t").replace(f"[rank{r}]: ", "") for r, n in enumerate([98, 104]))
    root = run_files(tmp_path, {"console.log": console}, settings).document.root_cause
    assert root.class_ == "collective_mismatch_desync"
    assert root.culprit.rank is None
    assert any("line 98, in main" in c.text for c in root.citations)
    assert any("line 104, in main" in c.text for c in root.citations)


def test_one_call_site_says_nothing_of_a_desync(tmp_path: Path, settings: Settings) -> None:
    root = run_files(tmp_path, _logs([98, 98, 98, 98]), settings).document.root_cause
    assert root.class_ != "collective_mismatch_desync"


def test_no_majority_names_no_culprit(tmp_path: Path, settings: Settings) -> None:
    root = run_files(tmp_path, _logs([98, 98, 104, 104]), settings).document.root_cause
    assert root.culprit.rank is None
