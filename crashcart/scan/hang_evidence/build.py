"""Findings from stack dumps (``stacks``): the minority rank, every rank stuck in one wait, where a lone rank is.

Input: the dumped processes and the scan's id source; output: Findings whose Evidence cites the dump's own lines
(the thread header through the frames that say where it is, a prompt naming the node, faulthandler's "Timeout"
line, a busy DataLoader worker's stack). ``finding`` builds a hang-evidence Finding for every reader here. Pure.
"""

from __future__ import annotations

from datetime import datetime

from crashcart.models import Evidence, Finding, Role, Severity
from crashcart.scan.findings import IdSource
from crashcart.scan.hang_evidence import frames, stacks
from crashcart.scan.hang_evidence.collectives import ranks_text

MAX_CULPRITS = 8


def finding(
    ids: IdSource,
    summary: str,
    role: Role,
    severity: Severity,
    signature: str,
    class_id: str,
    rank: int | None,
    time: datetime | None,
    fields: dict[str, str],
    evidence: list[Evidence],
    node: str | None = None,
) -> Finding:
    return Finding(
        id=ids.finding(),
        class_id=class_id,
        signature=signature,
        role=role,
        severity=severity,
        summary=summary,
        time=time,
        rank=rank,
        node=node,
        fields=fields,
        evidence=evidence,
    )


def _stack_ev(ids: IdSource, p: stacks.Process, t: stacks.Thread, *marks: int | None) -> list[Evidence]:
    """The thread's header and innermost frames, through the frames ``marks`` (the program's own code, the frame
    that says what it does) when they are near; a mark deeper than that is cited on its own line."""
    last = min(len(t.frames), stacks.FRAMES_CITED) - 1
    near = [m for m in marks if m is not None and m < stacks.FRAMES_SPAN]
    far = sorted({m for m in marks if m is not None and m >= stacks.FRAMES_SPAN})
    last = max([last, *near])
    end = t.frames[last].line if t.frames else t.header
    text = "\n".join(p.lines[t.header - 1 : end])
    out = [
        Evidence(id=ids.evidence_id(), file=p.path, line=t.header, end_line=end if end > t.header else None, text=text)
    ]
    for m in far:
        fr = t.frames[m]
        out.append(Evidence(id=ids.evidence_id(), file=p.path, line=fr.line, text=p.lines[fr.line - 1]))
    return out


def _marks(t: stacks.Thread) -> tuple[int | None, int | None]:
    return stacks.own_frame(t), frames.telling(t.frames)


def _workers(
    procs: list[stacks.Process], p: stacks.Process, pl: stacks.Place, ids: IdSource, ev: list[Evidence]
) -> str:
    """A rank waiting for its DataLoader: the dumped workers that are busy loading (where the data is stuck), their
    stacks appended to ``ev``; the words to add to the summary."""
    if pl.func != "DataLoader fetch":
        return ""
    busy = stacks.busy_workers(procs, p.pid)[:2]
    for w, _, t in busy:
        ev.extend(_stack_ev(ids, w, t, *_marks(t)))
    return "".join(f"; its DataLoader worker {w.pid or '?'} is in {wp.where}" for w, wp, _ in busy)


def _stalled(p: stacks.Process, ids: IdSource, ev: list[Evidence]) -> str:
    """faulthandler's dump_traceback_later fired (no progress for its timeout): its "Timeout (H:MM:SS)!" line is
    cited, and the words to add to the summary."""
    if p.stalled is None:
        return ""
    after, line = p.stalled
    ev.append(Evidence(id=ids.evidence_id(), file=p.path, line=line, text=p.lines[line - 1]))
    return f"; faulthandler's dump_traceback_later fired after {after}"


def _who(p: stacks.Process) -> str:
    if p.rank is not None:
        return f"rank {p.rank}"
    what = [f"local rank {p.local_rank}"] if p.local_rank is not None else []
    what.append(f"node {p.host}" if p.host else p.path)
    return f"process {p.pid or '?'} ({', '.join(what)})"


