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
