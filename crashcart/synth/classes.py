"""Synth class registry: every TAXONOMY section 2 class id plus ``unknown``, mapped to its scenario
function, with the layouts and minimum node count the scenario needs. Pure data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from crashcart.synth import scen_comm, scen_gpu, scen_host, scen_numerics, scen_proc, scen_sched
from crashcart.synth.story import Story
from crashcart.synth.world import LAYOUTS

_NOT_K8S = tuple(x for x in LAYOUTS if x != "k8s")


@dataclass(frozen=True)
class Scenario:
    run: Callable[[Story], None]
    layouts: tuple[str, ...] = LAYOUTS
    min_nodes: int = 1
    slurm: bool = False  # needs a Slurm scheduler (forces it in per_rank / per_node / torchrun layouts)


SCENARIOS: dict[str, Scenario] = {
    "nccl_watchdog_timeout": Scenario(scen_comm.nccl_watchdog_timeout),
    "nccl_watchdog_stuck_heartbeat": Scenario(scen_comm.nccl_watchdog_stuck_heartbeat),
    "nccl_remote_peer_failure": Scenario(scen_comm.nccl_remote_peer_failure, min_nodes=2),
    "collective_mismatch_desync": Scenario(scen_comm.collective_mismatch_desync),
    "rank_hang_or_missing_rank": Scenario(scen_comm.rank_hang_or_missing_rank),
    "ib_completion_error": Scenario(scen_comm.ib_completion_error, min_nodes=2),
    "ib_port_error_link_flap": Scenario(scen_comm.ib_port_error_link_flap, min_nodes=2),
    "nccl_init_bootstrap_failure": Scenario(scen_comm.nccl_init_bootstrap_failure),
    "gpu_fallen_off_bus": Scenario(scen_gpu.gpu_fallen_off_bus),
    "gpu_memory_ecc_uncorrectable": Scenario(scen_gpu.gpu_memory_ecc_uncorrectable),
    "gpu_nvlink_error": Scenario(scen_gpu.gpu_nvlink_error),
    "nvswitch_fabric_manager_error": Scenario(scen_gpu.nvswitch_fabric_manager_error),
    "gpu_gsp_firmware_error": Scenario(scen_gpu.gpu_gsp_firmware_error),
    "gpu_engine_hang_reset_required": Scenario(scen_gpu.gpu_engine_hang_reset_required),
    "gpu_app_fault_xid": Scenario(scen_gpu.gpu_app_fault_xid),
    "cuda_oom": Scenario(scen_proc.cuda_oom),
    "cuda_kernel_fault": Scenario(scen_proc.cuda_kernel_fault),
    "python_exception_rank_crash": Scenario(scen_proc.python_exception_rank_crash),
    "native_crash_segfault_abort": Scenario(scen_proc.native_crash_segfault_abort),
    "host_oom_kill": Scenario(scen_host.host_oom_kill, layouts=_NOT_K8S),
    "pcie_aer_error": Scenario(scen_gpu.pcie_aer_error),
    "storage_full_or_io_error": Scenario(scen_host.storage_full_or_io_error),
    "network_filesystem_hang": Scenario(scen_host.network_filesystem_hang),
    "dataloader_worker_failure": Scenario(scen_proc.dataloader_worker_failure),
    "slurm_node_failure": Scenario(scen_sched.slurm_node_failure, layouts=_NOT_K8S, min_nodes=2, slurm=True),
    "scheduler_preemption_or_timelimit": Scenario(scen_sched.scheduler_preemption_or_timelimit, layouts=_NOT_K8S),
    "k8s_pod_eviction_or_oomkilled": Scenario(scen_sched.k8s_pod_eviction_or_oomkilled, layouts=("k8s",)),
    "launcher_rendezvous_store_failure": Scenario(scen_sched.launcher_rendezvous_store_failure),
    "torchelastic_childfailed_summary": Scenario(
        scen_proc.torchelastic_childfailed_summary, layouts=tuple(x for x in LAYOUTS if x != "slurm_combined")
    ),
    "nan_inf_loss_or_grad": Scenario(scen_numerics.nan_inf_loss_or_grad),
    "fp16_loss_scale_overflow": Scenario(scen_numerics.fp16_loss_scale_overflow),
    "loss_spike_divergence": Scenario(scen_numerics.loss_spike_divergence),
    "silent_data_corruption_suspect": Scenario(scen_numerics.silent_data_corruption_suspect),
    "gpu_thermal_power_throttling": Scenario(scen_gpu.gpu_thermal_power_throttling),
    "straggler_fail_slow": Scenario(scen_gpu.straggler_fail_slow),
    "software_version_mismatch": Scenario(scen_comm.software_version_mismatch),
    "unknown": Scenario(scen_sched.unknown),
}

CLASSES: tuple[str, ...] = tuple(SCENARIOS)
