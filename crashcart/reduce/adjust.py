"""Adjusting the scored candidates: hardware first on a node, calibrated confidence, the specific line
within a class, and the suspect a peer error names."""

from __future__ import annotations

import re

from crashcart.catalogue import load_catalogue
from crashcart.models import Evidence, Finding, Topology
from crashcart.reduce.causal import HARDWARE_WINDOW, Candidate, _source_of, own_time, teardown_aborts


def hardware_first(cands: list[Candidate]) -> None:
    """TAXONOMY §1 rule 7: a hardware fault on a node explains software errors on that node.

    Two more same-event rules: the kernel's own report of a hardware fault outranks a rank's report of
    it, and under Kubernetes an OOMKilled record names the kernel OOM kill it came from.
    """
    cat = load_catalogue()
    by_class = {c.class_id: c for c in cands}
    k8s, oom = by_class.get("k8s_pod_eviction_or_oomkilled"), by_class.get("host_oom_kill")
    if k8s is not None and oom is not None and (not k8s.nodes or not oom.nodes or k8s.nodes & oom.nodes):
        k8s.score = max(k8s.score + 10, oom.score + 1)  # one event; under Kubernetes its record names the class
        k8s.reasons.append("Kubernetes recorded the kernel OOM kill")
    sched = by_class.get("scheduler_preemption_or_timelimit")
    failed = by_class.get("slurm_node_failure") or by_class.get("k8s_pod_eviction_or_oomkilled")
    if sched is not None and failed is not None and all(f.signature == "torchrun.death_signal" for f in sched.findings):
        sched.score -= 30  # the launcher was told to stop; the scheduler's record says why
        sched.penalties.append(f"explained by {failed.class_id}")
    for victim in ("dataloader_worker_failure", "unknown"):
        v = by_class.get(victim)
        if oom is not None and v is not None and v.nodes and v.nodes <= oom.nodes:
            v.score -= 15  # a process the kernel OOM killer picked dies with a bare SIGKILL
            v.penalties.append("explained by host_oom_kill on the same node")

    def hw(c: Candidate) -> bool:
        info = cat.classes.get(c.class_id)
        return bool(info and info.hardware) and c.severity == "P0"

    hardware = [c for c in cands if hw(c) and c.nodes]
    for h in hardware:
        if all(_source_of(f) == "kernel" or f.signature.startswith("kernel.") for f in h.findings):
            h.score += 6
            h.reasons.append("reported by the kernel itself")
    for c in cands:
        if hw(c) or not c.nodes:
            continue
        for h in hardware:
            ht, ct = own_time(h.first), own_time(c.first)
            if c.nodes <= h.nodes and (ht is None or ct is None or abs(ht - ct) <= HARDWARE_WINDOW):
                c.score -= 15
                c.penalties.append(f"explained by {h.class_id} on the same node")
                break


# Evidence that a job was stopped, not why (TAXONOMY §1 rule 5; issue 14 capability 4): torchrun's
# "Received <sig> death signal" (torch/distributed/elastic/agent/server/api.py), a Slurm CANCELLED line
# without a reason (slurmstepd "*** JOB <id> ON <node> CANCELLED AT <time> ***"), an agent-killed exit -15,
# Megatron's "[exiting program after receiving SIGTERM.]" (--exit-signal-handler: a signal from outside), Lightning's
# "Received SIGTERM: 15" (its signal connector).
WEAK_ROOT_SIGNATURES = frozenset(
    {
        "torchrun.death_signal",
        "slurm.cancelled",
        "slurm.step_abort_teardown",
        "megatron.exit_signal",
        "lightning.stop_signal",
    }
)
WEAK_CAP = 0.6
SYMPTOM_CAP = 0.7
# Signatures that take any message and give it a class by where it was printed (NCCL's "Cuda failure '%s'" for a
# CUDA error string no more specific signature knows): the class is a guess, never shown as high confidence.
CATCH_ALL_SIGNATURES = frozenset({"nccl.cuda_failure"})
# A CUDA API call that NCCL itself made and CUDA rejected ("NCCL WARN Cuda failure 1 'invalid argument'"): the
# user's code passed nothing wrong to CUDA, so which software is at fault (NCCL, the driver, a build or version
# mismatch, a caller's buffer) the line does not say (TAXONOMY rule 8b: NCCL's wording names where it gave up).
_INSIDE_NCCL = "NCCL WARN"


def calibrate(root: Candidate, conf: float) -> float:
    """Caps on confidence where the answer is an inference, not a line that states the cause.

    A symptom class as the root (a collective timeout, a lost peer: "a collective did not complete" says
    nothing of why), a stop signal without a reason and a catch-all's guess are never shown as high confidence.
    """
    info = load_catalogue().classes.get(root.class_id)
    if info is not None and info.default_role in {"cascade", "teardown"}:
        conf = min(conf, SYMPTOM_CAP)
    if root.findings and all(f.signature in WEAK_ROOT_SIGNATURES for f in root.findings):
        conf = min(conf, WEAK_CAP)
    if root.findings and all(f.signature in CATCH_ALL_SIGNATURES for f in root.findings):
        conf = min(conf, WEAK_CAP)
    if root.findings and all(
        f.signature == "cuda.api_error" and _INSIDE_NCCL in f.evidence[0].text for f in root.findings
    ):
        conf = min(conf, WEAK_CAP)
    if root.findings and all(f.signature in TRACE_ROOTS for f in root.findings):
        conf = min(conf, SYMPTOM_CAP)  # where the error passed (communicator set-up), not what it was
    return conf


WEAK_PENALTY = 10.0


