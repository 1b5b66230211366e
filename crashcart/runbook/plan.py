"""Runbook plan: a ``DiagnosisDocument`` -> a dry-run runbook (steps from ``data/actions.toml`` only).

Step text is catalogue text; placeholders take validated culprit/job values only, never log text or model
output, and a step whose value is unknown or unsafe falls back to a variant or is left out. Output:
``DocRunbook`` and its plan hash (``render`` writes Markdown and ``runbook.json``). Reads package data once;
otherwise pure.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import string
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from crashcart.catalogue import CatalogueError, load_catalogue
from crashcart.models import DiagnosisDocument, DocRunbook, DocRunbookStep
from crashcart.text.gpuid import canonical_pci

Scheduler = Literal["slurm", "k8s"]
PARAMS = ("node", "gpu", "rank", "job_id", "class_id", "evidence", "nodes")
RUNBOOK_SCHEMA = "crashcart.runbook/v1"
DRY_RUN = "DRY RUN — CrashCart never executes these commands. Read each one, then run it yourself."

_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
JOB_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # never a leading "-": it would read as an option
_CLASS = re.compile(r"[a-z0-9_]{1,64}")
_FILE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]{0,511}")
_GPU_INDEX = re.compile(r"[0-9]{1,2}")
_K8S_PATH = re.compile(r"(^|/)(pods|k8s|kube[^/]*)/|(^|/)(k8s|kube)?[-_]?events\.(json|ya?ml)$", re.IGNORECASE)
_EVIDENCE_MAX = 64
_K8S_NAMES = frozenset({"k8s", "kubernetes", "kube"})


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ActionStep(_Frozen):
    """One catalogue step (``[step.<id>]``)."""

    id: str
    title: str
    command: str
    rationale: str
    risk: Literal["low", "medium", "high"]
    reversible: bool
    needs: list[str] = Field(default_factory=list)
    fallback: str | None = None
    scheduler: Scheduler | None = None
    alt: str | None = None
    variant_of: str | None = None


class ActionClass(_Frozen):
    """The ordered steps of one class (``[class.<id>]``) and its rationale overrides."""

    steps: list[str]
    why: dict[str, str] = Field(default_factory=dict)


class ActionCatalogue(_Frozen):
    steps: dict[str, ActionStep]
    classes: dict[str, ActionClass]


@dataclass(frozen=True)
class Omitted:
    """A catalogue step left out of a runbook, and why (shown in the Markdown)."""

    step_id: str
    reason: str


def _fields(template: str) -> set[str]:
    names: set[str] = set()
    for _, name, spec, conv in string.Formatter().parse(template):
        if name is not None:
            if spec or conv or not name.isidentifier():
                raise CatalogueError(f"placeholder {{{name}}} must be plain (no format spec or conversion)")
            names.add(name)
    return names


def _loops(cat: ActionCatalogue, sid: str, path: tuple[str, ...]) -> bool:
    """Whether a fallback/alt chain from ``sid`` comes back to a step already on it."""
    if sid in path:
        return True
    step = cat.steps.get(sid)
    return step is not None and any(_loops(cat, r, (*path, sid)) for r in (step.fallback, step.alt) if r)


def _check(cat: ActionCatalogue, classes: set[str]) -> None:
    problems: list[str] = []
    for sid, step in cat.steps.items():
        try:
            used = _fields(step.title) | _fields(step.command)
            if _fields(step.rationale):
                problems.append(f"step {sid}: the rationale may not use placeholders")
        except (CatalogueError, ValueError) as exc:
            problems.append(f"step {sid}: {exc}")
            continue
        if unknown := set(step.needs) - set(PARAMS):
            problems.append(f"step {sid}: unknown params {sorted(unknown)}")
        if used != set(step.needs):
            problems.append(f"step {sid}: placeholders {sorted(used)} differ from needs {sorted(step.needs)}")
        for ref in (step.fallback, step.alt, step.variant_of):
            if ref is not None and ref not in cat.steps:
                problems.append(f"step {sid}: refers to unknown step {ref}")
        if step.alt is not None and step.scheduler is None:
            problems.append(f"step {sid}: an alt needs a scheduler")
    problems += [f"step {sid}: fallback/alt chain loops" for sid in cat.steps if _loops(cat, sid, ())]
    for cid, entry in cat.classes.items():
        problems += [f"class {cid}: unknown step {s}" for s in entry.steps if s not in cat.steps]
        problems += [f"class {cid}: why for unlisted step {s}" for s in entry.why if s not in entry.steps]
        if len(set(entry.steps)) != len(entry.steps):
            problems.append(f"class {cid}: a step is listed twice")
    if missing := classes - set(cat.classes):
        problems.append(f"classes without actions: {sorted(missing)}")
    if extra := set(cat.classes) - classes:
        problems.append(f"actions for unknown classes: {sorted(extra)}")
    if problems:
        raise CatalogueError("actions.toml: " + "; ".join(problems))


@cache
def load_actions() -> ActionCatalogue:
    """Load and validate ``data/actions.toml`` (once per process)."""
    raw = tomllib.loads(resources.files("crashcart.data").joinpath("actions.toml").read_text(encoding="utf-8"))
    cat = ActionCatalogue(
        steps={sid: ActionStep.model_validate({"id": sid, **row}) for sid, row in raw.get("step", {}).items()},
        classes={cid: ActionClass.model_validate(row) for cid, row in raw.get("class", {}).items()},
    )
    _check(cat, set(load_catalogue().classes) | {"unknown"})
    return cat


# --- parameters: validated values only ---------------------------------------------------------------------


def _safe(value: str) -> str | None:
    """The value when the shell reads it as one literal word, also inside double quotes; else None."""
    return value if shlex.quote(value) == value else None


def _host(value: str | None) -> str | None:
    return _safe(value) if value is not None and _HOST.fullmatch(value) else None


def _gpu(value: str | None) -> str | None:
    if value is None:
        return None
    if _GPU_INDEX.fullmatch(value):
        return value
    canon = canonical_pci(value) if len(value) <= 32 else None
    return f"{canon}.0" if canon is not None else None  # nvidia-smi -i and lspci -s take domain:bus:dev.fn


def _evidence(doc: DiagnosisDocument) -> str | None:
    for cite in doc.root_cause.citations:
        if not cite.verified:
            continue
        if not _FILE.fullmatch(cite.file) or ".." in PurePosixPath(cite.file).parts:
            continue
        path = cite.file
        if len(path) > _EVIDENCE_MAX - 8:
            path = "/".join(PurePosixPath(path).parts[-2:])[-(_EVIDENCE_MAX - 8) :].lstrip("-")
        return _safe(f"{path}:{int(cite.line)}")
    return None


def _nodes(doc: DiagnosisDocument) -> str | None:
    raw = {info.get("node") for info in doc.topology.values()}
    raw |= {n for s in doc.symptoms for n in s.nodes}
    raw.add(doc.root_cause.culprit.node)
    names = sorted(n for n in raw if isinstance(n, str))
    if not names or any(_host(n) is None for n in names):
        return None  # one unusable host name makes the whole list unusable
    return ",".join(names)


def runbook_params(doc: DiagnosisDocument) -> dict[str, str]:
    """The placeholder values this document supports: validated, shell-safe; unknown ones are absent."""
    culprit = doc.root_cause.culprit
    rank = culprit.rank
    class_id = doc.root_cause.class_ if doc.root_cause.class_ in load_actions().classes else None
    values: dict[str, str | None] = {
        "node": _host(culprit.node),
        "gpu": _gpu(culprit.gpu),
        "rank": str(rank) if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < 10**7 else None,
        "job_id": _safe(doc.job_id) if doc.job_id is not None and JOB_ID.fullmatch(doc.job_id) else None,
        "class_id": class_id if class_id is not None and _CLASS.fullmatch(class_id) else None,
        "evidence": _evidence(doc),
        "nodes": _nodes(doc),
    }
    return {k: v for k, v in values.items() if v is not None}


def infer_scheduler(doc: DiagnosisDocument) -> Scheduler:
    """``k8s`` when the incident is a Kubernetes one (class, or bundle paths of pod logs/events), else Slurm."""
    classes = {doc.root_cause.class_, *(s.class_ for s in doc.symptoms)}
    if "k8s_pod_eviction_or_oomkilled" in classes:
        return "k8s"
    files = [c.file for c in doc.root_cause.citations] + [t.file for t in doc.timeline]
    return "k8s" if any(_K8S_PATH.search(f) for f in files) else "slurm"


# --- building ----------------------------------------------------------------------------------------------


def _resolve(cat: ActionCatalogue, sid: str, params: dict[str, str], sched: Scheduler) -> tuple[ActionStep | None, str]:
    reason = ""
    seen: set[str] = set()
    cur: str | None = sid
    while cur is not None and cur not in seen:
        seen.add(cur)
        step = cat.steps[cur]
        if step.scheduler is not None and step.scheduler != sched:
            reason = reason or f"{step.scheduler} only"
            cur = step.alt
            continue
        missing = [n for n in step.needs if n not in params]
        if not missing:
            return step, ""
        reason = reason or "unknown or unsafe " + ", ".join(missing)
        cur = step.fallback
    return None, reason


def _render(template: str, params: dict[str, str]) -> str:
    return template.format_map({k: shlex.quote(v) for k, v in params.items()})


def plan_steps(doc: DiagnosisDocument, scheduler: str | None = None) -> tuple[list[DocRunbookStep], list[Omitted]]:
    """The runbook steps for ``doc`` and the catalogue steps left out (with the reason)."""
    cat = load_actions()
    params = runbook_params(doc)
    named = (scheduler or "").strip().lower()
    sched: Scheduler = "k8s" if named in _K8S_NAMES else "slurm" if named == "slurm" else infer_scheduler(doc)
    entry = cat.classes.get(doc.root_cause.class_) or cat.classes["unknown"]
    steps: list[DocRunbookStep] = []
    omitted: list[Omitted] = []
    for sid in entry.steps:
        step, reason = _resolve(cat, sid, params, sched)
        if step is None:
            omitted.append(Omitted(sid, reason))
            continue
        if any(s.id == step.id for s in steps):
            continue
        why = entry.why.get(step.id) or (entry.why.get(sid) if sid in (step.id, step.variant_of) else None)
        steps.append(
            DocRunbookStep(
                id=step.id,
                title=_render(step.title, params),
                command=_render(step.command, params),
                risk=step.risk,
                rationale=why or step.rationale,
                reversible=step.reversible,
            )
        )
    return steps, omitted


def build_runbook(doc: DiagnosisDocument, *, scheduler: str | None = None) -> DocRunbook:
    """The dry-run runbook for the document's root-cause class (``unknown`` steps for other classes).

    :param scheduler: the bundle manifest's ``scheduler`` (``slurm``, ``k8s``/``kubernetes``); other
        values and None mean: infer it from the document
    """
    return DocRunbook(steps=plan_steps(doc, scheduler)[0])


def plan_hash(runbook: DocRunbook) -> str:
    """sha256 (hex) of the canonical JSON of the steps: any change to any step changes the hash."""
    steps = [s.model_dump(mode="json") for s in runbook.steps]
    canonical = json.dumps(steps, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --- output ------------------------------------------------------------------------------------------------
