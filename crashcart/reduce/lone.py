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


# What reports a process killed by SIGKILL (signal 9, exit status 137 = 128 + 9): torch.multiprocessing.spawn's
# ProcessExitedException, torchrun's exitcode -9 / "Signal 9 (SIGKILL) received by PID", DeepSpeed's launcher
# ("exits with return code = -9"), srun's "task N: Killed", Horovod's status 137, pdsh, a shell's "Killed".
SIGKILL_SIGNS = frozenset(
    {
        "spawn.signal_sigkill",
        "torchrun.exitcode_sigkill",
        "deepspeed.exit_sigkill",
        "slurm.task_killed",
        "horovod.process_killed",
        "pdsh.remote_sigkill",
        "generic.killed",
        "mpi.process_killed",
    }
)
OOM_CLASS = "host_oom_kill"


def _sigkill(f: Finding) -> bool:
    if f.signature not in SIGKILL_SIGNS:
        return False
    return f.fields.get("signal", "9") == "9"  # Open MPI names the signal: 15 is a stop, not a kill


def _head_of(f: Finding, kills: list[Finding]) -> bool:
    """A generic ERROR-level line a few lines above a kill report in the same file: the report's own head (DeepSpeed
    logs "[ERROR] [launch.py:...:sigkill_handler] [<argv>] exits with return code = -9", and a long argv wraps)."""
    if not f.signature.startswith("generic."):
        return False
    ev = f.evidence[0]
    return any(k.evidence[0].file == ev.file and 0 < k.evidence[0].line - ev.line <= 8 for k in kills)


def unexplained_sigkill(findings: list[Finding], score: float) -> Candidate | None:
    """A worker killed by SIGKILL, and no line in the bundle says anything else failed: the kernel's (or a cgroup's)
    memory killer is the usual sender, so host memory is the likeliest cause. Offered as a guess (no line names the
    class: ``calibrate`` keeps it low) so that the runbook starts where it most often ends, at the node's OOM log.

    Not offered when any other failure or stop is reported (a scheduler's cancel or time limit, an error before the
    kill, a launcher's closing signal): those explain a SIGKILL better than a guess does.
    """
    kills = [f for f in findings if _sigkill(f)]
    if not kills:
        return None
    loud = [
        f
        for f in findings
        if f.role in {"root_candidate", "cascade"} and f.signature not in SIGKILL_SIGNS and f.class_id != "unknown"
    ]
    if loud or any(f.class_id == OOM_CLASS for f in findings):
        return None  # something else failed (or an OOM line exists and speaks for itself)
    if any(
        f.role == "root_candidate" and f.signature not in SIGKILL_SIGNS and not _head_of(f, kills) for f in findings
    ):
        return None  # an unclassified error line: not only a kill
    c = Candidate(OOM_CLASS, kills, [], score=score)
    c.lead = min(kills, key=lambda f: (f.time is None, f.time or 0, f.evidence[0].file, f.evidence[0].line))
    c.reasons.append(
        "a worker was killed by SIGKILL with no error of its own and nothing else failed; the kernel's memory killer "
        "is the usual sender (a guess: no OOM-killer line is in the bundle, check the node's kernel log)"
    )
    c.penalties.append("no OOM-killer line in the bundle: the scheduler or a person could also have sent SIGKILL")
    return c
