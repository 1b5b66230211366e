"""Ranks timed out in the same collective (one SeqNum) with different input sizes ran different collectives:
ProcessGroupNCCL's ``WorkNCCL(SeqNum=.., OpType=.., NumelIn=.., NumelOut=.., Timeout(ms)=..)`` (torch 2.x
ProcessGroupNCCL.cpp, ``operator<<(ostream, WorkNCCL)``) is the cheap desync signal TAXONOMY class 4 names."""

from __future__ import annotations

from pathlib import Path

from crashcart.catalogue import load_catalogue
from crashcart.settings import Settings
from tests.kit import run_files

WD = (
    "[rank{r}]:[E1130 02:23:07.{ms:06d} ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog "
    "caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={n}, NumelOut={n}, "
    "Timeout(ms)=600000) ran for 600031 milliseconds before timing out."
)


def _bundle(sizes: list[int], seq: int = 1580) -> dict[str, str]:
    out = {}
    for r, n in enumerate(sizes):
        lines = [
            f"[rank{r}]:[I1130 02:13:00.000000 train.py:10] step 1579 loss 2.1",
            WD.format(r=r, ms=100 + r, seq=seq, n=n),
            "",
        ]
        out[f"rank-{r}.log"] = "\n".join(lines)
    return out


def test_the_numel_field_is_read() -> None:
    cat = load_catalogue()
    fields = cat.extract(cat.index["nccl.watchdog_timeout"], WD.format(r=3, ms=1, seq=9, n=1024))
    assert fields is not None and fields["numel_in"] == "1024" and fields["seq"] == "9"


def test_the_rank_with_another_size_is_the_desync_culprit(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path, _bundle([8192, 8192, 4096, 8192]), settings)
    root = out.document.root_cause
    assert root.class_ == "collective_mismatch_desync"
    assert root.culprit.rank == 2
    assert any("NumelIn=4096" in c.text for c in root.citations)


def test_same_sizes_say_nothing_of_a_desync(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path, _bundle([8192, 8192, 8192, 8192]), settings)
    assert out.document.root_cause.class_ != "collective_mismatch_desync"


def test_two_ranks_that_differ_name_no_odd_one(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path, _bundle([8192, 4096]), settings)
    assert out.document.root_cause.culprit.rank is None or out.document.root_cause.class_ != (
        "collective_mismatch_desync"
    )
