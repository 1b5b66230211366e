"""GPU driver, GSP and CUDA semantics from the emitters (issue 14, capabilities 1 and 7).

Lines are in the shapes their emitters print: the NVIDIA driver's Xid line (open-gpu-kernel-modules
src/nvidia/src/kernel/gpu/rc/kernel_rc.c ``NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s,
name=%s, %s[ caused by previous Xid %d]``), its GSP RPC/heartbeat/CrashCat reports (kernel_gsp.c,
libraries/crashcat, 535-595), NVSwitch SXids (common_nvswitch.h), PyTorch's ``CUDA error: <cudaGetErrorString>``
(c10/cuda/CUDAException.cpp) with the CUDA runtime's error strings.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.catalogue import load_catalogue
from crashcart.settings import Settings
from tests.kit import run_files, winner

CAT = load_catalogue()


# --- the Xid catalogue ---------------------------------------------------------------------------------

# NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) mnemonics for codes
# an earlier table had invented names for, and the codes it lacked.
CATALOG_MNEMONICS = {
    1: "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD",
    18: "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR",
    52: "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE",
    111: "BUNDLE_ERROR_EVENT",
    113: "DP_LT_FAILURE",
    118: "HEAD_REGS",
    138: "ROBUST_CHANNEL_DLA_ERROR",
    173: "C2C_FATAL_LINK_FAILURE",
    175: "MEMORY_SUBSYSTEM_ERROR",
}


def test_every_catalogue_xid_has_an_entry() -> None:
    missing = [code for code in range(1, 177) if code not in CAT.xids]
    assert missing == []


@pytest.mark.parametrize(("code", "mnemonic"), CATALOG_MNEMONICS.items())
def test_xid_mnemonics_are_the_catalogues(code: int, mnemonic: str) -> None:
    assert CAT.xid_info(code).mnemonic == mnemonic


@pytest.mark.parametrize("code", [*range(111, 119), 138])
def test_display_and_dla_xids_are_context_not_causes(code: int) -> None:
    info = CAT.xid_info(code)
    assert (info.role, info.severity, info.class_id) == ("context", "info", "unknown")


def test_xids_newer_than_the_catalog_from_nverror_h() -> None:
    assert CAT.xid_info(173).class_id == "gpu_nvlink_error" and CAT.xid_info(173).role == "root_candidate"
    assert CAT.xid_info(174).role == "teardown"  # a silent channel kill follows another fault, like Xid 43
    assert CAT.xid_info(175).class_id == "gpu_memory_ecc_uncorrectable"
    assert CAT.xid_info(176).class_id == "pcie_aer_error"


def test_retirement_events_are_context_and_their_failures_roots() -> None:
    # the catalog: an event (63 row remap, 156 resource retirement, 160 channel retirement) is applied by a reset
    # and investigated as IGNORE; a failure (64, 157, 161) means no spare was left
    for event, failure in ((63, 64), (156, 157), (160, 161)):
        assert CAT.xid_info(event).role == "context", event
        assert CAT.xid_info(failure).role == "root_candidate", failure


def test_a_mig_attributed_xid_is_matched_with_its_gpu() -> None:
    idx = CAT.index["kernel.xid"]
    line = "[ 812.4] NVRM: Xid (PCI:0000:3b:00 GPU-I:02 GPU-CI:01): 48, pid=2231, name=python, An uncorrectable double bit error"
    fields = CAT.extract(idx, line)
    assert fields is not None
    assert (fields["pci"], fields["gpu_instance"], fields["compute_instance"], fields["xid"]) == (
        "0000:3b:00",
        "02",
        "01",
        "48",
    )
    assert winner(line) == ("kernel.xid", "xid")


# --- GSP firmware failures across driver versions --------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # 535: the RPC timeout as Xid 119's message, "Timeout waiting for RPC from GSP%d!"
        "NVRM: _kgspRpcRecvPoll: Timeout waiting for RPC from GSP1! Expected function 10 (FREE) (0x0 0x0).",
        # 570+: the RPC sanity check
        "NVRM: GPU2 sanity check failed 0xf waiting for RPC response from GSP. Expected function 76 (GSP_RM_CONTROL) sequence 1 (0x0 0x0).",
        # 590+: the timeout classification banners and the renamed banner function
        "[ 51.0] NVRM: _kgspClassifyGspTimeout: =============== GSP-RM unresponsive ==================",
        "[ 51.0] NVRM: _kgspLogRpcTimeout: ********************************* GSP Timeout **********************************",
        "NVRM: GPU0 _kgspRpcRecvPoll: GSP RM heartbeat timed out",
        # CrashCat: a GSP task timeout / panic
        "NVRM: GPU1 GSP task timeout @ pc:0x4d0d9ac, task:1",
        "NVRM: GSP kernel panic: fatal hardware error (3) @ pc:0x1000, aux:0x0",
        # boot
        "NVRM: RmInitAdapter: Cannot initialize GSP firmware RM",
    ],
)  # fmt: skip
def test_gsp_failures_are_gsp_firmware_errors(line: str) -> None:
    got = winner(line)
    assert got is not None and got[1] == "gpu_gsp_firmware_error", got


def test_a_gsp_watchdog_report_is_not_an_error() -> None:
    # "Watchdog timeouts do not have an XID associated with them as they are not considered as errors"
    assert winner("NVRM: GSP task watchdog timeout @ pc:0x4d0d9ac, partition:1#2, task:3") is None


def test_gsp_reported_pmu_halt_needs_a_reset() -> None:
    assert winner("NVRM: _kgspRpcHandlePmuHalt: Received signal from GSP that PMU has halted.") == (
        "kernel.gsp_pmu_halted",
        "gpu_engine_hang_reset_required",
    )


# --- CUDA error semantics (cudaGetErrorString wordings as PyTorch prints them) --------------------------


@pytest.mark.parametrize(
    ("message", "klass"),
    [
        ("unknown error", "gpu_engine_hang_reset_required"),  # cudaErrorUnknown: device state
        # cudaErrorHardwareStackError: "an error in the call stack during kernel execution, possibly due to stack
        # corruption or exceeding the stack size limit" (runtime API docs): the kernel's own fault
        ("hardware stack error", "cuda_kernel_fault"),
        ("uncorrectable ECC error encountered", "gpu_memory_ecc_uncorrectable"),  # cudaErrorECCUncorrectable
        (
            "uncorrectable NVLink error detected during the execution",
            "gpu_nvlink_error",
        ),  # cudaErrorNvlinkUncorrectable
        ("an illegal memory access was encountered", "cuda_kernel_fault"),  # cudaErrorIllegalAddress
        ("device-side assert triggered", "cuda_kernel_fault"),  # cudaErrorAssert
        ("unspecified launch failure", "cuda_kernel_fault"),  # cudaErrorLaunchFailure: the kernel faulted
        ("operation not supported on global/shared address space", "cuda_kernel_fault"),  # InvalidAddressSpace
        ("misaligned address", "cuda_kernel_fault"),  # cudaErrorMisalignedAddress
        ("invalid argument", "python_exception_rank_crash"),  # cudaErrorInvalidValue: the API call was wrong
        ("invalid configuration argument", "python_exception_rank_crash"),  # cudaErrorInvalidConfiguration
    ],
)
def test_cuda_errors_by_meaning(message: str, klass: str) -> None:
    got = winner(f"[rank3]: RuntimeError: CUDA error: {message}")
    assert got is not None and got[1] == klass, got


# --- Xid chains end to end ------------------------------------------------------------------------------


def test_caused_by_previous_xid_promotes_the_cause_end_to_end(tmp_path: Path, settings: Settings) -> None:
    kern = (
        "Nov 30 02:13:07 gpu-node-03 kernel: NVRM: Xid (PCI:0000:b7:00): 45, pid=8812, name=python, Ch 00000010\n"
        "Nov 30 02:13:07 gpu-node-03 kernel: NVRM: Xid (PCI:0000:b7:00): 140, pid='<unknown>', name=<unknown>, "
        "An uncorrectable ECC error escaped\n"
        "Nov 30 02:13:08 gpu-node-03 kernel: NVRM: Xid (PCI:0000:b7:00): 45, pid=8812, name=python, Ch 00000011 "
        "caused by previous Xid 140\n"
    )
    out = run_files(tmp_path / "b", {"gpu-node-03/kern.log": kern}, settings)
    rc = out.document.root_cause
    assert rc.class_ == "gpu_memory_ecc_uncorrectable"
    assert rc.culprit.gpu is not None and rc.culprit.gpu.startswith("0000:b7:00")
    assert all(c.line == 2 for c in rc.citations if c.verified)


def test_a_lone_summary_xid_is_the_root_with_its_gpu(tmp_path: Path, settings: Settings) -> None:
    kern = (
        "Nov 30 02:13:07 gpu-node-03 kernel: NVRM: Xid (PCI:0000:2a:00): 154, GPU recovery action changed from "
        "0x0 (None) to 0x2 (Node Reboot Required)\n"
    )
    out = run_files(tmp_path / "b", {"gpu-node-03/kern.log": kern}, settings)
    rc = out.document.root_cause
    assert rc.class_ == "gpu_engine_hang_reset_required"
    assert rc.culprit.gpu is not None and rc.culprit.gpu.startswith("0000:2a:00")


# --- several programs on one host -----------------------------------------------------------------------

TIMEOUT = (
    "[rank{r}]:[E1130 02:40:01.000000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600078 "
    "milliseconds before timing out.\n"
)
CUDA_UNKNOWN = (
    "[rank{r}]: Traceback (most recent call last):\n"
    '[rank{r}]:   File "train.py", line 88, in <module>\n'
    "[rank{r}]:     loss.backward()\n"
    "[rank{r}]: RuntimeError: CUDA error: unknown error\n"
)


def _job(failing: dict[int, str]) -> dict[str, str]:
    """Ranks 0-3 on gpu-node-07 and 4-7 on gpu-node-08; ``failing`` ranks print their error, the rest time out."""
    files = {}
    for r in range(8):
        node = "gpu-node-07" if r < 4 else "gpu-node-08"
        files[f"logs/{node}/rank_{r}.out"] = failing[r].format(r=r) if r in failing else TIMEOUT.format(r=r)
    return files


def test_several_ranks_with_device_errors_on_one_host_point_at_the_host(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", _job({1: CUDA_UNKNOWN, 2: CUDA_UNKNOWN}), settings)
    rc = out.document.root_cause
    assert rc.class_ == "gpu_engine_hang_reset_required"
    assert (rc.culprit.node, rc.culprit.rank, rc.culprit.gpu) == ("gpu-node-07", None, None)
    assert {c.file for c in rc.citations if c.verified} >= {
        "logs/gpu-node-07/rank_1.out",
        "logs/gpu-node-07/rank_2.out",
    }


def test_one_rank_with_a_device_error_stays_that_rank(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", _job({2: CUDA_UNKNOWN}), settings)
    rc = out.document.root_cause
    assert rc.class_ == "gpu_engine_hang_reset_required"
    assert rc.culprit.rank == 2


def test_device_errors_on_two_hosts_name_no_single_host(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", _job({1: CUDA_UNKNOWN, 5: CUDA_UNKNOWN}), settings)
    assert out.document.root_cause.culprit.node != "gpu-node-07" or out.document.root_cause.culprit.rank is not None


def test_one_gpu_every_report_names_keeps_the_gpu(tmp_path: Path, settings: Settings) -> None:
    files = _job({1: CUDA_UNKNOWN, 2: CUDA_UNKNOWN})
    files["gpu-node-07/kern.log"] = (
        "Nov 30 02:30:00 gpu-node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n"
    )
    rc = run_files(tmp_path / "b", files, settings).document.root_cause
    assert rc.class_ == "gpu_fallen_off_bus"
    assert rc.culprit.gpu is not None and rc.culprit.gpu.startswith("0000:3b:00")


def test_unrelated_programs_faulting_on_one_host_point_at_the_host(tmp_path: Path, settings: Settings) -> None:
    kern = (
        "Nov 30 02:13:07 gpu-node-09 kernel: NVRM: Xid (PCI:0000:07:00): 13, pid=4410, name=python3, Graphics "
        "SM Warp Exception on (GPC 1, TPC 0): Out Of Range Address\n"
        "Nov 30 02:13:09 gpu-node-09 kernel: NVRM: Xid (PCI:0000:0f:00): 31, pid=5120, name=render, channel "
        "0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_3 faulted @ 0x7f_12340000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n"
    )
    rc = run_files(tmp_path / "b", {"gpu-node-09/kern.log": kern}, settings).document.root_cause
    assert (rc.culprit.node, rc.culprit.rank, rc.culprit.gpu) == ("gpu-node-09", None, None)


def test_one_program_faulting_twice_is_not_the_host(tmp_path: Path, settings: Settings) -> None:
    kern = (
        "Nov 30 02:13:07 gpu-node-09 kernel: NVRM: Xid (PCI:0000:07:00): 13, pid=4410, name=python3, Graphics "
        "SM Warp Exception on (GPC 1, TPC 0): Out Of Range Address\n"
        "Nov 30 02:13:07 gpu-node-09 kernel: NVRM: Xid (PCI:0000:07:00): 13, pid=4410, name=python3, Graphics "
        "SM Warp Exception on (GPC 2, TPC 1): Out Of Range Address\n"
    )
    rc = run_files(tmp_path / "b", {"gpu-node-09/kern.log": kern}, settings).document.root_cause
    assert rc.culprit.gpu is not None and rc.culprit.gpu.startswith("0000:07:00")


# --- an NVSwitch error and its GPU endpoint -------------------------------------------------------------

SXID = (
    "[Sun Nov 30 02:13:07 2026] nvidia-nvswitch2: SXid (PCI:0000:87:00.0): 24007, Fatal, Link 14 sourcetrack "
    "timeout error\n"
)


def _xid74(pci: str, second: int) -> str:
    return (
        f"[Sun Nov 30 02:13:{second:02d} 2026] NVRM: Xid (PCI:{pci}): 74, pid=3310, name=python, NVLink: fatal "
        "error detected on link 8(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)\n"
    )


def test_an_sxid_with_one_gpus_nvlink_xid_names_that_gpu(tmp_path: Path, settings: Settings) -> None:
    kern = SXID + _xid74("0000:48:00", 9)
    rc = run_files(tmp_path / "b", {"hgx-04/dmesg.log": kern}, settings).document.root_cause
    assert rc.class_ in {"nvswitch_fabric_manager_error", "gpu_nvlink_error"}
    assert rc.culprit.gpu is not None and rc.culprit.gpu.startswith("0000:48:00")


def test_an_sxid_with_several_gpus_names_no_gpu(tmp_path: Path, settings: Settings) -> None:
    kern = SXID + _xid74("0000:48:00", 9) + _xid74("0000:4e:00", 10)
    rc = run_files(tmp_path / "b", {"hgx-04/dmesg.log": kern}, settings).document.root_cause
    assert rc.class_ == "nvswitch_fabric_manager_error"
    assert rc.culprit.gpu is None


@pytest.mark.parametrize(
    ("line", "klass"),
    [
        ("RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered", "cuda_kernel_fault"),
        ("RuntimeError: CUDA driver error: unknown error", "gpu_engine_hang_reset_required"),
        (
            "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA_ERROR_ECC_UNCORRECTABLE",
            "gpu_memory_ecc_uncorrectable",
        ),
    ],
)
def test_cuda_errors_through_other_wrappers(line: str, klass: str) -> None:
    got = winner(line)
    assert got is not None and got[1] == klass, got


def test_fabric_manager_that_does_not_match_the_driver_is_a_fabric_manager_error() -> None:
    line = (
        "Nov 05 13:55:26 node1 nv-fabricmanager[104230]: fabric manager NVIDIA GPU driver interface version "
        "580.65.06 doesn't match with driver version 590.44.01. Please update with the matching NVIDIA driver package."
    )
    assert winner(line) == ("fabricmanager.driver_mismatch", "nvswitch_fabric_manager_error")


def _logged(hhmm: str) -> str:
    # a training script's logging line carrying PyTorch's CUDA error (logging's default asctime format)
    return (
        f"2026-11-30 {hhmm}:00,000 - train - ERROR - rank {{r}} step failed: RuntimeError: CUDA error: unknown error\n"
    )


def test_device_errors_far_apart_on_one_host_are_not_one_event(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", _job({1: _logged("02:10"), 2: _logged("02:50")}), settings)
    rc = out.document.root_cause
    assert rc.culprit.rank == 1  # the first failure; the one 40 minutes later is another event


def test_device_errors_together_on_one_host_name_the_host(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", _job({1: _logged("02:10"), 2: _logged("02:11")}), settings)
    rc = out.document.root_cause
    assert (rc.culprit.node, rc.culprit.rank) == ("gpu-node-07", None)


# --- a stopped process that holds GPU memory -------------------------------------------------------------

NVSMI_PROCESSES = """\
+---------------------------------------------------------------------------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|        ID   ID                                                             Usage      |
|=======================================================================================|
|    2   N/A  N/A     77120      C   python3                                    38211MiB |
+---------------------------------------------------------------------------------------+
"""


def _ps(stat: str) -> str:
    return (
        "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
        f"carol      77120  0.3  9.1 81234560 24012345 pts/4 {stat} Nov28  88:12 python3 finetune.py --gpu 2\n"
    )


def test_a_stopped_process_holding_gpu_memory_is_the_oom_cause(tmp_path: Path, settings: Settings) -> None:
    files = {"nvidia-smi.txt": NVSMI_PROCESSES, "ps.txt": _ps("Tl")}
    rc = run_files(tmp_path / "b", files, settings).document.root_cause
    assert rc.class_ == "cuda_oom"
    assert {(c.file, c.line) for c in rc.citations if c.verified} == {("nvidia-smi.txt", 6), ("ps.txt", 2)}
    assert rc.confidence <= 0.6  # an inference from a process table, not a line that says it


def test_a_running_process_holding_gpu_memory_is_no_cause(tmp_path: Path, settings: Settings) -> None:
    files = {"nvidia-smi.txt": NVSMI_PROCESSES, "ps.txt": _ps("Rl")}
    rc = run_files(tmp_path / "b", files, settings).document.root_cause
    assert rc.class_ != "cuda_oom"


def test_the_jobs_own_oom_error_cites_the_stopped_process(tmp_path: Path, settings: Settings) -> None:
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity of "
        "79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 39.02 GiB memory in use.\n"
    )
    files = {"train.log": oom, "nvidia-smi.txt": NVSMI_PROCESSES, "ps.txt": _ps("T")}
    rc = run_files(tmp_path / "b", files, settings).document.root_cause
    assert rc.class_ == "cuda_oom"
    cited = {c.file for c in rc.citations if c.verified}
    assert {"train.log", "ps.txt"} <= cited


def test_a_device_busy_or_unavailable_is_a_gpu_fault_not_a_kernel_bug() -> None:
    # cudaErrorDevicesUnavailable (46): the GPU is held by another process in exclusive mode, or gone
    got = winner("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable")
    assert got == ("cuda.device_unavailable", "gpu_engine_hang_reset_required")


def test_rm_init_adapter_failures_by_stage() -> None:
    # osinit.c rm_init_status: 0x6x is the firmware (GSP) stage, 0x2x the GPU itself
    assert winner("NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x62:0x65:2385)") == (
        "kernel.nvrm_init_failed_gsp",
        "gpu_gsp_firmware_error",
    )
    assert winner("NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x26:0xffff:1290)") == (
        "kernel.nvrm_init_failed",
        "gpu_engine_hang_reset_required",
    )


def test_a_gpu_no_longer_attached_confirms_a_lost_gpu() -> None:
    got = winner("NVRM: _threadNodeCheckTimeout: API_GPU_ATTACHED_SANITY_CHECK failed!")
    assert got == ("kernel.gpu_not_attached", "gpu_fallen_off_bus")
    assert CAT.signatures[CAT.index["kernel.gpu_not_attached"]].role == "confirmation"


def test_one_jobs_ranks_faulting_on_one_host_are_its_bug_not_the_host(tmp_path: Path, settings: Settings) -> None:
    # two ranks of one job (the same program) hit an MMU fault: a bug in the job, not the host
    kern = "".join(
        f"Nov 30 02:13:0{i} gpu-node-09 kernel: NVRM: Xid (PCI:0000:{bus}:00): 31, pid={pid}, name=pt_main_thread, "
        "channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_3 faulted @ 0x7f_12340000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n"
        for i, (bus, pid) in enumerate((("07", 4410), ("0f", 4411)))
    )
    rc = run_files(tmp_path / "b", {"gpu-node-09/kern.log": kern}, settings).document.root_cause
    assert rc.culprit.gpu is not None  # the first faulting GPU speaks, not "the host"
