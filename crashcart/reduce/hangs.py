"""Hung and slow ranks that no error line names (TAXONOMY classes 5 and 35; §1 rule 2, "which rank did not arrive").

Input: findings (with the progress facts of the ``progress.*`` signatures), topology, each rank's last line.
Output: scored ``Candidate``s for the offline reduce, and the penalties they imply for other candidates:

- *long work*: the others wait in a collective while one rank works outside any: a progress bar of non-collective
  work (tokenization, a datasets map, evaluation, checkpoint loading) whose elapsed time reaches the collective's
  timeout, or an announced step (an index build, a JIT extension build, tokenization) that the silent rank printed
  last -> ``rank_hang_or_missing_rank`` citing that line (the bar and step readers live in ``bars``);
- *silent rank*: the others time out in a collective and one rank printed neither a timeout nor an error ->
  ``rank_hang_or_missing_rank`` citing its last line;
- *stack dumps*: py-spy dumps where every process but one waits in a collective -> the odd process; a silent rank's
  own dump (``hang.stack.where``) says where it is stuck;
- *throughput drop* and *slow rank*: in ``throughput`` (re-exported here);
- *named*: a line that lists the ranks that did not arrive (a coordination-service barrier): in ``named``.

Times inherited from far above a line are not trusted (``trusted_times``). Pure.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from crashcart.models import Evidence, Finding, RankLast, Topology
from crashcart.reduce.bars import ANNOUNCING, STEP_SIGNATURES, bar_step, long_bars, stepped_after, unowned_bar, work_bar
from crashcart.reduce.bars import bar_of as bar_of  # re-exported: the bar readers live there
from crashcart.reduce.bars import is_work as is_work
from crashcart.reduce.causal import Candidate
from crashcart.reduce.throughput import step_up as step_up  # re-exported: the slow-rank checks live there
from crashcart.reduce.throughput import throughput_drop as throughput_drop
from crashcart.text import clock

# Every backend's "a collective did not complete" (NCCL's watchdog, gloo, TensorFlow collectives and the
# coordination service's barriers, ElasticDL's allreduce retry: the signatures of that class).
WAIT_CLASSES = frozenset({"nccl_watchdog_timeout"})
# What a waiting rank's own error says (the exception lines that carry a collective timeout, whatever their class):
# c10d ProcessGroupNCCL "Watchdog caught collective operation timeout", gloo unbound_buffer.cc "Timed out waiting
# <ms>ms for recv|send operation to complete", ProcessGroupGloo::monitoredBarrier "failed to pass monitoredBarrier";
# and the c10d store's waits for a key another rank sets: TCPStore.cpp doWait "wait timeout after <ms>ms, keys:"
# (2.3+), ProcessGroupNCCL's "retrieving ncclUniqueId from [0] via c10d key-value store ... got error: Socket
# Timeout" ("retreiving" to 2.0, "Timeout waiting for key: <k> after <ms> ms" from other stores; rank 0 had not
# created the communicator), distributed_c10d.py _store_based_barrier "Timed out initializing process group in
# store based barrier".
_WAIT_TEXT = re.compile(
    r"Watchdog caught collective operation timeout|Timed out waiting \d+ms for (?:recv|send) operation"
    r"|failed to pass monitoredBarrier|Timeout at NCCL work|\bwait timeout after \d+ms, keys: "
    r"|retr(?:ie|ei)ving ncclUniqueId from \[\d+\] via c10d key-value store.*got error: "
    r"(?:Socket Timeout|wait timeout|Timeout waiting for key)"
    r"|Timed out initializing process group in store based barrier"
)
_GLOO_MS = re.compile(r"Timed out waiting (\d+)ms|Timeout waiting for key: \S+ after (\d+) ms")
_BARRIER_TIMEOUT = re.compile(r"timeout=(?:(\d+) days?, )?(\d+):(\d\d):(\d\d)\)")  # str(timedelta)
HANG = "rank_hang_or_missing_rank"

BASE_SILENT = 44.0  # a rank that printed nothing while the others timed out
BASE_WORK = 52.0  # ... and a line that says what it was doing
UNOWNED_DISCOUNT = 8.0  # ... but no line names the rank that was doing it
WAIT_PENALTY = 30.0  # a candidate that is only the waiting ranks' own timeout
SHORT_TIMEOUT_MS = 300_000  # below both PyTorch defaults (10 and 30 minutes): slow legitimate work trips it
# PyTorch's default process-group timeouts when no line states one: 10 min for NCCL (torch >= 2.2,
# distributed/constants.py default_pg_nccl_timeout), 30 min otherwise (default_pg_timeout); the shorter one decides
# whether a bar "reaches" it.
DEFAULT_TIMEOUT_MS = 600_000


# ---------------------------------------------------------------------------------------------
# Clocks


def trusted_times(findings: list[Finding], limit: timedelta = clock.INHERIT_LIMIT) -> list[Finding]:
    """The findings with inherited times that the file's next own clock contradicts set to None.

    A line without a clock takes the time of an earlier line (the scan's inheritance); when the next line of the
    same file that has a clock of its own is much later (``clock.inherited_is_stale``), the earlier line was a
    launch banner or the like, and the inherited time says nothing about when this line was written."""
    own: dict[str, list[tuple[int, datetime]]] = defaultdict(list)
    for f in findings:
        if f.time is not None and "_time" not in f.fields:
            own[f.evidence[0].file].append((f.evidence[0].line, f.time))
    for lines in own.values():
        lines.sort()
    out: list[Finding] = []
    for f in findings:
        if f.time is None or "_time" not in f.fields:
            out.append(f)
            continue
        line = f.evidence[0].line
        nxt = next((t for n, t in own.get(f.evidence[0].file, []) if n > line), None)
        if clock.inherited_is_stale(f.time, nxt, limit):
            why = "untrusted: inherited from far above"
            f = f.model_copy(update={"time": None, "fields": {**f.fields, "_time": why}})
        out.append(f)
    return out


# ---------------------------------------------------------------------------------------------
# Who waits, who does not


def waits(findings: list[Finding]) -> list[Finding]:
    """Findings that say "my collective did not complete" (any backend), of any class or role."""
    return [
        f
        for f in findings
        if f.role != "context" and (f.class_id in WAIT_CLASSES or _WAIT_TEXT.search(f.evidence[0].text) is not None)
    ]


def timeout_ms(waiting: list[Finding]) -> int | None:
    """The collective timeout the waiting ranks report (the smallest stated; ``ran for`` when none is)."""
    stated: list[int] = []
    ran: list[int] = []
    for f in waiting:
        for key, into in (("timeout_ms", stated), ("ran_ms", ran)):
            v = f.fields.get(key, "")
            if v.isdigit() and int(v) > 0:
                into.append(int(v))
        m = _GLOO_MS.search(f.evidence[0].text)
        if m is not None:
            stated.append(int(m.group(1) or m.group(2)))
        b = _BARRIER_TIMEOUT.search(f.evidence[0].text)
        if b is not None:
            d, h, mi, se = (int(x or 0) for x in b.groups())
            stated.append((((d * 24 + h) * 60 + mi) * 60 + se) * 1000)
    if stated and ran and min(stated) * 100 < min(ran):
        return min(ran)  # a Timeout(ms) a hundred times shorter than "ran for" is a unit slip, not the timeout
    return min(stated) if stated else min(ran) if ran else None


def silent_ranks(
    findings: list[Finding], topo: Topology, waiting: list[Finding], last: dict[int, RankLast] | None = None
) -> set[int]:
    """Ranks that printed neither a timeout nor an error of their own while at least half the others timed out.

    With clocks, an error a rank printed before the timed-out collective began and carried on after (its log goes
    on past it) does not count: it says nothing of why the rank did not arrive later."""
    waited = {f.rank for f in waiting if f.rank is not None}
    if not waited:
        return set()
    known = set(topo.ranks) | {f.rank for f in findings if f.rank is not None}
    world = topo.world_size or (max(known) + 1 if known else 0)
    if world < 2 or len(waited) * 2 < world:
        return set()
    start = _collective_start(waiting)
    loud = {
        f.rank
        for f in findings
        if f.rank is not None
        and (f.role in {"root_candidate", "cascade", "confirmation"} or _own_teardown(f))
        and not _carried_on(f, start, last or {})
    }
    silent = {r for r in range(world) if r not in waited and r not in loud}
    return silent if len(silent) == 1 or _one_node(silent, topo) else set()  # several: only as one whole node


def _one_node(ranks: set[int], topo: Topology) -> bool:
    """The ranks are exactly the ranks of one node of a multi-node job (a node that hung, not a scattered group)."""
    nodes = {topo.ranks[r].node if r in topo.ranks else None for r in ranks}
    if len(nodes) != 1 or None in nodes or len({i.node for i in topo.ranks.values()} - {None}) < 2:
        return False
    node = nodes.pop()
    return ranks == {r for r, i in topo.ranks.items() if i.node == node}


CARRIED_ON = timedelta(minutes=2)  # a rank whose log goes on this long after an error was not stopped by it


def _collective_start(waiting: list[Finding]) -> datetime | None:
    """When the timed-out collective began: the first timeout's own time less the timeout (None without both)."""
    timed = [f.time for f in waiting if f.time is not None and "_time" not in f.fields]
    limit = timeout_ms(waiting)
    return min(timed) - timedelta(milliseconds=limit) if timed and limit else None


def _carried_on(f: Finding, start: datetime | None, last: dict[int, RankLast]) -> bool:
    rl = last.get(f.rank) if f.rank is not None else None
    if start is None or f.time is None or "_time" in f.fields or rl is None or rl.time is None:
        return False
    return f.time < start and rl.time - f.time > CARRIED_ON


def _own_teardown(f: Finding) -> bool:
    """A rank's own shutdown lines (a traceback as it was stopped), not a launcher's report about it."""
    return f.role == "teardown" and not f.signature.startswith(("torchrun.", "slurm.", "srun.", "deepspeed."))


# ---------------------------------------------------------------------------------------------
# Long work


def announced(findings: list[Finding], rank: int) -> Finding | None:
    """The step the rank announced last, when no training step and no "finished" line of that rank follows it."""
    mine = [f for f in findings if f.rank == rank and f.role == "context"]
    steps = [f for f in mine if f.signature in ANNOUNCING]
    if not steps:
        return None
    last = max(steps, key=lambda f: (f.evidence[0].file, f.evidence[0].line))
    later = [
        f
        for f in mine
        if (f.signature in STEP_SIGNATURES or f.signature == "progress.step_done")
        and f.evidence[0].file == last.evidence[0].file
        and f.evidence[0].line > last.evidence[0].line
    ]
    return None if later else last


def unowned_announcement(findings: list[Finding], waiting: list[Finding]) -> Finding | None:
    """In a log where the waiting ranks' timeouts follow it, the last long step announced by a line that names no
    rank, with no training step or "finished" line of no rank between it and the first timeout (a pasted log
    where the late rank's own lines carry no prefix)."""
    first_wait: dict[str, int] = {}
    for f in waiting:
        ev = f.evidence[0]
        first_wait[ev.file] = min(first_wait.get(ev.file, ev.line), ev.line)
    best: Finding | None = None
    for f in findings:
        ev = f.evidence[0]
        if f.signature not in ANNOUNCING or f.rank is not None or ev.line >= first_wait.get(ev.file, 0):
            continue
        if best is None or (ev.file, ev.line) > (best.evidence[0].file, best.evidence[0].line):
            best = f
    if best is None:
        return None
    return None if stepped_after(best.evidence[0], findings, first_wait) else best


def last_line_finding(rank: int, rl: RankLast, topo: Topology, class_id: str = HANG) -> Finding | None:
    """A rank's last line as a root candidate of ``class_id`` (where a hung or missing rank stopped)."""
    if rl.evidence is None:
        return None
    return Finding(
        id=f"last-{rank}",
        class_id=class_id,
        signature="reduce.last_line",
        role="root_candidate",
        severity="P1",
        summary=f"rank {rank} wrote its last line here",
        time=rl.time,
        rank=rank,
        node=topo.ranks[rank].node if rank in topo.ranks else None,
        evidence=[rl.evidence],
    )


def as_root(f: Finding, cls: str, summary: str) -> Finding:
    return f.model_copy(update={"class_id": cls, "role": "root_candidate", "severity": "P1", "summary": summary})


def hang_candidate(findings: list[Finding], topo: Topology, last: dict[int, RankLast]) -> Candidate | None:
    """Long non-collective work or a silent rank while the others wait in a collective (None when neither shows)."""
    waiting = waits(findings)
    if not waiting:
        return None
    limit = timeout_ms(waiting)
    silent = silent_ranks(findings, topo, waiting, last)
    chosen: list[Finding] = []
    reasons: list[str] = []
    idle: list[int] = []  # ranks whose last word is a dispatcher's "no more tasks": inferred, not stated
    unfinished: list[int | None] = []  # ranks (None: unnamed) whose log stops in a work bar short of the timeout
    unprefixed: list[int] = []  # ranks known only from a line that names them: their other lines are not known
    work = False
    for f in long_bars(findings, waiting, limit or DEFAULT_TIMEOUT_MS)[:1]:
        bar = bar_of(f.evidence[0].text)
        assert bar is not None
        who = f"rank {f.rank}" if f.rank is not None else "a rank"
        what = bar[0] or bar_step(f, findings)
        summary = f"{who} was still busy with “{what[:60]}” after {bar[1] / 60:.1f} min, outside any collective"
        chosen.append(as_root(f, HANG, summary))
        if limit is not None:
            reasons.append(f"{summary}; the others waited in a collective with a {limit / 1000:.0f} s timeout")
        else:
            reasons.append(f"{summary}; the others timed out in a collective (PyTorch's default timeout: 10 min)")
        work = True
    first_wait = min((f.time for f in waiting if f.time is not None), default=None)
    for r in sorted(silent):
        rl = last.get(r)
        if rl is None or rl.evidence is None:
            named = announced(findings, r)  # its lines carry no prefix, but one names it ("... on rank 2")
            if named is None:
                continue  # no log of this rank in the bundle: missing from the bundle, not silent
            rl = RankLast(evidence=named.evidence[0], time=named.time if "_time" not in named.fields else None)
            unprefixed.append(r)
        ev = rl.evidence
        assert ev is not None
        if rl.time is not None and first_wait is not None and rl.time > first_wait:
            continue  # it kept writing after the others timed out: alive
        if rl.time is None and first_wait is None and _after_waits_in_file(ev, waiting):
            continue  # one file without clocks: its line order is the time order, and it wrote after them
        where = next((f for f in findings if f.signature == "hang.stack.where" and f.rank == r), None)
        if where is not None:  # a stack dump of it: where it is, outside any collective
            summary = f"rank {r} is stuck outside any collective: {where.fields.get('where', '')}"
            chosen.append(as_root(where, HANG, summary))
            reasons.append(summary + f" ({where.fields.get('tool', 'stack dump')}), while the others timed out")
            work = True
        step = announced(findings, r) if where is None else None
        if step is not None and step.signature == "progress.waiting_for_work":
            summary = f"rank {r} sat outside any collective, waiting for work: {step.fields.get('step', '')}"
            chosen.append(as_root(step, HANG, summary))
            reasons.append(summary + ", its last word while the others waited for it in a collective")
            idle.append(r)
            work = True
        elif step is not None:
            summary = f"rank {r} announced long work outside any collective: {step.fields.get('step', '')}"
            chosen.append(as_root(step, HANG, summary))
            reasons.append(summary + ", and printed no timeout while the others timed out")
            work = True
        lf = last_line_finding(r, rl, topo)
        bar = work_bar(ev, findings) if step is None and where is None else None
        if lf is not None and bar is not None:  # its last line: a bar of work outside any collective, unfinished
            what, seconds, percent = bar
            done = f"{percent}% after " if percent >= 0 else ""
            summary = (
                f"rank {r} went silent inside “{what[:60]}” ({done}{seconds / 60:.1f} min), outside any collective"
            )
            chosen.append(lf.model_copy(update={"summary": summary}))
            reasons.append(summary + ", while the others waited for it in a collective")
            unfinished.append(r)
            work = True
        elif lf is not None and not any(c.evidence[0] == lf.evidence[0] for c in chosen):
            chosen.append(lf)
        if step is None and where is None and bar is None:
            reasons.append(f"rank {r} printed neither a timeout nor an error while the others timed out")
    unowned = unowned_announcement(findings, waiting) if not chosen else None
    if unowned is not None:
        summary = f"long work outside any collective was announced and never finished: {unowned.fields.get('step', '')}"
        chosen.append(as_root(unowned, HANG, summary))
        reasons.append(summary + ", and the timeouts followed it")
        work = True
    loose = unowned_bar(findings, waiting) if not chosen else None
    if loose is not None:
        what, seconds, percent = work_bar(loose.evidence[0], findings) or ("", 0.0, -1)
        done = f"{percent}% after " if percent >= 0 else ""
        summary = (
            f"a bar of work outside any collective, “{what[:60]}”, stopped unfinished ({done}{seconds / 60:.1f} min)"
        )
        chosen.append(as_root(loose, HANG, summary))
        reasons.append(summary + ", and the timeouts followed it")
        unowned = loose
        unfinished.append(None)
        work = True
    if not chosen or (not work and limit is not None and limit < SHORT_TIMEOUT_MS):
        return None  # a rank late for a short timeout with nothing to show why: the timeout itself is the suspect
    c = Candidate(HANG, chosen, [])
    c.lead = chosen[0]
    c.score = BASE_WORK if work else BASE_SILENT
    c.reasons.extend(reasons)
    if not work:
        c.penalties.append("no line says what the silent rank was doing")
    if unowned is not None:
        c.score -= UNOWNED_DISCOUNT
        c.penalties.append("no line names the rank that announced it")
    if idle:
        c.penalties.append("inferred: no line says the others waited for this rank, only that it had no work")
    if unprefixed:
        c.penalties.append("inferred: only its announcement names the rank; its other lines carry no rank")
    if unfinished:
        c.penalties.append("inferred: the bar's last update is short of the timeout; the rank's log stops inside it")
    return c


def _after_waits_in_file(ev: Evidence, waiting: list[Finding]) -> bool:
    """The line comes after the first timeout another rank printed in the same file (line order as time)."""
    lines = [f.evidence[0].line for f in waiting if f.evidence[0].file == ev.file]
    return bool(lines) and ev.line > min(lines)


def explained_by_wait(cands: Iterable[Candidate], waiting: list[Finding], hang: Candidate) -> None:
    """Candidates that are only the waiting ranks' own timeout (a traceback around it, a launcher's report of
    it) are explained by the rank that did not arrive."""
    wait_ids = {f.id for f in waiting}
    lines = {(f.evidence[0].file, f.evidence[0].line) for f in waiting}
    for c in cands:
        if c is hang or c.class_id == HANG:
            continue
        own = [f for f in c.findings if f.id in wait_ids or (f.evidence[0].file, f.evidence[0].line) in lines]
        if own and len(own) == len(c.findings):
            c.score -= WAIT_PENALTY
            c.penalties.append(f"explained by {HANG}: the timeout of a rank that waited for another")


# ---------------------------------------------------------------------------------------------
# Order without clocks


def first_in_file_order(findings: list[Finding], excluded: set[str]) -> Finding | None:
    """The first symptom of a bundle whose every failure line is in one file and none carries a clock: a pasted log
    is written top to bottom, so its line order is the order things happened (None otherwise)."""
    failing = [f for f in findings if f.role != "context"]
    if not failing or any(f.time is not None for f in failing):
        return None
    if len({f.evidence[0].file for f in failing}) != 1:
        return None
    symptoms = [
        f for f in failing if f.role == "cascade" and f.id not in excluded and not f.signature.startswith("torchrun.")
    ]
    return min(symptoms, key=lambda f: f.evidence[0].line) if symptoms else None
