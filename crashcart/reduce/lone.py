"""Last-resort answer: nothing failed loudly, but the kernel recorded a hardware event.

The Xid catalogue rates some events informational (Xid 63: a row marked for remapping, "reset the GPU
to activate"; Xid 92: a high single-bit ECC rate): on their own they are context, and next to a crash
they are no cause. When they are all a bundle shows (a monitoring alert, a node's kernel log cut to the
event), an on-call engineer still wants the GPU named: the bundle says that GPU's memory is degrading and
the node was worth draining. So the event is offered as a hardware root with a penalty that keeps the
confidence at medium, never high, and it is never preferred over any line that reports a failure.
"""

from __future__ import annotations

from crashcart.catalogue import load_catalogue
from crashcart.locate.topology import _LOOPBACK as LOOPBACK  # torchrun and NCCL print these for "this host"
from crashcart.models import Finding
from crashcart.reduce.causal import Candidate


def lone_hardware_event(findings: list[Finding], score: float) -> Candidate | None:
    """The kernel's informational hardware events (context-role Xids of a hardware class), when no finding
    is a root candidate or a cascade: one candidate for the first event's class, on its GPU."""
    if any(f.role in {"root_candidate", "cascade"} for f in findings):
        return None
    classes = load_catalogue().classes
    events = [
        f
        for f in findings
        if f.signature == "kernel.xid"
        and f.role == "context"
        and (info := classes.get(f.class_id)) is not None
        and info.hardware
    ]
    if not events:
        return None
    first = min(events, key=lambda f: (f.time is None, f.time or 0, f.evidence[0].file, f.evidence[0].line))
    same = [f for f in events if f.class_id == first.class_id and f.fields.get("pci") == first.fields.get("pci")]
    c = Candidate(first.class_id, same, [], score=score)
    c.lead = first
    where = f" on {first.node}" if first.node else ""
    c.reasons.append(
        f"the only fault the bundle shows is Xid {first.fields.get('xid', '?')} on GPU "
        f"{first.fields.get('pci', '?')}{where}; no line reports a failure"
    )
    c.penalties.append("the Xid catalogue rates this event informational: it did not by itself stop a job")
    return c


_BLOCK_GAP = 2  # torchrun prints "rank : R (local_rank: L)" and then "exitcode : N (pid: P)" on the next line


def silent_exit(findings: list[Finding]) -> Candidate | None:
    """torchrun's failure summary lists one worker that exited with its own non-zero status (``exitcode : 3``, not a
    signal's negative code nor 128 + signal) and that printed no error, while every error in the bundle is a peer's
    lost connection: that worker stopped the job and nothing says why (TAXONOMY 29: the summary is evidence of who,
    not of why). The candidate carries the summary's ``rank :`` and ``exitcode :`` lines with the worker's rank, for
    an ``unknown`` answer that still names where to look. "Root Cause (first observed failure)" is not trusted for
    this: it is the first error file, often a peer's (rule 6)."""
    ranks = {(f.evidence[0].file, f.evidence[0].line): f for f in findings if f.signature == "torchrun.summary_rank"}
    silent: list[tuple[Finding, Finding, int]] = []
    for f in findings:
        code = f.fields.get("exitcode", "")
        if f.signature != "torchrun.summary_exitcode" or not code.isdigit() or not 0 < int(code) < 128:
            continue
        file, line = f.evidence[0].file, f.evidence[0].line
        head = next((ranks[(file, line - d)] for d in range(1, _BLOCK_GAP + 1) if (file, line - d) in ranks), None)
        if head is not None and head.fields.get("rank", "").isdigit():
            silent.append((head, f, int(head.fields["rank"])))
    spoke = {
        f.rank for f in findings if f.role in {"root_candidate", "cascade"} and not f.signature.startswith("torchrun.")
    }
    silent = [s for s in silent if s[2] not in spoke]  # a worker whose exit follows its own error line is not silent
    if len({r for _, _, r in silent}) != 1:
        return None
    rank = silent[0][2]
    if any(f.role == "root_candidate" and not f.signature.startswith(("generic.", "torchrun.")) for f in findings):
        return None  # an error line that says what failed speaks louder than an exit status
    head, code_line, _ = silent[0]
    place: dict[str, object] = {"rank": rank}
    if code_line.node in LOOPBACK or head.node in LOOPBACK:
        place["node"] = None  # torchrun's "host : localhost" names no node
    cited = [code_line.model_copy(update=place), head.model_copy(update=place)]
    c = Candidate("unknown", cited, [], score=0.0)
    c.lead = cited[0]
    c.reasons.append(
        f"torchrun's summary: rank {rank} exited with status {code_line.fields['exitcode']} and printed no error; "
        "the other ranks' errors are their lost connections to it"
    )
    return c
