"""Reduce stage: a Slurm node listing is about the cluster, not the job (issue 14, Slurm node failures).

sinfo (src/sinfo/opts.c 17.02-25.11: partition rows, ``-N`` node rows, ``-R`` reasons) and ``scontrol show node``
(src/scontrol/info_node.c) list every node of a partition with its state and drain reason: a node drained for
maintenance, or by another job's prolog, is listed whether or not this job ran there. Such a line is this job's
node failure only when the node it lists is one of the job's nodes. A node-failure candidate made of listings
alone loses ``ELSEWHERE`` when the job's nodes are known and none is listed, and ``UNTIED`` (down to just above
the least score of a root) when the bundle does not tie a listed node to the job: a rank's own error, when there is
one, is then the better lead, and a listing alone still answers. Pure.
"""

from __future__ import annotations

import re

from crashcart.models import Finding, Topology
from crashcart.reduce.causal import Candidate

CLASS = "slurm_node_failure"
LISTINGS = frozenset(
    {
        "slurm.sinfo_state",
        "slurm.sinfo_long_state",
        "slurm.sinfo_node_state",
        "slurm.sinfo_reason",
        "slurm.node_state_bad",
        "slurm.node_down_reason",
    }
)
ELSEWHERE = 30.0  # the listed nodes are not the job's
UNTIED = 12.0  # nothing says the job ran on a listed node (a P1 line's edge over a P2 one, and the earliest bonus)
MAX_NAMES = 4096  # names expanded from one hostlist
_RECORD = re.compile(r"^(?:NodeName=|[ \t]+(?:Reason|State)=)")  # a node record's lines (scan/scontrol.py)
_RANGE = re.compile(r"^(?P<lo>\d+)(?:-(?P<hi>\d+))?$")


def listed_nodes(cands: list[Candidate], topo: Topology, floor: float) -> None:
    """Lower a node-failure candidate whose every line is a node listing that does not name one of the job's nodes;
    ``floor`` is the least score that answers."""
    job = set(topo.nodes)
    for c in cands:
        if c.class_id != CLASS or not c.findings or not all(is_listing(f) for f in c.findings):
            continue
        listed: set[str] = set()
        for f in c.findings:
            listed |= names(f)
        if job and listed & job:
            continue
        if job and listed:
            c.score -= ELSEWHERE
            c.penalties.append(f"the listed node(s) {', '.join(sorted(listed)[:4])} are not the job's")
        else:
            c.score = min(c.score, max(c.score - UNTIED, floor + 1))
            c.penalties.append("a node listing: nothing says the job ran on the listed node")


def is_listing(f: Finding) -> bool:
    """A line of sinfo or scontrol show node: a node's state, not a report about the job."""
    return f.signature in LISTINGS or bool(_RECORD.match(f.evidence[0].text))


def names(f: Finding) -> set[str]:
    """The nodes a listing line names: its node, and its Slurm hostlist expanded."""
    out = {f.node} if f.node else set()
    return out | expand(f.fields.get("nodes", ""))


def expand(hostlist: str) -> set[str]:
    """A Slurm hostlist ("dgx[01-04,07],gpu-node-017") as names; an unreadable part is left out."""
    out: set[str] = set()
    if hostlist.count("[") != hostlist.count("]"):
        return out
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", hostlist):
        m = re.fullmatch(r"(?P<pre>[^\[\]]*)\[(?P<body>[^\]]*)\](?P<post>[^\[\]]*)", part)
        if m is None:
            if "[" not in part and "]" not in part and part:
                out.add(part)
            continue
        for item in m["body"].split(","):
            r = _RANGE.match(item)
            if r is None:
                continue
            lo, hi = r["lo"], r["hi"] or r["lo"]
            if int(hi) - int(lo) > MAX_NAMES - len(out):
                return out
            out.update(f"{m['pre']}{n:0{len(lo)}d}{m['post']}" for n in range(int(lo), int(hi) + 1))
    return out
