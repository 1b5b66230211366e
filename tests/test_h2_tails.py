"""Stack dumps and Horovod stalls at the end of a log too large to read whole (issue 14, H2).

A hung job's faulthandler dump (CPython ``faulthandler.dump_traceback(all_threads=True)`` on SIGUSR1: ``Thread
0x<id> (most recent call first):`` / ``  File "<file>", line <n> in <func>``) or Horovod's stall warning
(common/stall_inspector.cc, v0.21+) lands at the end of a rank's log after days of training: the last 4 MiB of a log
over the whole-file limit are searched, and the lines cited by the file's own numbers.
"""

from __future__ import annotations

from pathlib import Path

from crashcart.scan.hang_evidence import analyse
from crashcart.settings import Settings
from tests.kit import run_files
from tests.test_h2_horovod import SENTENCE


def fh(r: int, where: str, func: str, line: int) -> str:
    return (
        f"[rank{r}]:Thread 0x00007f3a1c5ff640 (most recent call first):\n"
        f'[rank{r}]:  File "/usr/lib/python3.10/threading.py", line 324 in wait\n'
        f"[rank{r}]:\n"
        f"[rank{r}]:Current thread 0x00007f3a2e1b4740 (most recent call first):\n"
        f'[rank{r}]:  File "{where}", line {line} in {func}\n'
        f'[rank{r}]:  File "/job/train.py", line 231 in train\n'
        f'[rank{r}]:  File "/job/train.py", line 300 in <module>\n'
    )


def big(prefix: str) -> tuple[str, int]:
    """Training lines past the whole-file limit, and how many."""
    row = f"{prefix}step 000000000 | loss 1.2345\n"
    n = analyse.MAX_LOG_READ // len(row) + 1000
    return "".join(f"{prefix}step {i:09d} | loss 1.2345\n" for i in range(n)), n


C10D = "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py"


def test_a_dump_at_the_end_of_a_large_log_is_found_and_cited_by_its_own_line(
    tmp_path: Path, settings: Settings
) -> None:
    body, n = big("")
    dumps = [
        fh(r, "/job/train.py", "_refresh_shard_cache", 131) if r == 1 else fh(r, C10D, "all_reduce", 2501)
        for r in range(4)
    ]
    out = run_files(tmp_path / "b", {"console.log": body + "".join(dumps)}, settings)
    assert (tmp_path / "b" / "console.log").stat().st_size > analyse.MAX_LOG_READ
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 1
    cited = [c for c in rc.citations if c.file == "console.log" and "_refresh_shard_cache" in c.text]
    assert cited and cited[0].verified and cited[0].line == n + 7 + 4  # rank 1's "Current thread" header


def test_a_horovod_stall_at_the_end_of_a_large_log(tmp_path: Path, settings: Settings) -> None:
    body, n = big("[1,0]<stdout>:")
    stall = (
        "[2021-06-01 10:20:30.123456: W /tmp/horovod/common/stall_inspector.cc:107] " + SENTENCE + "\n"
        "Missing ranks:\n3: [allreduce.fc2.weight]\n"
    )
    rc = run_files(tmp_path / "b", {"rank0.log": body + stall}, settings).document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 3
    (c,) = [c for c in rc.citations if c.file == "rank0.log"]
    assert (c.line, c.end_line, c.verified) == (n + 1, n + 3, True)


def test_faulthandler_s_watchdog_timeout_is_cited_with_the_stuck_rank(tmp_path: Path, settings: Settings) -> None:
    # CPython Modules/faulthandler.c format_timeout: dump_traceback_later's watchdog writes "Timeout (H:MM:SS)!"
    # before the threads (the program re-arms it every step: it fired because a step took that long)
    dumps = [fh(r, C10D, "all_reduce", 2501) for r in (0, 2, 3)]
    stuck = "[rank1]:Timeout (0:30:00)!\n" + fh(1, "/job/train.py", "_refresh_shard_cache", 131)
    out = run_files(tmp_path / "b", {"console.log": "".join(dumps[:1]) + stuck + "".join(dumps[1:])}, settings)
    (f,) = [f for f in out.findings if f.signature == "hang.stack.minority"]
    assert f.rank == 1 and "dump_traceback_later fired after 0:30:00" in f.summary
    assert any(e.text == "[rank1]:Timeout (0:30:00)!" for e in f.evidence)
