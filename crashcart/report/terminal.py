"""Render a diagnosis for a terminal with rich: root cause, verified citations, symptoms, hypotheses.

Input: ``DiagnosisDocument``. Output: text on a rich Console (colour when it is a TTY, plain
otherwise). Pure apart from writing to the given console.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from crashcart.models import DiagnosisDocument, DocCitation
from crashcart.report.document import llm_summary

MAX_QUOTE = 220


def _quote(text: str) -> str:
    first = text.split("\n")[0]
    return first if len(first) <= MAX_QUOTE else first[: MAX_QUOTE - 1] + "…"


def _citation(c: DocCitation) -> Text:
    mark = Text("✔ verified  ", style="green") if c.verified else Text(f"✘ {c.status}  ", style="bold red")
    where = f"{c.file}:{c.line}" + (f"-{c.end_line}" if c.end_line and c.end_line != c.line else "")
    out = Text.assemble(mark, (where, "cyan"), "\n    ", (_quote(c.text), "dim" if not c.verified else ""))
    return out


def render(doc: DiagnosisDocument, console: Console) -> None:
    rc = doc.root_cause
    known = rc.class_ != "unknown"
    title = Text("Root cause: ", style="bold") + Text(rc.class_, style="bold red" if known else "bold yellow")
    lines: list[Text | Table] = [Text(rc.summary)]
    cul = rc.culprit
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    if known:
        facts.add_row(
            "culprit",
            ", ".join(
                x
                for x in (
                    f"node {cul.node}" if cul.node else "",
                    f"rank {cul.rank}" if cul.rank is not None else "",
                    f"GPU {cul.gpu}" if cul.gpu else "",
                )
                if x
            )
            or "not established",
        )
    facts.add_row("time", rc.time or "unknown")
    facts.add_row("confidence", _confidence(rc.confidence))
    if rc.severity:
        facts.add_row("severity", rc.severity)
    lines.append(facts)
    if rc.citations:
        lines.append(Text("Evidence", style="bold"))
        lines.extend(_citation(c) for c in rc.citations)
    console.print(Panel(Group(*lines), title=title, title_align="left", border_style="red" if known else "yellow"))

    if doc.contributing:
        console.print(Text("Contributing", style="bold"))
        for c in doc.contributing:
            console.print(Text("  • ") + Text(c.summary))
            for cit in c.citations[:1]:
                console.print(Text("    ") + _citation(cit))
    if doc.symptoms:
        table = Table(title="Symptoms explained", title_justify="left", show_edge=False, pad_edge=False)
        table.add_column("count", justify="right")
        table.add_column("what")
        table.add_column("first seen at", style="cyan")
        for s in doc.symptoms[:12]:
            where = f"{s.citations[0].file}:{s.citations[0].line}" if s.citations else ""
            table.add_row(str(s.count), escape(s.summary), where)
        if len(doc.symptoms) > 12:
            table.add_row("", f"… and {len(doc.symptoms) - 12} more", "")
        console.print(table)
    if doc.hypotheses:
        table = Table(title="Other hypotheses", title_justify="left", show_edge=False, pad_edge=False)
        table.add_column("class")
        table.add_column("score", justify="right")
        table.add_column("why not")
        for h in doc.hypotheses:
            table.add_row(h.class_, f"{h.score:.0f}", escape(h.why_not))
        console.print(table)
    if doc.reasoning:
        console.print(Text("Reasoning", style="bold"))
        for r in doc.reasoning:
            console.print(Text("  · " + r, style="dim"))
    st = doc.stats
    cov = (
        f"{st.files} files, {st.lines:,} lines, {st.bytes / 1e6:.1f} MB scanned in {st.seconds:.2f} s "
        f"({st.matcher}); {st.findings} findings in {st.groups} groups"
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
        more = f" (and {len(st.skipped_files) - 5} more)" if len(st.skipped_files) > 5 else ""
        console.print(Text(f"skipped {len(st.skipped_files)} file(s): {shown}{more}", style="yellow"))
    if st.unaligned_clocks:
        console.print(
            Text(
                "kept in file order (clock not aligned): " + ", ".join(st.unaligned_clocks[:5]),
                style="yellow",
            )
        )
    console.print(Text(f"incident {doc.incident_id}", style="dim"))


def _confidence(c: float) -> str:
    word = "high" if c >= 0.8 else "medium" if c >= 0.55 else "low"
    return f"{word} ({c:.2f})"
