"""Where a log ends: the progress bar a file's last line draws, marked ``_eof`` for the stalled-bar check
(``reduce/stalls.py``).

A job that stalls stops writing: its log ends on whatever it printed last. tqdm draws a bar when it is created
(``0/<total> [00:00<?, ?it/s]``) and again only on an update, so a loop whose first item never finished leaves
that first drawing as the log's last line. Whether a line is the last one is a fact about the file, not the line:
only this stage, which has the bundle, can say it. Input: the bundle and the findings. Output: the findings, the
last bar of each file that ends on it carrying ``_eof``. Reads at most ``TRAILING`` lines per file with a bar.
"""

from __future__ import annotations

from crashcart.ingest.bundle import Bundle
from crashcart.models import Finding

BAR = "progress.tqdm"
TRAILING = 20  # blank lines after the bar that still leave it the last thing written (a paste's trailing newlines)


def mark_log_ends(bundle: Bundle, findings: list[Finding]) -> list[Finding]:
    """``findings`` with ``_eof`` set on each file's last bar when nothing but blank lines follows it."""
    last: dict[str, Finding] = {}
    for f in findings:
        if f.signature != BAR:
            continue
        got = last.get(f.evidence[0].file)
        if got is None or f.evidence[0].line > got.evidence[0].line:
            last[f.evidence[0].file] = f
    ends = {f.id for path, f in last.items() if _ends_file(bundle, path, f.evidence[0].end_line or f.evidence[0].line)}
    if not ends:
        return findings
    return [f.model_copy(update={"fields": {**f.fields, "_eof": "1"}}) if f.id in ends else f for f in findings]


def _ends_file(bundle: Bundle, path: str, line: int) -> bool:
    """Nothing but blank lines follows ``line`` in ``path``."""
    total = bundle.line_count(path) or 0
    if total == line:
        return True
    if not line < total <= line + TRAILING:
        return False
    return all(not text.strip() for text in bundle.read_lines(path, line + 1, total))
