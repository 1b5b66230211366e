"""The reduce model writes the diagnosis from grouped findings and evidence ids, never raw logs.

It sees each group's class, role, counts, ranks, nodes, times, masked (and redacted) template and
evidence ids, plus the deterministic analysis as hints. Its answer is checked by code: class ids from
the vocabulary only, evidence ids only from those it was shown, confidence capped when it departs from
the deterministic analysis or rests on model findings alone. Symptoms, contributing factors and the
timeline stay the deterministic ones; culprit fields are checked again by the verify stage.
"""

from __future__ import annotations

from crashcart.llm.client import ModelClient
from crashcart.llm.prompts import classes_block, load_prompt
from crashcart.llm.schemas import ReduceAnswer
from crashcart.llm.windows import data_block
from crashcart.models import Culprit, Diagnosis, Finding, Group, Hypothesis, TimelineEntry, Topology
from crashcart.text.clock import to_iso
from crashcart.text.mask import template
from crashcart.text.redact import redact_text

MAX_GROUPS = 60
MODEL_ONLY_CAP = 0.5  # a root resting on model findings alone
DISAGREE_CAP = 0.6  # the model departs from the deterministic answer


class ReduceRejected(Exception):
    """The reduce model answered, but not with anything our rules accept."""


def reduce_prompt(groups: list[Group], offline: Diagnosis, topo: Topology) -> tuple[str, str, set[str]]:
    """(system, user, evidence ids shown)."""
    shown: set[str] = set()
    ordered = sorted(
        groups, key=lambda g: (g.role == "context", g.severity == "info", g.first_time is None, g.first_time or 0)
    )
    rows: list[str] = []
    for n, g in enumerate(ordered[:MAX_GROUPS], start=1):
        ids = [e.id for e in g.evidence[:3]]
        shown.update(ids)
        rows.append(
            f"G{n} class={g.class_id} role={g.role} severity={g.severity} count={g.count} "
            f"ranks={_span(g.ranks)} nodes={','.join(g.nodes[:8]) or '-'} "
            f"first={to_iso(g.first_time) or '-'} last={to_iso(g.last_time) or '-'} evidence={','.join(ids)}\n"
            f"   template: {template(redact_text(g.exemplar.text))[:300]}"
        )
    hints: list[str] = []
    if offline.root_class != "unknown":
        shown.update(offline.root_evidence)
        hints.append(
            f"HINT 1: class={offline.root_class} evidence={','.join(offline.root_evidence)} "
            f"confidence={offline.confidence:.2f} summary={redact_text(offline.summary)}"
        )
    for n, h in enumerate(offline.hypotheses[:4], start=1):
        shown.update(h.evidence_ids)
        hints.append(f"ALTERNATIVE {n}: class={h.class_id} evidence={','.join(h.evidence_ids)} score={h.score:.2f}")
    world = f"world_size={topo.world_size or len(topo.ranks) or '?'} nodes={','.join(topo.nodes[:24]) or '?'}"
    user = data_block(f"TOPOLOGY: {world}\nGROUPS:\n" + "\n".join(rows) + "\n" + "\n".join(hints) + "\n")
    return load_prompt("reduce") + "\n\n" + classes_block(), user, shown


async def reduce_llm(
    client: ModelClient,
    model: str,
    groups: list[Group],
    findings: list[Finding],
    offline: Diagnosis,
    topo: Topology,
) -> Diagnosis:
    """The model's diagnosis, checked; raises ModelCallFailed/BudgetExhausted/ReduceRejected for the fallback."""
    system, user, shown = reduce_prompt(groups, offline, topo)
    answer = await client.structured("reduce", model, system, user, ReduceAnswer)
    return merge(answer, shown, findings, offline, topo)


