"""Reduce stage (offline engine): groups and findings -> one Diagnosis citing evidence ids.

Input: groups, findings, topology, each rank's last line. Output: ``Diagnosis`` with the root cause
(or ``unknown`` with ranked hypotheses), the symptoms it explains, and a timeline. Deterministic:
the same bundle gives the same answer. Confidence is capped by code when evidence is thin. Pure.
"""

from __future__ import annotations

from datetime import datetime

from crashcart.models import (
    Diagnosis,
    Finding,
    Group,
    RankLast,
    Topology,
)
from crashcart.reduce.adjust import hardware_first, stopped_by_an_error
from crashcart.reduce.causal import (
    WATCHDOG_CLASSES,
    Candidate,
    Picture,
    candidates,
    own_time,
    picture,
    score,
    teardown_aborts,
    versions,
)
from crashcart.reduce.desync import unranked_sites
from crashcart.reduce.explain import _compose, _unknown
from crashcart.reduce.hang_files import add_file_candidates, with_rank_stops
from crashcart.reduce.hangs import (
    explained_by_wait,
    first_in_file_order,
    hang_candidate,
    last_line_finding,
    trusted_times,
    waits,
)
from crashcart.reduce.host import host_suspects, stale_gpu_memory, switch_endpoint
from crashcart.reduce.listing import listed_nodes
from crashcart.reduce.lone import lone_hardware_event, silent_exit
from crashcart.reduce.memory import killed_work, named_nodes
from crashcart.reduce.named import barrier_named
from crashcart.reduce.prolog import prolog_node
from crashcart.reduce.smells import (
    CONNECT_CLASSES,
    SMELL_SCORE,
    interface_failure,
    interface_smells,
    master_addr_smell,
)
from crashcart.reduce.stalls import lone_waiters, stalled_bar
from crashcart.reduce.throughput import slow_candidates
from crashcart.reduce.trends import recovered_spike, trend_candidates
from crashcart.reduce.verdict import no_failure

MIN_SCORE = 30.0


def reduce_offline(
    groups: list[Group], findings: list[Finding], topo: Topology, last: dict[int, RankLast]
) -> Diagnosis:
    """Decide the root cause; explain everything else as contributing factors or symptoms."""
    return with_rank_stops(_decide(groups, findings, topo, last), findings, topo)  # where each rank stopped


