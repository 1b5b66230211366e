"""What the models must answer, as pydantic models: their JSON schema goes into ``response_format``.

The class vocabulary and the roles are checked here, so an answer with an invented class id (say,
one a log line asked for) fails validation and gets the repair retry, then counts as a failure.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from crashcart.catalogue import load_catalogue


@cache
def vocabulary() -> frozenset[str]:
    return frozenset({*load_catalogue().classes, "unknown"})


def _known(value: str) -> str:
    v = value.strip()
    if v not in vocabulary():
        raise ValueError(f"{v[:60]!r} is not a class id from CLASSES")
    return v


def _class_field(default: str | None = None) -> Any:
    """A class id: the enum in the schema lets constrained decoding keep to it; the validator enforces it."""
    extra: dict[str, Any] = {"enum": sorted(vocabulary())}
    return Field(json_schema_extra=extra) if default is None else Field(default=default, json_schema_extra=extra)


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SwarmFinding(_Answer):
    file: str
    line: int = Field(ge=1)
    quote: str = Field(min_length=1, max_length=2000)
    class_id: str = _class_field()
    role: Literal["root_candidate", "cascade", "teardown", "confirmation", "context"]
    severity: Literal["P0", "P1", "P2", "P3", "info"] = "P2"
    summary: str = Field(default="", max_length=400)

    _class = field_validator("class_id")(_known)


class SwarmAnswer(_Answer):
    findings: list[SwarmFinding] = Field(default_factory=list, max_length=200)


class CulpritAnswer(_Answer):
    node: str | None = None
    rank: int | None = None
    gpu: str | None = None


class HypothesisAnswer(_Answer):
    class_id: str = _class_field()
    score: float = Field(default=0.0, ge=0.0, le=1.0)
    why_not: str = Field(default="", max_length=400)

    _class = field_validator("class_id")(_known)


class ReduceAnswer(_Answer):
    root_class: str = _class_field()
    summary: str = Field(min_length=1, max_length=1200)
    root_evidence_ids: list[str] = Field(default_factory=list, max_length=20)
    culprit: CulpritAnswer = Field(default_factory=CulpritAnswer)
    confidence: float = Field(ge=0.0, le=1.0)
    symptom_group_ids: list[str] = Field(default_factory=list)
    hypotheses: list[HypothesisAnswer] = Field(default_factory=list, max_length=10)
    reasoning: list[str] = Field(default_factory=list, max_length=8)

    _class = field_validator("root_class")(_known)


class Observation(_Answer):
    metric: str = Field(max_length=120)
    gpu: str | None = None
    node: str | None = None
    start: str | None = None
    end: str | None = None
    summary: str = Field(default="", max_length=400)
    class_id: str = _class_field("unknown")

    _class = field_validator("class_id")(_known)


class VisionAnswer(_Answer):
    observations: list[Observation] = Field(default_factory=list, max_length=50)


class Ping(_Answer):
    ok: bool
