"""Small builders shared by the engine's tests: a finding as the scan makes it, the signature a line matches,
and a bundle written from text and diagnosed."""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime
from pathlib import Path

from crashcart.catalogue import load_catalogue
from crashcart.models import Evidence, Finding
from crashcart.pipeline import Outcome, diagnose
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


def run_files(root: Path, files: dict[str, str], settings: Settings) -> Outcome:
    """Write ``files`` (relative path -> text) under ``root`` and diagnose it."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return asyncio.run(diagnose(root, settings))
