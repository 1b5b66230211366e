"""Synth labels: the ``expected.json`` dict (DESIGN section 4.5) from a written Story.

Input: the Story and the root-line positions recorded while writing; output: the label dict. Pure.
"""

from __future__ import annotations

from crashcart.synth.layout import Written
from crashcart.synth.story import Story
from crashcart.text.gpuid import canonical_pci


def build(s: Story, written: Written) -> dict[str, object]:
    """``root_cause_class``, ``culprit`` (null where the bundle does not establish it), lines, symptoms."""
    w = s.world
    if s.class_id == "unknown":
        if written.roots:
            raise RuntimeError("an unknown incident must not carry root-cause lines")
    elif not written.roots:
        raise RuntimeError(f"{s.class_id}: the scenario wrote no root-cause line")
    node = w.nodes[s.culprit_node].host if s.culprit_node is not None else None
    gpu = canonical_pci(s.culprit_gpu) if s.culprit_gpu else None
    return {
        "root_cause_class": s.class_id,
        "culprit": {"node": node, "rank": s.culprit_rank, "gpu": gpu},
        "root_cause_lines": written.roots,
        "symptom_classes": [c for c in written.symptoms if c not in (s.class_id, "unknown")],
    }
