"""Reduce stage (offline engine): groups and findings -> one Diagnosis citing evidence ids.

Input: groups, findings, topology, each rank's last line. Output: ``Diagnosis`` with the root cause
(or ``unknown`` with ranked hypotheses), the symptoms it explains, and a timeline. Deterministic:
the same bundle gives the same answer. Confidence is capped by code when evidence is thin. Pure.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from crashcart.catalogue import load_catalogue
from crashcart.models import (
    Claim,
    Culprit,
    Diagnosis,
    Evidence,
    Finding,
    Group,
    Hypothesis,
    RankLast,
    TimelineEntry,
    Topology,
)
from crashcart.reduce.causal import (
    INHERITED_SLACK,
    Candidate,
    Picture,
    calibrate,
    candidates,
    hardware_first,
    own_time,
    peer_suspect,
    picture,
    score,
    specific_lines,
    teardown_aborts,
    versions,
)
from crashcart.reduce.hang_files import add_file_candidates, with_rank_stops
from crashcart.reduce.hangs import (
    explained_by_wait,
    first_in_file_order,
    hang_candidate,
    throughput_drop,
    trusted_times,
    waits,
)
from crashcart.reduce.smells import (
    CONNECT_CLASSES,
    SMELL_SCORE,
    interface_failure,
    interface_smells,
    master_addr_smell,
)
from crashcart.reduce.verdict import no_failure
from crashcart.verify import gpu_named, node_named, rank_named

MIN_SCORE = 30.0
NEIGHBOUR_LINES = 5
MAX_TIMELINE = 24


def reduce_offline(
    groups: list[Group], findings: list[Finding], topo: Topology, last: dict[int, RankLast]
) -> Diagnosis:
    """Decide the root cause; explain everything else as contributing factors or symptoms."""
    return with_rank_stops(_decide(groups, findings, topo, last), findings, topo)  # where each rank stopped


def _decide(groups: list[Group], findings: list[Finding], topo: Topology, last: dict[int, RankLast]) -> Diagnosis:
    findings = trusted_times(findings)  # an inherited time the file's next clock contradicts is no time
    pic = picture(findings, topo)
    cands = candidates(groups, findings)
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
    add_file_candidates(cands, findings, topo)  # Flight Recorder, stack dumps, RAS (hang_files)
    hardware_first(cands)
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
            _short_timeout(pic, findings),
            _hang(pic, topo, findings, last) if alive else None,
            _summary_hint(findings),
            _lone_cascade(findings, topo),
        )
        for fallback in fallbacks:
            if fallback is not None and weak:
                return _compose(fallback, cands, groups, findings, topo, pic, last)
        return _unknown(cands, groups, findings, topo, pic)
    return _compose(best, [c for c in cands if c is not best], groups, findings, topo, pic, last)


def _add_hangs(cands: list[Candidate], findings: list[Finding], topo: Topology, last: dict[int, RankLast]) -> None:
    """Hung, busy and slow ranks that no error line names (``hangs``), competing with the other candidates."""
    hang = hang_candidate(findings, topo, last)
    if hang is not None:
        explained_by_wait(cands, waits(findings), hang)
    for extra in (hang, throughput_drop(findings)):
        if extra is None:
            continue
        same = next((c for c in cands if c.class_id == extra.class_id), None)
        if same is None or same.score < extra.score:
            cands[:] = [c for c in cands if c is not same] + [extra]


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
        if rl is not None and rl.evidence is not None and pic.suspect_kind == "missing":
            chosen.append(
                Finding(
                    id=f"last-{r}",
                    class_id=cls,
                    signature="reduce.last_line",
                    role="root_candidate",
                    severity="P1",
                    summary=f"rank {r} wrote its last line here",
                    time=rl.time,
                    rank=r,
                    node=topo.ranks[r].node if r in topo.ranks else None,
                    evidence=[rl.evidence],
                )
            )
    if not chosen:
        return None
    c = Candidate(cls, chosen, [], score=MIN_SCORE + 10)
    c.reasons.append("; ".join(f"rank {r} {why}" for r, why in sorted(pic.suspects.items())))
    return c


def _rank_of_pid(node: str, pid: str, topo: Topology, findings: list[Finding]) -> int | None:
    """A process id named on a node (the OOM killer's victim) -> the rank whose NCCL lines show that pid."""
    ranks = {f.rank for f in findings if f.role == "context" and f.node == node and f.fields.get("pid") == pid}
    ranks.discard(None)
    return ranks.pop() if len(ranks) == 1 else None


def _culprit(c: Candidate, topo: Topology, findings: list[Finding] | None = None) -> Culprit:
    first = c.first
    nodes = c.nodes
    node = first.node if len(nodes) <= 1 or len(nodes) * 3 <= max(len(topo.nodes), 1) else None
    if node is None and len(nodes) == 1:
        node = next(iter(nodes))  # another line of the same fault says where
    ranks = c.ranks
    rank = first.rank if first.rank is not None and (len(ranks) <= 2 or c.lead is not None) else None
    if c.lead is not None and first.node:
        node = first.node
    gpu = first.gpu
    if gpu is None and rank is not None and rank in topo.ranks and first.node == topo.ranks[rank].node:
        gpu = None  # a rank's GPU is only named when a line names it; see _support
    if rank is None and node and gpu:
        rank = next((r for r, i in topo.ranks.items() if i.node == node and i.gpu == gpu), None)
    if rank is None and node and first.fields.get("pid") and findings is not None:
        rank = _rank_of_pid(node, first.fields["pid"], topo, findings)
    if node is None and rank is not None and rank in topo.ranks and len(nodes) <= 1:
        node = topo.ranks[rank].node
    return Culprit(node=node, rank=rank, gpu=gpu)


def _support(culprit: Culprit, c: Candidate, findings: list[Finding], cited: list[Evidence]) -> list[str]:
    """Context lines that tie the culprit to what the root lines say (NCCL init: rank -> host, GPU)."""
    out: list[str] = []
    texts = [(e.file, e.text) for e in cited]
    need_rank = culprit.rank is not None and not any(rank_named(culprit.rank, f, t) for f, t in texts)
    need_node = culprit.node is not None and not any(node_named(culprit.node, f, t) for f, t in texts)
    need_gpu = culprit.gpu is not None and not any(gpu_named(culprit.gpu, t) for _, t in texts)
    files = {e.file for e in cited}
    for f in findings:
        if not (need_rank or need_node or need_gpu):
            break
        if f.role != "context" and not (need_node and f.node == culprit.node):
            continue  # any line of the node may name it (srun's "<host>: task 0: Exited"); ranks come from context
        ev = f.evidence[0]
        names_rank = (
            f.role == "context"
            and culprit.rank is not None
            and f.rank == culprit.rank
            and rank_named(culprit.rank, ev.file, ev.text)
        )
        names_node = culprit.node is not None and node_named(culprit.node, ev.file, ev.text)
        names_gpu = culprit.gpu is not None and gpu_named(culprit.gpu, ev.text)
        useful = (need_rank and names_rank) or (need_node and names_node) or (need_gpu and names_gpu)
        related = (f.rank == culprit.rank and culprit.rank is not None) or ev.file in files
        if useful and related:
            out.append(ev.id)
            need_rank = need_rank and not names_rank
            need_node = need_node and not names_node
            need_gpu = need_gpu and not names_gpu
    return out


def _when(t: datetime | None) -> str:
    return f" at {t:%H:%M:%S} UTC" if t is not None else ""


def _summary(c: Candidate, culprit: Culprit) -> str:
    cat = load_catalogue()
    where = []
    if culprit.node:
        where.append(f"node {culprit.node}")
    extra = [
        x
        for x in (
            f"rank {culprit.rank}" if culprit.rank is not None else "",
            f"GPU {culprit.gpu}" if culprit.gpu else "",
        )
        if x
    ]
    place = " on " + where[0] if where else ""
    if extra:
        place += f" ({', '.join(extra)})" if where else " on " + ", ".join(extra)
    return f"{cat.class_title(c.class_id)}{place}{_when(c.time)}: {c.first.summary}"


def _compose(
    root: Candidate,
    others: list[Candidate],
    groups: list[Group],
    findings: list[Finding],
    topo: Topology,
    pic: Picture,
    last: dict[int, RankLast],
) -> Diagnosis:
    odd = root.ranks & pic.suspect_ranks
    if len(root.ranks) > 2 and len(odd) == 1:  # every rank reports it; the odd rank is the culprit
        r = odd.pop()
        root.lead = min(
            (f for f in root.findings if f.rank == r), key=lambda f: (f.evidence[0].file, f.evidence[0].line)
        )
        root.reasons.append(f"rank {r} {pic.suspects[r]}")
    culprit = _culprit(root, topo, findings)
    first = root.first
    root_ids = [ev.id for ev in first.evidence]
    near = [
        f
        for f in root.findings
        if f is not first
        and f.evidence[0].file == first.evidence[0].file
        and 0 < abs(f.evidence[0].line - first.evidence[0].line) <= NEIGHBOUR_LINES
    ]
    for f in sorted(near, key=lambda f: f.evidence[0].line)[:2]:  # the same event, worded on the next lines
        root_ids.append(f.evidence[0].id)
    root_ids += [ev.id for ev in specific_lines(root.class_id, first, findings) if ev.id not in root_ids]
    for f in root.findings:  # one more exemplar from another source, if any
        if f is not first and f.evidence[0].file != first.evidence[0].file and len(root_ids) < 5:
            root_ids.append(f.evidence[0].id)
            break
    root_ids += [f.evidence[0].id for f in root.findings if "_smell" in f.fields][:2]  # the configuration behind it
    registry = {ev.id: ev for f in [*root.findings, *findings] for ev in f.evidence}
    cited = [registry[i] for i in root_ids if i in registry]
    root_ids += [i for i in _support(culprit, root, findings, cited) if i not in root_ids]
    explained_nodes = root.nodes | ({culprit.node} if culprit.node else set())
    contributing: list[Claim] = []
    hypotheses: list[Hypothesis] = []
    for c in others:
        same_place = bool(c.nodes & explained_nodes) or bool(c.ranks & root.ranks)
        ct = own_time(c.first)
        later = ct is None or root.time is None or ct >= root.time - INHERITED_SLACK
        explained = any(p.startswith("explained by") for p in c.penalties)
        if explained or (same_place and later):
            contributing.append(_claim(c.class_id, c.first.summary + " (explained by the root cause)", c))
        else:
            why = "; ".join(c.penalties) or f"scored {c.score:.0f} vs {root.score:.0f}"
            hypotheses.append(
                Hypothesis(
                    class_id=c.class_id,
                    score=round(c.score, 1),
                    why_not=why,
                    evidence_ids=[c.first.evidence[0].id],
                )
            )
    suspect = peer_suspect(root, findings, topo)
    if suspect is not None:
        root.reasons.append(suspect[0])
        root_ids += [ev.id for ev in suspect[1] if ev.id not in root_ids]
    conf = _confidence(root, others, pic, culprit)
    return Diagnosis(
        root_class=root.class_id,
        summary=_summary(root, culprit),
        culprit=culprit,
        time=root.time,
        confidence=conf,
        root_evidence=root_ids,
        contributing=contributing[:10],
        symptoms=_symptoms(groups, exclude={root.class_id}),
        hypotheses=hypotheses[:6],
        timeline=_timeline(root, groups),
        reasoning=[*root.reasons, *(f"against: {p}" for p in root.penalties), *pic.notes],
    )


def _unknown(
    cands: list[Candidate], groups: list[Group], findings: list[Finding], topo: Topology, pic: Picture
) -> Diagnosis:
    hyps = [
        Hypothesis(
            class_id=c.class_id,
            score=round(c.score, 1),
            why_not="; ".join(c.penalties) or "evidence not decisive",
            evidence_ids=[c.first.evidence[0].id],
        )
        for c in cands[:6]
    ]
    reasons = list(pic.notes)
    if any(f.class_id == "unknown" and "kill" in f.signature for f in findings):
        reasons.append(
            "a process was SIGKILLed but no kernel or cgroup OOM line says why (could be OOM, scheduler, user)"
        )
        if not any(h.class_id == "host_oom_kill" for h in hyps):
            hyps.insert(0, Hypothesis(class_id="host_oom_kill", score=0.0, why_not="no OOM-killer line in the bundle"))
    if not cands:
        reasons.append("no line in the bundle names a cause; only symptoms were found")
    clue = cands[0].first.evidence[0].id if cands else None
    culprit = Culprit()
    root_ids = [clue] if clue else []
    if cands and (len(cands[0].nodes) == 1 or (not cands[0].nodes and len(cands[0].ranks) == 1)):
        culprit = _culprit(cands[0], topo, findings)  # where it happened is known even when why is not
        registry = {ev.id: ev for f in findings for ev in f.evidence}
        cited = [registry[i] for i in root_ids if i in registry]
        root_ids += [i for i in _support(culprit, cands[0], findings, cited) if i not in root_ids]
    return Diagnosis(
        root_class="unknown",
        summary="Root cause not established: "
        + ("the evidence is not decisive" if cands else "only symptoms were found")
        + (f" (first unexplained error{_when(cands[0].time)}: {cands[0].first.summary})" if cands else ""),
        culprit=culprit,
        time=None,
        confidence=0.2 if cands else 0.1,
        root_evidence=root_ids,
        contributing=[],
        symptoms=_symptoms(groups, exclude=set()),
        hypotheses=hyps,
        timeline=_timeline(None, groups),
        reasoning=reasons,
    )


def _confidence(root: Candidate, others: list[Candidate], pic: Picture, culprit: Culprit) -> float:
    second = max((c.score for c in others), default=0.0)
    conf = 0.5 + min(max(root.score - second, 0.0), 40.0) / 100.0
    if any(r.startswith("corroborated") for r in root.reasons):
        conf += 0.05
    if pic.suspects and (root.ranks & pic.suspect_ranks):
        conf += 0.05
    if root.generic:
        conf = min(conf, 0.6)
    if all(f.source == "telemetry" for f in root.findings):
        conf = min(conf, 0.7)
    if len(root.findings) == 1 and not any(r.startswith("corroborated") for r in root.reasons):
        conf = min(conf, 0.8)
    if root.penalties:
        conf = min(conf, 0.6)
    if any(f.signature == "reduce.last_line" for f in root.findings):
        conf = min(conf, 0.7)  # inferred from what a rank did not print: it hung, or died without a word
    return round(min(calibrate(root, conf), 0.95), 2)


def _claim(class_id: str, summary: str, c: Candidate) -> Claim:
    return Claim(
        class_id=class_id,
        summary=summary,
        evidence_ids=[c.first.evidence[0].id],
        count=len(c.findings),
        ranks=sorted(c.ranks),
        nodes=sorted(c.nodes),
        first_time=c.time,
    )


def _symptoms(groups: list[Group], exclude: set[str]) -> list[Claim]:
    """Cascade and teardown groups, merged per class, biggest first."""
    by_class: dict[str, list[Group]] = defaultdict(list)
    for g in groups:
        if g.role in {"cascade", "teardown", "confirmation"} and g.class_id not in exclude:
            by_class[g.class_id].append(g)
    cat = load_catalogue()
    out: list[Claim] = []
    for cls, gs in by_class.items():
        ranks = sorted({r for g in gs for r in g.ranks})
        nodes = sorted({n for g in gs for n in g.nodes})
        count = sum(g.count for g in gs)
        firsts = [g.first_time for g in gs if g.first_time]
        lasts = [g.last_time for g in gs if g.last_time]
        who = _count(len(ranks), "rank") if ranks else _count(len(nodes), "node") if nodes else _count(count, "line")
        span = ""
        if firsts and lasts:
            span = f", {min(firsts):%H:%M:%S}–{max(lasts):%H:%M:%S}"
        what = cat.class_title(cls) if cls != "unknown" else f"“{gs[0].template[:90]}”"
        out.append(
            Claim(
                class_id=cls,
                summary=f"{who}: {what}{span}",
                evidence_ids=[gs[0].exemplar.id],
                count=count,
                ranks=ranks,
                nodes=nodes,
                first_time=min(firsts) if firsts else None,
                last_time=max(lasts) if lasts else None,
            )
        )
    out.sort(key=lambda c: (-c.count, c.class_id))
    return out


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _timeline(root: Candidate | None, groups: list[Group]) -> list[TimelineEntry]:
    entries: list[TimelineEntry] = []
    if root is not None:
        entries.append(
            TimelineEntry(
                time=root.time,
                evidence_id=root.first.evidence[0].id,
                role="root_candidate",
                class_id=root.class_id,
            )
        )
    seen = {e.evidence_id for e in entries}
    for g in groups:
        if g.exemplar.id in seen:
            continue
        seen.add(g.exemplar.id)
        entries.append(TimelineEntry(time=g.first_time, evidence_id=g.exemplar.id, role=g.role, class_id=g.class_id))
    timed = sorted((e for e in entries if e.time is not None), key=lambda e: e.time)  # type: ignore[arg-type, return-value]
    untimed = [e for e in entries if e.time is None]
    return (timed + untimed)[:MAX_TIMELINE]