def merge(
    answer: ReduceAnswer, shown: set[str], findings: list[Finding], offline: Diagnosis, topo: Topology
) -> Diagnosis:
    """The model's answer as a Diagnosis, or ReduceRejected when our rules cannot accept it.

    A root class must be shown by evidence of that class (the model cannot relabel a line); a root that
    rests on model findings alone may only answer where the deterministic engine found nothing decisive,
    is capped, and gets the investigation runbook, so no log line can talk its way into a remediation.
    """
    by_ev = {ev.id: f for f in findings for ev in f.evidence}
    offered = [i for i in dict.fromkeys(answer.root_evidence_ids) if i in shown and i in by_ev]
    if answer.root_class == "unknown":
        cited = offered
    else:
        cited = [i for i in offered if by_ev[i].class_id == answer.root_class]
        if not cited:
            raise ReduceRejected(f"no evidence it was shown is of class {answer.root_class}")
    roots = [by_ev[i] for i in cited]
    unconfirmed = answer.root_class != "unknown" and all(f.source == "llm" for f in roots)
    if unconfirmed and offline.root_class != "unknown":
        raise ReduceRejected("a root resting on model findings alone cannot override the deterministic answer")
    same = answer.root_class == offline.root_class
    cap = min(1.0, offline.confidence + 0.1) if same else DISAGREE_CAP
    if unconfirmed:
        cap = min(cap, MODEL_ONLY_CAP)
    confidence = round(min(answer.confidence, cap), 2)
    # An unconfirmed root only investigates: it keeps the deterministic suspect (and the lines naming it), so
    # its runbook looks where the deterministic answer would have looked.
    keep = same or unconfirmed
    culprit = _culprit(answer, roots, topo, offline.culprit if keep else Culprit())
    if keep:  # keep the deterministic support lines (they tie rank, node and GPU together)
        cited = list(dict.fromkeys([*cited, *offline.root_evidence]))
    times = [f.time for f in roots if f.time is not None]
    hypotheses = [Hypothesis(class_id=h.class_id, score=h.score, why_not=h.why_not) for h in answer.hypotheses]
    if not same and offline.root_class != "unknown":
        hypotheses.insert(
            0,
            Hypothesis(
                class_id=offline.root_class,
                score=offline.confidence,
                why_not="the deterministic analysis chose this; the reduce model did not",
                evidence_ids=offline.root_evidence,
            ),
        )
    root_ids = set(cited)
    timeline = [t for t in offline.timeline if t.evidence_id not in root_ids]
    timeline += [
        TimelineEntry(time=f.time, evidence_id=f.evidence[0].id, role="root_candidate", class_id=f.class_id)
        for f in roots
    ]
    timeline.sort(key=lambda t: (t.time is None, t.time.isoformat() if t.time else ""))
    reasoning = [f"reduce model: {r.strip()[:300]}" for r in answer.reasoning if r.strip()]
    if unconfirmed:
        reasoning.append("the root rests on model findings alone (no rule confirms it): investigation runbook only")
    if not same:
        reasoning.append(f"the deterministic analysis answered {offline.root_class}; confidence capped at {cap:.2f}")
    return Diagnosis(
        root_class=answer.root_class,
        summary=answer.summary.strip(),
        culprit=culprit,
        time=min(times) if times else (offline.time if same else None),
        confidence=confidence,
        root_evidence=cited,
        contributing=[c for c in offline.contributing if not root_ids & set(c.evidence_ids)],
        symptoms=[c for c in offline.symptoms if not root_ids & set(c.evidence_ids)],
        hypotheses=hypotheses[:8],
        timeline=timeline,
        reasoning=[*reasoning, *offline.reasoning][:12],
        unconfirmed=unconfirmed,
    )


def _culprit(answer: ReduceAnswer, roots: list[Finding], topo: Topology, fallback: Culprit) -> Culprit:
    """The model's culprit fields that the topology or the root findings establish; else the fallback's."""
    said = answer.culprit
    nodes = {f.node for f in roots if f.node} | set(topo.nodes)
    gpus = {f.gpu for f in roots if f.gpu} | {i.gpu for i in topo.ranks.values() if i.gpu}
    node = said.node if said.node in nodes else None
    rank = (
        said.rank
        if said.rank is not None and (said.rank in topo.ranks or any(f.rank == said.rank for f in roots))
        else None
    )
    gpu = said.gpu if said.gpu in gpus else None
    return Culprit(
        node=node or fallback.node,
        rank=rank if rank is not None else fallback.rank,
        gpu=gpu or fallback.gpu,
    )


def _span(ranks: list[int]) -> str:
    """[0,1,2,3,7] -> 0-3,7 (at most 12 runs)."""
    runs: list[str] = []
    start = prev = None
    for r in sorted(set(ranks)):
        if start is None:
            start = prev = r
        elif prev is not None and r == prev + 1:
            prev = r
        else:
            runs.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = r
    if start is not None:
        runs.append(f"{start}-{prev}" if start != prev else f"{start}")
    more = f",+{len(runs) - 12} runs" if len(runs) > 12 else ""
    return (",".join(runs[:12]) + more) or "-"
