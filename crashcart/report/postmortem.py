"""Report stage: a ``DiagnosisDocument`` and its runbook -> a postmortem first draft in Markdown.

Facts come from the document only: times are UTC, every quote is a cited line (verified ones marked,
unverified ones flagged), anything not derivable reads "unknown". Quoted text is scrubbed of secret-looking
values as a second line of defence; environment variables are never listed. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from crashcart.catalogue import load_catalogue
from crashcart.models import DiagnosisDocument, DocCitation, DocRunbook
from crashcart.report.document import llm_summary
from crashcart.report.reading import NOTHING_FOUND, nothing_found, plain_summary
from crashcart.report.spans import ranges
from crashcart.report.words import (
    ROOT_UNKNOWN,
    class_title,
    clip,
    confidence_word,
    reasons,
    severity_words,
    titles_for_ids,
)
from crashcart.text.clock import from_iso

TEAM = "*To be filled in by the team.*"
MAX_TIMELINE, MAX_LIST, MAX_QUOTE = 30, 15, 240
_SECRET = re.compile(
    r"(?i)\b([\w.-]*(?:token|secret|passw(?:or)?d|api[_-]?key|access[_-]?key|private[_-]?key|credentials?))"
    r"(\s*[=:]\s*)(['\"]?)[^\s'\"]+"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_KNOWN_TOKEN = re.compile(
    r"\b(?:xox[abposr]-[A-Za-z0-9-]{8,}|sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,})"
)
_ROLE = {
    "cascade": "symptom",
    "teardown": "teardown",
    "root_candidate": "other possible cause",
    "confirmation": "confirms",
}
_KIND_WORD = {"symptom": "symptom", "teardown": "teardown", "benign": "benign", "contributing": "contributing"}
GROUPS = {
    "symptom": (
        "Symptoms: failures the root cause explains",
        "Other ranks and processes failing because of the root cause (timeouts, lost peers, CUDA errors on the "
        "failed GPU). Fixing the root cause removes them.",
    ),
    "teardown": (
        "Teardown: the job shutting down",
        "Processes stopped after the failure: the launcher's SIGTERM, the NCCL watchdog aborting its own "
        "process (SIGABRT, `terminate called`), workers exiting. Expected after any failure; not causes.",
    ),
    "benign": (
        "Benign: lines that look like errors and are not",
        "Normal messages worded like errors, such as NCCL saying its optional network plugin (libnccl-net.so) "
        "is absent and that it uses its built-in transport. Ignore them.",
    ),
}


def _scrub(text: str) -> str:
    text = _SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}[REDACTED]", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} [REDACTED]", text)
    return _KNOWN_TOKEN.sub("[REDACTED]", text)


def _code(text: str, limit: int = MAX_QUOTE, *, cell: bool = False) -> str:
    """An inline code span that shows ``text`` literally, whatever backticks it holds (in a table cell,
    pipes are escaped as GFM requires even inside code spans)."""
    one = " ".join(_scrub(text).split())
    if len(one) > limit:
        one = one[: limit - 1] + "…"
    fence = "`" * (max((len(r) for r in re.findall(r"`+", one)), default=0) + 1)
    pad = " " if one.startswith("`") or one.endswith("`") or not one else ""
    span = f"{fence}{pad}{one}{pad}{fence}"
    return span.replace("|", "\\|") if cell else span


def _plain(text: str) -> str:
    """Text from the document shown as prose: scrubbed, one line, Markdown/HTML control characters escaped."""
    return re.sub(r"([\\`*\[\]<>|])", r"\\\1", " ".join(_scrub(text).split()))


def _utc(t: datetime | None, *, ms: bool = False) -> str:
    if t is None:
        return "unknown"
    text = f"{t:%Y-%m-%d %H:%M:%S}"
    return f"{text}.{t.microsecond // 1000:03d} UTC" if ms else f"{text} UTC"


def _span(d: timedelta) -> str:
    s = round(d.total_seconds())
    if s < 60:
        return f"{d.total_seconds():.1f} s" if s < 10 else f"{s} s"
    h, rest = divmod(s, 3600)
    return f"{h} h {rest // 60:02d} min" if h else f"{rest // 60} min {rest % 60:02d} s"


def _ranges(values: Iterable[int]) -> str:
    return ranges(values)


def _names(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(_code(n, cell=True) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _cite(c: DocCitation) -> str:
    where = f"{c.file}:{c.line}" + (f"-{c.end_line}" if c.end_line and c.end_line != c.line else "")
    mark = "✅ verified" if c.verified else f"⚠️ **unverified** ({c.status}) — do not rely on it"
    return f"{_code(where)} {mark}: {_code(c.text)}"


def _title(class_id: str, *, root: bool = False) -> str:
    return _plain(ROOT_UNKNOWN if root and class_id == "unknown" else class_title(class_id))


# --- sections ------------------------------------------------------------------------------------------------


def _summary(doc: DiagnosisDocument) -> list[str]:
    root = doc.root_cause
    level = confidence_word(root.confidence)
    lines = ["## Summary", ""]
    if nothing_found(doc):
        files = f"{doc.stats.files} file" + ("s" if doc.stats.files != 1 else "")
        return [
            *lines,
            f"**No failure found.** CrashCart read {files}, {doc.stats.lines:,} lines, and {NOTHING_FOUND}",
            "",
        ]
    if root.class_ == "unknown":
        lines.append("CrashCart could **not** decide a root cause from the evidence; the hypotheses below compete.")
    lines.append(_plain(clip(root.summary, 280)))  # the engine cuts long messages mid-word; cut at a word
    lines.append("")
    kinds = [g.kind for g in doc.symptoms] + [c.kind for c in doc.contributing]
    if kinds:
        counts = {k: kinds.count(k) for k in ("symptom", "teardown", "benign", "contributing")}
        words = {
            "symptom": ("group of symptoms it explains", "groups of symptoms it explains"),
            "teardown": (
                "group of teardown lines (the job shutting down)",
                "groups of teardown lines (the job shutting down)",
            ),
            "benign": (
                "group of benign lines (they look like errors and are not)",
                "groups of benign lines (they look like errors and are not)",
            ),
            "contributing": ("contributing factor", "contributing factors"),
        }
        parts = [f"{n} {words[k][n != 1]}" for k, n in counts.items() if n]
        lines += [f"The other lines the logs show are grouped below: {', '.join(parts)}.", ""]
    sev = f", severity {severity_words(root.severity)}" if root.severity else ""
    partial = " The analysis was **partial** (a limit was reached); coverage below." if doc.partial else ""
    lines += [f"Confidence: **{level}** ({root.confidence:.0%}){sev}.{partial}", ""]
    return lines


IMPACT_DEFINITIONS = [
    "Every time is UTC and comes from a line that prints its own clock. A line without one (a torchrun "
    "failure summary, an untimestamped traceback) is never given the time of a line above it; a figure "
    "with no such line reads unknown.",
    "Fault: the time on the root cause's own line.",
    "Incident start: the fault; when the fault's time is unknown, the detected time.",
    "Detected: the first symptom or teardown line at or after the fault, when the job visibly began to fail.",
    "End: the last failure line at or after the fault (root cause, symptom, teardown or contributing factor; "
    "benign lines left out).",
    "GPU time lost: every GPU of the job × (end − fault), since in a synchronous job one failed rank stalls "
    "all the others from the fault on (from the detected time when the fault's time is unknown). The "
    "training progress lost since the last checkpoint is counted separately.",
]


def _impact(doc: DiagnosisDocument) -> list[str]:
    topo = doc.topology
    im = doc.impact
    nodes = sorted(
        {str(i["node"]) for i in topo.values() if i.get("node")} | {n for s in doc.symptoms for n in s.nodes}
    )
    ranks = len(topo)
    fault, detected = from_iso(im.fault), from_iso(im.detected)
    since, end = fault or detected, from_iso(im.end)
    duration = end - since if since and end and end >= since else None
    if im.gpu_hours_lost is not None and im.gpus and duration is not None:
        frm = "fault" if fault else "detected"
        lost = f"{im.gpu_hours_lost:.2f} GPU-hours (all {im.gpus} GPUs × {_span(duration)}, {frm} to end)"
    else:
        need = "the GPU count" if not im.gpus else "a trusted fault or detection time and an end"
        lost = f"unknown (needs {need})"
    progress = "unknown (no training-progress line with a clock)"
    if im.last_step is not None:
        progress = f"step {im.last_step:,} at {_utc(from_iso(im.last_progress))}"
    rows = [
        ("Job", _code(doc.job_id, cell=True) if doc.job_id else "unknown"),
        ("Nodes", f"{len(nodes)} ({_names(nodes)})" if nodes else "unknown"),
        ("Ranks", str(ranks) if ranks else "unknown"),
        ("GPUs", str(im.gpus) if im.gpus else "unknown"),
        ("Incident start", _utc(from_iso(im.incident_start))),
        ("Fault (root cause)", _utc(fault)),
        ("Detected (first symptom)", _utc(detected)),
        ("End (last failure line)", _utc(end)),
        (
            "Duration (fault to end)" if fault else "Duration (detected to end)",
            _span(duration) if duration else "unknown",
        ),
        ("GPU time lost in the incident", lost),
        ("Last training progress seen", progress),
        (
            "Training progress lost since the last checkpoint",
            "unknown (CrashCart does not read checkpoint lines yet: compare the last checkpoint's step with "
            "the last progress above)",
        ),
    ]
    lines = ["## Impact", "", "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
    lines += [f"Note: {_plain(n)}." for n in im.notes]
    lines += [""] if im.notes else []
    lines += ["How these figures are defined:", "", *(f"- {d}" for d in IMPACT_DEFINITIONS), ""]
    return lines


def kinds_of(doc: DiagnosisDocument) -> dict[str, str]:
    """What the report calls each class of the document: symptom, teardown, benign or contributing."""
    out: dict[str, str] = {s.class_: s.kind for s in doc.symptoms}
    out.update({c.class_: c.kind for c in doc.contributing if c.class_ not in out})
    return out


def _timeline(doc: DiagnosisDocument) -> list[str]:
    lines = ["## Timeline (UTC)", ""]
    if not doc.timeline:
        return [*lines, "No timestamped event could be cited.", ""]
    root = doc.root_cause
    roots = {(c.file, c.line) for c in root.citations if c.verified}
    kinds = kinds_of(doc)
    own = [e for e in doc.timeline if e.time and e.time_trusted]
    rest = [e for e in doc.timeline if e not in own]
    entries = sorted(own, key=lambda e: from_iso(e.time) or datetime.min) + rest
    lines += ["| time | what it is | what | where | line |", "|---|---|---|---|---|"]
    for e in entries[:MAX_TIMELINE]:
        when = _utc(from_iso(e.time), ms=True) if e in own else "(no clock on the line)"
        what = _title(e.class_) if e.class_ else ""
        is_root = (e.file, e.line) in roots or (e.class_ == root.class_ and e.role == "root_candidate")
        kind = kinds.get(e.class_ or "", "")
        role = "**root cause**" if is_root else _KIND_WORD.get(kind) or _ROLE.get(e.role, e.role)
        lines.append(
            f"| {when} | {role} | {what} | {_code(f'{e.file}:{e.line}', cell=True)} | {_code(e.text, 140, cell=True)} |"
        )
    if len(doc.timeline) > MAX_TIMELINE:
        lines.append(f"| … | | {len(doc.timeline) - MAX_TIMELINE} more events in diagnosis.json | | |")
    lines += [
        "",
        "Each line above is a verified citation: the quoted text is that line of the bundle. Lines that print no "
        "clock of their own are listed last, in no particular order, rather than given the time of a line above.",
        "",
    ]
    return lines


def _root_cause(doc: DiagnosisDocument) -> list[str]:
    root = doc.root_cause
    cat = load_catalogue()
    info = cat.classes.get(root.class_)
    c = root.culprit
    culprit = ", ".join(
        x
        for x in (
            f"node {_code(c.node)}" if c.node else "",
            f"rank {c.rank}" if c.rank is not None else "",
            f"GPU {_code(c.gpu)}" if c.gpu else "",
        )
        if x
    )
    lines = [f"## Root cause: {_title(root.class_, root=True)}", ""]
    if info is not None:
        lines += [_plain(info.explanation), ""]
    lines += [f"- Culprit: {culprit or 'not identified'}", f"- Time: {_utc(from_iso(root.time), ms=True)}"]
    hardware = f" (hardware: {'yes' if info.hardware else 'no'})" if info else ""
    lines.append(f"- Class: {_code(root.class_)}{hardware}")
    lines += ["", "Evidence:", ""]
    lines += [f"- {_cite(x)}" for x in root.citations] or ["- none survived verification"]
    if any(not x.verified for x in root.citations):
        lines += ["", "⚠️ Unverified citations did not match the bundle; the claim rests on the verified ones only."]
    if plain := reasons(doc.reasoning):
        lines += ["", "Why CrashCart chose it:", "", *(f"- {_plain(r)}" for r in plain)]
    return [*lines, ""]


def _group_lines(doc: DiagnosisDocument, kind: str) -> list[str]:
    lines: list[str] = []
    for s in (x for x in doc.symptoms if x.kind == kind):
        who = []
        if s.ranks:
            who.append(f"{len(s.ranks)} ranks ({_ranges(s.ranks)})" if len(s.ranks) > 1 else f"rank {s.ranks[0]}")
        if s.nodes:
            who.append(f"{len(s.nodes)} nodes" if len(s.nodes) > 1 else f"node {_code(s.nodes[0])}")
        first, last = from_iso(s.first_time), from_iso(s.last_time)
        when = f", {_utc(first)}" if first else ""
        if first and last and _utc(last) != _utc(first):
            when = f", {_utc(first)[:-4]} – {_utc(last)[11:]}"
        if s.untimed and first:
            when += f" ({s.untimed} without a clock)"
        plural = "s" if s.count != 1 else ""
        lines.append(
            f"- **{_title(s.class_)}**: {s.count} line{plural} from {', '.join(who) or 'unknown ranks'}{when}."
        )
        info = load_catalogue().classes.get(s.class_)
        if info is not None and kind != "benign":
            lines.append(f"  {_plain(info.explanation)}")
        lines += [f"  - {_cite(x)}" for x in s.citations[:2]]
    for c in (x for x in doc.contributing if x.kind == kind):
        lines.append(f"- **{_title(c.class_)}**: {_plain(plain_summary(c.summary))}")
        lines += [f"  - {_cite(x)}" for x in c.citations[:2]]
    return lines


def _symptoms(doc: DiagnosisDocument) -> list[str]:
    out: list[str] = []
    for kind, (heading, meaning) in GROUPS.items():
        body = _group_lines(doc, kind)
        if not body and kind != "symptom":
            continue
        out += [f"## {heading}", "", meaning, ""]
        out += body or ["None: no other error was found."]
        out.append("")
    return out


def _contributing(doc: DiagnosisDocument) -> list[str]:
    lines = [
        "## Contributing factors",
        "",
        "Separate problems that made the failure more likely or worse without causing it.",
        "",
    ]
    body = _group_lines(doc, "contributing")
    if not body:
        return [*lines, "None identified from the logs. " + TEAM, ""]
    return [*lines, *body, ""]


def _hypotheses(doc: DiagnosisDocument) -> list[str]:
    lines = ["## Hypotheses considered", ""]
    if not doc.hypotheses:
        return [*lines, "No competing explanation scored.", ""]
    lines += ["| class | score | why not |", "|---|---|---|"]
    lines += [f"| {_title(h.class_)} | {h.score:g} | {_plain(titles_for_ids(h.why_not))} |" for h in doc.hypotheses]
    return [*lines, ""]


def _actions(runbook: DocRunbook) -> list[str]:
    lines = ["## Action items", ""]
    if not runbook.steps:
        return [*lines, "The runbook has no step for this class. " + TEAM, ""]
    lines.append("From the dry-run runbook (`runbook.md`; nothing runs until a human approves and runs it):")
    lines.append("")
    for step in runbook.steps:
        lines.append(f"- [ ] {_plain(step.title)} — risk {step.risk}, `{step.id}`. Owner: {TEAM}")
    lines += ["", "Longer-term follow-ups: " + TEAM, ""]
    return lines


def _coverage(doc: DiagnosisDocument) -> list[str]:
    st = doc.stats
    lines = [
        "## Coverage",
        "",
        f"- Scanned {st.files} files, {st.lines:,} lines, {st.bytes:,} bytes in {st.seconds:.1f} s "
        f"({doc.engine} engine); {st.findings:,} findings in {st.groups} groups.",
        f"- Citations dropped by verification: {st.citations_dropped}.",
    ]
    models = llm_summary(st.llm)
    if models:
        lines.append(f"- {_plain(models[0].upper() + models[1:])}.")
    if doc.partial:
        lines.append("- **Partial analysis**: a limit was reached before every source was read.")
    lines.append(f"- Skipped files: {len(st.skipped_files) or 'none'}")
    lines += [f"  - `{_plain(s.path)}`: {_plain(s.reason)}" for s in st.skipped_files[:MAX_LIST]]
    if len(st.skipped_files) > MAX_LIST:
        lines.append(f"  - … and {len(st.skipped_files) - MAX_LIST} more")
    lines.append(f"- Clocks not aligned (events ordered, not timed): {len(st.unaligned_clocks) or 'none'}")
    lines += [f"  - {_plain(u)}" for u in st.unaligned_clocks[:MAX_LIST]]
    if len(st.unaligned_clocks) > MAX_LIST:
        lines.append(f"  - … and {len(st.unaligned_clocks) - MAX_LIST} more")
    return [*lines, ""]


def render_postmortem(doc: DiagnosisDocument, runbook: DocRunbook) -> str:
    """The postmortem draft (``postmortem.md``) for a diagnosis and its runbook."""
    root = doc.root_cause
    where = f" on {_code(root.culprit.node)}" if root.culprit.node else ""
    job = f" — job {_code(doc.job_id)}" if doc.job_id else ""
    what = "No failure found" if nothing_found(doc) else _title(root.class_, root=True)
    head = [
        f"# Postmortem (draft): {what}{where}{job}",
        "",
        f"*First draft by CrashCart from incident {_code(doc.incident_id)} (bundle "
        f"`{doc.bundle.sha256[:12]}`, {doc.bundle.files} files). Check it; the sections left "
        "“to be filled in by the team” need a human.*",
        "",
    ]
    body = [
        *_summary(doc),
        *_impact(doc),
        *_timeline(doc),
        *_root_cause(doc),
        *_symptoms(doc),
        *_contributing(doc),
        *_hypotheses(doc),
        *_actions(runbook),
        *_coverage(doc),
        "## What went well",
        "",
        TEAM,
        "",
        "## What we will change",
        "",
        TEAM,
        "",
    ]
    return "\n".join([*head, *body])
