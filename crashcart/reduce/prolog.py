"""Reduce stage: the node a failed Slurm prolog/epilog ran on, when the slurmd line that holds the script's error
does not name it (issue 14, capability 3).

slurmd's SlurmdLogFile lines carry no host, but the same failure is reported with the node elsewhere: slurmd
req.c (17.02-25.11) sends the job's output "Prolog failure on node %s" and srun "Prolog hung on node %s";
slurmctld node_mgr.c "Prolog failed on node %s" / "Prolog or job env setup failure on node %s" and agent.c
"Prolog/Epilog failure on nodes %s" drain it. When those lines name exactly one node, the script's failure
takes that node, and the line that names it is cited beside it. Pure.
"""

from __future__ import annotations

from crashcart.models import Finding
from crashcart.reduce.causal import Candidate

CLASS = "slurm_node_failure"
SCRIPT_ERROR = "slurm.prolog_script_error"  # crashcart/scan/script_output.py


def _names_prolog_node(f: Finding) -> bool:
    return (
        f.class_id == CLASS
        and f.role != "context"
        and f.node is not None
        and f.signature != SCRIPT_ERROR
        and "rolog" in f.evidence[0].text
    )


def prolog_node(cands: list[Candidate], findings: list[Finding]) -> None:
    """A script failure without a node takes the one node the other prolog-failure lines name."""
    for c in cands:
        if c.class_id != CLASS or c.lead is not None:
            continue
        first = c.first
        if first.signature != SCRIPT_ERROR or first.node is not None:
            continue
        named = [f for f in findings if _names_prolog_node(f)]
        nodes = {f.node for f in named}
        if len(nodes) != 1:
            continue  # none, or several nodes failed theirs: the line alone does not say which
        node = nodes.pop()
        lead = first.model_copy(update={"node": node})
        c.findings = [lead if f is first else f for f in c.findings]
        c.findings += [f for f in named if all(f.id != g.id for g in c.findings)][:1]
        c.lead = lead
        c.reasons.append(f"the node {node} is named by another report of the same prolog failure")
