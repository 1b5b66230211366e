"""Scan follow-ups (crashcart/scan/followups.py, wrapped.py): `Last error:` stitching, Xid chains and the summary
Xid fallback, loss-scale trends, and wrapped lines, each on lines in the shapes their emitters print."""

from __future__ import annotations

from pathlib import Path

from crashcart.models import Finding
from crashcart.settings import Settings
from tests.kit import scan_texts


def _scan(tmp_path: Path, settings: Settings, files: dict[str, str]) -> list[Finding]:
    return scan_texts(tmp_path / "bundle", files, settings)


# PyTorch c10d NCCLUtils: "NCCL error in: <file>:<line>, <reason>, NCCL version <v>" then ncclGetLastError().
NVLS_LAST_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
    "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
    "ncclUnhandledCudaError: Call to CUDA function failed.\n"
    "Last error:\n"
    "Failed to bind NVLink SHARP (NVLS) Multicast memory of size 4194304 : CUDA error 999 'unknown error'.\n"
)


def test_last_error_detail_names_the_cause(tmp_path: Path, settings: Settings) -> None:
    found = _scan(tmp_path, settings, {"rank0.log": NVLS_LAST_ERROR})
    head = next(f for f in found if f.evidence[0].line == 1 and f.role != "context")
    assert head.class_id == "nvswitch_fabric_manager_error"
    assert "NVLink SHARP" in head.fields["last_error"]
    span = head.evidence[-1]
    assert (span.line, span.end_line) == (1, 4)
    assert not any(f.class_id == "cuda_kernel_fault" for f in found)


def test_last_error_inline_and_unknown_detail_is_kept(tmp_path: Path, settings: Settings) -> None:
    text = (
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, internal error, NCCL version 2.10.3\n"
        "ncclInternalError: Internal check failed.\n"
        "Last error: some detail the catalogue does not know\n"
    )
    found = _scan(tmp_path, settings, {"rank0.log": text})
    head = next(f for f in found if f.evidence[0].line == 1 and f.role != "context")
    assert head.fields["last_error"] == "some detail the catalogue does not know"
    assert head.class_id == "nccl_remote_peer_failure"


def test_a_dataloader_workers_original_error_names_the_cause(tmp_path: Path, settings: Settings) -> None:
    # torch/_utils.py ExceptionWrapper.reraise: "Caught <E> in DataLoader worker process <n>." + "Original <tb>"
    text = (
        "[rank0]: RuntimeError: Caught RuntimeError in DataLoader worker process 0.\n"
        "[rank0]: Original Traceback (most recent call last):\n"
        '[rank0]:   File "/x/torch/utils/data/_utils/worker.py", line 374, in _worker_loop\n'
        "[rank0]:     data = fetcher.fetch(index)\n"
        "[rank0]: RuntimeError: unable to allocate shared memory(shm) for file </torch_1_2_0>: No space left on "
        "device (28)\n"
    )
    found = _scan(tmp_path, settings, {"rank0.log": text})
    head = next(f for f in found if f.evidence[0].line == 1)
    assert head.class_id == "dataloader_worker_failure"
    assert head.fields["worker_error"].startswith("RuntimeError: unable to allocate shared memory")


XID_CHAIN = (
    "[ 10.1] NVRM: Xid (PCI:0000:48:00): 74, pid=22884, name=python, NVLink: fatal error detected on link 8\n"
    "[ 10.2] NVRM: Xid (PCI:0000:48:00): 45, pid=22884, name=python, channel 0x0000000a\n"
    "[ 70.2] NVRM: Xid (PCI:0000:48:00): 45, pid=22884, name=python, channel 0x00000010 caused by previous Xid 74\n"
)


def test_caused_by_previous_xid_is_a_consequence(tmp_path: Path, settings: Settings) -> None:
    found = [f for f in _scan(tmp_path, settings, {"dmesg.log": XID_CHAIN}) if f.signature == "kernel.xid"]
    by_line = {f.evidence[0].line: f for f in found}
    assert by_line[3].role == "cascade" and by_line[3].fields["_caused_by_xid"] == "74"
    assert by_line[1].role == "root_candidate" and by_line[1].class_id == "gpu_nvlink_error"


def test_summary_xid_is_a_fallback_root_with_its_gpu(tmp_path: Path, settings: Settings) -> None:
    text = (
        "[ 5.0] NVRM: Xid (PCI:0000:1b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
        "(GPU Reset Required)\n"
    )
    (f,) = [f for f in _scan(tmp_path, settings, {"dmesg.log": text}) if f.signature == "kernel.xid"]
    assert f.role == "root_candidate" and f.gpu is not None and f.gpu.startswith("0000:1b:00")
    assert f.class_id == "gpu_engine_hang_reset_required"


