"""The work a memory killer stopped: its own error is the kill seen from the victim's side, not a second cause.

A process that the kernel or a cgroup OOM killer (``Killed process <pid>``, ``oom-kill:``, Slurm's
``oom_kill event``), Ray's memory monitor (``ray.exceptions.OutOfMemoryError``, the raylet's "Workers (tasks /
actors) killed due to memory pressure (OOM)" summary), systemd-oomd or earlyoom killed does not say why it
died: Ray raises ``RayActorError`` "The actor died unexpectedly" / ``WorkerCrashedError``, PyTorch's DataLoader
"worker (pid N) is killed by signal: Killed", a shell prints ``Killed``, a launcher exit -9 or 137. When a
memory killer's line is in the job (on the same node, or naming the same pid, or with no node to tell them
apart), such an error is its consequence (TAXONOMY class 20: a bare ``Killed`` is confirmed by the OOM line):
the error's candidate becomes a contributing factor and the memory killer the root. Pure.
"""

from __future__ import annotations

import re
from datetime import timedelta

from crashcart.models import Finding
from crashcart.reduce.causal import Candidate, own_time

OOM_CLASS = "host_oom_kill"
#: Classes the victim's own report of its death is scored as.
VICTIM_CLASSES = frozenset(
    {"python_exception_rank_crash", "native_crash_segfault_abort", "dataloader_worker_failure", "unknown"}
)
#: A process's report that it (or its worker) was killed or died without a reason of its own.
KILLED_WORK = frozenset(
    {
        "ray.worker_died",  # RayActorError / WorkerCrashedError / "A worker died or was killed"
        "python.worker_terminated",  # concurrent.futures' BrokenProcessPool, joblib/loky's TerminatedWorkerError
        "ray.node_died",  # GCS "marked dead ... missed too many heartbeats", the agent's "Raylet is terminated"
        "dataloader.worker_killed",  # "DataLoader worker (pid N) is killed by signal: Killed."
        "dataloader.worker_exited",  # "DataLoader worker (pid(s) N) exited unexpectedly"
        "generic.killed",  # a shell's "Killed", exit 137, "Signal 9 (SIGKILL) received by PID"
        "torchrun.exitcode_sigkill",
        "slurm.task_killed",
        "deepspeed.exit_sigkill",
        "spawn.signal_sigkill",
        "mpi.process_killed",  # "mpirun noticed that process rank R with PID P on node H exited on signal 9"
        "pdsh.remote_sigkill",  # "pdsh@h: node2: ssh exited with exit code 137"
        "horovod.process_killed",  # horovodrun's "Process N exit with status code 137."
        "mpi.daemon_lost",  # "ORTE|PRTE has lost communication with a remote daemon."
        "ray.worker_exit_code",  # "Worker exits with an exit code None."
    }
)
#: DataLoader's signal names that a memory killer sends (SIGKILL; earlyoom and systemd-oomd start with SIGTERM).
_KILL_SIGNALS = frozenset({"Killed", "Terminated"})
#: How long before the memory killer's line a victim may report its death: Ray's raylet prints its OOM summary
#: once per RAY_event_stats_print_interval_ms (60 s by default) about the kills "over the last time period".
EARLIER = timedelta(minutes=2)
#: After the kill: a launcher notices a dead worker within its monitor interval, a collective within its timeout.
LATER = timedelta(minutes=35)
VICTIM_MARGIN = 10.0  # the victim is explained, but only the bundle ties the two lines together
LINKED_MARGIN = 30.0  # the same pid or the same node: the kill and the death are one event
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


#: Fields that hold the address of the node a line says ran low on memory (catalogue ray.memory_monitor_kill): the
#: memory monitor's "Memory on the node (IP: %s", also later on the line ("at_ip"), the raylet summary's "at node
#: (ID: %s, IP: %s)". Not a RayTaskError's "ip=": over a Ray OutOfMemoryError it is the caller whose ray.get
#: failed, which may run on another node; over a 1.x RayOutOfMemoryError it is the node, but the error's own line
#: below names that node by host name, and one node under two names would read as two (no culprit).
PLACE_FIELDS = ("ip", "at_ip", "node_ip", "address", "node")


