"""TORCH_DISTRIBUTED_DEBUG=DETAIL's mismatch message names the reporting rank and the first rank whose
fingerprint differs (c10d ProcessGroupWrapper.cpp, ``verify_tensors``: "Detected mismatch between collectives
on ranks. Rank <own> is running collective: <own fingerprint>, but Rank <first other> is running collective:
<its fingerprint>."). The odd rank is the one whose own fingerprint a clear majority does not share; two ranks
alone never say which side is odd."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.reduce.desync import _fingerprints
from crashcart.settings import Settings
from tests.kit import run_files

FP = (
    "CollectiveFingerPrint(SequenceNumber=7, OpType=ALLREDUCE, TensorShape=[{n}], TensorDtypes=Float, "
    "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, layout=Strided (default), "
    "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt)))"
)
MSG = (
    "[rank{r}]: RuntimeError: Detected mismatch between collectives on ranks. Rank {r} is running collective: "
    "{own}, but Rank {o} is running collective: {other}.Collectives differ in the following aspects:   Tensor "
    "Tensor shapes: {a}vs {b}"
)


def _bundle(shapes: list[int]) -> dict[str, str]:
    out = {}
    for r, n in enumerate(shapes):
        other = next((o for o, m in enumerate(shapes) if m != n), None)
        if other is None:
            continue
        msg = MSG.format(r=r, own=FP.format(n=n), o=other, other=FP.format(n=shapes[other]), a=n, b=shapes[other])
        out[f"rank-{r}.log"] = f"[rank{r}]: Traceback (most recent call last):\n{msg}\n"
    return out


def test_the_fingerprints_are_read_to_their_balanced_parenthesis() -> None:
    own, other = FP.format(n=8), FP.format(n=4)
    pairs = _fingerprints(MSG.format(r=1, own=own, o=0, other=other, a=8, b=4))
    assert pairs == [(1, own), (0, other)]


@pytest.mark.parametrize(("odd", "world"), [(1, 4), (0, 4), (3, 8)])
def test_the_rank_most_ranks_disagree_with_is_the_culprit(
    tmp_path: Path, settings: Settings, odd: int, world: int
) -> None:
    shapes = [4] * world
    shapes[odd] = 8
    root = run_files(tmp_path, _bundle(shapes), settings).document.root_cause
    assert root.class_ == "collective_mismatch_desync"
    assert root.culprit.rank == odd
    assert any(f"Rank {odd} is running collective" in c.text for c in root.citations)


def test_two_ranks_name_no_culprit(tmp_path: Path, settings: Settings) -> None:
    root = run_files(tmp_path, _bundle([4, 8]), settings).document.root_cause
    assert root.class_ == "collective_mismatch_desync"
    assert root.culprit.rank is None


def test_no_clear_majority_names_no_culprit(tmp_path: Path, settings: Settings) -> None:
    root = run_files(tmp_path, _bundle([4, 4, 8, 8]), settings).document.root_cause
    assert root.class_ == "collective_mismatch_desync"
    assert root.culprit.rank is None
