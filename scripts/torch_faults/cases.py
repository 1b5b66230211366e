"""The registry of fault kinds: one ``Case`` per incident folder under ``incidents/torch/``.

A case says how to launch the job (layout, nodes, ranks, worker arguments, environment), what to set up around it
and do while it runs (``hooks``), the labels that follow from the injection (class, culprit rank), and how to find the
lines that show the injected fault (``root``) and its loudest symptoms (``symptoms``) in the logs it produced. To add
a case (a new hang, say), append an entry; the generator, the README and ``--check`` pick it up.

Regexes in ``Find`` are matched against a line with its launcher prefixes (``[default1]:``, ``[rank1]:``) removed;
the label keeps the exact line. Rank output that torchrun repeats in its failure summary is indented there, so an
anchored ``^`` regex finds the rank's own line.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Literal

from torch_faults.hooks import (
    Action,
    Setup,
    dump_stacks,
    memory_cgroup,
    old_checkpoint,
    other_job_on_port,
    private_tmpfs,
    signal_launcher,
    signal_rank,
)

Layout = Literal["log-dir", "tee", "console"]


@dataclass(frozen=True)
class Find:
    """Where a label line is: the first (or last) line matching ``regex``, in the output of global rank ``rank``
    only, or in torchrun's own output only (``agent``), or anywhere (neither), in files whose path (relative to
    the case) matches ``file``; ``optional`` lines may be absent."""

    regex: str
    rank: int | None = None
    agent: bool = False
    last: bool = False
    file: str = ""
    optional: bool = False


@dataclass(frozen=True)
class Case:
    id: str
    fault: str
    cls: str
    injected: str
    culprit: int | None
    layout: Layout
    root: tuple[Find, ...]
    symptoms: tuple[Find, ...] = ()
    symptom_classes: tuple[str, ...] = ()
    acceptable: tuple[str, ...] = ()
    train: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    nodes: int = 1
    first_node: int = 0
    nproc: int = 2
    rdzv: Literal["static", "c10d"] = "static"
    rdzv_conf: str = ""
    launcher: tuple[str, ...] = ()  # more torchrun arguments (``--max-restarts 1``)
    nnodes_of: tuple[int, ...] = ()  # each agent's own --nnodes, when they disagree (default: ``nodes`` for all)
    setups: tuple[Setup, ...] = ()
    action: Action | None = None
    confidence: Literal["high", "medium"] = "high"
    notes: str = ""
    timeout: float = 150.0
    what: str = ""  # one line for the README


SHORT_PG = ("--pg-timeout", "10")
PEER_GONE = r"^RuntimeError: \[\S*gloo\S*\] (Connection closed by peer|Read error .*Connection reset by peer)"
GLOO_TIMEOUT = r"^RuntimeError: \[\S*gloo\S*\] Timed out waiting \d+ms for (recv|send) operation to complete"
SUMMARY_ROOT = r"^Root Cause \(first observed failure\):$"


def exitcode(code: int) -> str:
    return rf"^\s+exitcode\s+: {code} \(pid: \d+\)"


CASES: list[Case] = [
    Case(
        id="keyerror-rank3",
        fault="python_exception",
        cls="python_exception_rank_crash",
        injected="rank 3 (node 1, local rank 1) reads a record without its 'label' key at step 35: KeyError raised "
        "in the dataset's __getitem__ (num_workers=0)",
        culprit=3,
        layout="log-dir",
        nodes=2,
        train=("--fault", "keyerror", "--fault-rank", "3"),
        root=(Find(r"^KeyError: 'label'$", rank=3),),
        symptoms=(Find(PEER_GONE),),
        symptom_classes=("nccl_remote_peer_failure", "torchelastic_childfailed_summary"),
        what="KeyError in the data path on rank 3 (second of two torchrun agents); its peers see the gloo "
        "connection closed.",
    ),
    Case(
        id="segfault-rank1",
        fault="sigsegv",
        cls="native_crash_segfault_abort",
        injected="rank 1 calls ctypes.string_at(0) at step 35 (a NULL read: SIGSEGV); the entry point is not "
        "wrapped in @record, so no faulthandler dump",
        culprit=1,
        layout="tee",
        env={"LOGLEVEL": "INFO"},
        train=("--fault", "segfault", "--no-record"),
        root=(Find(exitcode(-11), agent=True), Find(r"^\s+traceback : Signal 11 \(SIGSEGV\) received by PID \d+$")),
        symptoms=(Find(PEER_GONE),),
        symptom_classes=("nccl_remote_peer_failure", "torchelastic_childfailed_summary"),
        what="SIGSEGV on rank 1 with no stack dump: only torchrun's summary (exitcode -11) names it.",
    ),
    Case(
        id="abort-rank0",
        fault="sigabrt",
        cls="native_crash_segfault_abort",
        injected="rank 0 calls os.abort() at step 35 (SIGABRT); @record's faulthandler prints 'Fatal Python error: "
        "Aborted' and the Python stack",
        culprit=0,
        layout="console",
        env={"TORCH_CPP_LOG_LEVEL": "INFO"},
        train=("--fault", "abort", "--fault-rank", "0"),
        root=(Find(r"^Fatal Python error: Aborted$"), Find(exitcode(-6), agent=True)),
        symptoms=(Find(PEER_GONE),),
        symptom_classes=("nccl_remote_peer_failure", "torchelastic_childfailed_summary"),
        what="os.abort() on rank 0: 'Fatal Python error: Aborted' in the pasted console, exitcode -6.",
    ),
    Case(
        id="sigkill-rank1",
        fault="sigkill",
        cls="unknown",
        acceptable=("host_oom_kill",),
        injected="the generator sends SIGKILL to rank 1's process from outside once it reports step 30; there is no "
        "OOM or scheduler line anywhere",
        culprit=1,
        layout="log-dir",
        train=("--marker-dir", "markers"),
        action=signal_rank(1, 30, signal.SIGKILL),
        root=(
            Find(exitcode(-9), agent=True),
            Find(r"^\s+traceback : Signal 9 \(SIGKILL\) received by PID \d+$", agent=True),
        ),
        symptoms=(Find(PEER_GONE),),
        symptom_classes=("nccl_remote_peer_failure", "torchelastic_childfailed_summary"),
        confidence="medium",
        notes="TAXONOMY §1 rule 8(a): a SIGKILL with no kernel/cgroup OOM line is 'unknown' (it could be OOM, "
        "the scheduler, a user, a health check); host_oom_kill is the likeliest alternative an expert would accept.",
        what="Rank 1 SIGKILLed from outside, nothing says why: exitcode -9 only (unknown per rule 8).",
    ),
    Case(
        id="hang-rank1",
        fault="hang",
        cls="rank_hang_or_missing_rank",
        injected="rank 1 blocks forever on an Event nobody sets at step 35, before the step's DDP all-reduce; "
        "process-group timeout 10 s",
        culprit=1,
        layout="log-dir",
        env={"LOGLEVEL": "INFO"},
        train=("--fault", "hang", *SHORT_PG),
        root=(Find(r"^step \d+/100 loss", rank=1, last=True),),
        symptoms=(Find(GLOO_TIMEOUT, rank=0),),
        symptom_classes=("nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        notes="A hang prints nothing: the root-cause line is the hung rank's last line before it went silent "
        "(step 30); rank 0 times out in gloo 10 s later, and torchrun then SIGTERMs rank 1 (exitcode -15).",
        what="Rank 1 hangs before a collective; rank 0 hits the 10 s gloo timeout; rank 1's log just stops.",
    ),
    Case(
        id="slow-rank1",
        fault="straggler",
        cls="straggler_fail_slow",
        acceptable=("rank_hang_or_missing_rank",),
        injected="rank 1 spends 30 s of real CPU work (matmuls) rebuilding an index at step 35, logging each shard; "
        "process-group timeout 10 s",
        culprit=1,
        layout="tee",
        train=("--fault", "slow", *SHORT_PG),
        root=(
            Find(r"^rank 1: rebuilding the token-length index", rank=1),
            Find(r"^rank 1: index shard \d+/\d+ done", rank=1, last=True),
        ),
        symptoms=(Find(GLOO_TIMEOUT, rank=0),),
        symptom_classes=("nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        notes="The slow rank is alive and logging (its shard lines) while rank 0 times out waiting for it.",
        what="Rank 1 does 30 s of non-collective work with progress lines; rank 0 times out after 10 s.",
    ),
    Case(
        id="mismatch-shape",
        fault="collective_mismatch",
        cls="collective_mismatch_desync",
        acceptable=("rank_hang_or_missing_rank",),
        injected="from step 40, rank 1 all_reduces a 3-element metrics tensor while ranks 0, 2, 3 all_reduce 2 "
        "elements (a rank-conditional extra metric); manual gradient all_reduce, no debug flags; 10 s timeout",
        culprit=1,
        layout="console",
        nproc=4,
        train=("--fault", "mismatch", "--grad-sync", "manual", *SHORT_PG),
        root=(Find(r"^\s+mean = reduce_metrics\(", rank=1), Find(r"^\s+dist\.all_reduce\(buf, ", rank=1)),
        symptoms=(Find(GLOO_TIMEOUT),),
        symptom_classes=("nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        confidence="medium",
        notes="Every rank times out; the clue is in the stacks: some ranks wait in reduce_metrics' all_reduce, the "
        "others already in the gradient all_reduce. The ring all-reduce lets a neighbour of rank 1 (here rank 2) wait "
        "in reduce_metrics too, so these logs alone do not single out rank 1: the culprit is the injected rank.",
        what="Rank 1 all_reduces a different shape; without debug flags only gloo timeouts and differing stacks.",
    ),
    Case(
        id="mismatch-shape-detail",
        fault="collective_mismatch",
        cls="collective_mismatch_desync",
        injected="as mismatch-shape, with TORCH_DISTRIBUTED_DEBUG=DETAIL: rank 1 (node 0, local rank 1) sends "
        "TensorShape=[3], ranks 0, 2, 3 TensorShape=[2]",
        culprit=1,
        layout="tee",
        nodes=2,
        env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        train=("--fault", "mismatch", "--grad-sync", "manual", *SHORT_PG),
        root=(Find(r"^RuntimeError: Detected mismatch between collectives on ranks\. Rank 1 is running", rank=1),),
        symptoms=(Find(r"^RuntimeError: Detected mismatch between collectives on ranks\. Rank 0 ", rank=0),),
        symptom_classes=("torchelastic_childfailed_summary",),
        notes="DDP is not used here: with TORCH_DISTRIBUTED_DEBUG=DETAIL, DDP's constructor segfaults in this CPU "
        "build (see ddp-detail-segfault), so gradients are averaged by hand.",
        what="Same mismatch with TORCH_DISTRIBUTED_DEBUG=DETAIL: 'Detected mismatch between collectives' "
        "on every rank; rank 1 is the odd one out.",
    ),
    Case(
        id="ddp-detail-segfault",
        fault="sigsegv",
        cls="native_crash_segfault_abort",
        injected="TORCH_DISTRIBUTED_DEBUG=DETAIL with DDP on gloo/CPU: every rank segfaults inside "
        "DistributedDataParallel.__init__ (a crash of this torch build, found while making mismatch-shape-detail)",
        culprit=None,
        layout="console",
        env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        root=(Find(r"^Fatal Python error: Segmentation fault$"), Find(exitcode(-11), agent=True)),
        symptom_classes=("torchelastic_childfailed_summary",),
        notes="Not an injected fault but a real crash that the DETAIL flag triggers in torch's DDP logger; every "
        "rank dies the same way, so no single culprit rank.",
        what="Every rank segfaults in DDP's constructor when TORCH_DISTRIBUTED_DEBUG=DETAIL is set.",
    ),
    Case(
        id="rdzv-port-in-use",
        fault="rendezvous_eaddrinuse",
        cls="launcher_rendezvous_store_failure",
        injected="another job's TCPStore already listens on the rendezvous port; node 0's agent cannot host the C10d "
        "store (EADDRINUSE) and node 1's agent joins the other job's store and times out waiting for node 0",
        culprit=None,
        layout="console",
        nodes=2,
        rdzv="c10d",
        setups=(other_job_on_port,),
        root=(Find(r"name: EADDRINUSE, message: address already in use$", agent=True),),
        symptoms=(Find(r"^torch\.distributed\.elastic\.rendezvous\.api\.Rendezvous\w+Error\b", file="^node1/"),),
        timeout=180.0,
        what="Rendezvous port already taken by another job: EADDRINUSE on node 0; node 1 times out waiting.",
    ),
    Case(
        id="store-unreachable",
        fault="store_unreachable",
        cls="launcher_rendezvous_store_failure",
        injected="only node 1's agent starts (static rendezvous, --node-rank 1); nobody listens on MASTER_ADDR:port, "
        "and the store timeout is 10 s",
        culprit=None,
        layout="console",
        nodes=2,
        first_node=1,
        rdzv_conf="timeout=10",
        env={"TORCH_CPP_LOG_LEVEL": "INFO"},
        root=(Find(r"The client socket has timed out after \d+ms while trying to connect to \(127\.0\.0\.1, \d+\)"),),
        symptoms=(Find(r"^torch\.distributed\.DistNetworkError: ", agent=True),),
        what="The master never came up: node 1's agent times out connecting to the TCPStore.",
    ),
    Case(
        id="dataloader-worker-killed",
        fault="dataloader_worker_death",
        cls="dataloader_worker_failure",
        injected="a DataLoader worker of rank 1 (num_workers=2) is SIGKILLed while it reads the step-35 batch",
        culprit=1,
        layout="log-dir",
        train=("--fault", "worker_killed", "--num-workers", "2"),
        root=(Find(r"DataLoader worker \(pid\(?s?\)? ?\d+\)? (is killed by signal|exited unexpectedly)", rank=1),),
        notes="The worker dies by SIGKILL with no OOM line (rule 8 would call a bare SIGKILL unknown), but the "
        "DataLoader names the dead worker, which is this class's own signature.",
        symptoms=(Find(PEER_GONE),),
        symptom_classes=("nccl_remote_peer_failure", "torchelastic_childfailed_summary"),
        what="A DataLoader worker of rank 1 is killed by a signal; the rank fails, its peer sees the socket close.",
    ),
    Case(
        id="dataloader-worker-raise",
        fault="dataloader_worker_exception",
        cls="python_exception_rank_crash",
        acceptable=("dataloader_worker_failure",),
        injected="a DataLoader worker of rank 0 (num_workers=2) raises ValueError decoding the step-35 record; the "
        "DataLoader re-raises it in rank 0",
        culprit=0,
        layout="tee",
        env={"LOGLEVEL": "INFO", "TORCH_CPP_LOG_LEVEL": "INFO"},
        train=("--fault", "worker_raise", "--fault-rank", "0", "--num-workers", "2"),
        root=(Find(r"^ValueError: corrupt record \d+: could not decode field 'features'", rank=0),),
        symptoms=(Find(r"^ValueError: Caught ValueError in DataLoader worker process \d\.$", rank=0),),
        symptom_classes=("nccl_remote_peer_failure", "torchelastic_childfailed_summary"),
        what="A worker raises on a corrupt record; rank 0 re-raises 'Caught ValueError in DataLoader worker'.",
    ),
    Case(
        id="shm-exhausted",
        fault="shm_exhaustion",
        cls="dataloader_worker_failure",
        injected="/dev/shm is a 1 MiB tmpfs (private mount namespace) while each rank's 2 DataLoader workers pass "
        "~400 KB batches through shared memory; whichever rank's worker allocates first fails",
        culprit=None,
        layout="console",
        setups=(private_tmpfs("/dev/shm", "1m"),),
        train=("--num-workers", "2", "--features", "3072", "--batch-size", "32"),
        root=(Find(r"unable to allocate shared memory\(shm\) for file </torch_\S+>: No space left on device \(28\)"),),
        symptoms=(Find(PEER_GONE),),
        symptom_classes=("nccl_remote_peer_failure", "torchelastic_childfailed_summary"),
        notes="The shared-memory limit belongs to the node (a container's --shm-size), not to one rank; which "
        "rank's worker hits it first is a race, so no culprit rank is labelled.",
        what="/dev/shm too small for the DataLoader workers: 'unable to allocate shared memory(shm)', ENOSPC.",
    ),
    Case(
        id="nan-loss-rank1",
        fault="nan_loss",
        cls="nan_inf_loss_or_grad",
        injected="rank 1's step-35 batch holds a sample with an inf feature; the loop sees a non-finite loss, prints "
        "'Loss is nan, stopping training' and exits 1 (as the MAE/DeiT training loops do)",
        culprit=1,
        layout="tee",
        env={"LOGLEVEL": "INFO"},
        train=("--fault", "nan_loss"),
        root=(Find(r"^Loss is (nan|inf), stopping training$", rank=1),),
        symptoms=(Find(PEER_GONE),),
        symptom_classes=("nccl_remote_peer_failure", "torchelastic_childfailed_summary"),
        what="A corrupt sample gives rank 1 a NaN loss; it stops with 'Loss is nan, stopping training'.",
    ),
    Case(
        id="ckpt-disk-full",
        fault="enospc_checkpoint",
        cls="storage_full_or_io_error",
        injected="the checkpoint directory is a 256 KiB tmpfs (private mount namespace); rank 0's step-20 checkpoint "
        "(~115 KB) fits, its torch.save at step 40 runs out of space",
        culprit=0,
        layout="log-dir",
        setups=(private_tmpfs("checkpoints", "256k"),),
        train=("--ckpt-every", "20", "--hidden", "256"),
        root=(
            Find(r"^RuntimeError: basic_ios::clear: iostream error$", rank=0),
            Find(r"^RuntimeError: \[enforce fail at inline_container\.cc:\d+\] \. unexpected pos \d+ vs \d+$", rank=0),
        ),
        symptoms=(Find(PEER_GONE),),
        symptom_classes=("nccl_remote_peer_failure", "torchelastic_childfailed_summary"),
        what="Checkpoint dir full: rank 0's torch.save fails; rank 1 loses its peer at the barrier.",
    ),
    Case(
        id="cgroup-oom-rank1",
        fault="cgroup_oom_kill",
        cls="host_oom_kill",
        injected="the job runs in a 1200 MiB memory cgroup; rank 1 caches 64 MiB blocks in host memory from step 35 "
        "until the kernel's cgroup OOM killer SIGKILLs it",
        culprit=1,
        layout="console",
        setups=(memory_cgroup(1200),),
        train=("--fault", "host_oom"),
        root=(
            Find(r"Memory cgroup out of memory: Killed process \d+"),
            Find(exitcode(-9), agent=True),
        ),
        symptoms=(Find(PEER_GONE),),
        symptom_classes=("nccl_remote_peer_failure", "torchelastic_childfailed_summary"),
        what="Rank 1 grows past the cgroup's memory limit: the kernel's OOM kill in dmesg.log, exitcode -9.",
    ),
    Case(
        id="sigterm-torchrun",
        fault="scheduler_sigterm",
        cls="scheduler_preemption_or_timelimit",
        injected="the generator sends SIGTERM to torchrun once rank 0 reports step 40, as a scheduler does at a "
        "time limit or preemption",
        culprit=None,
        layout="tee",
        train=("--marker-dir", "markers"),
        action=signal_launcher(40, signal.SIGTERM),
        root=(Find(r"Received (Signals\.SIGTERM|15) death signal, shutting down workers$", agent=True),),
        symptoms=(Find(r"^torch\.distributed\.elastic\.multiprocessing\.api\.SignalException: ", agent=True),),
        symptom_classes=("torchelastic_childfailed_summary",),
        what="torchrun gets SIGTERM mid-training and shuts its workers down.",
    ),
    Case(
        id="clean-run",
        fault="none",
        cls="no_failure",
        injected="nothing: 100 steps complete normally",
        culprit=None,
        layout="log-dir",
        env={"LOGLEVEL": "INFO", "TORCH_CPP_LOG_LEVEL": "INFO"},
        train=("--ckpt-every", "50"),
        root=(),
        what="A normal run (LOGLEVEL=INFO, TORCH_CPP_LOG_LEVEL=INFO), checkpoints included.",
    ),
]

# Hang cases (issue 18): Flight Recorder on (a ring of 2,000 entries), each rank's dump written by a watchdog thread
# of train.py once no step has started for a while (gloo dumps nothing by itself), kept under fr/ in the bundle.
FR_ENV = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": "fr/comm_lib_trace_rank_"}
LAST_STEP = r"^step \d+/100 loss "


def fr_dump(rank: int) -> Find:
    """The culprit's Flight Recorder dump (line 1: the JSON form is one line; the pickle has no lines)."""
    return Find(r".", file=rf"^fr/comm_lib_trace_rank_{rank}$")