def place(f: Finding) -> str | None:
    """The node a memory killer's line names: the finding's node, or the address it names (Ray names nodes by IP:
    "Memory on the node (IP: 10.0.62.231, ...)", "at node (ID: ..., IP: 10.0.62.231)")."""
    if f.node:
        return f.node
    for key in PLACE_FIELDS:
        value = f.fields.get(key, "")
        if _IPV4.fullmatch(value) and not value.startswith("127."):  # a local Ray instance names no node
            return value
    return None


def _killed_work(f: Finding) -> bool:
    if f.signature not in KILLED_WORK:
        return False
    return not f.signature.startswith("dataloader.worker_killed") or f.fields.get("signal", "") in _KILL_SIGNALS


def _pids(f: Finding) -> set[str]:
    return {v for k in ("pid", "killed_pid") if (v := f.fields.get(k, "").strip()).isdigit()}


def _linked(victim: Finding, kills: list[Finding]) -> str | None:
    """Why the memory killer's lines explain the victim's death, or None when they do not."""
    pids = _pids(victim)
    for k in kills:
        if pids & _pids(k):
            return f"the memory killer's line names the same process (pid {min(pids & _pids(k))})"
    t = own_time(victim)
    for k in kills:
        kt = own_time(k)
        if t is not None and kt is not None and not (kt - EARLIER <= t <= kt + LATER):
            continue  # far apart in time: another event
        where, node = place(victim), place(k)
        if where and node:
            if where == node:
                return f"on the same node ({node})"
            continue
        return "in the same job (no node tells them apart)"
    return None


def killed_work(cands: list[Candidate]) -> None:
    """Demote the candidates that are only the victim's report of a memory kill below the memory killer, and say
    why on both (TAXONOMY §1 rules 5 and 8: a bare kill is unknown unless a kernel/cgroup/monitor line says OOM)."""
    oom = next((c for c in cands if c.class_id == OOM_CLASS), None)
    if oom is None:
        return
    kills = [f for f in oom.findings if f.role in {"root_candidate", "confirmation"}]
    if not kills:
        return
    for c in cands:
        if c is oom or c.class_id not in VICTIM_CLASSES or not c.findings:
            continue
        if not all(_killed_work(f) for f in c.findings):
            continue  # an error of the work's own (a KeyError, a segfault) is not explained by the kill
        why = {w for f in c.findings if (w := _linked(f, kills)) is not None}
        if len(why) == 0 or any(_linked(f, kills) is None for f in c.findings):
            continue
        reason = sorted(why)[0]
        loose = reason.startswith("in the same job")  # nothing ties the two lines together but the bundle
        c.score = min(c.score, oom.score - (VICTIM_MARGIN if loose else LINKED_MARGIN))
        c.penalties.append(f"explained by {OOM_CLASS}: the memory killer stopped this work ({reason})")
        if loose:
            oom.reasons.append(f"explains the killed work's own error ({c.first.summary}; {reason})")
        else:
            oom.reasons.append(f"corroborated by the killed work's own error ({c.first.summary}; {reason})")


def named_nodes(cands: list[Candidate]) -> None:
    """A memory killer's finding without a node takes the address its line names as its node (Ray's raylet and
    memory monitor name the node by IP; the culprit is the node the line names, and verify finds it there)."""
    for c in cands:
        if c.class_id != OOM_CLASS:
            continue
        c.findings = [_with_place(f) for f in c.findings]
        if c.lead is not None:
            c.lead = _with_place(c.lead)


def _with_place(f: Finding) -> Finding:
    where = place(f)
    return f if f.node or where is None else f.model_copy(update={"node": where})