def _decide(groups: list[Group], findings: list[Finding], topo: Topology, last: dict[int, RankLast]) -> Diagnosis:
    findings = trusted_times(findings)  # an inherited time the file's next clock contradicts is no time
    pic = picture(findings, topo)
    cands = candidates(groups, findings)
    prolog_node(cands, findings)  # a failed prolog's node, from the lines that name it (reduce/prolog.py)
    mismatch = versions(findings)
    if mismatch is not None:
        key, odd, evidence = mismatch
        existing = next((c for c in cands if c.class_id == "software_version_mismatch"), None)
        found = Candidate("software_version_mismatch", evidence, [])
        found.lead = evidence[0]
        if existing is not None:  # an error line says "mismatch"; the version table says where
            existing.findings = [*evidence, *existing.findings]
            existing.lead = evidence[0]
            found = existing
        else:
            cands.append(found)
        found.reasons.append(
            f"{key.replace('_', ' ')} differs across hosts: "
            + ", ".join(f"{h} has {v}" for h, v in sorted(odd.items()))
        )
    times = [t for c in cands if (t := own_time(c.first)) is not None]
    earliest = min(times) if times else None
    for c in cands:
        score(c, pic, topo, findings, last, earliest)
    _add_hangs(cands, findings, topo, last)
    _add_smells(cands, findings, topo)
    listed_nodes(cands, topo, MIN_SCORE)  # a node listing counts for the job's nodes (reduce/listing.py)
    stale_gpu_memory(cands, findings)  # a stopped process holding GPU memory (reduce/host.py)
    add_file_candidates(cands, findings, topo)  # Flight Recorder, stack dumps, RAS (hang_files)
    hardware_first(cands)
    stopped_by_an_error(cands)  # a reasonless cancel after a failing task is the stop, not the cause
    switch_endpoint(cands, findings)  # an NVSwitch fault one GPU reports its side of (reduce/host.py)
    host_suspects(cands, findings, topo)  # several programs failing on one host point at the host
    named_nodes(cands)  # a memory killer's line names its node by address (reduce/memory.py)
    killed_work(cands)  # the killed work's own error is the memory kill seen from its side
    cands.sort(  # a tie without clocks: the cause is printed before its effects in the same file
        key=lambda c: (
            -c.score,
            c.time is None,
            c.time or datetime.max.astimezone(),
            (c.first.evidence[0].file, c.first.evidence[0].line),
            c.class_id,
        )
    )
    best = cands[0] if cands else None
    from_files = best is not None and best.lead is not None and best.lead.signature.startswith("hang.")  # hang_files
    by_logs = pic.suspect_kind == "desync" and not from_files  # a dump's verdict is not second-guessed by the logs
    if best is not None and by_logs and best.class_id == "rank_hang_or_missing_rank":
        desync = _hang(pic, topo, findings, last)  # every rank reports a laggard that issued another collective
        if desync is not None:
            return _compose(desync, cands[1:], groups, findings, topo, pic, last)
    if best is None or best.score < MIN_SCORE or (best.generic and best.class_id == "unknown"):
        done = no_failure(findings)  # the launcher reported success and nothing failed (reduce/verdict.py)
        if done is not None:
            return done
        weak = best is None or best.score < MIN_SCORE + 20
        alive = _missing_alive(pic, last)
        fallbacks = (
            None if alive else _hang(pic, topo, findings, last),  # a rank that did not arrive and went silent
            _site_desync(findings),
            _short_timeout(pic, findings),
            _hang(pic, topo, findings, last) if alive else None,
            _summary_hint(findings),
            _lone_cascade(findings, topo),
            lone_hardware_event(findings, MIN_SCORE + 5),  # an informational Xid is all there is (reduce/lone.py)
            recovered_spike(findings),  # the loss spiked and recovered, and nothing failed (reduce/trends.py)
            lone_waiters(findings, topo, MIN_SCORE + 5),  # only the waiting ranks timed out (reduce/stalls.py)
            stalled_bar(findings, topo, MIN_SCORE + 5),  # a log ending on a bar that never advanced
        )
        for fallback in fallbacks:
            if fallback is not None and weak:
                return _compose(fallback, cands, groups, findings, topo, pic, last)
        quiet = silent_exit(findings)  # a worker that exited with its own status and printed nothing (reduce/lone.py)
        return _unknown([quiet, *cands] if quiet else cands, groups, findings, topo, pic)
    return _compose(best, [c for c in cands if c is not best], groups, findings, topo, pic, last)


def _add_hangs(cands: list[Candidate], findings: list[Finding], topo: Topology, last: dict[int, RankLast]) -> None:
    """Hung, busy and slow ranks that no error line names (``hangs``), competing with the other candidates."""
    hang = barrier_named(findings) or hang_candidate(findings, topo, last)
    if hang is not None:
        explained_by_wait(cands, waits(findings), hang)
    errors = any(c.class_id not in _NOT_ERRORS and not c.generic and c.score >= MIN_SCORE for c in cands)
    slow = slow_candidates(findings, topo, other_errors=errors)  # reduce/throughput.py
    for trend in trend_candidates(findings, timed_out=bool(waits(findings))):  # reduce/trends.py
        same = next((c for c in cands if c.class_id == trend.class_id), None)
        if same is not None and same.severity not in {"info", "P3"}:  # a line states it: that line speaks
            same.score = max(same.score, trend.score)
            same.reasons.extend(trend.reasons)
        elif same is None or same.score < trend.score:
            cands[:] = [c for c in cands if c is not same] + [trend]
    for extra in (hang, *slow):
        if extra is None:
            continue
        same = next((c for c in cands if c.class_id == extra.class_id), None)
        if same is None or same.score < extra.score:
            cands[:] = [c for c in cands if c is not same] + [extra]


_NOT_ERRORS = frozenset({"straggler_fail_slow", "fp16_loss_scale_overflow", "loss_spike_divergence", "unknown"})


