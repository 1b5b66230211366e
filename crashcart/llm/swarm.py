"""The swarm: chunks of windows scanned by the swarm model in parallel; its answers become Findings.

The model answers with (file, line, quote) of lines it was shown. Our code keeps an answer only when the
line was in that chunk and the quote is the shown (redacted) text or a part of it of at least 12
characters; everything else is dropped and counted. Evidence is then made by our code from the bundle,
for the exemplar and for every rank where the same window was seen.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from crashcart.errors import BudgetExhausted, ModelCallFailed
from crashcart.ingest.bundle import Bundle
from crashcart.llm.client import ModelClient
from crashcart.llm.prompts import classes_block, load_prompt
from crashcart.llm.schemas import SwarmAnswer, SwarmFinding
from crashcart.llm.windows import Chunk, Occurrences
from crashcart.models import Evidence, Finding
from crashcart.scan.findings import clock_context
from crashcart.text import prefix
from crashcart.text.clock import parse_time

MIN_QUOTE = 12


@dataclass
class SwarmResult:
    findings: list[Finding] = field(default_factory=list)
    chunks: int = 0
    scanned: int = 0  # chunks that got a valid answer
    failures: list[str] = field(default_factory=list)  # one line per chunk that did not
    dropped: int = 0  # answers that pointed at lines not shown or quoted text that is not there
    agreed: int = 0  # answers on lines the rules had already found
    skipped_budget: int = 0
    unavailable: bool = False


async def run_swarm(
    client: ModelClient,
    model: str,
    bundle: Bundle,
    chunks: list[Chunk],
    seen: Occurrences,
    rule_findings: list[Finding],
) -> SwarmResult:
    result = SwarmResult(chunks=len(chunks))
    system = load_prompt("swarm") + "\n\n" + classes_block()
    answers = await asyncio.gather(*(_ask(client, model, system, c) for c in chunks))
    known = {(f.evidence[0].file, f.evidence[0].line) for f in rule_findings}
    made: set[tuple[str, int]] = set()
    ids = iter(range(1, 10**9))
    for chunk, answer in zip(chunks, answers, strict=True):
        if isinstance(answer, BudgetExhausted):
            result.skipped_budget += 1
            continue
        if isinstance(answer, ModelCallFailed):
            result.failures.append(answer.reason)
            result.unavailable = result.unavailable or answer.unavailable
            continue
        result.scanned += 1
        for item in answer.findings:
            key = _check(item, chunk)
            if key is None:
                result.dropped += 1
                continue
            for path, line, text, rank in seen.get(key, []):
                where = (path, line)
                if where in made:
                    continue
                made.add(where)
                if where in known:
                    result.agreed += 1
                    continue
                ev = Evidence(id=f"M{next(ids):05d}", file=path, line=line, text=text)
                result.findings.append(_finding(bundle, item, ev, rank))
    return result


async def _ask(
    client: ModelClient, model: str, system: str, chunk: Chunk
) -> SwarmAnswer | ModelCallFailed | BudgetExhausted:
    try:
        return await client.structured("swarm", model, system, chunk.text, SwarmAnswer)
    except (ModelCallFailed, BudgetExhausted) as exc:
        return exc


def _check(item: SwarmFinding, chunk: Chunk) -> str | None:
    """The template of the answered line when it was shown and is quoted faithfully, else None."""
    key = (item.file.strip(), item.line)
    shown = chunk.redacted.get(key)
    if shown is None:
        return None
    quote = item.quote.strip()
    if not quote or quote not in shown or len(quote) < min(MIN_QUOTE, len(shown.strip())):
        return None
    return chunk.shown[key]


def _finding(bundle: Bundle, item: SwarmFinding, ev: Evidence, rank: int | None) -> Finding:
    bf = bundle.file(ev.file)
    parsed = parse_time(ev.text, clock_context(bundle, bf)) if bf is not None else None
    view_rank = prefix.view(ev.text).rank
    return Finding(
        id=ev.id.replace("M", "LLM", 1),
        class_id=item.class_id,
        signature="llm.swarm",
        role=item.role,
        severity=item.severity,
        summary=item.summary.strip()[:200] or f"{item.class_id} (model)",
        time=parsed.time if parsed is not None else None,
        rank=view_rank if view_rank is not None else rank,
        node=bf.host if bf is not None else None,
        evidence=[ev],
        source="llm",
    )
