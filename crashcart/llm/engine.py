"""The LLM engine (``crashcart.engine.Engine``): ``find`` adds model findings, ``reduce`` writes the diagnosis.

Both degrade instead of failing: a chunk without a usable answer is a recorded scan failure, a budget
that runs out makes the run partial, and an endpoint that stays down (or a reduce answer our rules
reject) leaves the deterministic diagnosis in place with a note saying so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from crashcart.errors import BudgetExhausted, ModelCallFailed
from crashcart.ingest.bundle import Bundle
from crashcart.llm.client import AnswerCache, ModelClient
from crashcart.llm.prompts import prompt_version
from crashcart.llm.reduce import ReduceRejected, reduce_llm
from crashcart.llm.swarm import SwarmResult, run_swarm
from crashcart.llm.vision import VisionResult, read_dashboards
from crashcart.llm.windows import build_windows, chunk_windows, occurrences
from crashcart.locate.topology import attribute
from crashcart.models import Diagnosis, DocLLMStats, Finding, Group, RankLast, Topology
from crashcart.settings import LlmSettings
from crashcart.text.redact import POLICY_VERSION


@dataclass
class LlmEngine:
    settings: LlmSettings
    client: ModelClient
    swarm: SwarmResult = field(default_factory=SwarmResult)
    vision: VisionResult = field(default_factory=VisionResult)
    notes: list[str] = field(default_factory=list)
    reduced_by_model: bool = False

    @classmethod
    def open(cls, settings: LlmSettings, cache: AnswerCache | None = None) -> LlmEngine:
        version = f"{prompt_version()}+{POLICY_VERSION}"
        engine = cls(settings, ModelClient(settings, version=version, cache=cache))
        roles = (settings.swarm_model, settings.reduce_model, settings.vision_model)
        unpriced = sorted({m for m in roles if m not in settings.prices})
        if unpriced:
            engine.notes.append(
                f"no price for {', '.join(unpriced)} (CRASHCART_LLM_PRICES): its cost counts as $0 against the budget"
            )
        return engine

    async def close(self) -> None:
        await self.client.close()

    async def find(
        self, bundle: Bundle, findings: list[Finding], last: dict[int, RankLast], topo: Topology
    ) -> list[Finding]:
        """Model findings to add to the rule findings (attributed to rank/node/GPU like them)."""
        windows = build_windows(bundle, findings, last)
        chunks = chunk_windows(windows)
        model = self.settings.swarm_model
        self.swarm = await run_swarm(self.client, model, bundle, chunks, occurrences(windows), findings)
        s = self.swarm
        if s.failures:
            self.notes.append(f"swarm: {len(s.failures)} of {s.chunks} chunks got no usable answer ({s.failures[0]})")
        if s.dropped:
            self.notes.append(f"swarm: {s.dropped} model answers pointed at lines not shown or misquoted; dropped")
        if not self.client.unavailable:
            self.vision = await read_dashboards(self.client, self.settings.vision_model, bundle, findings)
            self.notes.extend(self.vision.notes())
        return attribute(s.findings, topo)

    async def reduce(
        self,
        groups: list[Group],
        findings: list[Finding],
        topo: Topology,
        last: dict[int, RankLast],
        offline: Diagnosis,
    ) -> Diagnosis:
        """The reduce model's diagnosis over every group, with the engine's notes and partial flag; the
        deterministic one (from rule findings only, so a model finding never sways it) is its hint and the
        answer whenever the model's cannot be used."""
        diagnosis = await self._reduce(groups, findings, topo, offline)
        return diagnosis.model_copy(
            update={
                "reasoning": [*self.notes, *diagnosis.reasoning],
                "partial": self.partial,
                "rank_stops": diagnosis.rank_stops or offline.rank_stops,  # hang evidence: facts, not the model's
            }
        )

    def calls(self) -> list[dict[str, Any]]:
        return [asdict(c) for c in self.client.ledger.calls]

    async def _reduce(
        self, groups: list[Group], findings: list[Finding], topo: Topology, offline: Diagnosis
    ) -> Diagnosis:
        if self.client.unavailable:
            self.notes.append("the model endpoint was unavailable; the deterministic engine answered")
            return offline
        try:
            diagnosis = await reduce_llm(self.client, self.settings.reduce_model, groups, findings, offline, topo)
        except BudgetExhausted as exc:
            self.notes.append(f"reduce skipped, {exc}; the deterministic engine answered")
            return offline
        except ModelCallFailed as exc:
            why = "unavailable" if exc.unavailable else f"gave no usable answer ({exc.reason})"
            self.notes.append(f"the reduce model {why}; the deterministic engine answered")
            return offline
        except ReduceRejected as exc:
            self.notes.append(f"the reduce answer was rejected ({exc}); the deterministic engine answered")
            return offline
        self.reduced_by_model = True
        return diagnosis

    @property
    def partial(self) -> bool:
        return self.client.ledger.exhausted or bool(self.swarm.failures) or self.swarm.skipped_budget > 0

    def stats(self) -> DocLLMStats:
        ledger, s = self.client.ledger, self.swarm
        live = [c for c in ledger.calls if c.status in ("ok", "repaired")]
        if self.client.unavailable:
            status = "unavailable"
        elif self.partial:
            status = "partial"
        else:
            status = "ok"
        return DocLLMStats(
            calls=len(live),
            prompt_tokens=sum(c.prompt_tokens for c in ledger.calls),
            completion_tokens=sum(c.completion_tokens for c in ledger.calls),
            cost_usd=round(ledger.cost_usd, 6),
            status=status,
            cached_calls=sum(1 for c in ledger.calls if c.status in ("cached", "replayed")),
            failed_calls=sum(1 for c in ledger.calls if c.status in ("error", "invalid")),
            chunks=s.chunks,
            chunks_scanned=s.scanned,
            chunks_skipped_budget=s.skipped_budget,
            model_findings=len(s.findings),
            answers_dropped=s.dropped,
            reduced_by_model=self.reduced_by_model,
            models={
                "swarm": self.settings.swarm_model,
                "reduce": self.settings.reduce_model,
                "vision": self.settings.vision_model,
            },
        )
