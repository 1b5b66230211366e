"""A worker that exited with its own status and printed nothing (reduce/lone.py ``silent_exit``; TAXONOMY 29, rule 6).

torchrun's ChildFailedError summary (torch/distributed/elastic/multiprocessing/errors/__init__.py, 1.9-2.x) lists each
failed worker as "[i]:" then "time", "host", "rank : R (local_rank: L)", "exitcode : N (pid: P)", "error_file",
"traceback" lines; "Root Cause (first observed failure)" is the first error file, often a peer's.
"""

from __future__ import annotations

from pathlib import Path

from crashcart.settings import Settings
from tests.kit import run_files

PEER = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.1.0.7]:41234"


def _summary(quiet_rank: int, code: str) -> str:
    return f"""\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-02-11_09:14:52
  host      : trn-a03
  rank      : {quiet_rank} (local_rank: {quiet_rank})
  exitcode  : {code} (pid: 77102)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-02-11_09:14:51
  host      : trn-a03
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 77101)
  error_file: /tmp/torchelastic_x/0/error.json
  traceback : Traceback (most recent call last):
    {PEER}
============================================================
"""


def test_the_worker_that_exited_with_its_own_status_is_where_to_look(tmp_path: Path, settings: Settings) -> None:
    log = f"[rank0]: {PEER}\n" + _summary(2, "7")
    doc = run_files(tmp_path / "b", {"console.log": log}, settings).document
    assert doc.root_cause.class_ == "unknown"  # nothing says why it exited
    assert doc.root_cause.culprit.rank == 2
    assert any("exitcode  : 7" in c.text and c.verified for c in doc.root_cause.citations)


def test_an_error_of_its_own_speaks_louder_than_the_exit_status(tmp_path: Path, settings: Settings) -> None:
    loud = f"[rank2]: KeyError: 'pixel_values'\n[rank0]: {PEER}\n" + _summary(2, "1")
    own = run_files(tmp_path / "b", {"console.log": loud}, settings).document.root_cause
    assert own.class_ == "python_exception_rank_crash"
    assert own.culprit.rank == 2


def test_of_two_silent_workers_neither_is_picked_by_exit_status(tmp_path: Path, settings: Settings) -> None:
    both = _summary(2, "7").replace("rank      : 0 (local_rank: 0)", "rank      : 3 (local_rank: 3)")
    both = both.replace(f"    {PEER}\n", "")  # neither worker printed anything
    doc = run_files(tmp_path / "b", {"console.log": both}, settings).document
    assert doc.root_cause.culprit.rank != 2  # not picked from two (the Root Cause entry's own rule may hint at 3)
