"""The pipeline keeps what the scan built out of the cyclic collector's reach only while it diagnoses."""

from __future__ import annotations

import gc

import pytest

from crashcart.models import Diagnosis, Finding, Group, RankLast, Topology
from crashcart.pipeline import diagnose
from crashcart.settings import Settings
from tests.test_engine_seam import INCIDENT, Recording


class Frozen(Recording):
    """Records how many objects are frozen when the pipeline asks it to reduce; raises if told to."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.frozen = -1

    async def reduce(
        self,
        groups: list[Group],
        findings: list[Finding],
        topo: Topology,
        last: dict[int, RankLast],
        offline: Diagnosis,
    ) -> Diagnosis:
        self.frozen = gc.get_freeze_count()
        if self.fail:
            raise RuntimeError("engine failed")
        return await super().reduce(groups, findings, topo, last, offline)


async def test_the_stages_after_the_scan_run_frozen_and_unfreeze(settings: Settings) -> None:
    gc.unfreeze()
    engine = Frozen()
    outcome = await diagnose(INCIDENT, settings, engine=engine)
    assert engine.frozen > len(outcome.findings)  # the findings (and all before them) were frozen
    assert gc.get_freeze_count() == 0


async def test_a_stage_that_raises_still_unfreezes(settings: Settings) -> None:
    gc.unfreeze()
    engine = Frozen(fail=True)
    with pytest.raises(RuntimeError, match="engine failed"):
        await diagnose(INCIDENT, settings, engine=engine)
    assert engine.frozen > 0 and engine.closed
    assert gc.get_freeze_count() == 0
