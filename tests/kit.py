"""Small builders shared by the engine's tests: a finding as the scan makes it, the signature a line matches,
and a bundle written from text and diagnosed."""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime
from pathlib import Path

from crashcart.catalogue import load_catalogue
from crashcart.ingest.bundle import open_bundle
from crashcart.models import Evidence, Finding
from crashcart.pipeline import Outcome, diagnose
from crashcart.scan.run import scan
from crashcart.settings import Settings

_n = itertools.count(1)


def finding(
    signature: str,
    text: str,
    *,
    rank: int | None = None,
    file: str = "train.log",
    line: int = 1,
    time: datetime | None = None,
    **extra: str,
) -> Finding:
    """A finding as the scan makes it: the catalogue signature's class, role and fields for this line."""
    cat = load_catalogue()
    idx = cat.index[signature]
    s = cat.signatures[idx]
    fields = cat.extract(idx, text)
    assert fields is not None, (signature, text)
    n = next(_n)
    return Finding(
        id=f"F{n:05d}",
        class_id=s.class_id,
        signature=s.id,
        role=s.role,
        severity=s.severity,
        summary=s.id,
        time=time,
        rank=rank,
        fields={**fields, **extra},
        evidence=[Evidence(id=f"E{n:05d}", file=file, line=line, text=text)],
    )


def winner(text: str) -> tuple[str, str] | None:
    """(signature id, class) of the highest-priority non-context signature matching ``text``."""
    cat = load_catalogue()
    best = None
    for i, s in enumerate(cat.signatures):
        if s.role == "context" or not cat.regex(i).search(text):
            continue
        if best is None or s.priority > best.priority:
            best = s
    return (best.id, best.class_id) if best is not None else None


def grouped(groups: dict[str, list[tuple[str, str]]]) -> list[tuple[str, str, str]]:
    """(group, wording, class) rows of an emitter audit's groups, for ``pytest.mark.parametrize``."""
    return [(group, text, cls) for group, rows in groups.items() for text, cls in rows]


def grouped_ids(cases: list[tuple[str, str, str]]) -> list[str]:
    return [f"{g}-{i}" for i, (g, _, _) in enumerate(cases)]


def assert_class(group: str, text: str, cls: str) -> None:
    """The wording ``text`` is won by a signature of class ``cls``."""
    got = winner(text)
    assert got is not None, text
    assert got[1] == cls, (group, text, got)


def assert_benign(text: str) -> None:
    """A benign warning: the reading knows it as benign, and no signature above NCCL's catch-all wins it."""
    from crashcart.report.reading import is_benign_line

    assert is_benign_line(text), text
    got = winner(text)
    assert got is None or got == ("generic.nccl_warn", "unknown"), (text, got)  # info, never above a real cause


def scan_texts(root: Path, files: dict[str, str], settings: Settings) -> list[Finding]:
    """Write ``files`` under ``root`` and scan them (no reduce); every cited span is checked byte-true."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    with open_bundle(root, settings.work_dir, settings.bundle_limits) as b:
        found = scan(b, settings.scan).findings
        for f in found:
            for ev in f.evidence:
                assert "\n".join(b.read_lines(ev.file, ev.line, ev.end_line or ev.line)) == ev.text
        return found


def run_files(root: Path, files: dict[str, str], settings: Settings) -> Outcome:
    """Write ``files`` (relative path -> text) under ``root`` and diagnose it."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return asyncio.run(diagnose(root, settings))


# The optional fields a test Finding may be given (the shared-field-set and in-place-attribution tests vary them).
OPTIONAL_FIELDS = {"time": datetime(2026, 11, 30, 2, 13, 7), "rank": 3, "node": "gpu-node-017", "gpu": "0000:3b:00"}


def xid_finding(i: int, given_names: frozenset[str], text: str = "", end: bool = False) -> Finding:
    """A made-up Xid 79 finding number ``i`` given exactly ``given_names`` of ``OPTIONAL_FIELDS`` (and, with ``end``,
    an evidence span of two lines)."""
    extra = {k: v for k, v in OPTIONAL_FIELDS.items() if k in given_names}
    evidence = Evidence(
        id=f"E{i:05d}", file="ranks/rank3.log", line=i, text=text or f"line {i}", **({"end_line": i + 1} if end else {})
    )
    return Finding(
        id=f"F{i:04d}",
        class_id="gpu_fallen_off_bus",
        signature="xid",
        role="root_candidate",
        severity="P0",
        summary=f"Xid 79 ({i})",
        evidence=[evidence],
        **extra,
    )
