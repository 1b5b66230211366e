"""Reduce stage: the host as the place of a hardware fault (issue 14, capability 7).

Input: the scored candidates, every finding, the topology. Output: the same candidates, where the evidence
as a whole names a place the first finding alone does not (``Candidate.where``), with the lines that say so
added to the candidate and a reason. Pure.

- Several programs failing on one host point at the host. When independent processes on one host (ranks,
  or unrelated programs the kernel log names by pid) fail with device-level errors within a few minutes,
  and the errors do not all name one GPU, no single rank or GPU explains them: the host (its PCIe fabric,
  power, baseboard, driver) is the suspect. TAXONOMY §1 rule 7 (hardware on a node explains the software
  errors on it) and class 15 (an application-fault Xid from different programs on one GPU is hardware).
  Device-level errors are the hardware classes of classes.toml and CUDA's device-state errors
  (cudaErrorUnknown, cudaErrorDevicesUnavailable, cudaErrorInitializationError; CUDA runtime
  driver_types.h), not kernel faults such as illegal accesses or device-side asserts.
- An NVSwitch SXid names the switch's PCI id, not a GPU's ("nvidia-nvswitch%d: SXid (PCI:%s): %05d, ...",
  open-gpu-kernel-modules src/common/nvswitch/kernel/inc/common_nvswitch.h). When GPUs of the same host
  report their side of the fault in the same moments (an NVLink, engine-halt or fallen-off Xid) and they
  all name one GPU, that GPU is the endpoint of the switch's error.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from crashcart.catalogue import load_catalogue
from crashcart.models import Culprit, Finding, Topology
from crashcart.reduce.causal import Candidate, own_time

HOST_WINDOW = timedelta(minutes=5)  # "at about the same time": one event, not two unrelated failures
SWITCH_WINDOW = timedelta(minutes=2)  # an SXid and the GPU Xids of the same link fault
HOST_BONUS = 8.0
DEVICE_SIGNATURES = frozenset({"cuda.kernel_fault_device", "cuda.device_fault", "cuda.ecc_uncorrectable"})
NOT_DEVICE = frozenset({"ib_completion_error", "slurm_node_failure", "straggler_fail_slow"})  # network, scheduler


def _device_classes() -> frozenset[str]:
    cat = load_catalogue()
    hw = {k for k, v in cat.classes.items() if v.hardware}
    return frozenset((hw - NOT_DEVICE) | {"gpu_app_fault_xid"})


def is_device_error(f: Finding) -> bool:
    """A device-level failure: a GPU/driver/PCIe fault, or a CUDA error that says the device is in a bad state."""
    if f.role not in {"root_candidate", "confirmation"}:
        return False  # teardown (Xid 43/45) and cascades follow a fault, they do not report one
    return f.signature in DEVICE_SIGNATURES or f.class_id in _device_classes()


def _pid_ranks(findings: list[Finding]) -> dict[tuple[str | None, str], int]:
    """(node, pid) -> rank, from lines that show both (NCCL's host:pid:tid prefix, torchrun's summary)."""
    seen: dict[tuple[str | None, str], set[int]] = defaultdict(set)
    for f in findings:
        pid = f.fields.get("pid", "")
        if f.rank is not None and pid.isdigit():
            seen[(f.node, pid)].add(f.rank)
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1}


def _process(f: Finding, pid_rank: dict[tuple[str | None, str], int]) -> str | None:
    """Which process a line speaks for: its rank, or the pid the kernel names (the rank that pid is).

    An application-fault Xid (13, 31, ...) counts by program name: the ranks of one job run the same program,
    and a bug in it may fault on several of them; only different programs faulting together say hardware."""
    if f.class_id == "gpu_app_fault_xid":
        comm = f.fields.get("comm", "").strip("'")
        return f"program {comm}" if comm and comm != "<unknown>" else None
    if f.rank is not None:
        return f"rank {f.rank}"
    pid = f.fields.get("pid", "").strip("'")
    if not pid.isdigit() or pid == "0":
        return None  # pid=0, '<unknown>': the driver's own thread, no program
    rank = pid_rank.get((f.node, pid))
    return f"rank {rank}" if rank is not None else f"pid {pid}"


def _host(f: Finding, topo: Topology) -> str | None:
    if f.node:
        return f.node
    info = topo.ranks.get(f.rank) if f.rank is not None else None
    if info is not None and info.node:
        return info.node
    return topo.nodes[0] if len(topo.nodes) == 1 else None


def _one_event(events: list[Finding]) -> list[Finding]:
    """The device errors of the host's first failure: within HOST_WINDOW of the earliest one with a time (a
    time taken from an earlier line counts, as a lower bound); lines with no time at all are kept."""
    times = [f.time for f in events if f.time is not None]
    if not times:
        return events
    start = min(times)
    return [f for f in events if f.time is None or f.time - start <= HOST_WINDOW]


def host_suspects(cands: list[Candidate], findings: list[Finding], topo: Topology) -> None:
    """Independent processes on one host failing with device errors together: the host is the suspect."""
    pid_rank = _pid_ranks(findings)
    by_host: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        host = _host(f, topo)
        if host is not None and is_device_error(f):
            by_host[host].append(f)
    for host, events in sorted(by_host.items()):
        event = _one_event(events)
        procs: dict[str, Finding] = {}
        for f in sorted(event, key=lambda f: (own_time(f) or datetime.max.astimezone(), f.evidence[0].line)):
            p = _process(f, pid_rank)
            if p is not None:
                procs.setdefault(p, f)
        gpus = {f.gpu for f in event if f.gpu}
        if len(procs) < 2 or len(gpus) == 1:
            continue  # one program, or one GPU that every report names: that GPU or rank speaks for itself
        ids = {f.id for f in event}
        for c in cands:
            if c.where is not None or not any(f.id in ids for f in c.findings):
                continue
            c.lead = c.first  # the candidate's own line still speaks for it; the others say where
            own = {f.id for f in c.findings}
            c.findings.extend(f for f in procs.values() if f.id not in own)
            c.where = Culprit(node=host)
            c.score += HOST_BONUS
            names = ", ".join(sorted(procs))
            c.reasons.append(
                f"{len(procs)} programs on {host} ({names}) failed with device errors within "
                f"{int(HOST_WINDOW.total_seconds() // 60)} minutes: the host is the suspect, not one rank"
            )


def switch_endpoint(cands: list[Candidate], findings: list[Finding]) -> None:
    """An NVSwitch fault whose GPU side one GPU of the same host reports: that GPU is the link's endpoint."""
    cat = load_catalogue()
    for c in cands:
        sxids = [f for f in c.findings if f.signature == "kernel.sxid" and own_time(f) is not None]
        if c.class_id != "nvswitch_fabric_manager_error" or not sxids or c.where is not None:
            continue
        node = c.first.node
        start = min(t for f in sxids if (t := own_time(f)) is not None)
        gpu_side = [
            f
            for f in findings
            if f.signature == "kernel.xid"
            and f.gpu
            and f.node == node
            and f.role in {"root_candidate", "confirmation"}
            and (info := cat.classes.get(f.class_id)) is not None
            and info.hardware
            and (t := own_time(f)) is not None
            and abs(t - start) <= SWITCH_WINDOW
        ]
        gpus = {f.gpu for f in gpu_side}
        if len(gpus) != 1:
            continue  # no GPU, or several: the switch (the fabric) is what they share
        gpu = gpus.pop()
        c.lead = c.first
        first = min(gpu_side, key=lambda f: (own_time(f) or start, f.evidence[0].line))
        if first.id not in {f.id for f in c.findings}:
            c.findings.append(first)
        c.where = Culprit(node=node, gpu=gpu)
        c.reasons.append(
            f"GPU {gpu} on the same host reported its side of the fault at the same time "
            f"(Xid {first.fields.get('xid', '?')}): the switch's failing link ends there"
        )


