"""The signature catalogue: every example matches (Python ``re`` and hyperscan), counter-examples don't,
every TAXONOMY class is reachable, benign logs stay quiet, and the loader API behaves."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crashcart.catalogue import (
    _GROUP_NAME,
    BLOCK_FIELDS,
    DERIVED_FIELDS,
    SPECIAL_CLASSES,
    Catalogue,
    CatalogueError,
    Signature,
    _validate,
    hyperscan_expressions,
    load_catalogue,
    read_catalogue,
    summary_fields,
)

hyperscan = pytest.importorskip("hyperscan")

CAT = load_catalogue()
SIGS = list(enumerate(CAT.signatures))
SIG_IDS = [s.id for s in CAT.signatures]

# TAXONOMY.md section 2: the class ids are a contract (diagnosis.json, eval labels).
TAXONOMY_CLASSES = [
    "nccl_watchdog_timeout",
    "nccl_watchdog_stuck_heartbeat",
    "nccl_remote_peer_failure",
    "collective_mismatch_desync",
    "rank_hang_or_missing_rank",
    "ib_completion_error",
    "ib_port_error_link_flap",
    "nccl_init_bootstrap_failure",
    "gpu_fallen_off_bus",
    "gpu_memory_ecc_uncorrectable",
    "gpu_nvlink_error",
    "nvswitch_fabric_manager_error",
    "gpu_gsp_firmware_error",
    "gpu_engine_hang_reset_required",
    "gpu_app_fault_xid",
    "cuda_oom",
    "cuda_kernel_fault",
    "python_exception_rank_crash",
    "native_crash_segfault_abort",
    "host_oom_kill",
    "pcie_aer_error",
    "storage_full_or_io_error",
    "network_filesystem_hang",
    "dataloader_worker_failure",
    "slurm_node_failure",
    "scheduler_preemption_or_timelimit",
    "k8s_pod_eviction_or_oomkilled",
    "launcher_rendezvous_store_failure",
    "torchelastic_childfailed_summary",
    "nan_inf_loss_or_grad",
    "fp16_loss_scale_overflow",
    "loss_spike_divergence",
    "silent_data_corruption_suspect",
    "gpu_thermal_power_throttling",
    "straggler_fail_slow",
    "software_version_mismatch",
]


def _database(multiline: bool) -> Any:
    expressions, ids, flags = hyperscan_expressions(CAT)
    if multiline:
        flags = [f | hyperscan.HS_FLAG_MULTILINE for f in flags]
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=expressions, ids=ids, flags=flags)
    return db


HS_LINE = _database(multiline=False)
HS_BUFFER = _database(multiline=True)  # how crashcart.scan.matcher compiles it


def hs_hits(text: str, db: Any = HS_LINE) -> set[int]:
    hits: set[int] = set()

    def on_match(sig: int, start: int, end: int, flags: int, ctx: object) -> None:
        hits.add(sig)

    db.scan(text.encode("utf-8"), match_event_handler=on_match)
    return hits


def re_matches(text: str) -> list[int]:
    return [i for i in range(len(CAT.signatures)) if CAT.extract(i, text) is not None]


def winner(text: str) -> Signature | None:
    """The failure signature the scanner keeps for a line: highest priority, then lowest index."""
    cands = [i for i in re_matches(text) if CAT.signatures[i].role != "context"]
    if not cands:
        return None
    return CAT.signatures[max(cands, key=lambda i: (CAT.signatures[i].priority, -i))]


# --- per signature -------------------------------------------------------------------------------


@pytest.mark.parametrize(("index", "sig"), SIGS, ids=SIG_IDS)
def test_examples_match_with_fields(index: int, sig: Signature) -> None:
    for ex in sig.examples:
        fields = CAT.extract(index, ex.text)
        assert fields is not None, f"no match: {ex.text!r}"
        for name, value in ex.fields.items():
            assert fields.get(name) == value, f"{name} in {ex.text!r}: {fields.get(name)!r} != {value!r}"


@pytest.mark.parametrize(("index", "sig"), SIGS, ids=SIG_IDS)
def test_examples_match_in_hyperscan(index: int, sig: Signature) -> None:
    for ex in sig.examples:
        assert index in hs_hits(ex.text), f"hyperscan misses {ex.text!r}"


@pytest.mark.parametrize(("index", "sig"), SIGS, ids=SIG_IDS)
def test_counter_examples_do_not_match(index: int, sig: Signature) -> None:
    for text in sig.counter_examples:
        assert CAT.extract(index, text) is None, f"re matches {text!r}"
        assert index not in hs_hits(text), f"hyperscan matches {text!r}"


@pytest.mark.parametrize(("index", "sig"), SIGS, ids=SIG_IDS)
def test_pattern_is_portable(index: int, sig: Signature) -> None:
    """ASCII only, no constructs hyperscan rejects, and usable as a bytes regex (the re fallback)."""
    assert sig.pattern.isascii()
    for construct in ("(?=", "(?!", "(?<=", "(?<!", "(?>", "\\Z", "\\A", "\\p{", "*+", "++", "?+"):
        assert construct not in sig.pattern, construct
    assert not re.search(r"\\[1-9]", sig.pattern), "backreference"
    flags = re.MULTILINE | (re.IGNORECASE if "i" in sig.flags else 0)
    compiled = re.compile(sig.pattern.encode("ascii"), flags)
    for ex in sig.examples:
        assert compiled.search(ex.text.encode("utf-8")) is not None
    assert CAT.regex(index).search("") is None, "pattern matches the empty line"


@pytest.mark.parametrize(("index", "sig"), SIGS, ids=SIG_IDS)
def test_summary_renders(index: int, sig: Signature) -> None:
    names = summary_fields(sig.summary)
    allowed = set(CAT.regex(index).groupindex) | DERIVED_FIELDS | BLOCK_FIELDS.get(sig.block or "", set())
    assert names <= allowed
    fields = CAT.extract(index, sig.examples[0].text) or {}
    text = CAT.summarize(index, fields)
    assert text and "{" not in text


# Examples whose line is won by a more specific signature of another class, on purpose.
EXPECTED_OVERRIDES = {
    ("nccl.watchdog_thread_terminated", "nccl.remote_error"),  # the exception text names the cause
    ("nccl.cuda_failure", "cuda.peer_access_unsupported"),  # a known CUDA string beats the catch-all
}


@pytest.mark.parametrize(("index", "sig"), SIGS, ids=SIG_IDS)
def test_example_lines_are_classified_as_intended(index: int, sig: Signature) -> None:
    """The scanner keeps one failure signature per line; an example must end up in its own class."""
    if sig.role == "context":
        return
    for ex in sig.examples:
        best = winner(ex.text)
        assert best is not None
        if best.id == sig.id or best.class_id == sig.class_id or sig.id.startswith("generic."):
            continue
        assert (sig.id, best.id) in EXPECTED_OVERRIDES, f"{ex.text!r} is won by {best.id}"


# --- whole catalogue -----------------------------------------------------------------------------


def test_whole_catalogue_compiles_into_one_hyperscan_database() -> None:
    expressions, ids, flags = hyperscan_expressions(CAT)
    assert len(expressions) == len(ids) == len(flags) == len(CAT.signatures)
    assert ids == list(range(len(CAT.signatures)))
    for sig, flag in zip(CAT.signatures, flags, strict=True):
        assert bool(flag & hyperscan.HS_FLAG_SINGLEMATCH) == sig.sampled  # only progress lines are sampled
        assert bool(flag & hyperscan.HS_FLAG_CASELESS) == ("i" in sig.flags)
    assert HS_LINE is not None and HS_BUFFER is not None


def test_buffer_scan_finds_every_example_on_its_line() -> None:
    """Like the real matcher: one multiline buffer, hits mapped back to lines by end offset."""
    lines: list[tuple[int, str]] = [(i, ex.text) for i, s in SIGS for ex in s.examples]
    buf = "\n".join(text for _, text in lines).encode("utf-8") + b"\n"
    starts = [0]
    for text in lines[:-1]:
        starts.append(starts[-1] + len(text[1].encode("utf-8")) + 1)
    found: set[tuple[int, int]] = set()

    def on_match(sig: int, start: int, end: int, flags: int, ctx: object) -> None:
        line = max(0, buf.rfind(b"\n", 0, end) + 1)
        found.add((sig, starts.index(line) if line in starts else -1))

    HS_BUFFER.scan(buf, match_event_handler=on_match)
    missing = [(CAT.signatures[i].id, text) for n, (i, text) in enumerate(lines) if (i, n) not in found]
    # sampled (SINGLEMATCH) signatures report only their first match in a buffer, maybe on another line
    missing = [(sid, text) for sid, text in missing if CAT.index[sid] not in {i for i, s in SIGS if s.sampled}]
    assert all(any(sig == i for sig, _ in found) for i, s in SIGS if s.sampled)
    assert not missing


def test_signature_ids_are_unique_and_dotted() -> None:
    assert len(set(SIG_IDS)) == len(SIG_IDS)
    for sid in SIG_IDS:
        assert re.fullmatch(r"[a-z0-9_]+\.[a-z0-9_]+", sid), sid


def test_classes_are_exactly_the_taxonomy_index() -> None:
    failures = [c for c in CAT.classes.values() if c.default_role != "verdict"]
    assert [c.id for c in failures] == TAXONOMY_CLASSES
    assert [c.number for c in failures] == list(range(1, 37))
    verdicts = [c for c in CAT.classes.values() if c.default_role == "verdict"]
    assert [(c.id, c.number) for c in verdicts] == [("no_failure", 0)]  # the index's "—" row: not a failure
    for info in CAT.classes.values():
        assert info.title and info.explanation and info.layer
        assert len(info.explanation) <= 400


def test_every_class_is_reachable() -> None:
    reachable = {s.class_id for s in CAT.signatures}
    reachable |= {x.class_id for x in CAT.xids.values()} | {x.class_id for x in CAT.sxids.values()}
    assert set(TAXONOMY_CLASSES) <= reachable
    direct = {s.class_id for s in CAT.signatures}
    assert set(TAXONOMY_CLASSES) - direct <= {"gpu_app_fault_xid"}  # reached through kernel.xid


def test_class_ids_used_are_known() -> None:
    known = set(TAXONOMY_CLASSES)
    for sig in CAT.signatures:
        assert sig.class_id in known | SPECIAL_CLASSES, sig.id
        if sig.class_id in {"xid", "sxid"}:
            assert sig.class_id in CAT.regex(CAT.index[sig.id]).groupindex, sig.id
    for entry in [*CAT.xids.values(), *CAT.sxids.values()]:
        assert entry.class_id in known | {"unknown"}, entry.code


def test_roles_priorities_and_blocks_are_consistent() -> None:
    for sig in CAT.signatures:
        assert 5 <= sig.priority <= 90, sig.id
        if sig.role == "context":
            assert sig.class_id == "context" and sig.severity == "info", sig.id
        if sig.id.startswith("generic."):
            assert sig.priority <= 20, sig.id
    tracebacks = [s for s in CAT.signatures if s.block == "traceback"]
    assert [s.id for s in tracebacks] == ["generic.traceback"]
    assert [s.id for s in CAT.signatures if s.block == "torchrun_summary"] == ["torchrun.root_cause"]
    assert CAT.signatures[CAT.index["kernel.xid"]].class_id == "xid"
    assert CAT.signatures[CAT.index["kernel.sxid"]].class_id == "sxid"
    assert CAT.signatures[CAT.index["generic.error"]].priority == 5


# --- Xid / SXid data -----------------------------------------------------------------------------

XID_CLASSES: dict[str, list[int]] = {
    "gpu_fallen_off_bus": [79],
    "gpu_memory_ecc_uncorrectable": [48, 63, 64, 92, 94, 95, 140],
    "gpu_nvlink_error": [74, *range(144, 151)],
    "gpu_gsp_firmware_error": [119, 120],
    "gpu_engine_hang_reset_required": [8, 46, 62, 109, 136, 143, 154, *range(155, 159)],
    "gpu_app_fault_xid": [13, 31, 43, 45],
}


@pytest.mark.parametrize(("class_id", "codes"), XID_CLASSES.items(), ids=list(XID_CLASSES))
def test_taxonomy_xids_map_to_their_class(class_id: str, codes: list[int]) -> None:
    for code in codes:
        assert CAT.xids[code].class_id == class_id, code


def test_xid_roles() -> None:
    assert CAT.xid_info(45).role == "teardown"
    assert CAT.xid_info(43).role == "teardown"  # a channel reset that follows a killed or faulted process
    for code in (13, 31):
        assert CAT.xid_info(code).role == "confirmation"
    for code in (63, 92, 154):
        assert CAT.xid_info(code).role == "context"
        assert CAT.xid_info(code).severity == "info"
    for code in (79, 48, 95, 74, 119, 109):
        assert CAT.xid_info(code).role == "root_candidate"
        assert CAT.xid_info(code).severity == "P0"
    for code in (32, 38, 54, 56, 57, 61, 68, 69, 93, 121, 122, 123, 137, 139):
        assert code in CAT.xids
    assert CAT.xid_info(79).mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"


def test_unknown_codes_get_default_entries() -> None:
    unknown = CAT.xid_info(9999)
    assert (unknown.code, unknown.class_id, unknown.role, unknown.severity) == (
        9999,
        "unknown",
        "root_candidate",
        "P1",
    )
    assert unknown.mnemonic == "UNKNOWN_XID"
    sx = CAT.sxid_info(99999)
    assert sx.class_id == "nvswitch_fabric_manager_error" and sx.code == 99999
    assert all(e.class_id == "nvswitch_fabric_manager_error" for e in CAT.sxids.values())
    assert CAT.sxid_info(20034).mnemonic == "LTSSM_FAULT_UP"


# --- loader API ----------------------------------------------------------------------------------


def test_load_is_cached_and_regex_is_cached() -> None:
    assert load_catalogue() is CAT
    i = CAT.index["cuda.oom"]
    assert CAT.regex(i) is CAT.regex(i)
    assert CAT.regex(CAT.index["scheduler.time_limit_text"]).flags & re.IGNORECASE


def test_extract_returns_only_groups_that_matched() -> None:
    i = CAT.index["kernel.xid"]
    fields = CAT.extract(i, "[  12.5] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    assert fields == {"pci": "0000:3b:00", "xid": "79", "message": "GPU has fallen off the bus."}
    assert CAT.extract(i, "nothing to see here") is None


def test_summarize_leaves_out_missing_fields_and_the_words_that_introduce_them() -> None:
    i = CAT.index["nccl.watchdog_timeout"]
    assert CAT.summarize(i, {"rank": "3", "op": "ALLREDUCE"}) == "Rank 3: ALLREDUCE timed out"
    assert CAT.summarize(i, {"rank": "3", "op": "ALLREDUCE", "seq": "7", "ran_ms": "5", "timeout_ms": "4"}) == (
        "Rank 3: ALLREDUCE #7 timed out after 5 ms (timeout 4 ms)"
    )
    frame = CAT.index["native.frame0"]  # alternatives side by side: the one present stands for them
    assert CAT.summarize(frame, {"func": "__GI_raise"}) == "innermost frame: __GI_raise"
    root = CAT.index["torchrun.root_cause"]
    assert (
        CAT.summarize(root, {"exitcode": "1"}) == "torchrun root cause (first failure seen by this agent), exit code 1"
    )


@pytest.mark.parametrize(("index", "sig"), SIGS, ids=SIG_IDS)
def test_examples_summarize_without_a_lone_question_mark(index: int, sig: Signature) -> None:
    """A field a line did not give is left out, never shown as ``?`` (issue 14; a ``?`` in the template's own
    words, "(/dev/shm too small?)", is text)."""
    for ex in sig.examples:
        text = CAT.summarize(index, CAT.extract(index, ex.text) or {})
        assert text and not re.search(r"(?:^|[\s(#:/])\?(?=$|[\s)%,:/])", text), (ex.text, text)
        assert "\x00" not in text and "()" not in text


def test_class_title() -> None:
    assert CAT.class_title("gpu_fallen_off_bus") == "GPU fell off the PCIe bus"
    assert CAT.class_title("unknown") == "Unclassified error"
    assert CAT.class_title("not_a_class") == "not_a_class"


def test_catalogue_is_frozen() -> None:
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError for frozen models
        CAT.signatures = []  # type: ignore[misc]


# --- benign logs ---------------------------------------------------------------------------------

BENIGN_LOG = """\
[    0.000000] Linux version 5.15.0-1053-nvidia (buildd@lcy02-amd64-024) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #54-Ubuntu SMP Fri Jun 14 07:39:29 UTC 2024
[    0.512345] ACPI Error: AE_NOT_FOUND, While resolving a named reference package element - \\_SB_.PC00.RP01.PXSX (20210730/dspkginit-438)
[    1.234567] ERST: Error Record Serialization Table (ERST) support is initialized.
[    1.300001] RAS: Correctable Errors collector initialized.
[    2.101010] pcieport 0000:00:01.0: AER: enabled with IRQ 26
[    2.200000] pci 0000:01:00.0: 63.008 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe x8 link at 0000:00:1c.0 (capable of 126.016 Gb/s with 16.0 GT/s PCIe x8 link)
[    4.345678] nvidia: loading out-of-tree module taints kernel.
[    4.400000] nvidia-nvlink: Nvlink Core is being initialized, major device number 510
[    5.123456] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023
[    5.900000] mlx5_core 0000:0c:00.0: firmware version: 28.39.1002
[   10.200000] mlx5_core 0000:0c:00.0 enp12s0f0np0: Link up
[   12.000000] EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Opts: (null). Quota mode: none.
[   20.100000] NFS: Registering the id_resolver key type
[   30.000000] nfs: server nas01 OK
Nov 30 01:50:02 gpu-node-017 systemd[1]: Started NVIDIA fabric manager service.
W1130 01:59:00.123000 139876 torch/distributed/run.py:779]
W1130 01:59:00.123000 139876 torch/distributed/run.py:779] *****************************************
W1130 01:59:00.123000 139876 torch/distributed/run.py:779] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed.
W1130 01:59:00.123000 139876 torch/distributed/run.py:779] *****************************************
[default0]:[rank0]:/usr/local/lib/python3.10/dist-packages/torch/_utils.py:831: UserWarning: TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be the only storage class.
[rank0]:/opt/conda/lib/python3.10/site-packages/torch/cuda/amp/grad_scaler.py:120: FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` instead.
gpu-node-017:88412:88412 [3] NCCL INFO Bootstrap : Using eth0:10.0.1.17<0>
gpu-node-017:88412:88412 [3] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory
gpu-node-017:88412:88412 [3] NCCL INFO NET/Plugin : No plugin found, using internal implementation
gpu-node-017:88412:88412 [3] NCCL WARN NET/Plugin: Could not find: libnccl-net.so.
gpu-node-017:88412:88412 [3] NCCL INFO cudaDriverVersion 12020
gpu-node-017:88412:88412 [3] NCCL INFO NCCL version 2.18.5+cuda12.2
gpu-node-017:88412:88500 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; OOB eth0:10.0.1.17<0>
gpu-node-017:88412:88500 [3] NCCL INFO Using network IB
gpu-node-017:88412:88500 [3] NCCL INFO comm 0x5633f2a1b0c0 rank 27 nranks 64 cudaDev 3 nvmlDev 3 busId 3b000 commId 0x1a2b3c4d5e6f7081 - Init START
gpu-node-017:88412:88500 [3] NCCL INFO Setting affinity for GPU 3 to ffff,ffffffff,00000000,0000ffff,ffffffff
gpu-node-017:88412:88500 [3] NCCL INFO NVLS multicast support is available on dev 3
gpu-node-017:88412:88500 [3] NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7
gpu-node-017:88412:88500 [3] NCCL INFO Trees [0] 28/-1/-1->27->26 [1] 28/-1/-1->27->26
gpu-node-017:88412:88500 [3] NCCL INFO Channel 00/0 : 27[3] -> 28[4] via P2P/IPC
gpu-node-017:88412:88500 [3] NCCL INFO Connected all rings
gpu-node-017:88412:88500 [3] NCCL INFO Connected all trees
gpu-node-017:88412:88500 [3] NCCL INFO threadThresholds 8/8/64 | 512/8/64 | 512 | 512
gpu-node-017:88412:88500 [3] NCCL INFO 32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer
gpu-node-017:88412:88500 [3] NCCL INFO NCCL_IB_RETRY_CNT set by environment to 7.
gpu-node-017:88412:88500 [3] NCCL INFO comm 0x5633f2a1b0c0 rank 27 nranks 64 cudaDev 3 nvmlDev 3 busId 3b000 commId 0x1a2b3c4d5e6f7081 - Init COMPLETE
gpu-node-017:88412:88500 [3] NCCL INFO Init timings - ncclCommInitRankConfig: rank 27 nranks 64 total 1.23 (kernels 0.21, alloc 0.05, bootstrap 0.40, allgathers 0.02, topo 0.30, graphs 0.05, connections 0.15, rest 0.05)
[rank0]: > building GPT model ...
[rank0]: > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 6738415616
[rank0]: training ...
 [2024-11-30 01:59:59] iteration      100/   1000 | consumed samples:        12800 | elapsed time per iteration (ms): 1020.3 | learning rate: 1.000E-05 | global batch size:   128 | lm loss: 2.345E+00 | loss scale: 1.0 | grad norm: 0.813 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2024-11-30 02:01:41] iteration      200/   1000 | consumed samples:        25600 | elapsed time per iteration (ms): 1018.7 | learning rate: 2.000E-05 | global batch size:   128 | lm loss: 2.301E+00 | loss scale: 1.0 | grad norm: 0.799 | number of skipped iterations:   0 | number of nan iterations:   0 |
[rank0]: step 1200 | loss 2.3456 | lr 3.0e-04 | tokens/s 1.2e6
{'loss': 2.3456, 'grad_norm': 1.2301, 'learning_rate': 4.9e-05, 'epoch': 1.02}
[rank0]: saving checkpoint at iteration     200 to /checkpoints/run42
[rank0]:   successfully saved checkpoint at iteration     200 to /checkpoints/run42
[rank0]: validation loss at iteration 200 | lm loss value: 2.2891E+00 | lm loss PPL: 9.866E+00 |
  Rank=297 Node=h100-003-095-026 Score=1.00
| NVIDIA-SMI 535.129.03             Driver Version: 535.129.03   CUDA Version: 12.2     |
            HW Slowdown                       : Not Active
            SW Power Cap                      : Not Active
        Pending                           : No
        Remapping Failure Occurred        : No
         Link 0: CRC Errors: 0
JobId=123456 JobName=llm-pretrain
   JobState=RUNNING Reason=None Dependency=(null)
   State=ALLOCATED ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
123456          train    RUNNING      0:0 gpu-node-[001-064]
gpu-node-017:88412:88412 [3] NCCL INFO comm 0x5633f2a1b0c0 rank 27 nranks 64 cudaDev 3 busId 3b000 - Destroy COMPLETE
I1130 03:00:01.000000 139876 torch/distributed/elastic/agent/server/api.py:932] Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish
"""

# Low-priority detectors allowed to fire on benign lines (each below priority 50).
ACCEPTABLE_ON_BENIGN = {"generic.error", "generic.nccl_warn", "kernel.pcie_link_degraded"}


@pytest.mark.parametrize("matcher", ["re", "hyperscan"])
def test_benign_log_raises_no_failure(matcher: str) -> None:
    find: Callable[[str], set[int]] = (lambda t: set(re_matches(t))) if matcher == "re" else hs_hits
    fired: list[tuple[str, str]] = []
    for line in BENIGN_LOG.splitlines():
        for i in find(line):
            sig = CAT.signatures[i]
            if sig.role == "context":
                continue
            assert sig.id in ACCEPTABLE_ON_BENIGN, f"{sig.id} fires on {line!r}"
            assert sig.priority < 50
            fired.append((sig.id, line))
    assert {sid for sid, _ in fired} <= ACCEPTABLE_ON_BENIGN


def test_benign_log_yields_topology_and_progress_context() -> None:
    ctx: dict[str, dict[str, str]] = {}
    for line in BENIGN_LOG.splitlines():
        for i in re_matches(line):
            sig = CAT.signatures[i]
            if sig.role == "context":
                ctx.setdefault(sig.id, CAT.extract(i, line) or {})
    init = ctx["nccl.comm_init"]
    assert (init["host"], init["rank"], init["nranks"], init["busid"]) == (
        "gpu-node-017",
        "27",
        "64",
        "3b000",
    )
    assert ctx["nccl.version"]["nccl_version"] == "2.18.5"
    assert ctx["nccl.cuda_driver_version"]["cuda_driver_version"] == "12020"
    assert ctx["megatron.iteration"]["loss"] == "2.345E+00"
    assert ctx["nvsmi.header"]["driver_version"] == "535.129.03"


# --- a few end-to-end classifications of whole incident snippets ---------------------------------

INCIDENT_LINES = [
    (
        "Nov 30 02:13:07 gpu-node-017 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.",
        "kernel.xid",
    ),
    ("[rank27]: RuntimeError: CUDA error: unknown error", "cuda.device_fault"),
    (
        "[rank12]:[E1130 02:23:07.1 ProcessGroupNCCL.cpp:1537] [PG 0 (default_pg) Rank 12] Process group watchdog thread terminated with exception: CUDA error: uncorrectable ECC error encountered",
        "cuda.ecc_uncorrectable",
    ),
    (
        "[rank0]:[E1130 02:23:07.1 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
        "nccl.watchdog_timeout",
    ),
    (
        "[rank3]: terminate called after throwing an instance of 'c10::DistBackendError'",
        "nccl.terminate_dist_error",
    ),
    ("srun: error: gpu-node-017: task 27: Killed", "slurm.task_killed"),
    (
        "RuntimeError: unable to write to file </torch_28041_1546596096>: No space left on device (28)",
        "dataloader.shm_exhausted",
    ),
    (
        "gpu-node-03:2210:2290 [5] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
        "nccl.shm_failure",
    ),
    ("[ 3751.2] INFO: task kworker/u16:2:123 blocked for more than 120 seconds.", "kernel.hung_task"),
    ("  exitcode  : -15 (pid: 4015791)", None),
    # issue 14: the emitter decides the class, not the loudest word on the line
    ("node23:12098:12141 [2] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'", "nccl.nvls_warn"),
    ("[rank1]: RuntimeError: CUDA error: invalid argument", "cuda.api_error"),
    ("OSError: [Errno 28] No space left on device: '/dev/shm/torch_1234_5678'", "storage.shm_no_space"),
    ("OSError: [Errno 28] No space left on device: '/ckpt/step_100.pt'", "storage.no_space"),
    ("slurmstepd: error: execve(): /home/u/train.sbatch: No such file or directory", "slurm.stepd_execve"),
    ("slurmstepd: error: mkdir(/var/spool/slurmd/job77): No space left on device", "slurm.stepd_setup_failed"),
    (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
        "ray.memory_monitor_kill",
    ),
    ("h:1:2 [0] graph/topo.h:269 NCCL WARN Could not find NET with id 2", "nccl.topology_failure"),
    ("NVRM: GPU1 _kgspRpcRecvPoll: GSP RM heartbeat timed out", "kernel.gsp_heartbeat"),
]


@pytest.mark.parametrize(("line", "expected"), INCIDENT_LINES, ids=[str(e) for _, e in INCIDENT_LINES])
def test_incident_lines_are_won_by_the_right_signature(line: str, expected: str | None) -> None:
    best = winner(line)
    assert (best.id if best else None) == expected


def test_fresh_catalogue_validates_the_same_data() -> None:
    again = Catalogue.model_validate(CAT.model_dump(by_alias=True))
    assert [s.id for s in again.signatures] == SIG_IDS


# --- the reading kept in the user's cache -------------------------------------------------------------


def _fresh_load(monkeypatch: pytest.MonkeyPatch, home: Path) -> Catalogue:
    monkeypatch.setenv("HOME", str(home))  # the cache lives under ~/.cache/crashcart
    return read_catalogue()


def test_a_cached_reading_gives_the_same_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _fresh_load(monkeypatch, tmp_path)
    kept = list((tmp_path / ".cache" / "crashcart").glob("catalogue-*.json"))
    assert len(kept) == 1
    again = _fresh_load(monkeypatch, tmp_path)
    assert again.model_dump() == first.model_dump() == CAT.model_dump()


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: len(raw) // 2],  # cut short
        lambda raw: b"junk",
        lambda raw: raw.replace(b'"key": "', b'"key": "0', 1),  # names another text
        lambda raw: raw.replace(b'"signatures.toml"', b'"other.toml"', 1),  # a file missing
    ],
)
def test_a_damaged_reading_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Callable[[bytes], bytes]
) -> None:
    _fresh_load(monkeypatch, tmp_path)
    (kept,) = (tmp_path / ".cache" / "crashcart").glob("catalogue-*.json")
    kept.write_bytes(damage(kept.read_bytes()))
    assert _fresh_load(monkeypatch, tmp_path).model_dump() == CAT.model_dump()


def test_an_unwritable_cache_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".cache").write_text("a file where the cache directory would go")
    assert _fresh_load(monkeypatch, tmp_path).model_dump() == CAT.model_dump()


def test_group_names_read_from_the_text_are_the_compiled_ones() -> None:
    """A cached reading skips compiling; the summary check then takes group names from the pattern text."""
    for sig in CAT.signatures:
        compiled = set(re.compile(sig.pattern, re.ASCII).groupindex)
        assert set(_GROUP_NAME.findall(sig.pattern)) == compiled, sig.id


def test_a_bad_pattern_is_reported_when_the_reading_is_new() -> None:
    bad = CAT.model_copy(update={"signatures": [CAT.signatures[0].model_copy(update={"pattern": "(unclosed"})]})
    with pytest.raises(CatalogueError, match="bad pattern"):
        _validate(bad)
