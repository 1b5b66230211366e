"""Megatron's straggler detector (issue 14, capability 6): the rank its reports keep naming slowest.

Lines in the format of NVIDIA/Megatron-LM megatron/core/utils.py ``StragglerDetector.report`` (rank 0 logs
``[<time>] | MnRtt/Rnk: <ms>ms/<rank> | MxRtt/Rnk: <ms>ms/<rank> | MnPwr/Rnk: ... | MxEtpt/Rnk: <tf>TF/<rank>`` under
``--log-straggler``; megatron/core/README_STRAGGLER.md shows it behind ``srun -l``'s `` 0: ``).
"""

from __future__ import annotations

from pathlib import Path

from crashcart.reduce.throughput import megatron_straggler
from crashcart.settings import Settings
from tests.kit import finding, run_files


def report(lo: float, hi: float, slow: int, minute: int = 7) -> str:
    return (
        f" 0: INFO:megatron.core.utils:[2024-03-14 23:{minute:02d}:56] | MnRtt/Rnk: {lo:.2f}ms/8 | MxRtt/Rnk: "
        f"{hi:.2f}ms/{slow} | MnPwr/Rnk: 601796W/8 | MxPwr/Rnk: 683801W/18 | MnTmp/Rnk: 52C/0 | MxTmp/Rnk: 65C/21 | "
        "MnUtl/Rnk: 97%/8 | MxUtl/Rnk: 100%/6 | MnClk/Rnk: 1950MHz/28 | MxClk/Rnk: 1980MHz/0 | MnDRtt/Rnk: 14.27ms/23 "
        "| MxDRtt/Rnk: 34.65ms/3 | MnEtpt/Rnk: 296.02TF/0 | MxEtpt/Rnk: 297.32TF/8"
    )


def reports(rows: list[tuple[float, float, int]]) -> list:  # type: ignore[type-arg]
    return [finding("megatron.straggler_report", report(*row), line=i + 1) for i, row in enumerate(rows)]


def test_the_same_rank_far_slowest_in_the_last_reports() -> None:
    c = megatron_straggler(reports([(3453.1, 3468.2, 0), (3450.0, 5100.0, 21), (3449.0, 5230.5, 21)]))
    assert c is not None and c.class_id == "straggler_fail_slow" and c.lead is not None and c.lead.rank == 21
    # the healthy spread of the README's example, or a slowest rank that changes, says nothing
    assert megatron_straggler(reports([(3453.08, 3468.20, 0)] * 3)) is None
    assert megatron_straggler(reports([(3450.0, 5100.0, 21), (3449.0, 5230.5, 7)])) is None


def test_the_diagnosis_names_the_straggler_when_nothing_else_does(tmp_path: Path, settings: Settings) -> None:
    log = "\n".join(report(3450.0 + i, 5200.0 + i, 21, minute=i) for i in range(4)) + "\n"
    rc = run_files(tmp_path / "b", {"megatron.log": log}, settings).document.root_cause
    assert rc.class_ == "straggler_fail_slow" and rc.culprit.rank == 21
    assert any(c.file == "megatron.log" and c.line == 4 and c.verified for c in rc.citations)