def fr_train(form: str, after: float, timeout: float) -> tuple[str, ...]:
    return ("--fr-form", form, "--fr-dump-after", str(after), "--pg-timeout", str(timeout))


HANG_CASES: list[Case] = [
    Case(
        id="fr-missing-rank3",
        fault="hang",
        cls="rank_hang_or_missing_rank",
        injected="rank 3 of 4 waits forever on a prefetch event at step 35 and never enters that step's DDP "
        "all_reduce; every rank's Flight Recorder dump (JSON form) is written after 5 s without a step",
        culprit=3,
        layout="log-dir",
        nproc=4,
        env=FR_ENV,
        train=("--fault", "hang", "--fault-rank", "3", *fr_train("json", 5, 10)),
        root=(fr_dump(3), Find(LAST_STEP, rank=3, last=True)),
        symptoms=(Find(GLOO_TIMEOUT),),
        symptom_classes=("nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        what="Rank 3 never enters a collective; its Flight Recorder dump (JSON) ends one collective_seq_id early.",
    ),
    Case(
        id="fr-mismatch-rank2",
        fault="collective_mismatch",
        cls="collective_mismatch_desync",
        injected="from step 40, rank 2 all_reduces a 3-element metrics tensor while ranks 0, 1, 3 all_reduce 2 "
        "elements; manual gradient all_reduce; Flight Recorder dumps in the pickle form",
        culprit=2,
        layout="log-dir",
        nproc=4,
        env=FR_ENV,
        train=("--fault", "mismatch", "--fault-rank", "2", "--grad-sync", "manual", *fr_train("pickle", 5, 10)),
        root=(fr_dump(2),),
        symptoms=(Find(GLOO_TIMEOUT, optional=True),),
        symptom_classes=("nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        what="Rank 2 all_reduces another shape: same collective_seq_id, other input_sizes in its pickle dump.",
    ),
    Case(
        id="fr-straggler-rank1",
        fault="straggler",
        cls="straggler_fail_slow",
        acceptable=("rank_hang_or_missing_rank",),
        injected="from step 20 rank 1 sleeps one second more each step (1 s, 2 s, ...) before the next collective, "
        "until a wait passes the 8 s timeout; Flight Recorder dumps (JSON) after 6 s without a step",
        culprit=1,
        layout="log-dir",
        nproc=4,
        env=FR_ENV,
        train=(
            "--fault",
            "none",
            "--fault-rank",
            "1",
            "--fault-step",
            "20",
            "--straggle",
            "1.0",
            *fr_train("json", 6, 8),
        ),
        root=(fr_dump(1),),
        symptoms=(Find(GLOO_TIMEOUT, optional=True),),
        symptom_classes=("nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        what="Rank 1 gets slower every step: its dump shows it entering every recent collective last, seconds late.",
    ),
    Case(
        id="pyspy-deadlock-rank2",
        fault="deadlock",
        cls="rank_hang_or_missing_rank",
        injected="rank 2 takes a non-reentrant lock its caller holds at step 35 (a Python deadlock); py-spy dump of "
        "every rank 4 s later; Flight Recorder dumps (pickle) after 8 s; 30 s timeout",
        culprit=2,
        layout="log-dir",
        nproc=4,
        env=FR_ENV,
        train=("--fault", "deadlock", "--fault-rank", "2", "--marker-dir", "markers", *fr_train("pickle", 8, 30)),
        action=dump_stacks(4, 35, 4.0, "py-spy"),
        root=(Find(r"^    _refresh_shard_cache \(", file=r"^stacks/py-spy-rank2\.txt$"), fr_dump(2)),
        symptoms=(Find(GLOO_TIMEOUT, optional=True),),
        symptom_classes=("nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        what="A deadlocked rank 2 caught by py-spy dump: its main thread in a lock, the others in all_reduce.",
    ),
    Case(
        id="faulthandler-deadlock-rank1",
        fault="deadlock",
        cls="rank_hang_or_missing_rank",
        injected="rank 1 deadlocks on a non-reentrant lock at step 35; 4 s later every rank gets SIGUSR1, whose "
        "faulthandler.register(all_threads=True) prints every thread's stack to the rank's stderr; Flight Recorder "
        "dumps (JSON) after 8 s; 20 s timeout",
        culprit=1,
        layout="log-dir",
        nproc=4,
        env=FR_ENV,
        train=(
            "--fault",
            "deadlock",
            "--fault-rank",
            "1",
            "--marker-dir",
            "markers",
            "--faulthandler-signal",
            *fr_train("json", 8, 20),
        ),
        action=dump_stacks(4, 35, 4.0, "faulthandler"),
        root=(Find(r'^  File ".*train\.py", line \d+ in _refresh_shard_cache$', rank=1), fr_dump(1)),
        symptoms=(Find(GLOO_TIMEOUT, optional=True),),
        symptom_classes=("nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        what="The same deadlock caught by faulthandler: rank 1's stderr shows the lock, the others all_reduce.",
    ),
    Case(
        id="tp-hang-rank3",
        fault="hang",
        cls="rank_hang_or_missing_rank",
        injected="4 ranks, data parallel over all (PG 0) and tensor parallel in pairs (PGs 1: ranks 0-1, 2: ranks "
        "2-3); rank 3 hangs at step 35 before its tensor-parallel all_reduce: rank 2 waits in PG 2, ranks 0-1 finish "
        "PG 1 and wait in PG 0; Flight Recorder dumps (pickle)",
        culprit=3,
        layout="log-dir",
        nproc=4,
        env=FR_ENV,
        train=("--fault", "hang", "--fault-rank", "3", "--tp", "2", *fr_train("pickle", 5, 10)),
        root=(fr_dump(3), Find(LAST_STEP, rank=3, last=True)),
        symptoms=(Find(GLOO_TIMEOUT, optional=True),),
        symptom_classes=("nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        what="Two process groups, one stuck: rank 3 never enters its tensor-parallel all_reduce.",
    ),
]
CASES += HANG_CASES

# Software faults whose only words are PyTorch's own: DDP's reducer and autograd's anomaly mode.
CASES += [
    Case(
        id="ddp-unused-param-rank2",
        fault="ddp_unused_parameter",
        cls="python_exception_rank_crash",
        injected="from step 35, rank 2 (node 1, local rank 0) skips the model's auxiliary head (a rank-conditional "
        "code path); DDP was built without find_unused_parameters, so rank 2's reducer never finishes the step and "
        "its next forward raises",
        culprit=2,
        layout="log-dir",
        nodes=2,
        train=("--fault", "unused_param", "--fault-rank", "2", *SHORT_PG),
        root=(
            Find(r"^RuntimeError: Expected to have finished reduction in the prior iteration", rank=2),
            Find(r"^Parameter indices which did not receive grad for rank 2:", rank=2, optional=True),
        ),
        symptoms=(Find(PEER_GONE, optional=True), Find(GLOO_TIMEOUT, optional=True)),
        symptom_classes=("nccl_remote_peer_failure", "nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        what="DDP's 'Expected to have finished reduction in the prior iteration' on rank 2, which stopped using "
        "a parameter; its peers lose the connection.",
    ),
    Case(
        id="anomaly-nan-grad-rank1",
        fault="nan_gradient",
        cls="nan_inf_loss_or_grad",
        injected="torch.autograd.set_detect_anomaly(True) on every rank; at step 35 rank 1 adds a hand-written L2 "
        "distance (sqrt of a sum of squares) that is exactly 0, so its backward computes 0 * inf: anomaly mode "
        "raises in PowBackward0",
        culprit=1,
        layout="tee",
        train=("--fault", "nan_grad", "--detect-anomaly", *SHORT_PG),
        root=(Find(r"^RuntimeError: Function '\w+' returned nan values in its \d+th output\.$", rank=1),),
        symptoms=(Find(PEER_GONE, optional=True), Find(GLOO_TIMEOUT, optional=True)),
        symptom_classes=("nccl_remote_peer_failure", "nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        what="Autograd's anomaly mode on rank 1: 'Function 'PowBackward0' returned nan values in its 0th output'.",
    ),
    Case(
        id="resume-shape-mismatch",
        fault="checkpoint_architecture_mismatch",
        cls="python_exception_rank_crash",
        injected="the job resumes from a checkpoint an earlier run wrote with --hidden 128 while this run builds "
        "the model with --hidden 64: load_state_dict raises on every rank before the first step",
        culprit=None,
        layout="log-dir",
        nproc=4,
        train=("--resume-from", "checkpoints/step_000050.pt"),
        setups=(old_checkpoint("checkpoints/step_000050.pt", 128),),
        root=(
            Find(r"^RuntimeError: Error\(s\) in loading state_dict for Sequential:$", rank=0),
            Find(r"^\s+size mismatch for 0\.weight: copying a param with shape", rank=0, optional=True),
        ),
        symptoms=(Find(r"^RuntimeError: Error\(s\) in loading state_dict for Sequential:$", rank=3),),
        symptom_classes=("torchelastic_childfailed_summary",),
        notes="Every rank fails the same way at the same moment: no rank is the culprit.",
        what="Resuming from a checkpoint of another model size: load_state_dict's size mismatch on all 4 ranks.",
    ),
    Case(
        id="nofile-dataloader-rank1",
        fault="file_descriptor_limit",
        cls="dataloader_worker_failure",
        injected="rank 1 runs with a soft RLIMIT_NOFILE of 24 (a node with a low `ulimit -n`) and 2 DataLoader "
        "workers; receiving batches through file descriptors (the default sharing strategy) runs out of them",
        culprit=1,
        layout="console",
        train=("--num-workers", "2", "--nofile", "24", *SHORT_PG),
        root=(
            Find(r"^RuntimeError: Too many open files\. Communication with the workers is no longer possible", rank=1),
        ),
        symptoms=(Find(PEER_GONE, optional=True), Find(GLOO_TIMEOUT, optional=True)),
        symptom_classes=("nccl_remote_peer_failure", "nccl_watchdog_timeout", "torchelastic_childfailed_summary"),
        what="A low `ulimit -n` on rank 1: the DataLoader's 'Too many open files. Communication with the workers is "
        "no longer possible'.",
    ),
]

# Issue 14 (2026-12-04): more fault kinds an on-call engineer meets, each in PyTorch's own words where it has any.
PEER_SYMPTOMS = (Find(PEER_GONE),)
PEER_SYMPTOM_CLASSES = ("nccl_remote_peer_failure", "torchelastic_childfailed_summary")
MORE_SYMPTOMS = (Find(PEER_GONE, optional=True), Find(GLOO_TIMEOUT, optional=True))
MORE_SYMPTOM_CLASSES = ("nccl_remote_peer_failure", "nccl_watchdog_timeout", "torchelastic_childfailed_summary")
CASES += [
    Case(
        id="autograd-function-rank1",
        fault="custom_autograd_function_bug",
        cls="python_exception_rank_crash",
        injected="at step 35 rank 1's batch takes a rarely used path: its logits go through a custom "
        "torch.autograd.Function (ClipOutlierLogits) whose backward returns one gradient for its two inputs; the "
        "autograd engine raises in loss.backward()",
        culprit=1,
        layout="tee",
        train=("--fault", "bad_backward", *SHORT_PG),
        root=(
            Find(
                r"^RuntimeError: function ClipOutlierLogitsBackward returned an incorrect number of gradients "
                r"\(expected 2, got 1\)$",
                rank=1,
            ),
        ),
        symptoms=PEER_SYMPTOMS,
        symptom_classes=PEER_SYMPTOM_CLASSES,
        what="A custom autograd Function's backward on rank 1 returns too few gradients: 'returned an incorrect "
        "number of gradients (expected 2, got 1)'.",
    ),
    Case(
        id="dataloader-timeout-rank1",
        fault="dataloader_stall",
        cls="dataloader_worker_failure",
        acceptable=("rank_hang_or_missing_rank",),
        injected="a DataLoader worker of rank 1 (num_workers=2, DataLoader timeout=5 s) takes 60 s to read the "
        "step-35 record (a stalled remote read); rank 1's DataLoader gives up after 5 s, before rank 0's 10 s "
        "process-group timeout",
        culprit=1,
        layout="log-dir",
        train=("--fault", "loader_stall", "--num-workers", "2", "--loader-timeout", "5", *SHORT_PG),
        root=(Find(r"^RuntimeError: DataLoader timed out after 5(\.0)? seconds$", rank=1),),
        symptoms=PEER_SYMPTOMS,
        symptom_classes=PEER_SYMPTOM_CLASSES,
        what="A DataLoader worker of rank 1 stalls on a read: 'DataLoader timed out after 5.0 seconds'; rank 0 loses "
        "its peer in the all_reduce.",
    ),
    Case(
        id="monitored-barrier-rank2",
        fault="slow_checkpoint_write",
        cls="rank_hang_or_missing_rank",
        acceptable=("straggler_fail_slow", "network_filesystem_hang"),
        injected="at step 20 each of 4 ranks writes its own checkpoint shard, then all meet in "
        "dist.monitored_barrier(timeout=5 s); rank 2's shard goes to storage that writes 2 KB/s, so rank 2 is still "
        "writing when rank 0's monitored barrier gives up on it",
        culprit=2,
        layout="log-dir",
        nproc=4,
        train=(
            "--fault",
            "slow_ckpt",
            "--fault-rank",
            "2",
            "--ckpt-every",
            "20",
            "--ckpt-sharded",
            "--barrier-timeout",
            "5",
        ),
        root=(
            Find(r"Rank 2 failed to pass monitoredBarrier in \d+ ms", rank=0),
            Find(r"^rank 2: saving checkpoint shard to ", rank=2, last=True),
        ),
        symptoms=(
            Find(r"^RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors", rank=1),
            Find(r"^RuntimeError: Rank 3 successfully reached monitoredBarrier, but received errors", rank=3),
        ),
        symptom_classes=("torchelastic_childfailed_summary",),
        notes="Rank 2 is alive but stuck in checkpoint I/O (TAXONOMY class 5: a rank that never reaches the "
        "collective, the mechanism being storage); its last line is the shard save it never finished.",
        what="Rank 2 writes its checkpoint shard to slow storage: 'Rank 2 failed to pass monitoredBarrier' on rank 0.",
    ),
    Case(
        id="restart-target-oob-rank1",
        fault="python_exception_restarted",
        cls="python_exception_rank_crash",
        injected="rank 1's step-35 record has label 10 of 10 classes (one past the last), so cross_entropy raises "
        "IndexError; torchrun runs with --max-restarts 1 (c10d rendezvous) and restarts the workers once from "
        "scratch; the second attempt meets the same record",
        culprit=1,
        layout="log-dir",
        rdzv="c10d",
        launcher=("--max-restarts", "1"),
        train=("--fault", "bad_label"),
        root=(Find(r"^IndexError: Target 10 is out of bounds\.$", rank=1, file=r"/attempt_0/"),),
        symptoms=(
            Find(PEER_GONE, rank=0, file=r"/attempt_0/", optional=True),
            Find(r"^IndexError: Target 10 is out of bounds\.$", rank=1, file=r"/attempt_1/", optional=True),
            Find(r"^RuntimeError: Gloo connectFullMesh failed with ", file=r"/attempt_1/", optional=True),
        ),
        symptom_classes=("nccl_remote_peer_failure", "torchelastic_childfailed_summary"),
        notes="The runs made while writing this case ended two ways: the second attempt fails on the same record (the "
        "same IndexError in attempt_1) or dies at once in init_process_group, gloo's connectFullMesh refused (the "
        "restarted workers dialled ports nobody listened on, seemingly the first attempt's dead workers': a race "
        "this generator did not pin down). Either way the root is attempt_0's IndexError; symptom_lines say which "
        "way this run went.",
        what="An out-of-range label on rank 1 ('Target 10 is out of bounds'); torchrun's one restart (attempt_1) "
        "fails too.",
    ),
    Case(
        id="truncated-ckpt-resume",
        fault="truncated_checkpoint",
        cls="python_exception_rank_crash",
        acceptable=("storage_full_or_io_error",),
        injected="the job resumes from checkpoints/step_000050.pt, which an earlier run's interrupted save left "
        "with only its first 60% of bytes; torch.load raises on every rank before the first step",
        culprit=None,
        layout="console",
        train=("--resume-from", "checkpoints/step_000050.pt", "--hidden", "1024"),
        setups=(old_checkpoint("checkpoints/step_000050.pt", 1024, keep=0.6),),
        root=(
            Find(r"^RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"),
        ),
        symptom_classes=("torchelastic_childfailed_summary",),
        notes="Every rank reads the same damaged file at the same moment: no rank is the culprit. The cause lies in "
        "an earlier run (the save that was cut short); this job's logs only show the read. The model is --hidden 1024 "
        "(a 177 KB checkpoint): a 12 KB checkpoint cut the same way gave only 'OSError: [Errno 22] Invalid argument' "
        "from PyTorchFileReader instead.",
        what="Resuming from a truncated checkpoint: 'PytorchStreamReader failed reading zip archive: failed finding "
        "central directory' on every rank.",
    ),
    Case(
        id="exit3-rank1",
        fault="silent_exit",
        cls="unknown",
        acceptable=("python_exception_rank_crash",),
        injected="rank 1 calls sys.exit(3) at step 35 with no message (as a library's own check may): no traceback, "
        "no error file",
        culprit=1,
        layout="tee",
        train=("--fault", "exit"),
        root=(Find(exitcode(3), agent=True),),
        symptoms=PEER_SYMPTOMS,
        symptom_classes=PEER_SYMPTOM_CLASSES,
        confidence="medium",
        notes="Nothing says why rank 1 exited: exit status 3 is the only evidence, so the class is unknown (TAXONOMY: "
        "a failure whose cause the evidence does not decide); the culprit rank is the one torchrun's summary names. "
        "Its 'Root Cause (first observed failure)' names rank 0 instead: rank 0 wrote an error file (the lost "
        "connection), rank 1 none (TAXONOMY rule 6).",
        what="Rank 1 exits with status 3 and no message: only torchrun's summary (exitcode 3) names it.",
    ),
    Case(
        id="ckpt-readonly-fs",
        fault="readonly_filesystem",
        cls="storage_full_or_io_error",
        injected="the checkpoint directory is a read-only mount (a read-only tmpfs in a private mount namespace, as "
        "a filesystem remounted read-only after errors); rank 0's torch.save at step 20 cannot open its file",
        culprit=0,
        layout="console",
        setups=(private_tmpfs("checkpoints", "1m", readonly=True),),
        train=("--ckpt-every", "20"),
        root=(Find(r"open file failed with strerror: Read-only file system$"),),
        symptoms=PEER_SYMPTOMS,
        symptom_classes=PEER_SYMPTOM_CLASSES,
        what="Checkpoint dir mounted read-only: rank 0's torch.save fails with 'open file failed with strerror: "
        "Read-only file system'.",
    ),
]
CASES += [
    Case(
        id="nnodes-mismatch",
        fault="launcher_config_mismatch",
        cls="launcher_rendezvous_store_failure",
        injected="two torchrun agents (static rendezvous, rendezvous timeout 10 s): node 0 (the master) is "
        "launched with a stale --nnodes=3 (its launch script was not updated), node 1 with --nnodes=2; node 0's "
        "agent waits for a third node that never comes",
        culprit=None,
        layout="console",
        nodes=2,
        nnodes_of=(3, 2),
        timeout=90.0,
        rdzv_conf="timeout=10",
        env={"TORCH_CPP_LOG_LEVEL": "INFO"},
        root=(
            Find(
                r"^torch\.distributed\.DistStoreError: Timed out after \d+ seconds waiting for clients\. 2/3 clients",
                file=r"^node0/",
            ),
        ),
        symptoms=(
            Find(
                r"^torch\.distributed\.DistStoreError: wait timeout after \d+ms, keys: \S+/assigned_ranks/",
                file="^node1/",
            ),
        ),
        notes="Node 0's TCPStore expects one client per node it was told about (3) and says 2/3 joined; node 1 gives "
        "up waiting for the rank assignment node 0 never publishes. Nothing is wrong with node 1 except that it "
        "agrees with the real cluster: the misconfigured agent is node 0's (culprit.node stays null, as in every "
        "case here).",
        what="Two agents disagree on --nnodes (2 and 3): the rendezvous times out waiting for a node that does not "
        "exist.",
    ),
]
