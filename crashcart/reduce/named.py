"""Lines that name the rank that did not arrive: the TSL coordination service's barrier timeout with its list of
pending tasks, and its heartbeat report of unhealthy tasks (TAXONOMY class 5). Pure.
"""

from __future__ import annotations

from collections import defaultdict

from crashcart.models import Finding
from crashcart.reduce.causal import Candidate
from crashcart.reduce.hangs import HANG, as_root

BARRIER_LISTED = 60.0  # a coordination barrier that names every task that did not reach it
HEARTBEAT_LISTED = 50.0  # ... the tasks that stopped sending heartbeats (dead, hung, or a busy host)
_TASKS_BELOW = 64  # task-name lines read below a barrier timeout
MAX_NAMED = 2  # more tasks than this missing: a group that stopped, no single culprit


def barrier_named(findings: list[Finding]) -> Candidate | None:
    """The task a coordination-service message lists as not arrived or gone, when the list is whole and short.

    tsl coordination_service.cc (2023+) prints, for a barrier, "# of tasks that reached the barrier: <n>/<N>."
    then "Some timed out task names:" and one "/job:<j>/replica:<r>/task:<t>" a line (the tasks still pending):
    the list is whole when it holds N - n names. For a heartbeat timeout it prints "The following tasks are
    unhealthy (stopped sending heartbeats):" and the tasks a line: they died or hung, though a busy host can miss
    a heartbeat too (inferred: capped). The task index is the process index (jax.distributed's process_id, the
    worker index of MultiWorkerMirroredStrategy)."""
    by_file: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        if f.signature in {"tsl.barrier_task", "tsl.barrier_arrived"}:
            by_file[f.evidence[0].file].append(f)
    heads = sorted(
        (f for f in findings if f.signature in {"tsl.barrier_timeout", "tsl.unhealthy_tasks"}),
        key=lambda f: (f.signature != "tsl.barrier_timeout", f.evidence[0].file, f.evidence[0].line),
    )
    for head in heads:
        ev = head.evidence[0]
        barrier = head.signature == "tsl.barrier_timeout"
        below = sorted(
            (f for f in by_file.get(ev.file, []) if ev.line < f.evidence[0].line <= ev.line + _TASKS_BELOW),
            key=lambda f: f.evidence[0].line,
        )
        count = next((f for f in below if f.signature == "tsl.barrier_arrived"), None)
        tasks = [f for f in below if f.signature == "tsl.barrier_task"]
        if (barrier and count is None) or not tasks or (not barrier and tasks[0].evidence[0].line > ev.line + 1):
            continue
        run = tasks[:1]  # one list: the consecutive lines from the first task name
        for t in tasks[1:]:
            if t.evidence[0].line != run[-1].evidence[0].line + 1:
                break
            run.append(t)
        tasks = run
        named = sorted({int(t.fields["task"]) for t in tasks})
        if count is not None and barrier:
            whole = int(count.fields["total"]) - int(count.fields["arrived"]) == len(named)
        else:
            whole = True  # the heartbeat message lists every unhealthy task
        if not whole or not 0 < len(named) <= MAX_NAMED:
            continue  # "Some" names: a partial list says who else is late, not who alone is
        what = f"did not reach barrier {head.fields.get('barrier', '')}" if barrier else "stopped sending heartbeats"
        chosen = [
            as_root(t, HANG, f"task {t.fields['task']} {what}").model_copy(update={"rank": int(t.fields["task"])})
            for t in tasks
        ]
        c = Candidate(HANG, [*chosen, head, *([count] if barrier and count is not None else [])], [])
        c.lead = chosen[0]
        listed = ", ".join(map(str, named))
        if barrier and count is not None:
            c.score = BARRIER_LISTED
            c.reasons.append(
                f"the coordination service's barrier timed out with {count.fields['arrived']}/"
                f"{count.fields['total']} tasks arrived and names the missing: task {listed}"
            )
        else:
            c.score = HEARTBEAT_LISTED
            c.reasons.append(f"the coordination service names the tasks that stopped sending heartbeats: {listed}")
            c.penalties.append(
                "inferred: a missed heartbeat says the task died or hung, or only that its host was busy"
            )
        return c
    return None
