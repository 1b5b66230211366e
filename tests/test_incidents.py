"""The committed corpus: every incident diagnosed right, and the corpus reproducible from the generator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from crashcart.evaluate import find_cases, run_eval
from crashcart.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def test_every_shipped_incident_passes(settings: Settings) -> None:
    cases = find_cases([ROOT / "incidents"])
    assert len(cases) >= 20
    results = run_eval(cases, settings)
    failed = [(r.case, r.expected, r.got, r.notes) for r in results if not r.passed]
    assert failed == []


def test_each_incident_is_small() -> None:
    sizes = {
        p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in find_cases([ROOT / "incidents"])
    }
    assert max(sizes.values()) < 1_000_000
    assert sum(sizes.values()) < 15_000_000


@pytest.mark.slow
def test_corpus_is_reproducible() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_incidents.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