def stopped_by_an_error(cands: list[Candidate]) -> None:
    """A stop without a reason (``WEAK_ROOT_SIGNATURES``) loses to an error printed before it (issue 14, capability
    4): Slurm cancels a step whose task failed ("srun: error: <node>: task 4: Out Of Memory", "srun: Terminating job
    step", then "*** STEP <id> ON <node> CANCELLED AT <time> ***"), so the cancel says the job stopped and the
    error says why. Before it: by the clocks, or earlier in the same file where a line has none."""
    for weak in cands:
        if not weak.findings or not all(f.signature in WEAK_ROOT_SIGNATURES for f in weak.findings):
            continue
        w = weak.first
        for c in cands:
            if (
                c is weak
                or c.generic
                or c.score < weak.score
                or any(f.signature in WEAK_ROOT_SIGNATURES for f in c.findings)
            ):
                continue
            f = c.first
            timed = f.time is not None and w.time is not None and f.time <= w.time
            same_file = f.evidence[0].file == w.evidence[0].file and f.evidence[0].line < w.evidence[0].line
            if timed or (f.time is None and same_file):
                weak.score -= WEAK_PENALTY
                weak.penalties.append(f"a stop without a reason, after {c.class_id} (its cause)")
                break


FRAME_SIGNATURES = frozenset({"native.frame0"})  # a native crash's innermost frame (context)
NATIVE = "native_crash_segfault_abort"
SPECIFIC_BEFORE = 10  # lines: a bind error's errno line is printed just before c10d's "failed to listen"
SPECIFIC_AFTER = 20  # lines: DataLoader's "Caught X in DataLoader worker" is followed by the original traceback
TRACE_ROOTS = frozenset({"nccl.init_error_trace"})  # a root that only says where an error passed, not what it was


def specific_lines(class_id: str, first: Finding, findings: list[Finding]) -> list[Evidence]:
    """Lines of the same class, rank and file around the root's line that say more than it does (issue 14,
    capability 10): the original exception under a wrapper ("Caught ValueError in DataLoader worker process 0",
    then the worker's own "ValueError: corrupt record ..."), the errno line under a generic "failed to listen",
    a native crash's frame #0 after its signal line. Up to two, nearest first; never separators or re-prints."""
    ev0 = first.evidence[0]
    if first.signature in TRACE_ROOTS:  # NCCLCHECK's trace follows the WARN that said what failed: cite that line
        said = [
            f
            for f in findings
            if f.evidence[0].file == ev0.file
            and 0 < ev0.line - f.evidence[0].line <= SPECIFIC_BEFORE
            and " WARN " in f.evidence[0].text
        ]
        if said:
            return [max(said, key=lambda f: f.evidence[0].line).evidence[0]]
    near = [
        f
        for f in findings
        if (f.class_id == class_id or (f.signature in FRAME_SIGNATURES and class_id == NATIVE))
        and f is not first
        and (f.role in {"root_candidate", "confirmation"} or f.signature in FRAME_SIGNATURES)
        and f.rank == first.rank
        and f.evidence[0].file == ev0.file
        and -SPECIFIC_BEFORE <= f.evidence[0].line - ev0.line <= SPECIFIC_AFTER
        and f.evidence[0].line != ev0.line
    ]
    if near:  # re-prints and aborts are told from the whole bundle: only when a line is near
        skip = teardown_aborts(findings)
        near = [f for f in near if f.id not in skip]
    near.sort(key=lambda f: abs(f.evidence[0].line - ev0.line))
    return [f.evidence[0] for f in near[:2]]


PEER_ROOTS = frozenset(
    {
        "nccl_remote_peer_failure",
        "ib_completion_error",
        "nccl_init_bootstrap_failure",
        "launcher_rendezvous_store_failure",
    }
)
_PORT = re.compile(r"(?:<\d+>|:\d+)$")


def peer_suspect(root: Candidate, findings: list[Finding], topo: Topology) -> tuple[str, list[Evidence]] | None:
    """The peer a remote/refused/reset error names, offered as the suspect (issue 14, capability 3).

    NCCL names the peer it lost ("Connection closed by remote peer <host><port>", "Got completion from peer
    <addr><port> with error", "Connect to <addr><port> failed : Connection refused"), gloo "[<addr>]:<port>",
    c10d the endpoint. The address is mapped to a node when a node has that name or NCCL's bootstrap line on a
    node says it uses that address. Returns (why, evidence naming it), or None when no single peer is named.
    """
    if root.class_id not in PEER_ROOTS:
        return None
    named = {_PORT.sub("", f.fields.get("peer") or f.fields.get("endpoint") or "") for f in root.findings}
    named.discard("")
    ranks = {f.fields["peer_rank"] for f in root.findings if f.fields.get("peer_rank", "").isdigit()}
    if len(named) == 1:
        peer = next(iter(named))
        if peer in {"127.0.0.1", "localhost", "::1"}:
            return None  # a single-host job: the address says nothing about which process went away
        node = peer if peer in topo.nodes else None
        cited: list[Evidence] = []
        if node is None:
            owners = {
                f.node or f.fields.get("host", "")
                for f in findings
                if f.role == "context" and f.fields.get("address") == peer and (f.node or f.fields.get("host"))
            }
            if len(owners) == 1:
                node = owners.pop()
                cited = [
                    next(f.evidence[0] for f in findings if f.role == "context" and f.fields.get("address") == peer)
                ]
        where = f" (node {node})" if node and node != peer else ""
        if root.class_id == "launcher_rendezvous_store_failure":
            return f"suspect: the store or rendezvous endpoint {peer}{where} that did not answer", cited
        return f"suspect: the peer at {peer}{where} that the failing rank lost; check that node first", cited
    if len(ranks) == 1:  # c10d: "[3] is setting up NCCL communicator and retrieving ncclUniqueId from [0]"
        return f"suspect: peer rank {next(iter(ranks))}, named by the failing rank's error", []
    return None