def stack_findings(procs: list[stacks.Process], ids: IdSource) -> list[Finding]:
    odd = stacks.odd_ones(procs)
    if odd is None:
        return _all_stuck(procs, ids) or _where(procs, ids)
    out: list[Finding] = []
    others = sorted({p.rank for p in odd.others if p.rank is not None})
    who_else = f"ranks {ranks_text(others)}" if others else f"{len(odd.others)} other processes"
    tool = odd.culprits[0].tool
    cls = "collective_mismatch_desync" if odd.mismatch else "rank_hang_or_missing_rank"
    ref = odd.others[0]
    for p in odd.culprits[:MAX_CULPRITS]:
        got = stacks.place(p)
        if got is None:
            continue
        pl, t, _ = got
        verb = "waits in" if pl.collective else "is in"
        summary = (
            f"{_who(p)}: main thread {verb} {pl.where} ({tool}), while {who_else} wait in {odd.others_place.where}"
        )
        ev = _stack_ev(ids, p, t, *_marks(t))
        summary += _workers(procs, p, pl, ids, ev) + _stalled(p, ids, ev)
        if p.host_line is not None:  # the prompt or prefix that names the node
            ev.append(Evidence(id=ids.evidence_id(), file=p.path, line=p.host_line, text=p.lines[p.host_line - 1]))
        ref_t = ref.main()
        if ref_t is not None:
            ev.extend(_stack_ev(ids, ref, ref_t)[:1])
        fields = {"tool": tool, "where": pl.where, "others": ranks_text(others)}
        if not pl.collective and not pl.known:
            fields["ordinary"] = "1"  # in ordinary code, no blocking wait: one dump cannot tell stuck from slow
        if p.pid:
            fields["pid"] = p.pid
        if p.local_rank is not None:
            fields["local_rank"] = str(p.local_rank)
        out.append(
            finding(
                ids,
                summary,
                "root_candidate",
                "P1",
                "hang.stack.minority",
                cls,
                p.rank,
                None,
                fields,
                ev,
                node=p.host,
            )
        )
    return out


def _where(procs: list[stacks.Process], ids: IdSource) -> list[Finding]:
    """Where each dumped rank is that waits for no peer, when nothing to compare it with stands out (one rank
    dumped, say): context, for the reduce's silent-rank rule to say what that rank was doing."""
    out: list[Finding] = []
    for p in stacks.ranks_only(procs):
        got = stacks.place(p)
        if p.rank is None or got is None or got[0].collective:
            continue
        pl, t, _ = got
        summary = f"rank {p.rank}'s main thread is in {pl.where} ({p.tool}), outside any collective"
        fields = {"tool": p.tool, "where": pl.where}
        ev = _stack_ev(ids, p, t, *_marks(t))
        summary += _stalled(p, ids, ev)
        out.append(
            finding(
                ids,
                summary,
                "context",
                "info",
                "hang.stack.where",
                "rank_hang_or_missing_rank",
                p.rank,
                None,
                fields,
                ev,
                node=p.host,
            )
        )
    return out[:MAX_CULPRITS]


def _all_stuck(procs: list[stacks.Process], ids: IdSource) -> list[Finding]:
    got = stacks.all_stuck(procs)
    if got is None:
        return []
    pl, stuck = got
    first = stacks.place(stuck[0])
    if first is None:
        return []
    _, t, _ = first
    ranks = sorted({p.rank for p in stuck if p.rank is not None})
    who = f"ranks {ranks_text(ranks)}" if len(ranks) == len(stuck) else f"all {len(stuck)} processes"
    summary = (
        f"{who} are blocked in the same place outside any collective, none waits for a peer: {pl.where} "
        f"({stuck[0].tool}); the job hangs there on every rank"
    )
    ev = _stack_ev(ids, stuck[0], t, *_marks(t))
    summary += _workers(procs, stuck[0], pl, ids, ev)
    fields = {"tool": stuck[0].tool, "where": pl.where, "processes": str(len(stuck))}
    node = stuck[0].host if len({p.host for p in stuck}) == 1 else None
    return [
        finding(
            ids,
            summary,
            "root_candidate",
            "P1",
            "hang.stack.all_stuck",
            "rank_hang_or_missing_rank",
            None,
            None,
            fields,
            ev,
            node=node,
        )
    ]
