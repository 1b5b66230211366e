"""The real-log yardstick: the public real-log corpus (incidents/real) and real PyTorch runs (incidents/torch).

Labels are checked against the files they cite (every line reference re-read), the corpus is checked for the
spread the team agreed on, and both sets are diagnosed with floors equal to what was measured: a regression
guard, never tuned upward to make a test pass.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from crashcart.catalogue import load_catalogue
from crashcart.evaluate import find_cases, run_eval, summary
from crashcart.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "incidents" / "real"
TORCH = ROOT / "incidents" / "torch"
SETS = {"real": REAL, "torch": TORCH}
LABEL_FILES = ("expected.json", "source.json")


def _script(name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/expected.json"))


def _lines(path: Path) -> list[str]:
    """A file's lines as a person reads them: newline stripped, a trailing CR too."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    return [line.removesuffix("\r") for line in text.split("\n")]


ALL = [c for root in SETS.values() for c in _cases(root)]


@pytest.mark.parametrize("case", ALL, ids=[f"{c.parent.name}/{c.name}" for c in ALL])
def test_every_label_line_is_the_line_of_its_file(case: Path) -> None:
    labels = json.loads((case / "expected.json").read_text())
    refs = [*labels.get("root_cause_lines", []), *labels.get("symptom_lines", [])]
    for ref in refs:
        path = case / ref["file"]
        assert path.is_file(), ref["file"]
        lines = _lines(path)
        assert 1 <= ref["line"] <= len(lines), ref
        assert lines[ref["line"] - 1] == ref["text"], (ref["file"], ref["line"])
    if labels["root_cause_class"] not in ("unknown", "no_failure"):
        assert labels["root_cause_lines"], "a labelled class cites the line that shows it"


@pytest.mark.parametrize("case", ALL, ids=[f"{c.parent.name}/{c.name}" for c in ALL])
def test_every_label_is_well_formed(case: Path) -> None:
    labels = json.loads((case / "expected.json").read_text())
    known = set(load_catalogue().classes) | {"unknown", "no_failure"}
    assert labels["root_cause_class"] in known
    assert set(labels.get("acceptable_classes", [])) <= known
    assert set(labels.get("symptom_classes", [])) <= known
    assert labels["confidence"] in ("high", "medium")
    assert labels["split"] == _script("real_readme").split_of(case.name)  # type: ignore[attr-defined]
    assert set(labels["culprit"]) == {"node", "rank", "gpu"}
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", case.name)
    logs = [f for f in case.rglob("*") if f.is_file() and f.name not in LABEL_FILES]
    assert logs, "a case holds the logs it is about"


@pytest.mark.parametrize("case", _cases(REAL), ids=[c.name for c in _cases(REAL)])
def test_every_real_case_names_its_source(case: Path) -> None:
    source = json.loads((case / "source.json").read_text())
    assert source["url"].startswith("https://")
    for key in ("title", "date", "established", "trimmed", "confidence"):
        assert str(source.get(key, "")).strip(), key
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}.*", source["date"])


def test_the_real_corpus_has_the_agreed_spread() -> None:
    cases = _cases(REAL)
    urls = {json.loads((c / "source.json").read_text())["url"] for c in cases}
    assert len(urls) == len(cases), "one case per thread"
    sources = {re.sub(r"^https://github\.com/([^/]+/[^/#]+).*", r"\1", u) for u in urls}
    classes = {json.loads((c / "expected.json").read_text())["root_cause_class"] for c in cases}
    multi = [c for c in cases if sum(1 for f in c.rglob("*") if f.is_file() and f.name not in LABEL_FILES) > 1]
    splits = [json.loads((c / "expected.json").read_text())["split"] for c in cases]
    assert len(cases) >= 40 and len(sources) >= 30 and len(classes) >= 20
    assert len(multi) >= 10
    assert 0.35 <= splits.count("dev") / len(splits) <= 0.65


def test_the_real_readme_lists_every_case() -> None:
    module = _script("real_readme")
    readme = (REAL / "README.md").read_text()
    assert module.render(readme) == readme, "run scripts/real_readme.py"  # type: ignore[attr-defined]


def test_the_engine_never_reads_labels(settings: Settings, tmp_path: Path) -> None:
    """A real case diagnosed without its label files gets the same answer."""
    import asyncio
    import shutil

    from crashcart.pipeline import diagnose

    case = _cases(REAL)[0]
    bare = tmp_path / case.name
    shutil.copytree(case, bare, ignore=shutil.ignore_patterns(*LABEL_FILES))
    with_labels = asyncio.run(diagnose(case, settings)).document
    without = asyncio.run(diagnose(bare, settings)).document
    assert with_labels.root_cause.model_dump() == without.root_cause.model_dump()


# Floors: what `crashcart eval incidents/real incidents/torch` measured (README "Accuracy"). Raise them when
# the engine gets better; never lower them to make a change pass.
FLOORS = {  # first contact 2026-12-01: real class 0.5738, torch 0.4737 (19 cases then)
    # real lowered to the measured values after 9 new cases were added at first contact on 2026-12-02 (70 cases),
    # and again after 24 more at first contact the same day (94 cases; torch 29 with 4 new ones), then dev fixes;
    # culprit and line lowered once more for 14 cases added at first contact that evening (108 cases), and all three
    # for 17 cases added at first contact on 2026-12-03 (125 cases; the NET/OFI audit had landed, nothing tuned on them); culprit and line raised by the
    # hard-wrapped paste reading (scan/wrapped.py); torch class and culprit lowered to the measured values for 8 cases
    # added at first contact on 2026-12-04 (37 torch cases; nothing tuned on them); real class lowered to the measured
    # value for the third batch of 9 cases added at first contact on 2026-12-04 (154 cases; nothing tuned on them)
    "real": {"class_accuracy": 0.870, "culprit_accuracy": 0.976, "line_hit_rate": 0.872, "citation_validity": 1.0},
    "torch": {"class_accuracy": 0.9189, "culprit_accuracy": 0.9459, "line_hit_rate": 1.0, "citation_validity": 1.0},
}


@pytest.mark.parametrize("name", sorted(SETS))
def test_each_real_set_stays_above_its_floor(name: str, settings: Settings) -> None:
    cases = find_cases([SETS[name]])
    assert cases
    s = summary(run_eval(cases, settings))
    for metric, floor in FLOORS[name].items():
        assert s[metric] >= floor, (metric, s[metric])
