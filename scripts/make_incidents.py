"""Regenerate the committed incident corpus in incidents/ from the deterministic generator.

Usage: python scripts/make_incidents.py [--check]
Each case is (directory, class, seed, layout, ranks, nodes, what the trap is). ``--check`` regenerates into a
temporary directory and fails if the committed files differ (the corpus is reproducible byte for byte).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from crashcart.synth import synthesize

ROOT = Path(__file__).resolve().parent.parent / "incidents"
DEFAULT = "gpu-fell-off-bus"

# (directory, class, seed, layout, ranks, nodes, note)
CASES: list[tuple[str, str, int, str, int, int, str]] = [
    (
        DEFAULT,
        "gpu_fallen_off_bus",
        7,
        "per_rank",
        32,
        4,
        "Xid 79 in one node's kern.log; 24 healthy ranks hit the NCCL watchdog ten minutes later.",
    ),
    (
        "ecc-uncorrectable",
        "gpu_memory_ecc_uncorrectable",
        1,
        "per_node",
        8,
        2,
        "Xid 48/94 on one GPU; the rank on it reports only an unspecified CUDA error.",
    ),
    (
        "nvlink-fatal",
        "gpu_nvlink_error",
        0,
        "per_rank",
        8,
        2,
        "Xid 74 in dmesg; the rank's own NCCL 'unhandled cuda error' shows first by file order.",
    ),
    ("gsp-timeout", "gpu_gsp_firmware_error", 1, "per_node", 8, 2, "Xid 119 GSP RPC timeout; the rank hangs."),
    ("gpu-hang-reset", "gpu_engine_hang_reset_required", 0, "per_rank", 8, 2, "Xid 109 context-switch timeout."),
    (
        "xid31-app-fault",
        "gpu_app_fault_xid",
        0,
        "per_rank",
        8,
        2,
        "Xid 31 then 43 for the culprit's pid; the rank itself just hangs.",
    ),
    ("pcie-aer-fatal", "pcie_aer_error", 1, "per_node", 8, 2, "Uncorrected (Fatal) AER naming the GPU, no Xid 79."),
    (
        "nvswitch-sxid",
        "nvswitch_fabric_manager_error",
        1,
        "per_node",
        8,
        2,
        "SXid 20034 plus Fabric Manager errors; ranks report an NVLink failure.",
    ),
    (
        "cuda-oom",
        "cuda_oom",
        0,
        "per_rank",
        8,
        2,
        "One rank's fatal CUDA OOM; a caught-and-retried OOM earlier is a trap.",
    ),
    ("illegal-memory-access", "cuda_kernel_fault", 1, "per_node", 8, 2, "CUDA illegal memory access in one rank."),
    (
        "dataset-keyerror",
        "python_exception_rank_crash",
        0,
        "per_rank",
        8,
        2,
        "A Python exception in one rank; the others time out, DataLoader teardown noise follows.",
    ),
    (
        "segfault-libnccl",
        "native_crash_segfault_abort",
        2,
        "slurm_combined",
        8,
        2,
        "A segfault in libnccl in the kernel log; srun reports the aborted tasks.",
    ),
    (
        "host-oom-killer",
        "host_oom_kill",
        0,
        "per_rank",
        8,
        2,
        "Kernel OOM killer on one node; the rank's log just ends.",
    ),
    ("dataloader-shm", "dataloader_worker_failure", 0, "per_rank", 8, 2, "DataLoader bus error: /dev/shm exhausted."),
    (
        "enospc-checkpoint",
        "storage_full_or_io_error",
        1,
        "per_node",
        8,
        2,
        "No space left on device while checkpointing.",
    ),
    (
        "lustre-hang",
        "network_filesystem_hang",
        1,
        "per_node",
        8,
        2,
        "Lustre connection lost, hung task; the rank stops.",
    ),
    ("ib-completion-12", "ib_completion_error", 1, "per_node", 8, 2, "IB completion status 12 on one node's ranks."),
    ("ib-link-flap", "ib_port_error_link_flap", 0, "per_rank", 8, 2, "mlx5 link down on one node."),
    ("nccl-init-nvml", "nccl_init_bootstrap_failure", 0, "per_rank", 8, 2, "NCCL init fails on one rank."),
    (
        "nccl-peer-reset",
        "nccl_remote_peer_failure",
        1,
        "per_node",
        8,
        2,
        "Connection reset by peer on one rank with no peer crash: the earliest error is the clue.",
    ),
    (
        "desync-allgather",
        "collective_mismatch_desync",
        0,
        "per_rank",
        8,
        2,
        "Every rank reports a collective mismatch; one rank runs a different OpType.",
    ),
    (
        "hung-rank",
        "rank_hang_or_missing_rank",
        0,
        "per_rank",
        8,
        2,
        "One rank never prints a watchdog timeout: its log just stops.",
    ),
    (
        "stuck-heartbeat",
        "nccl_watchdog_stuck_heartbeat",
        0,
        "per_rank",
        8,
        2,
        "The watchdog itself got stuck on one rank; no Xid anywhere.",
    ),
    (
        "short-pg-timeout",
        "nccl_watchdog_timeout",
        1,
        "per_node",
        8,
        2,
        "A 3-minute process-group timeout while rank 0 runs validation: the timeout is the cause.",
    ),
    (
        "slurm-node-fail",
        "slurm_node_failure",
        0,
        "per_rank",
        8,
        2,
        "NODE_FAIL; the slurmstepd line names the healthy batch host, not the failed node.",
    ),
    (
        "time-limit",
        "scheduler_preemption_or_timelimit",
        2,
        "slurm_combined",
        8,
        2,
        "Slurm time limit; a recovered CUDA OOM earlier is a trap.",
    ),
    ("k8s-oomkilled", "k8s_pod_eviction_or_oomkilled", 1, "k8s", 8, 2, "Pod OOMKilled (describe output)."),
    (
        "rendezvous-eaddrinuse",
        "launcher_rendezvous_store_failure",
        0,
        "per_rank",
        8,
        2,
        "torchrun master port in use; other agents time out at rendezvous.",
    ),
    (
        "childfailed-only",
        "torchelastic_childfailed_summary",
        0,
        "per_rank",
        8,
        2,
        "A rank exits with code 1 and prints nothing; only torchrun's summary names it.",
    ),
    ("nan-grad", "nan_inf_loss_or_grad", 1, "per_node", 8, 2, "NaN in the grad norm."),
    (
        "fp16-min-scale",
        "fp16_loss_scale_overflow",
        0,
        "per_rank",
        8,
        2,
        "Benign overflow skips early, then the loss scale hits its minimum on every rank.",
    ),
    (
        "sdc-rerun",
        "silent_data_corruption_suspect",
        0,
        "per_rank",
        8,
        2,
        "Megatron's rerun cannot reproduce a NaN: possible transient error on one GPU.",
    ),
    (
        "thermal-throttle",
        "gpu_thermal_power_throttling",
        0,
        "per_rank",
        8,
        2,
        "Only telemetry shows it: one GPU's clocks drop with HW thermal slowdown; ranks slow, then time out.",
    ),
    ("straggler-gpu", "straggler_fail_slow", 0, "k8s", 8, 2, "Only telemetry shows it: one GPU busy while peers wait."),
    (
        "driver-too-old",
        "software_version_mismatch",
        2,
        "slurm_combined",
        8,
        2,
        "One node runs an older NCCL: 'Mismatched NCCL version' at init.",
    ),
    (
        "all-timeouts-unknown",
        "unknown",
        1,
        "per_node",
        8,
        2,
        "Every rank times out and nothing explains it: the honest answer is unknown.",
    ),
]


def build(target: Path) -> list[tuple[str, str, str]]:
    rows = []
    for name, cls, seed, layout, ranks, nodes, note in CASES:
        synthesize(cls, target / name, ranks=ranks, nodes=nodes, seed=seed, layout=layout)
        rows.append((name, cls, note))
    return rows


def readme(rows: list[tuple[str, str, str]]) -> str:
    lines = [
        "# Incident corpus",
        "",
        "Synthetic bundles written by `crashcart synth` (regenerate with `python scripts/make_incidents.py`).",
        "Each has an `expected.json` label (DESIGN §4.5) that only `crashcart eval` reads.",
        f"`{DEFAULT}` is the README's default incident.",
        "",
        "Two sets here are not synthetic and are not written by this script: `real/` (logs copied from public",
        "failure threads) and `torch/` (real PyTorch runs, `scripts/make_torch_incidents.py`); each has its README.",
        "",
        "| incident | class | what happened, and the trap |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | `{cls}` | {note} |" for name, cls, note in rows]
    return "\n".join(lines) + "\n"


KEPT = frozenset({"real", "torch"})  # real-log sets beside the synthetic corpus: never generated, never removed


def _differences(d: filecmp.dircmp[str], top: bool = False) -> list[str]:
    out = [n for n in (*d.left_only, *d.right_only, *d.diff_files, *d.funny_files) if not (top and n in KEPT)]
    for sub in d.subdirs.values():
        out += _differences(sub)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="fail if the committed corpus is not reproducible")
    args = parser.parse_args()
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            rows = build(Path(tmp))
            (Path(tmp) / "README.md").write_text(readme(rows))
            bad = _differences(filecmp.dircmp(tmp, ROOT, ignore=[*KEPT]), top=True)
            if bad:
                print(f"incidents/ differs from the generator: {bad[:5]}", file=sys.stderr)
                return 1
        return 0
    ROOT.mkdir(exist_ok=True)
    for old in ROOT.iterdir():
        if old.name not in KEPT:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    rows = build(ROOT)
    (ROOT / "README.md").write_text(readme(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
