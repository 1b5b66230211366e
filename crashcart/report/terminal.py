"""Render a diagnosis for a terminal with rich: root cause, verified citations, what the other lines are.

Input: ``DiagnosisDocument``. Output: text on a rich Console (colour when it is a TTY, plain
otherwise), in the console's width. Class ids stay in ``diagnosis.json``; people read titles. Pure apart
from writing to the given console.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from crashcart.models import WHOLE_JOB_STOPS, DiagnosisDocument, DocCitation, DocSymptom
from crashcart.report.document import llm_summary
from crashcart.report.reading import NOT_A_FAILURE, NOTHING_FOUND, nothing_found, plain_summary
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

MAX_QUOTE, MAX_HEADLINE, MAX_ROWS = 220, 180, 12
GROUPS = {
    "symptom": "Symptoms: failures the root cause explains",
    "teardown": "Teardown: the job shutting down after the failure (expected, not causes)",
    "benign": "Benign: lines that look like errors and are not",
    "contributing": "Contributing factors: separate problems that made it worse",
}


def headline(doc: DiagnosisDocument) -> tuple[str, str]:
    """The root cause's one-line headline and its detail (the engine's summary, cut at a word)."""
    rc = doc.root_cause
    title = class_title(rc.class_) if rc.class_ != "unknown" else ROOT_UNKNOWN
    summary = " ".join(rc.summary.split())
    head, _, detail = summary.partition(": ") if summary.startswith(title.split(" (")[0]) else ("", "", summary)
    return clip(head or title, MAX_HEADLINE), clip(detail, MAX_HEADLINE)


def _quote(text: str) -> str:
    return clip(text.split("\n")[0], MAX_QUOTE)


def _citation(c: DocCitation) -> Text:
    mark = (
        Text("✔ verified  ", style="green") if c.verified else Text(f"✘ not verified ({c.status})  ", style="bold red")
    )
    where = f"{c.file}:{c.line}" + (f"-{c.end_line}" if c.end_line and c.end_line != c.line else "")
    return Text.assemble(mark, (where, "cyan"), "\n    ", (_quote(c.text), "dim" if not c.verified else ""))


def _when(iso: str | None) -> str:
    t = from_iso(iso)
    return f"{t:%Y-%m-%d %H:%M:%S} UTC" if t else "unknown"


def _who(s: DocSymptom) -> str:
    if len(s.ranks) > 1:
        return f"on {len(s.ranks)} ranks"
    if s.ranks:
        return f"on rank {s.ranks[0]}"
    if s.nodes:
        return f"on {len(s.nodes)} nodes" if len(s.nodes) > 1 else f"on {s.nodes[0]}"
    return ""


def _span(s: DocSymptom) -> str:
    first, last = from_iso(s.first_time), from_iso(s.last_time)
    if first is None:
        return ""
    if last is None or f"{last:%H:%M:%S}" == f"{first:%H:%M:%S}":
        return f", {first:%H:%M:%S}"
    return f", {first:%H:%M:%S}–{last:%H:%M:%S}"


def _nothing(doc: DiagnosisDocument, console: Console) -> None:
    st = doc.stats
    files = f"{st.files} file" + ("s" if st.files != 1 else "")
    body = Text(f"CrashCart read {files}, {st.lines:,} lines, and {NOTHING_FOUND}")
    console.print(
        Panel(body, title=Text("No failure found", style="bold yellow"), title_align="left", border_style="yellow")
    )


def render(doc: DiagnosisDocument, console: Console) -> None:
    """The terminal view of ``doc`` on ``console``."""
    if nothing_found(doc):
        _nothing(doc, console)
    else:
        _root(doc, console)
        _groups(doc, console)
        _hypotheses(doc, console)
        if plain := reasons(doc.reasoning):
            console.print(Text("Why CrashCart chose it", style="bold"))
            for r in plain:
                console.print(Text("  · " + r, style="dim"))
    _coverage(doc, console)


def _root(doc: DiagnosisDocument, console: Console) -> None:
    rc = doc.root_cause
    known = rc.class_ not in NOT_A_FAILURE
    label = "Root cause: " if known else ""
    name = class_title(rc.class_) if rc.class_ != "unknown" else ROOT_UNKNOWN
    title = Text(label, style="bold") + Text(name, style="bold red" if known else "bold yellow")
    head, detail = headline(doc)
    lines: list[Text | Table] = [Text(head, style="bold")]
    if detail:
        lines.append(Text(detail))
    cul = rc.culprit
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold", no_wrap=True)
    facts.add_column()
    where = [f"node {cul.node}" if cul.node else "", f"rank {cul.rank}" if cul.rank is not None else ""]
    where.append(f"GPU {cul.gpu}" if cul.gpu else "")
    if known or any(where):
        none = "none: a policy stopped the whole job" if rc.class_ in WHOLE_JOB_STOPS else "not established"
        facts.add_row("culprit" if known else "where", ", ".join(x for x in where if x) or none)
    if known:
        when = _when(doc.impact.fault) if doc.impact.fault else "unknown (its line has no clock of its own)"
        if doc.impact.fault and rc.time_source != "line":
            when += " (its line has no clock: the time of the rank's last progress line just before it)"
        facts.add_row("time", when)
    facts.add_row("confidence", _confidence(rc.confidence))
    if words := severity_words(rc.severity):
        facts.add_row("severity", words)
    lines.append(facts)
    if rc.citations:
        lines.append(Text("Evidence", style="bold"))
        lines.extend(_citation(c) for c in rc.citations)
    console.print(Panel(Group(*lines), title=title, title_align="left", border_style="red" if known else "yellow"))


def _groups(doc: DiagnosisDocument, console: Console) -> None:
    for kind, heading in GROUPS.items():
        rows = [s for s in doc.symptoms if s.kind == kind]
        extra = [c for c in doc.contributing if c.kind == kind]
        if not rows and not extra:
            continue
        table = Table(title=heading, title_justify="left", title_style="bold", show_edge=False, pad_edge=False)
        table.add_column("lines", justify="right", no_wrap=True)
        table.add_column("what", ratio=3)
        table.add_column("first seen at", style="cyan", ratio=2, overflow="fold")
        for s in rows[:MAX_ROWS]:
            where = f"{s.citations[0].file}:{s.citations[0].line}" if s.citations else ""
            name = class_title(s.class_)
            if s.class_ == "unknown" and ": " in s.summary:  # the engine quotes the line's template
                name += " " + clip(s.summary.split(": ", 1)[1], 90)
            what = " ".join(x for x in (name, _who(s)) if x) + _span(s)
            table.add_row(str(s.count), what, where)
        if len(rows) > MAX_ROWS:
            table.add_row("", f"… and {len(rows) - MAX_ROWS} more (postmortem.md lists them)", "")
        for c in extra:
            where = f"{c.citations[0].file}:{c.citations[0].line}" if c.citations else ""
            what = f"{class_title(c.class_)}: {clip(titles_for_ids(plain_summary(c.summary)), 140)}"
            table.add_row("", what, where)
        console.print(table)


def _hypotheses(doc: DiagnosisDocument, console: Console) -> None:
    if not doc.hypotheses:
        return
    table = Table(title="Other possible causes, and why not", title_justify="left", title_style="bold", show_edge=False)
    table.add_column("cause", ratio=2)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("why not", ratio=3)
    for h in doc.hypotheses:
        table.add_row(class_title(h.class_), f"{h.score:.0f}", clip(titles_for_ids(h.why_not), 200))
    console.print(table)


def _coverage(doc: DiagnosisDocument, console: Console) -> None:
    st = doc.stats
    cov = (
        f"{st.files} files, {st.lines:,} lines, {st.bytes / 1e6:.1f} MB scanned in {st.seconds:.2f} s; "
        f"{st.findings} findings in {st.groups} groups"
    )
    console.print(Text(cov, style="dim"))
    models = llm_summary(st.llm)
    if models:
        console.print(Text(models, style="yellow" if st.llm.status != "ok" else "dim"))
    if st.citations_dropped:
        console.print(
            Text(
                f"{st.citations_dropped} citation(s) could not be verified and are not shown as verified",
                style="yellow",
            )
        )
    if st.skipped_files:
        shown = "; ".join(f"{s.path}: {s.reason}" for s in st.skipped_files[:5])
        more = f" and {len(st.skipped_files) - 5} more" if len(st.skipped_files) > 5 else ""
        console.print(Text(f"not read: {shown}{more}", style="yellow"))
    if st.unaligned_clocks:
        console.print(
            Text(
                "times not known, kept in file order: " + ", ".join(st.unaligned_clocks[:5]),
                style="yellow",
            )
        )
    console.print(Text(f"incident {doc.incident_id}", style="dim"))


def _confidence(c: float) -> str:
    return f"{confidence_word(c)} ({c:.2f})"