def _add_smells(cands: list[Candidate], findings: list[Finding], topo: Topology) -> None:
    """Configuration smells (``smells``) that explain a connection failure join its candidate and are cited."""
    for c in cands:
        if c.class_id not in CONNECT_CLASSES:
            continue
        text = " ".join(f.evidence[0].text for f in c.findings)
        found = [*interface_smells(findings, topo, text), master_addr_smell(findings, c.findings)]
        for smell in [s for s in found if s is not None]:
            c.lead = c.first  # the failure still speaks for the candidate; the smell says why
            fields = {**smell.finding.fields, "_smell": smell.kind}
            c.findings.append(smell.finding.model_copy(update={"class_id": c.class_id, "fields": fields}))
            c.reasons.append(smell.why)
            c.score += SMELL_BONUS
    got = interface_failure(findings, topo)
    if got is not None and not any(c.class_id == "nccl_init_bootstrap_failure" for c in cands):
        failure, smells = got
        lead = failure.model_copy(update={"class_id": "nccl_init_bootstrap_failure", "role": "root_candidate"})
        c = Candidate("nccl_init_bootstrap_failure", [lead], [], score=SMELL_SCORE)
        c.lead = lead
        for smell in smells:
            fields = {**smell.finding.fields, "_smell": smell.kind}
            c.findings.append(smell.finding.model_copy(update={"class_id": c.class_id, "fields": fields}))
            c.reasons.append(smell.why)
        cands.append(c)


SMELL_BONUS = 6.0
SHORT_TIMEOUT_MS = 300_000  # below both PyTorch defaults (10 and 30 minutes)


def _missing_alive(pic: Picture, last: dict[int, RankLast]) -> bool:
    """The ranks that did not arrive were busy, not hung: each was still writing after the timed-out
    collective began, or rank 0 is among them, which alone runs validation, checkpointing and logging in
    the usual training loop (the short-timeout story)."""
    if pic.suspect_kind != "missing":
        return False
    if 0 in pic.suspects:
        return True
    if pic.lookback_start is None:
        return False
    times = [rl.time for r in pic.suspects if (rl := last.get(r)) is not None and rl.time is not None]
    return len(times) == len(pic.suspects) and all(t > pic.lookback_start for t in times)


def _short_timeout(pic: Picture, findings: list[Finding]) -> Candidate | None:
    """Nothing failed, but the collective timeout is so short that slow legitimate work trips it."""
    configured = [_sane_timeout(f) for f in findings if f.fields.get("timeout_ms", "").isdigit()]
    if not configured or max(configured) >= SHORT_TIMEOUT_MS:
        return None
    wd = [f for f in findings if f.class_id == "nccl_watchdog_timeout" and f.fields.get("timeout_ms")]
    c = Candidate("nccl_watchdog_timeout", wd[:3], [], score=MIN_SCORE + 5)
    c.reasons.append(
        f"the process-group timeout is only {max(configured) / 1000:.0f} s and no rank reported an error: "
        "a slow step (validation, checkpointing) can exceed it"
    )
    return c


def _site_desync(findings: list[Finding]) -> Candidate | None:
    """Timeouts without ranks whose tracebacks show two call sites or more: the ranks ran different collectives
    (``desync.unranked_sites``); one traceback of each site is cited, and no rank is named."""
    sites = unranked_sites([f for f in findings if f.class_id in WATCHDOG_CLASSES])
    if not sites:
        return None
    c = Candidate(
        "collective_mismatch_desync", [fs[0] for fs in sites.values()], [], score=MIN_SCORE + 5, inferred=True
    )
    c.reasons.append(
        "the collectives that timed out were called at "
        + " and ".join(f"{site} ({len(fs)} tracebacks)" for site, fs in sites.items())
        + ": the ranks were in different collectives, and no line says which rank was where"
    )
    return c


def _sane_timeout(f: Finding) -> int:
    """The watchdog's ``Timeout(ms)``, unless ``ran for`` is about a thousand times larger: then the field is a
    unit slip or a typo (a 1800 ms timeout that ran for 1800000 ms), and the run time is the timeout."""
    timeout = int(f.fields["timeout_ms"])
    ran = f.fields.get("ran_ms", "")
    if ran.isdigit() and timeout > 0 and int(ran) >= 500 * timeout:
        return int(ran)
    return timeout


KILL_SIGNS = {"generic.killed", "torchrun.exitcode_sigkill"}
LONE_CLASSES = {"nccl_remote_peer_failure", "ib_completion_error", "nccl_watchdog_stuck_heartbeat"}