def test_summary_xid_stays_context_beside_a_root_xid(tmp_path: Path, settings: Settings) -> None:
    text = XID_CHAIN + (
        "[ 71.0] NVRM: Xid (PCI:0000:48:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
        "(GPU Reset Required)\n"
    )
    found = [f for f in _scan(tmp_path, settings, {"dmesg.log": text}) if f.fields.get("xid") == "154"]
    assert found and found[0].role == "context"


def _deepspeed_skips(scales: list[int]) -> str:
    # deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler.update_scale) via the engine's overflow message
    return "".join(
        f"[2024-03-01 10:00:{i:02d},000] [INFO] [logging.py:96:log_dist] [Rank 0] OVERFLOW! Rank 0 Skipping step. "
        f"Attempted loss scale: {s}, reducing to {max(s // 2, 1)}\n"
        for i, s in enumerate(scales)
    )


def test_loss_scale_halving_to_its_floor_is_a_root(tmp_path: Path, settings: Settings) -> None:
    text = "step 1 loss 2.1\n" + _deepspeed_skips([64, 32, 16, 8, 4, 2, 1]) + "step 9 loss nan-free\n" * 60
    found = _scan(tmp_path, settings, {"train.log": text})
    trend = [f for f in found if "_trend" in f.fields]
    assert len(trend) == 1
    assert trend[0].class_id == "fp16_loss_scale_overflow" and trend[0].severity == "P2"
    assert "64 to 1" in trend[0].summary


def test_overflow_skips_running_to_the_end_are_a_root(tmp_path: Path, settings: Settings) -> None:
    text = "step 1 loss 2.1\n" + _deepspeed_skips([65536, 65536, 65536, 65536])
    found = _scan(tmp_path, settings, {"train.log": text})
    assert any("_trend" in f.fields and "end of the log" in f.summary for f in found)


def test_megatron_loss_scale_falling_to_one_is_a_root(tmp_path: Path, settings: Settings) -> None:
    # megatron/training/training.py training_log: "iteration N/ T | ... | loss scale: S | ... | number of skipped
    # iterations: K |"
    text = (
        "".join(
            f" iteration {10 * i}/ 1000 | consumed samples: {640 * i} | lm loss: 7.1E+00 | loss scale: {s:.1f} | "
            f"grad norm: 1.0 | number of skipped iterations:  10 | number of nan iterations:   0 |\n"
            for i, s in enumerate([4096, 512, 64, 8, 1])
        )
        + "tail line\n" * 60
    )
    found = _scan(tmp_path, settings, {"main_log.txt": text})
    assert any("_trend" in f.fields and "4096 to 1" in f.summary for f in found)


def test_a_few_skips_early_in_training_are_not_a_trend(tmp_path: Path, settings: Settings) -> None:
    text = _deepspeed_skips([65536, 32768, 16384]) + "iteration 10 loss 1.5\n" * 80
    found = _scan(tmp_path, settings, {"train.log": text})
    assert not any("_trend" in f.fields for f in found)


# PyTorch ProcessGroupNCCL watchdog line, wrapped by a terminal at 100 columns.
WATCHDOG = (
    "[rank3]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=77, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600011 "
    "milliseconds before timing out."
)


def test_a_wrapped_watchdog_line_is_matched_across_lines(tmp_path: Path, settings: Settings) -> None:
    cut = WATCHDOG.index("WorkNCCL(SeqNum=77, OpType")
    text = "starting\n" + WATCHDOG[:cut] + "\n" + WATCHDOG[cut:] + "\n"
    found = _scan(tmp_path, settings, {"rank3.log": text})
    wd = [f for f in found if f.signature == "nccl.watchdog_timeout"]
    assert len(wd) == 1
    assert (wd[0].evidence[0].line, wd[0].evidence[0].end_line) == (2, 3)
    assert wd[0].fields["ran_ms"] == "600011" and wd[0].fields["_wrapped"] == "lines 2-3"


def test_a_paste_broken_at_a_space_is_matched(tmp_path: Path, settings: Settings) -> None:
    cut = WATCHDOG.index(" ran for")
    text = WATCHDOG[:cut] + "\n" + WATCHDOG[cut + 1 :] + "\n"
    found = _scan(tmp_path, settings, {"rank3.log": text})
    assert [f.evidence[0].end_line for f in found if f.signature == "nccl.watchdog_timeout"] == [2]


def test_separate_records_are_not_joined(tmp_path: Path, settings: Settings) -> None:
    text = (
        "[2024-01-01 10:00:00] worker 3 finished its shard of the dataset and is waiting\n"
        "[2024-01-01 10:00:01] ran for 600011 milliseconds before timing out.\n"
    )
    found = _scan(tmp_path, settings, {"a.log": text})
    assert not any("_wrapped" in f.fields for f in found)
