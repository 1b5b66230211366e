"""Deterministic incident generator: writes a realistic failed-job bundle for one failure class.

Input: class id, job shape, seed, layout; output: a bundle directory with ``expected.json`` labels
(DESIGN section 4.5), whose root-cause lines are recorded while the files are written. Does I/O.
Same arguments give byte-identical output.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from crashcart.synth import background, cascade, docs, expected, kit
from crashcart.synth import layout as layout_mod
from crashcart.synth.classes import CLASSES, SCENARIOS
from crashcart.synth.story import Story
from crashcart.synth.world import LAYOUTS, build_world

__all__ = ["CLASSES", "LAYOUTS", "compatible_layouts", "synthesize"]


def compatible_layouts(class_id: str) -> tuple[str, ...]:
    """The layouts a class can be generated in (e.g. Kubernetes eviction only in ``k8s``)."""
    if class_id not in SCENARIOS:
        raise ValueError(f"unknown class id: {class_id!r}")
    return SCENARIOS[class_id].layouts


def synthesize(
    class_id: str,
    out: Path,
    *,
    ranks: int = 8,
    nodes: int = 2,
    seed: int = 0,
    layout: str | None = None,
) -> dict[str, object]:
    """Write the bundle for ``class_id`` into ``out`` (created; must be missing or empty).

    :param layout: one of :data:`LAYOUTS`, or None to pick one of the class's layouts from the seed.
    :returns: the ``expected.json`` dict, also written to ``out/expected.json``.
    :raises ValueError: unknown class or layout, a layout the class cannot use, a bad job shape, or a
        non-empty ``out``.
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"output directory must be missing or empty: {out}")
    story = build_story(class_id, ranks=ranks, nodes=nodes, seed=seed, layout=layout)
    out.mkdir(parents=True, exist_ok=True)
    written = layout_mod.write(story, out)
    labels = expected.build(story, written)
    (out / "expected.json").write_text(json.dumps(labels, indent=2) + "\n", encoding="utf-8")
    return labels


def build_story(class_id: str, *, ranks: int, nodes: int, seed: int, layout: str | None) -> Story:
    """The whole incident in memory (timed lines per stream, documents, labels); no I/O."""
    scenario = SCENARIOS.get(class_id)
    if scenario is None:
        raise ValueError(f"unknown class id: {class_id!r}")
    if ranks < 2 or nodes < 1 or nodes > ranks:
        raise ValueError(f"need ranks >= 2 and 1 <= nodes <= ranks, got ranks={ranks} nodes={nodes}")
    if nodes < scenario.min_nodes:
        raise ValueError(f"{class_id} needs at least {scenario.min_nodes} nodes")
    if layout is None:
        pick = random.Random(f"crashcart-synth/layout/{class_id}/{seed}")
        layout = scenario.layouts[pick.randrange(len(scenario.layouts))]
    elif layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    elif layout not in scenario.layouts:
        raise ValueError(f"{class_id} cannot be generated in layout {layout!r}")
    world = build_world(seed, ranks, nodes, layout, slurm=scenario.slurm)
    story = Story(world, class_id, random.Random(f"crashcart-synth/scenario/{class_id}/{seed}"))
    story.t0 = kit.default_t0(story)
    story.mode = "remote" if story.rng.random() < 0.2 else "timeout"
    story.xid45 = story.rng.random() < 0.35
    story.caught_oom = story.rng.random() < 0.3
    scenario.run(story)
    for r in range(story.world.ranks):
        story.stop.setdefault(r, story.t0)
    background.fill(story)
    cascade.finish(story)
    docs.build(story)
    return story
