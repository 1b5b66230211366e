"""Locate: who is who and where each rank stopped.

``locate`` infers the job's topology (rank -> node -> GPU) from the logs and the optional manifest
(``topology``), attributes every finding to its rank, node and GPU, and finds each rank's last line
(``last``), and marks the progress bar a log ends on (``ends``). Input: the bundle and the scan result.
Output: topology, attributed findings, last lines.
"""

from __future__ import annotations

from crashcart.ingest.bundle import Bundle
from crashcart.locate.ends import mark_log_ends
from crashcart.locate.last import last_lines
from crashcart.locate.topology import attribute, declared_ranks, infer_topology, layout_ranks, local_to_global
from crashcart.models import Finding, RankLast, Topology
from crashcart.scan.run import ScanResult

__all__ = ["attribute", "infer_topology", "last_lines", "locate"]


def locate(bundle: Bundle, scanned: ScanResult) -> tuple[Topology, list[Finding], dict[int, RankLast]]:
    """Topology from the logs, findings attributed to rank/node/GPU, and each rank's last line.

    The scan's findings are this stage's: they are attributed in place (``attribute(owned=True)``), so
    ``scanned.findings`` holds them as attributed afterwards; what is read of them as scanned is read first."""
    topo = infer_topology(bundle.files, scanned.findings, bundle.manifest)
    folders = {p: r for r, (_, _, paths) in layout_ranks(bundle.files, scanned.findings).items() for p in paths}
    findings = attribute(scanned.findings, topo, bundle.files, owned=True)
    declared = {p: r for p, r in declared_ranks(bundle.files, findings).items() if p not in folders}
    if declared:  # a log whose process says which worker it is: its unprefixed lines are that rank's
        findings = [
            f.model_copy(update={"rank": declared[f.evidence[0].file]})
            if f.rank is None and f.evidence[0].file in declared
            else f
            for f in findings
        ]
    findings = mark_log_ends(bundle, findings)  # a bar a log ends on (locate/ends.py)
    return topo, findings, last_lines(bundle, scanned, findings, {**folders, **declared}, local_to_global(topo))