STALE_MIN_MIB = 1024  # less is a context or a monitoring agent, not memory a job misses
STALE_SCORE = 50.0
STALE_BONUS = 10.0


def stale_gpu_memory(cands: list[Candidate], findings: list[Finding]) -> None:
    """A stopped or defunct process that still holds GPU memory starves every job on that GPU.

    nvidia-smi's Processes table names the pid and its memory; ``ps`` says the process is stopped (T) or a
    zombie (Z), so it will never free it: a CUDA out-of-memory cause that is node hygiene, not the job's
    size (TAXONOMY class 16: "Process <pid> has ... memory in use" is a zombie from a previous job).
    """
    rows = {
        f.fields["pid"]: f
        for f in findings
        if f.signature == "nvsmi.process_row" and int(f.fields.get("gpu_mem_mib", "0")) >= STALE_MIN_MIB
    }
    stopped = [f for f in findings if f.signature == "ps.process_stopped" and f.fields.get("pid") in rows]
    if not stopped:
        return
    evidence = [x for p in stopped for x in (rows[p.fields["pid"]], p)]
    held = ", ".join(
        f"process {p.fields['pid']} (STAT {p.fields.get('stat', '?')}) holds "
        f"{rows[p.fields['pid']].fields['gpu_mem_mib']} MiB on GPU {rows[p.fields['pid']].fields['gpu']}"
        for p in stopped
    )
    reason = f"{held}: a stopped or defunct process keeps GPU memory no job on that GPU can use"
    oom = next((c for c in cands if c.class_id == "cuda_oom"), None)
    if oom is not None:  # the job's own out-of-memory error: the stale process says why
        oom.lead = oom.first
        oom.findings.extend(  # cited beside the error, as a configuration smell is (explain._compose)
            e.model_copy(update={"class_id": "cuda_oom", "fields": {**e.fields, "_smell": "stale_gpu_process"}})
            for e in evidence
        )
        oom.reasons.append(reason)
        oom.score += STALE_BONUS
        return
    moved = [
        e.model_copy(update={"class_id": "cuda_oom", "role": "root_candidate", "severity": "P1"}) for e in evidence
    ]
    c = Candidate("cuda_oom", moved, [], score=STALE_SCORE)
    c.lead = moved[0]
    c.reasons.append(reason)
    c.penalties.append("no line of the job says it ran out of memory: inferred from the process table")
    cands.append(c)
