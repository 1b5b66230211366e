"""Rows <-> models: how findings, groups, files and citations are written as rows and read back, and the text
that full-text search indexes for a run."""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from crashcart.models import (
    BundleFile,
    Citation,
    DiagnosisDocument,
    DocContributing,
    DocSymptom,
    Finding,
    Group,
)

if TYPE_CHECKING:  # imported when a store is opened: commands that keep no store never load it
    pass

from crashcart.store.records import iso

_M = TypeVar("_M", bound=BaseModel)


JSON_COLUMNS: dict[str, frozenset[str]] = {
    "files": frozenset(),
    "findings": frozenset({"fields", "evidence"}),
    "groups": frozenset({"ranks", "nodes", "gpus", "exemplar", "evidence", "common_fields", "finding_ids"}),
    "citations": frozenset(),
}


def child_row(model: BaseModel, diagnosis_id: str, seq: int) -> dict[str, Any]:
    row: dict[str, Any] = {"diagnosis_id": diagnosis_id, "seq": seq}
    data = model.model_dump(mode="json", warnings="error")
    for name, value in data.items():
        raw = getattr(model, name)
        if isinstance(raw, datetime):
            row[name] = iso(raw)
        elif isinstance(value, dict | builtins.list):
            row[name] = json.dumps(value, ensure_ascii=False)
        else:
            row[name] = value
    return row


def child_model(cls: type[_M], table: str, row: dict[str, Any]) -> _M:
    json_columns = JSON_COLUMNS[table]
    data = {
        name: json.loads(value) if name in json_columns and value is not None else value
        for name, value in row.items()
        if name not in ("diagnosis_id", "seq")
    }
    return cls.model_validate(data)


def search_body(
    document: DiagnosisDocument,
    files: Sequence[BundleFile],
    findings: Sequence[Finding],
    groups: Sequence[Group],
    citations: Sequence[Citation],
) -> str:
    """Everything a person may type to find this run: ids, classes, nodes, summaries, evidence text."""
    root = document.root_cause
    parts: builtins.list[str | None] = [
        document.incident_id,
        document.job_id,
        root.class_,
        root.summary,
        root.culprit.node,
        root.culprit.gpu,
        None if root.culprit.rank is None else str(root.culprit.rank),
    ]
    parts += [c.text for c in root.citations]
    claims: builtins.list[DocContributing | DocSymptom] = [*document.contributing, *document.symptoms]
    for claim in claims:
        parts += [claim.class_, claim.summary, *(c.text for c in claim.citations)]
    for symptom in document.symptoms:
        parts += symptom.nodes
    parts += [h.class_ for h in document.hypotheses]
    parts += [f.host for f in files]
    for finding in findings:
        parts += [finding.class_id, finding.signature, finding.summary, finding.node, finding.gpu]
        parts += [e.text for e in finding.evidence]
    for group in groups:
        parts += [group.class_id, group.summary, *group.nodes]
    parts += [c.text for c in citations]
    return "\n".join(dict.fromkeys(p for p in parts if p))
