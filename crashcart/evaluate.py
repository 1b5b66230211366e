"""``crashcart eval``: diagnose labelled bundles and score the answers against ``expected.json``.

Input: directories holding bundles with ``expected.json`` (DESIGN §4.5). Output: one ``CaseResult``
per bundle and a summary, also per set (the folder a case sits in: ``real``, ``torch``, ``incidents``…)
and per split (``dev`` / ``held-out`` for real cases). This is the only module that reads labels; the
engine never does (the extraction layer refuses to even list ``expected.json``).

Scoring (DESIGN §4.5): the class is right when it is the labelled one or one of ``acceptable_classes``;
culprit and root-cause-line rates count only cases whose labels name them; an abstention is an
``unknown`` answer where the label names a class; "confident" answers are those the terminal shows as
high confidence (>= ``CONFIDENT``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crashcart.models import DiagnosisDocument
from crashcart.pipeline import diagnose
from crashcart.report.words import HIGH
from crashcart.settings import Settings
from crashcart.text.gpuid import canonical_pci

LABELS = "expected.json"


CONFIDENT = HIGH  # what the reports call "high confidence"


@dataclass
class CaseResult:
    case: str
    expected: str
    got: str
    class_ok: bool
    culprit_ok: bool
    line_hit: bool
    citations_ok: bool
    seconds: float
    culprit: str = ""
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    set: str = ""  # the folder the case sits in
    split: str = ""  # "dev" / "held-out" for real cases, "" otherwise
    confidence: float = 0.0  # the diagnosis's root-cause confidence
    culprit_labelled: bool = False  # the labels name a culprit field
    lines_labelled: bool = False  # the labels name root-cause lines (and a class other than unknown)
    llm_calls: int = 0
    llm_tokens: int = 0
    llm_cost_usd: float = 0.0
    llm_status: str = "off"

    @property
    def passed(self) -> bool:
        return self.error is None and self.class_ok and self.culprit_ok and self.line_hit and self.citations_ok


SIDECAR = ".expected.json"


def labels_of(case: Path) -> Path:
    """Where a case's labels are: ``DIR/expected.json``, or ``NAME.expected.json`` beside an archive or file."""
    if case.is_dir():
        return case / LABELS
    return case.with_name(case.name.split(".")[0] + SIDECAR)


def find_cases(dirs: list[Path]) -> list[Path]:
    """Labelled bundles: each DIR itself, its sub-directories with expected.json, and archives or single
    log files beside a ``NAME.expected.json``."""
    out: list[Path] = []
    for d in dirs:
        if (d / LABELS).is_file() or (d.is_file() and labels_of(d).is_file()):
            out.append(d)
        elif d.is_dir():
            found = [p.parent for p in d.glob(f"*/{LABELS}")]
            for side in d.glob(f"*{SIDECAR}"):
                stem = side.name[: -len(SIDECAR)]
                found += [p for p in d.glob(f"{stem}.*") if p.is_file() and p != side]
            out.extend(sorted(found))
    return out


def in_split(case: Path, split: str | None) -> bool:
    """Whether a case's labels put it in ``split`` (every case when ``split`` is None; an unreadable label file
    is kept, so that the run reports it rather than hiding it)."""
    if split is None:
        return True
    try:
        labels = json.loads(labels_of(case).read_text())
    except (OSError, ValueError):
        return True
    return isinstance(labels, dict) and labels.get("split") == split


def score_case(name: str, doc: DiagnosisDocument, labels: dict[str, Any], seconds: float) -> CaseResult:
    """Compare one diagnosis with its labels, by the rules of DESIGN §4.5."""
    rc = doc.root_cause
    want_class = str(labels.get("root_cause_class", "unknown"))
    accepted = {want_class, *(str(c) for c in labels.get("acceptable_classes") or [])}
    want = labels.get("culprit") or {}
    notes: list[str] = []
    culprit_ok = True
    for key in ("node", "rank", "gpu"):
        exp = want.get(key)
        if exp is None:
            continue
        got = getattr(rc.culprit, key)
        same = (
            (canonical_pci(str(exp)) or str(exp)) == (canonical_pci(str(got)) or str(got))
            if key == "gpu" and got
            else got == exp
        )
        if not same:
            culprit_ok = False
            notes.append(f"culprit {key}: expected {exp}, got {got}")
    lines = {(str(x["file"]), int(x["line"])) for x in labels.get("root_cause_lines") or []}
    hit = (
        not lines
        or want_class == "unknown"
        or any(
            (c.file, n) in lines for c in rc.citations if c.verified for n in range(c.line, (c.end_line or c.line) + 1)
        )
    )
    if not hit:
        notes.append("no root-cause citation is one of the labelled lines")
    shown = [
        *rc.citations,
        *(c for x in doc.contributing for c in x.citations),
        *(c for s in doc.symptoms for c in s.citations),
    ]
    cites_ok = all(c.verified for c in shown)
    culprit = ", ".join(
        x
        for x in (
            rc.culprit.node or "",
            f"rank {rc.culprit.rank}" if rc.culprit.rank is not None else "",
            rc.culprit.gpu or "",
        )
        if x
    )
    return CaseResult(
        case=name,
        expected=want_class,
        got=rc.class_,
        class_ok=rc.class_ in accepted,
        culprit_ok=culprit_ok,
        line_hit=hit,
        citations_ok=cites_ok,
        seconds=round(seconds, 3),
        culprit=culprit,
        notes=notes,
        split=str(labels.get("split") or ""),
        confidence=rc.confidence,
        culprit_labelled=any(want.get(k) is not None for k in ("node", "rank", "gpu")),
        lines_labelled=bool(lines) and want_class != "unknown",
    )


