"""Scan stage: the shell error of a Slurm prolog/epilog/health-check script that failed, from the lines around it.

slurmd logs a failed script with the script's captured output, which holds newlines, so the script's own error
lands on the lines after the failure line, and its path need not say "prolog" (issue 14, capabilities 2, 10):

- slurm 22.05-25.11 ``plugins/prep/script/prep_script_slurmd.c`` ``error("%s failed: rc:%u output:%s")`` (and
  "killed by signal"; ``slurmd.c`` health_check the same way): in SlurmdLogFile the output's later lines follow
  at column 0 with no clock of their own; ``journalctl`` indents a multi-line entry's continuation lines.
- journald keeps a daemon's stderr one entry per line, each with the ``<host> slurmd[<pid>]:`` header; slurm
  17.02-21.08 ``slurmd/common/run_script.c`` let the script inherit that stderr, so its error comes *before*
  ``error: <script>: exited with status 0x%04x`` and ``[job %u] prolog failed status=%d:%d`` (``req.c``).

The shell errors are bash's (error.c/execute_cmd.c 4.4-5.3: ``<script>: line <n>: <cmd>: command not found``,
``<path>: No such file or directory``, ``Permission denied``, ``<script>: <interp>: bad interpreter: ...``,
``cannot execute: required file not found``, ``bash: <path>: ...``), dash's (``<script>: <n>: <cmd>: not
found``, ``sh: 0: cannot open <f>: No such file``) and coreutils env's (``env: 'python3': No such file or
directory``). Such a line joins the failure line in one finding of ``slurm.prolog_script_error`` citing the span
from one to the other. A shell error with no Slurm script failure around it is left alone. Pure apart from
reading bundle lines.
"""

from __future__ import annotations

import re

from crashcart.catalogue import Catalogue
from crashcart.ingest.bundle import Bundle
from crashcart.models import BundleFile, Evidence, Finding
from crashcart.scan.wrapped import Maker
from crashcart.text.prefix import looks_like_host

HEADS = frozenset({"slurm.prolog_epilog_failed", "slurm.prolog_failed"})  # slurmd's lines for a failed script
SIGNATURE = "slurm.prolog_script_error"
ALSO_CITED = frozenset({"slurm.prolog_script_not_found"})  # a shell error the stitched finding now cites
AFTER = 8  # lines of captured output read after the failure line
BEFORE = 4  # journald lines of the same daemon read before it (the inherited stderr of 17.02-21.08)
_BUDGET = 16  # failure lines per file looked around

_SYSLOG = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\S+) (?P<host>[A-Za-z0-9][\w.-]*) "
    r"(?P<prog>[\w./-]+\[\d+\]): (?P<body>.*)$"
)
_RECORD = re.compile(r"^\s*(?:\[?\d{4}-\d\d-\d\d[ T]\d\d:|\[?[A-Z][a-z]{2} [ \d]?\d \d\d:\d\d|[IWEF]\d{4} \d\d:)")
_REASONS = (
    r"command not found|not found|No such file or directory|No such file|Permission denied|"
    r"cannot execute: required file not found|cannot execute binary file(?:: .*)?|Exec format error"
)
SHELL_ERROR = re.compile(
    r"^(?:"
    rf"(?P<script>\S+?): (?:line )?\d+: (?:exec: )?(?P<command>[^:]+): (?P<reason>{_REASONS})"  # bash/dash
    rf"|(?:/bin/|/usr/bin/)?(?:ba|da)?sh: (?:line \d+: |\d+: )?(?:cannot open |Can.t open )?(?P<path>\S+?): "
    rf"(?P<why>{_REASONS})"  # the shell itself cannot open or run the file
    r"|(?P<bad>\S+?): (?P<interp>/\S+): bad interpreter: (?P<interp_reason>.+)"
    r"|(?:/usr/bin/|/bin/)?env: \W?(?P<program>[^:]+?)\W?: (?P<env_reason>No such file or directory)"
    rf"|(?P<file>/\S+?): (?P<file_reason>cannot execute: required file not found|{_REASONS})"
    r")\s*$"
)


