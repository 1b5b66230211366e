"""The engine seam: what the pipeline asks of an engine, and the offline engine.

Every stage up to grouping and the deterministic reduce is shared; an engine adds to it at two points:
``find`` may add findings after the scan (attributed like the rule findings), and ``reduce`` decides the
diagnosis from the groups and the offline answer it is given. It reports what it did (``stats``, ``calls``)
and is closed by the pipeline. The offline engine adds nothing and answers with the offline diagnosis;
the LLM engine (``crashcart.llm.engine``) is imported only when chosen, so the offline path never loads
a model client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from crashcart.ingest.bundle import Bundle
from crashcart.models import Diagnosis, DocLLMStats, Finding, Group, RankLast, Topology
from crashcart.settings import Settings

if TYPE_CHECKING:
    from crashcart.llm.client import AnswerCache


class Engine(Protocol):
    """One diagnosis engine, as ``pipeline.diagnose`` uses it."""

    async def find(
        self, bundle: Bundle, findings: list[Finding], last: dict[int, RankLast], topo: Topology
    ) -> list[Finding]:
        """Findings to add to the rule findings (already attributed to rank/node/GPU)."""
        ...

    async def reduce(
        self,
        groups: list[Group],
        findings: list[Finding],
        topo: Topology,
        last: dict[int, RankLast],
        offline: Diagnosis,
    ) -> Diagnosis:
        """The diagnosis, given every group and the deterministic answer over the rule findings."""
        ...

    def stats(self) -> DocLLMStats | None:
        """What the engine's models did, for ``stats.llm``; None when it used none."""
        ...

    def calls(self) -> list[dict[str, Any]]:
        """Model calls to record with the incident."""
        ...

    async def close(self) -> None: ...


class OfflineEngine:
    """The default engine: deterministic, no network. It adds no findings and keeps the offline answer."""

    async def find(
        self, bundle: Bundle, findings: list[Finding], last: dict[int, RankLast], topo: Topology
    ) -> list[Finding]:
        return []

    async def reduce(
        self,
        groups: list[Group],
        findings: list[Finding],
        topo: Topology,
        last: dict[int, RankLast],
        offline: Diagnosis,
    ) -> Diagnosis:
        return offline

    def stats(self) -> DocLLMStats | None:
        return None

    def calls(self) -> list[dict[str, Any]]:
        return []

    async def close(self) -> None:
        return None


def open_engine(settings: Settings, cache: AnswerCache | None = None) -> Engine:
    """The engine ``settings.engine`` names."""
    if settings.engine != "llm":
        return OfflineEngine()
    from crashcart.llm.engine import LlmEngine

    return LlmEngine.open(settings.llm, cache=cache)
