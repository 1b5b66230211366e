"""Group stage: merge findings across ranks and nodes by (class, signature, masked template).

Input: Findings. Output: Groups with count, rank/node/GPU sets, first/last time, the earliest
exemplar and a bounded evidence sample. 512 identical timeouts become one group with count 512. Pure.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from datetime import datetime

from crashcart.models import Evidence, Finding, Group
from crashcart.text.mask import template

SAMPLE = 6
_MAX = datetime.max


def _order(f: Finding) -> tuple[int, datetime, str, int]:
    ev = f.evidence[0]
    t = f.time.replace(tzinfo=None) if f.time is not None else _MAX
    return (0 if f.time is not None else 1, t, ev.file, ev.line)


def group_findings(findings: list[Finding]) -> list[Group]:
    """Groups sorted by first time (untimed last), then key, so output order is deterministic."""
    buckets: dict[tuple[str, str, str], list[Finding]] = defaultdict(list)
    templates: dict[str, str] = {}
    for f in findings:
        if f.role == "context":
            continue
        text = f.evidence[0].text
        tpl = templates.get(text)
        if tpl is None:
            tpl = templates[text] = template(text)
        buckets[(f.class_id, f.signature, tpl)].append(f)
    groups = [_make(key, sorted(members, key=_order)) for key, members in buckets.items()]
    groups.sort(
        key=lambda g: (
            g.first_time is None,
            g.first_time.replace(tzinfo=None) if g.first_time else _MAX,
            g.key,
        )
    )
    return groups


def _make(key: tuple[str, str, str], members: list[Finding]) -> Group:
    class_id, signature, tpl = key
    first = members[0]
    own = [f.time for f in members if f.time is not None and "_time" not in f.fields]
    inherited = [f.time for f in members if f.time is not None]
    # Times taken from earlier lines are lower bounds: they order a group but do not end a span.
    sample: list[Evidence] = []
    seen_nodes: set[str | None] = set()
    for f in members:  # prefer one exemplar per node, earliest first
        if f.node not in seen_nodes and len(sample) < SAMPLE:
            seen_nodes.add(f.node)
            sample.append(f.evidence[0])
    for f in members:
        if len(sample) >= SAMPLE:
            break
        if f.evidence[0] not in sample:
            sample.append(f.evidence[0])
    common = dict(first.fields)
    for f in members[1:]:
        common = {k: v for k, v in common.items() if f.fields.get(k) == v}
    digest = hashlib.sha1(f"{class_id}|{signature}|{tpl}".encode(), usedforsecurity=False).hexdigest()[:10]
    return Group(
        key=f"G{digest}",
        class_id=class_id,
        signature=signature,
        role=first.role,
        severity=first.severity,
        template=tpl,
        summary=first.summary,
        count=len(members),
        ranks=sorted({f.rank for f in members if f.rank is not None}),
        nodes=sorted({f.node for f in members if f.node}),
        gpus=sorted({f.gpu for f in members if f.gpu}),
        first_time=min(own) if own else min(inherited) if inherited else None,
        last_time=max(own) if own else None,
        exemplar=first.evidence[0],
        evidence=sample,
        common_fields=common,
        finding_ids=[f.id for f in members],
    )