def shell_error(body: str) -> str | None:
    """The shell's error on one line of a script's output (bash, dash, env), or None."""
    text = body.strip()
    return text if SHELL_ERROR.match(text) else None


def stitch(cat: Catalogue, bundle: Bundle, bf: BundleFile, findings: list[Finding], make: Maker) -> list[Finding]:
    """``findings`` with each Slurm script failure that has its shell error nearby replaced by one finding
    citing both lines; a shell-error finding inside that span is cited by it and goes."""
    heads = [f for f in findings if f.signature in HEADS and f.evidence[0].end_line is None][:_BUDGET]
    if not heads:
        return findings
    sig = cat.index[SIGNATURE]
    claimed: set[int] = set()  # a shell line explains one failure line, the first to reach it
    replaced: dict[str, Finding] = {}
    for f in heads:
        got = _nearby(bundle, bf, f.evidence[0].line, claimed)
        if got is None:
            continue
        at, error, start, lines = got
        claimed.add(at)
        head = f.evidence[0]
        first, last = min(at, head.line), max(at, head.line)
        span = lines[first - start : last - start + 1]
        ev = Evidence(id="", file=bf.path, line=first, end_line=last, text="\n".join(span))
        script = _kind(head.text.split(" output:", 1)[0])
        fields = {**f.fields, "script": script, "script_error": error[:300], "_script_error_line": str(at)}
        made = make(sig, head.text, [ev], fields)
        host = _SYSLOG.match(head.text)
        if host is not None and made.node is None and looks_like_host(host["host"]):
            made = made.model_copy(update={"node": host["host"]})  # the journal's header names the daemon's node
        replaced[f.id] = made
    if not replaced:
        return findings
    spans = [(m.evidence[0].line, m.evidence[0].end_line or m.evidence[0].line) for m in replaced.values()]
    out: list[Finding] = []
    for f in findings:
        if f.id in replaced:
            out.append(replaced[f.id])
        elif not (f.signature in ALSO_CITED and any(a <= f.evidence[0].line <= b for a, b in spans)):
            out.append(f)
    return out


def _kind(text: str) -> str:
    """Which script the failure line names (run_script.c's "exited with status" names only the script's path)."""
    for word, kind in (("health_check", "health_check"), ("pilog", "epilog"), ("rolog", "prolog")):
        if word in text:
            return kind
    return "prolog, epilog or health-check"


def _nearby(bundle: Bundle, bf: BundleFile, line: int, claimed: set[int]) -> tuple[int, str, int, list[str]] | None:
    """(line, shell error, first line read, lines read) of the shell error that belongs to the failure line."""
    start = max(1, line - BEFORE)
    lines = bundle.read_lines(bf.path, start, line + AFTER)
    if len(lines) <= line - start:
        return None
    head = lines[line - start]
    if shell_error(head.rsplit("output:", 1)[-1]) is not None:
        return None  # the output's first line says it: the line's own signature cites it
    key = _SYSLOG.match(head)
    if key is not None:  # journald: the entry's indented lines, then the daemon's own lines after and before it
        for at in range(line + 1, min(line + AFTER, start + len(lines) - 1) + 1):
            text = lines[at - start]
            if not text[:1].isspace() or _RECORD.match(text):
                break
            if at not in claimed and (error := shell_error(text)) is not None:
                return at, error, start, lines
        want = (key["host"], key["prog"])
        order = [*range(line + 1, line + AFTER + 1), *range(line - 1, start - 1, -1)]
        for at in order:
            if at in claimed or not 0 <= at - start < len(lines):
                continue
            m = _SYSLOG.match(lines[at - start])
            if m is None:
                continue
            if (m["host"], m["prog"]) == want and (error := shell_error(m["body"])) is not None:
                return at, error, start, lines
        return None
    for at in range(line + 1, min(line + AFTER, start + len(lines) - 1) + 1):  # the output's continuation lines
        text = lines[at - start]
        if _RECORD.match(text):
            return None  # the next record: the output ended
        if at not in claimed and (error := shell_error(text)) is not None:
            return at, error, start, lines
    return None
