"""The engine seam: a third engine, written here, plugs into the pipeline without the pipeline knowing it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crashcart.engine import Engine, OfflineEngine
from crashcart.ingest.bundle import Bundle
from crashcart.models import Diagnosis, DocLLMStats, Finding, Group, RankLast, Topology
from crashcart.pipeline import diagnose
from crashcart.settings import Settings
from crashcart.store import Store

ROOT = Path(__file__).resolve().parent.parent
INCIDENT = ROOT / "incidents" / "gpu-fell-off-bus"


class Recording:
    """Adds no findings, keeps the offline answer but marks it partial, and reports one model call."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.offline: Diagnosis | None = None
        self.closed = False

    async def find(
        self, bundle: Bundle, findings: list[Finding], last: dict[int, RankLast], topo: Topology
    ) -> list[Finding]:
        self.seen.append("find")
        assert findings and all(f.source == "rule" for f in findings)
        return []

    async def reduce(
        self,
        groups: list[Group],
        findings: list[Finding],
        topo: Topology,
        last: dict[int, RankLast],
        offline: Diagnosis,
    ) -> Diagnosis:
        self.seen.append("reduce")
        self.offline = offline
        return offline.model_copy(update={"reasoning": ["third engine: kept the offline answer"], "partial": True})

    def stats(self) -> DocLLMStats | None:
        return DocLLMStats(calls=1, prompt_tokens=10, completion_tokens=2, cost_usd=0.0, status="ok")

    def calls(self) -> list[dict[str, Any]]:
        call = {"role": "reduce", "model": "third", "prompt_hash": "h", "prompt_tokens": 10, "completion_tokens": 2}
        return [call | {"latency_s": 0.1, "cost_usd": 0.0, "status": "ok", "attempts": 1}]

    async def close(self) -> None:
        self.closed = True


async def test_a_third_engine_runs_through_the_same_pipeline(settings: Settings) -> None:
    engine = Recording()
    _: Engine = engine  # it satisfies the protocol (checked by mypy)
    with Store(settings.store) as store:
        outcome = await diagnose(INCIDENT, settings, store=store, engine=engine)
        calls = store.model_calls(outcome.document.incident_id)
    assert engine.seen == ["find", "reduce"] and engine.closed
    assert engine.offline is not None and outcome.document.root_cause.class_ == engine.offline.root_class
    assert outcome.document.stats.llm.calls == 1 and outcome.document.stats.llm.status == "ok"
    assert [c["model"] for c in calls] == ["third"]


async def test_the_offline_engine_answers_exactly_what_the_default_run_answers(settings: Settings) -> None:
    default = await diagnose(INCIDENT, settings)
    explicit = await diagnose(INCIDENT, settings, engine=OfflineEngine())
    zero = {"stats": {"seconds"}}
    assert explicit.document.model_dump(exclude=zero) == default.document.model_dump(exclude=zero)


async def test_the_engine_is_closed_when_the_bundle_is_unusable(settings: Settings, tmp_path: Path) -> None:
    import pytest

    from crashcart.errors import BundleError

    engine = Recording()
    with pytest.raises(BundleError):
        await diagnose(tmp_path / "missing", settings, engine=engine)
    assert engine.closed and engine.seen == []
