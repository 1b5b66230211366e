"""Synth stage 1: the simulated cluster: hosts, GPUs and PCI ids, software stack, and the job clock.

Input: seed and job shape; output: an immutable :class:`World`. Pure, no I/O. All randomness comes
from ``random.Random`` seeded with a string, so a world depends on nothing but its arguments.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

LAYOUTS: tuple[str, ...] = ("per_rank", "per_node", "slurm_combined", "torchrun_prefixed", "k8s")

# Real PCI bus numbers of the 8 GPUs on common HGX/DGX boards.
_BUSES: dict[str, tuple[str, ...]] = {
    "h100": ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db"),
    "a100": ("07", "0f", "47", "4e", "87", "90", "b7", "bd"),
    "hgx": ("19", "3b", "4c", "5d", "9b", "bb", "cb", "db"),
}
_NIC_BUSES = ("0c", "0d", "3f", "40", "86", "8a", "c0", "c4")


@dataclass(frozen=True)
class Stack:
    """Software versions of one node (they may drift between nodes in a real cluster)."""

    driver: str
    cuda_driver: int  # as NCCL prints it, e.g. 12040
    nccl: str  # e.g. "2.19.3"
    cuda: str  # e.g. "12.3"


@dataclass(frozen=True)
class Node:
    """One host of the job."""

    index: int
    host: str
    fqdn: str
    ip: str
    ranks: tuple[int, ...]
    buses: tuple[str, ...]  # canonical "0000:18:00", one per local GPU
    boot: float  # boot time, seconds relative to job start (negative)
    agent_pid: int
    pod: str


@dataclass(frozen=True)
class World:
    """Everything about the job that does not depend on the failure class."""

    seed: int
    ranks: int
    layout: str
    scheduler: str  # "slurm" | "k8s" | "none"
    launcher: str  # "torchrun" | "srun"
    nodes: tuple[Node, ...]
    rank_node: tuple[int, ...]
    local: tuple[int, ...]
    pid: tuple[int, ...]
    base: datetime  # job start, t = 0
    kernel_clock: str  # "ctime" | "mono" | "syslog"
    syslog_mono: bool
    timeout_ms: int
    old_torch: bool
    log_style: str  # "pylog" | "megatron"
    pylog_fmt: int
    prefix_style: str  # "rank" | "default" (torchrun_prefixed only)
    stack: Stack
    torch_version: str
    gpu_model: str
    gpu_kind: str  # "h100" | "a100"
    pci_id: str
    mem_gib: float
    net: str  # "IB" | "RoCE"
    ifname: str
    job_id: str
    job_name: str
    user: str
    uid: int
    script: str
    namespace: str
    plugin_warn: bool
    cpp_info: bool
    t_train0: float
    step_time: float
    log_every: int
    start_step: int
    total_steps: int
    coll_per_step: int
    seq_base: int
    numel: int
    comm_id: str
    comm_addr: tuple[str, ...]

    def at(self, t: float) -> datetime:
        """Wall-clock time of job-relative second ``t``."""
        return self.base + timedelta(seconds=t)

    def node_of(self, rank: int) -> Node:
        return self.nodes[self.rank_node[rank]]

    def host(self, rank: int) -> str:
        return self.node_of(rank).host

    def bus(self, rank: int) -> str:
        return self.node_of(rank).buses[self.local[rank]]


def _hostnames(rng: random.Random, count: int) -> list[str]:
    style = rng.randrange(5)
    start = rng.randrange(1, 180)
    if style == 0:
        return [f"gpu-node-{start + i:03d}" for i in range(count)]
    if style == 1:
        kind = rng.choice(("a100", "h100"))
        return [f"dgx-{kind}-{start % 60 + i:02d}" for i in range(count)]
    if style == 2:
        return [f"node{start * 7 + i:04d}" for i in range(count)]
    if style == 3:
        rack = rng.randrange(1, 30)
        return [f"h100-b{rack:02d}-{(start % 40) + i:02d}" for i in range(count)]
    rack = rng.randrange(1, 20)
    return [f"hgx-r{rack:02d}-u{(start % 30) + i:02d}" for i in range(count)]


def _buses(rng: random.Random, count: int, board: str) -> tuple[str, ...]:
    chosen = list(_BUSES[board][:count])
    spare = [f"{b:02x}" for b in range(0x10, 0xF0, 3) if f"{b:02x}" not in chosen]
    while len(chosen) < count:
        chosen.append(spare.pop(rng.randrange(len(spare))))
    dom = "0000"
    return tuple(f"{dom}:{b}:00" for b in chosen)


def split_ranks(ranks: int, nodes: int) -> list[tuple[int, ...]]:
    """Contiguous rank blocks per node; the first ``ranks % nodes`` nodes get one extra rank."""
    per, extra = divmod(ranks, nodes)
    out: list[tuple[int, ...]] = []
    start = 0
    for i in range(nodes):
        n = per + (1 if i < extra else 0)
        out.append(tuple(range(start, start + n)))
        start += n
    return out


def build_world(seed: int, ranks: int, nodes: int, layout: str, *, slurm: bool = False) -> World:
    """Build the cluster and job for one synthetic incident (``slurm``: the class needs a Slurm job)."""
    rng = random.Random(f"crashcart-synth/world/{seed}/{ranks}/{nodes}/{layout}")
    if layout == "slurm_combined":
        scheduler, launcher = "slurm", "srun"
    elif layout == "k8s":
        scheduler, launcher = "k8s", "torchrun"
    else:
        scheduler, launcher = rng.choice(("slurm", "slurm", "none")), "torchrun"
        scheduler = "slurm" if slurm else scheduler
    hosts = _hostnames(rng, nodes)
    gpu_kind = rng.choice(("h100", "h100", "a100"))
    board = rng.choice(("h100", "hgx")) if gpu_kind == "h100" else rng.choice(("a100", "hgx"))
    blocks = split_ranks(ranks, nodes)
    job_name = rng.choice(("llm-pretrain", "gpt-moe", "llama-sft", "t5-xl", "vit-huge", "mixtral-ft"))
    subnet = rng.randrange(1, 250)
    pid0 = rng.randrange(3000, 900000)
    node_list: list[Node] = []
    rank_node: list[int] = []
    local: list[int] = []
    pids: list[int] = []
    domain = rng.choice(("cluster.local", "hpc.internal", "", "ml.example.net"))
    for i, host in enumerate(hosts):
        base_pid = pid0 + rng.randrange(0, 40000)
        for j in range(len(blocks[i])):
            rank_node.append(i)
            local.append(j)
            pids.append(base_pid + 1 + j * rng.randrange(1, 4) + j)
        pod = f"{job_name}-master-0" if i == 0 else f"{job_name}-worker-{i - 1}"
        node_list.append(
            Node(
                index=i,
                host=host,
                fqdn=f"{host}.{domain}" if domain else host,
                ip=f"10.{subnet}.{(i * 7 + 3) % 250}.{10 + i % 200}",
                ranks=blocks[i],
                buses=_buses(rng, len(blocks[i]), board),
                boot=-rng.uniform(3 * 3600, 40 * 86400),
                agent_pid=base_pid,
                pod=pod,
            )
        )
    base = datetime(2026, rng.randrange(1, 13), rng.randrange(1, 29), rng.randrange(24), rng.randrange(60))
    base += timedelta(seconds=rng.randrange(60), microseconds=rng.randrange(1_000_000))
    old_torch = rng.random() < 0.25
    timeout_ms = 1800000 if old_torch else rng.choice((600000, 600000, 1800000))
    nccl, cuda, cuda_driver = rng.choice(
        (
            ("2.18.3", "12.2", 12020),
            ("2.19.3", "12.3", 12030),
            ("2.20.5", "12.4", 12040),
            ("2.21.5", "12.4", 12040),
        )
    )
    driver = rng.choice(("535.161.08", "535.183.01", "550.54.15", "550.90.07"))
    step_time = round(rng.uniform(0.6, 4.0), 3)
    log_every = rng.choice((10, 20, 25, 50))
    coll = rng.choice((1, 2, 4, 6))
    comm_addr = tuple(f"0x{rng.randrange(0x55D000000000, 0x55FFFFFFFFFF):x}" for _ in range(ranks))
    return World(
        seed=seed,
        ranks=ranks,
        layout=layout,
        scheduler=scheduler,
        launcher=launcher,
        nodes=tuple(node_list),
        rank_node=tuple(rank_node),
        local=tuple(local),
        pid=tuple(pids),
        base=base,
        kernel_clock=rng.choice(("ctime", "mono", "syslog")),
        syslog_mono=rng.random() < 0.5,
        timeout_ms=timeout_ms,
        old_torch=old_torch,
        log_style=rng.choice(("pylog", "pylog", "megatron")),
        pylog_fmt=rng.randrange(3),
        prefix_style=rng.choice(("rank", "default")),
        stack=Stack(driver=driver, cuda_driver=cuda_driver, nccl=nccl, cuda=cuda),
        torch_version=rng.choice(("2.1.2", "2.2.2")) if old_torch else rng.choice(("2.3.1", "2.4.1", "2.5.1")),
        gpu_model="NVIDIA H100 80GB HBM3" if gpu_kind == "h100" else "NVIDIA A100-SXM4-80GB",
        gpu_kind=gpu_kind,
        pci_id="10de:2330" if gpu_kind == "h100" else "10de:20b2",
        mem_gib=79.11 if gpu_kind == "h100" else 79.15,
        net=rng.choice(("IB", "IB", "RoCE")),
        ifname=rng.choice(("eth0", "bond0", "ens21f0np0", "enp170s0f0")),
        job_id=str(rng.randrange(100000, 9999999)),
        job_name=job_name,
        user=rng.choice(("mlops", "alice", "bwang", "train-svc", "kpatel")),
        uid=rng.randrange(1000, 60000),
        script=rng.choice(("train.py", "pretrain_gpt.py", "main.py", "run_clm.py")),
        namespace=rng.choice(("training", "ml-prod", "research")),
        plugin_warn=rng.random() < 0.4,
        cpp_info=rng.random() < 0.5,
        t_train0=rng.uniform(70.0, 240.0),
        step_time=step_time,
        log_every=log_every,
        start_step=rng.choice((0, 0, 1000, 12000, 38000, 41000)) + rng.randrange(0, 5) * 100,
        total_steps=rng.choice((100000, 250000, 500000)),
        coll_per_step=coll,
        seq_base=rng.randrange(3, 40),
        numel=rng.choice((466119168, 262144000, 134217728, 50331648, 16777216)),
        comm_id=f"0x{rng.getrandbits(64):016x}",
        comm_addr=comm_addr,
    )
