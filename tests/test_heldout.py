"""Held-out accuracy: every class generated with seeds, shapes and layouts the shipped corpus does not use.

Requires at least 95 % of cases to pass the DESIGN §4.5 rules, so the engine is not tuned to the committed
files. The misses are printed (pytest -s) so a drop can be explained.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.evaluate import run_eval, summary
from crashcart.settings import Settings
from crashcart.synth import CLASSES, compatible_layouts, synthesize

SEEDS = (51, 52, 53)  # untouched while tuning: 31-33 and 41-43 were looked at (figures in the notes)
SHAPES = ((32, 4), (10, 2), (12, 6))  # (ranks, nodes)


@pytest.mark.slow
def test_held_out_accuracy(tmp_path: Path, settings: Settings) -> None:
    cases = []
    for cls in CLASSES:
        layouts = compatible_layouts(cls)
        for k, seed in enumerate(SEEDS):
            ranks, nodes = SHAPES[k]
            out = tmp_path / f"{cls}-s{seed}"
            synthesize(cls, out, ranks=ranks, nodes=nodes, seed=seed, layout=layouts[(seed + k) % len(layouts)])
            cases.append(out)
    results = run_eval(cases, settings)
    s = summary(results)
    for r in results:
        if not r.passed:
            print(f"MISS {r.case}: expected {r.expected}, got {r.got} ({'; '.join(r.notes)})")
    print(f"held-out: {s['passed']}/{s['cases']}, class accuracy {s['class_accuracy']:.1%}")
    assert s["passed"] / s["cases"] >= 0.95
