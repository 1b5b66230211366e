"""Stalls that no line names: the last resorts of the offline reduce when nothing in the bundle failed but a wait
(issue 14, capabilities 5 and 6; TAXONOMY class 5, ``rank_hang_or_missing_rank``).

- *lone waiters*: the only failure lines are the waiting ranks' own collective timeouts (c10d's watchdog, gloo's
  "Timed out waiting <ms>ms", and the watchdog's own teardown), the full timeout ran (not a short one: that is
  ``_short_timeout``'s story), and other ranks of the job wrote nothing in the bundle. "A collective did not complete"
  always asks which rank did not arrive; here the answer lies among the absent ranks, and no line says which or why
  (busy outside the collective, as one rank validating or checkpointing alone, or hung).
- *stalled bar*: a log of a job of two ranks or more ends on a tqdm bar that never advanced (``0/<total>``: tqdm
  draws a bar when it is created and again only on an update, so the first drawing left as the log's last line is a
  loop whose first item never finished), and nothing in the bundle failed: the job hung there.

Both are inferred from what the bundle lacks: never a culprit (no line names one), never high confidence. Pure.
"""

from __future__ import annotations

from crashcart.models import Culprit, Finding, Topology
from crashcart.reduce.bars import bar_count, bar_of, bar_step
from crashcart.reduce.causal import Candidate, teardown_aborts
from crashcart.reduce.hangs import HANG, SHORT_TIMEOUT_MS, as_root, timeout_ms, waits
from crashcart.reduce.verdict import benign
from crashcart.scan.hang_evidence.collectives import ranks_text

BAR = "progress.tqdm"
WATCHDOG = "nccl.watchdog_timeout"  # c10d's "Watchdog caught collective operation timeout: WorkNCCL(...)"


def _word(ranks: set[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ranks_text(ranks)


def _nothing_else_failed(findings: list[Finding], allowed: set[str]) -> bool:
    """Every finding is context, benign, teardown, a collective failure's own abort, or in ``allowed``."""
    aborts = teardown_aborts(findings)
    return all(f.role in {"context", "teardown"} or f.id in allowed or f.id in aborts or benign(f) for f in findings)


def lone_waiters(findings: list[Finding], topo: Topology, score: float) -> Candidate | None:
    """Only the waiting ranks' timeouts, a full-length timeout, one collective, and ranks absent from the bundle."""
    waiting = waits(findings)
    waited = {f.rank for f in waiting if f.rank is not None}
    if not waited or not _nothing_else_failed(findings, {f.id for f in waiting}):
        return None
    limit = timeout_ms(waiting)
    if limit is None or limit < SHORT_TIMEOUT_MS:
        return None  # a short timeout is the suspect itself (reduce/offline.py ``_short_timeout``)
    lines = sorted(
        (f for f in waiting if f.signature == WATCHDOG), key=lambda f: (f.evidence[0].file, f.evidence[0].line)
    ) or sorted(waiting, key=lambda f: (f.evidence[0].file, f.evidence[0].line))
    works = {(f.fields.get("pg", ""), f.fields["seq"], f.fields.get("op", "")) for f in lines if "seq" in f.fields}
    if len(works) > 1:
        return None  # the ranks stopped in different collectives: a desync's story, not an absent rank's
    seen = {f.rank for f in findings if f.rank is not None} | set(topo.ranks)
    world = topo.world_size or max(seen) + 1
    absent = set(range(world)) - seen
    if not absent and world >= 2:
        return None  # every rank is in the bundle and none is missing: nothing says which one did not arrive
    # a collective or a store wait of one process never times out: a bundle that shows only the waiter (its world
    # size read as its own rank + 1) leaves out the ranks it waited for, whichever they are
    others = _word(absent) if absent else "the job's other ranks"
    _, seq, op = next(iter(works)) if works else ("", "", "")
    what = f" in {op or 'the collective'} #{seq}" if seq else ""
    summary = (
        f"{_word(waited)} waited the full {limit / 1000:.0f} s timeout{what}; {others} wrote nothing "
        "in the bundle and no line reports an error: a rank that did not arrive (busy outside the collective, or hung)"
    )
    c = Candidate(HANG, [as_root(f, HANG, summary) for f in lines[:3]], [], score=score, inferred=True)
    c.lead = c.findings[0]
    c.where = Culprit()  # the waiting rank is not the culprit, and no line names the absent one
    c.reasons.append(summary)
    c.penalties.append(f"inferred from what the bundle lacks: no line of {others} says where it was, or why")
    return c


def stalled_bar(findings: list[Finding], topo: Topology, score: float) -> Candidate | None:
    """A log that ends on a bar that never advanced, in a job of two ranks or more, where nothing failed."""
    world = topo.world_size or len(topo.ranks)
    if world < 2 or not _nothing_else_failed(findings, set()):
        return None
    ends = sorted(
        (f for f in findings if f.signature == BAR and f.fields.get("_eof")),
        key=lambda f: (f.evidence[0].file, f.evidence[0].line),
    )
    for f in ends:
        count = bar_count(f.evidence[0].text)
        bar = bar_of(f.evidence[0].text)
        if count is None or bar is None or count[0] != "0" or count[1] in {"0", "0.0"}:
            continue
        what = bar[0] or bar_step(f, findings) or "a progress bar"
        summary = (
            f"the log ends on “{what[:60]}” at 0/{count[1]}, a bar that never advanced, in a job of {world} ranks, "
            "and no line reports an error: the job stalled there"
        )
        c = Candidate(HANG, [as_root(f, HANG, summary)], [], score=score, inferred=True)
        c.lead = c.findings[0]
        c.where = Culprit()  # every rank stops when one stalls a collective; the bar does not say which
        c.reasons.append(summary)
        init = _communicator_up(f, findings)
        if init is not None:  # cited beside the bar: the ranks were connected, then nothing moved
            c.findings.append(init)
            c.reasons.append(f"the NCCL communicator of {init.fields.get('nranks', '?')} ranks was up before it")
        c.penalties.append("inferred: the log just ends; no line says the job hung, where, or why")
        return c
    return None


def _communicator_up(bar: Finding, findings: list[Finding]) -> Finding | None:
    """The last NCCL "Init COMPLETE" line of the bar's file before it (nccl.comm_init), if any."""
    ev = bar.evidence[0]
    ups = [
        f
        for f in findings
        if f.signature == "nccl.comm_init"
        and f.fields.get("state") == "COMPLETE"
        and f.evidence[0].file == ev.file
        and f.evidence[0].line < ev.line
    ]
    return max(ups, key=lambda f: f.evidence[0].line) if ups else None