def _lone_cascade(findings: list[Finding], topo: Topology) -> Candidate | None:
    """No root line, but the earliest symptom is a peer/network error on one rank only: report it."""
    aborts = teardown_aborts(findings)
    timed = [
        f
        for f in findings
        if f.role == "cascade"
        and f.time is not None
        and f.rank is not None
        and not f.signature.startswith("torchrun.")  # the launcher's summary of a rank is not the rank's error
        and f.id not in aborts
    ]
    ordered = first_in_file_order(findings, set(aborts)) if not timed else None  # one file, no clocks: line order
    if not timed and ordered is None:
        return None
    first = ordered or min(timed, key=lambda f: (f.time, f.evidence[0].file, f.evidence[0].line))
    if first.class_id not in LONE_CLASSES or (first.rank is None and ordered is None):
        return None
    same = [f for f in findings if f.class_id == first.class_id]
    tied = [f for f in timed if f.rank not in (None, first.rank) and f.time == first.time]
    if tied:  # several ranks at the same moment: no single first error
        return None
    if any(f.signature in KILL_SIGNS for f in findings):
        return None  # a peer was SIGKILLed: the peer error is its echo, and why it died is unknown
    c = Candidate(first.class_id, [f for f in same if f.rank == first.rank], [], score=MIN_SCORE + 5)
    c.lead = first
    if ordered is not None:
        c.reasons.append("the first error of the log (one file without clocks: its line order is the time order)")
    else:
        c.reasons.append(f"the first error of the incident, on rank {first.rank} only; no other cause was found")
    return c


_AGENT_KILLED = {"-15", "143", "-1", "-9", "137"}


def _summary_hint(findings: list[Finding]) -> Candidate | None:
    """Last resort: torchrun's "Root Cause" names a worker that exited with an error and printed nothing."""
    heads = [f for f in findings if f.signature == "torchrun.root_cause" and f.fields.get("exitcode")]
    heads = [f for f in heads if f.fields["exitcode"] not in _AGENT_KILLED and not f.fields["exitcode"].startswith("-")]
    if not heads:
        return None
    loud = {
        f.rank
        for f in findings
        if f.role in {"root_candidate", "cascade"} and f.rank is not None and not f.signature.startswith("generic.")
    }
    heads = [f for f in heads if f.fields.get("rank", "").isdigit() and int(f.fields["rank"]) not in loud]
    if not heads:  # the rank the summary names said something itself: that speaks louder
        return None
    head = min(heads, key=lambda f: (f.fields.get("failure_time", ""), f.evidence[0].file, f.evidence[0].line))
    file, line = head.evidence[0].file, head.evidence[0].line
    block = [
        f
        for f in findings
        if f.role == "context"
        and f.evidence[0].file == file
        and line < f.evidence[0].line <= line + 8
        and ("exitcode" in f.fields or "local_rank" in f.fields or "host" in f.fields)
    ]
    if not block:
        return None
    c = Candidate("torchelastic_childfailed_summary", block, [], score=MIN_SCORE + 5)
    c.lead = next((f for f in block if "local_rank" in f.fields), None)
    c.reasons.append(
        f"no rank printed an error; torchrun's failure summary says rank {head.fields.get('rank', '?')} "
        f"exited with code {head.fields['exitcode']} (a local hint, not proof of the cause)"
    )
    return c


def _hang(pic: Picture, topo: Topology, findings: list[Finding], last: dict[int, RankLast]) -> Candidate | None:
    """No root line, but one rank is odd: it hung, lagged or issued another collective."""
    if not pic.suspects or len(pic.suspects) > 2:
        return None
    if pic.suspect_kind == "missing":
        spoke = {
            f.rank
            for f in findings
            if f.rank in pic.suspects and f.role in {"root_candidate", "cascade"} and f.class_id != "unknown"
        }
        if spoke:
            return None  # a missing rank that reported its own error did not hang: that error speaks for it
    cls = "collective_mismatch_desync" if pic.suspect_kind == "desync" else "rank_hang_or_missing_rank"
    chosen: list[Finding] = []
    for r in sorted(pic.suspects):
        own = [f for f in findings if f.rank == r and f.class_id == "nccl_watchdog_timeout"]
        chosen.extend(own[:2])
        rl = last.get(r)
        if rl is not None and pic.suspect_kind == "missing" and (f := last_line_finding(r, rl, topo, cls)) is not None:
            chosen.append(f)
    if not chosen:
        return None
    c = Candidate(cls, chosen, [], score=MIN_SCORE + 10, inferred=pic.suspects_inferred)
    c.reasons.append("; ".join(f"rank {r} {why}" for r, why in sorted(pic.suspects.items())))
    return c
