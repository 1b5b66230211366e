"""Scan stage: the node a ``scontrol show node`` record's drain reason belongs to (issue 14, capability 3).

scontrol (src/scontrol/info_node.c, slurm_print_node_info_msg / slurm_sprint_node_table, 17.02-25.11) prints one
record per node: ``NodeName=<name> Arch=...`` at column 0, then indented ``   State=...``, ``   Reason=<reason>
[<user>@<time>]`` lines (``-o`` puts the whole record on one line). A failure read from an indented line of the
record (the drain reason, the state) names its node only on the record's first line, so the finding cites the
record from its ``NodeName=`` line down to its own line, and takes that node. Pure apart from reading bundle lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from crashcart.ingest.bundle import Bundle
from crashcart.models import BundleFile, Evidence, Finding

CLASS = "slurm_node_failure"
RECORD_LINES = 40  # lines of one node record (25.11 prints about 20)
_INDENTED = re.compile(r"^\s+(?:Reason|State)=")
_NODE_NAME = re.compile(r"^NodeName=(?P<node>[\w.-]+)\s")


def record_nodes(
    bundle: Bundle, bf: BundleFile, findings: list[Finding], evidence_id: Callable[[], str]
) -> list[Finding]:
    """``findings`` with each indented node-record failure citing its record and naming its node."""
    out: list[Finding] = []
    for f in findings:
        ev = f.evidence[0]
        if f.class_id != CLASS or f.node is not None or ev.end_line is not None or not _INDENTED.match(ev.text):
            out.append(f)
            continue
        start = max(1, ev.line - RECORD_LINES)
        lines = bundle.read_lines(bf.path, start, ev.line)
        head = None
        for at in range(len(lines) - 2, -1, -1):
            if not lines[at][:1].isspace():
                head = at  # the record's first line (or another record's last: not a node record)
                break
        m = _NODE_NAME.match(lines[head]) if head is not None else None
        if m is None or len(lines) != ev.line - start + 1:
            out.append(f)
            continue
        assert head is not None
        span = Evidence(
            id=evidence_id(), file=bf.path, line=start + head, end_line=ev.line, text="\n".join(lines[head:])
        )
        out.append(f.model_copy(update={"node": m["node"], "evidence": [span, *f.evidence]}))
    return out