def run_eval(cases: list[Path], settings: Settings) -> list[CaseResult]:
    results: list[CaseResult] = []
    for case in cases:
        labels = json.loads(labels_of(case).read_text())
        start = time.perf_counter()
        outcome = asyncio.run(diagnose(case, settings))
        result = score_case(case.name, outcome.document, labels, time.perf_counter() - start)
        result.set = case.resolve().parent.name
        llm = outcome.document.stats.llm
        result.llm_calls, result.llm_status = llm.calls, llm.status
        result.llm_tokens, result.llm_cost_usd = llm.prompt_tokens + llm.completion_tokens, llm.cost_usd
        results.append(result)
    return results


def _rate(hits: int, n: int) -> float | None:
    return round(hits / n, 4) if n else None


def summary(results: list[CaseResult]) -> dict[str, Any]:
    n = len(results) or 1
    confusion = Counter((r.expected, r.got) for r in results if not r.class_ok)
    culprits = [r for r in results if r.culprit_labelled]
    lined = [r for r in results if r.lines_labelled]
    confident = [r for r in results if r.confidence >= CONFIDENT]
    return {
        "cases": len(results),
        "passed": sum(r.passed for r in results),
        "class_accuracy": round(sum(r.class_ok for r in results) / n, 4),
        "culprit_accuracy": round(sum(r.culprit_ok for r in results) / n, 4),
        "culprit_labelled": len(culprits),
        "culprit_accuracy_labelled": _rate(sum(r.culprit_ok for r in culprits), len(culprits)),
        "line_hit_rate": round(sum(r.line_hit for r in results) / n, 4),
        "lines_labelled": len(lined),
        "line_hit_rate_labelled": _rate(sum(r.line_hit for r in lined), len(lined)),
        "citation_validity": round(sum(r.citations_ok for r in results) / n, 4),
        "abstentions": sum(r.got == "unknown" and r.expected != "unknown" for r in results),
        "confident": len(confident),
        "confident_accuracy": _rate(sum(r.class_ok for r in confident), len(confident)),
        "confident_wrong": [r.case for r in confident if not r.class_ok],
        "confusion": [{"expected": e, "got": g, "count": c} for (e, g), c in sorted(confusion.items())],
        "llm": {
            "calls": sum(r.llm_calls for r in results),
            "tokens": sum(r.llm_tokens for r in results),
            "cost_usd": round(sum(r.llm_cost_usd for r in results), 6),
            "status": dict(Counter(r.llm_status for r in results)),
        },
    }


def by_set(results: list[CaseResult]) -> dict[str, dict[str, Any]]:
    """A summary per set, and per set and split where a set has splits (``real``, ``real/dev``, …)."""
    groups: dict[str, list[CaseResult]] = {}
    for r in results:
        groups.setdefault(r.set, []).append(r)
        if r.split:
            groups.setdefault(f"{r.set}/{r.split}", []).append(r)
    return {name: summary(rs) for name, rs in sorted(groups.items())}


def summary_lines(results: list[CaseResult]) -> list[str]:
    """The figures a person reads after the case table: one line per set (and split), then the misses."""
    out = []
    sets = by_set(results)
    for name, s in sets.items() if len(sets) > 1 else [("all", summary(results))]:
        parts = [f"{name}: {s['passed']}/{s['cases']} passed", f"class {s['class_accuracy']:.0%}"]
        if s["culprit_accuracy_labelled"] is not None:
            parts.append(f"culprit {s['culprit_accuracy_labelled']:.0%} of {s['culprit_labelled']} labelled")
        if s["line_hit_rate_labelled"] is not None:
            parts.append(f"root-cause line {s['line_hit_rate_labelled']:.0%} of {s['lines_labelled']}")
        parts.append(f"citations valid {s['citation_validity']:.0%}")
        parts.append(f"abstained {s['abstentions']}")
        if s["confident"]:
            parts.append(f"high-confidence answers right {s['confident_accuracy']:.0%} of {s['confident']}")
        out.append("; ".join(parts))
    wrong = summary(results)["confusion"]
    if wrong:
        out.append("missed classes: " + ", ".join(f"{c['expected']} -> {c['got']} x{c['count']}" for c in wrong))
    return out


def as_json(results: list[CaseResult]) -> dict[str, Any]:
    return {
        "summary": summary(results),
        "sets": by_set(results),
        "cases": [{**asdict(r), "passed": r.passed} for r in results],
    }
