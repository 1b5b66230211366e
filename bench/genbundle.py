"""Generate a large, deterministic benchmark bundle: many ranks, many lines, one real root cause.

Usage: python bench/genbundle.py OUT [--size 1GiB | --steps N | --lines N] [--ranks 64] [--nodes 8] [--seed 0]

Every byte is a function of the arguments (one ``random.Random`` per file, seeded from ``--seed`` and
the file), so two runs write identical bundles whatever the number of worker processes. The logs look
like a Megatron/PyTorch job run with ``NCCL_DEBUG=INFO``: NCCL init lines, per-microbatch debug lines,
optimizer and all-reduce lines, a progress line every 10 steps, throughput, warnings and checkpoints;
about 1 line in 100 matches a signature, as in real logs. The root cause is an Xid 79 in one node's
kernel log; that rank stops, every other rank prints the NCCL watchdog timeout ten minutes later.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import shapes

PCI = ["0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00", "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00"]
START = 1_796_083_200  # 2026-12-01T00:00:00Z
STEP_S = 1.7
MICROBATCHES = 4
VERSION = 2  # bump when the output changes, so cached bundles are regenerated


def _bus(pci: str) -> str:
    return pci.split(":")[1] + "000"


def _stamp(t: float) -> str:
    """``2026-12-01 00:00:01,700`` (UTC), the Python logging format."""
    whole = int(t)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(whole)) + f",{int((t - whole) * 1000):03d}"


def _dmesg_stamp(t: float) -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(int(t)))


def parse_size(text: str) -> int:
    """``1GiB``, ``512MiB``, ``1e9`` or a plain number of bytes."""
    m = re.fullmatch(r"\s*([\d.eE+]+)\s*([KMGT]i?B?)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    unit = (m.group(2) or "").rstrip("B")
    scale = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return int(float(m.group(1)) * scale[unit])


class Plan:
    """What every file needs to know: hosts, the culprit, and when the failure happens."""

    def __init__(self, ranks: int, nodes: int, steps: int, seed: int) -> None:
        rng = random.Random(seed)
        self.ranks, self.nodes, self.steps, self.seed = ranks, nodes, steps, seed
        self.per_node = max(1, ranks // nodes)
        self.hosts = [f"gpu-node-{i:03d}" for i in range(nodes)]
        self.culprit = rng.randrange(ranks)
        self.fail_step = max(1, steps - 60)
        self.t_fail = START + self.fail_step * STEP_S
        self.chost = self.hosts[min(self.culprit // self.per_node, nodes - 1)]
        self.cpci = PCI[(self.culprit % self.per_node) % len(PCI)]

    def host_of(self, rank: int) -> str:
        return self.hosts[min(rank // self.per_node, self.nodes - 1)]

    def rng(self, what: str) -> random.Random:
        return random.Random(self.seed * 1_000_003 + zlib.crc32(what.encode()))


def _rank_header(p: Plan, r: int, rng: random.Random) -> list[str]:
    host, local = p.host_of(r), r % p.per_node
    pid = 9000 + r
    who = f"{host}:{pid}:{pid + 100} [{local}]"
    out = [
        f"{who} NCCL INFO Bootstrap : Using eth0:10.0.{r // 256}.{r % 256}<0>\n",
        f"{who} NCCL INFO NCCL version 2.21.5+cuda12.4\n",
        f"{who} NCCL INFO cudaDriverVersion 12040\n",
        f"{who} NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB eth0:10.0.0.1<0>\n",
        f"{who} NCCL INFO Using network IB\n",
    ]
    for ch in range(32):
        peer = (r + 1) % p.ranks
        out.append(
            f"{who} NCCL INFO Channel {ch:02d}/0 : {r}[{local}] -> {peer}[{peer % p.per_node}] via P2P/IPC/read\n"
        )
    out += [
        f"{who} NCCL INFO Connected all rings\n",
        f"{who} NCCL INFO Connected all trees\n",
        f"{who} NCCL INFO threadThresholds 8/8/64 | 512/8/64 | 512 | 512\n",
        f"{who} NCCL INFO comm 0x55d0a1b2{r:04x} rank {r} nranks {p.ranks} cudaDev {local} nvmlDev {local} "
        f"busId {_bus(PCI[local % len(PCI)])} commId 0x9f1c2d3e - Init COMPLETE\n",
    ]
    rng.random()
    return out


def _rank_log(p: Plan, r: int, out: Path) -> int:
    rng = p.rng(f"rank-{r}")
    rnd = rng.random
    lines = _rank_header(p, r, rng)
    stop = p.fail_step if r == p.culprit else p.steps - 4
    pp = r % 4
    with out.open("w") as fh:
        fh.writelines(lines)
        buf: list[str] = []
        for i in range(stop):
            t = START + i * STEP_S
            ts = _stamp(t)
            for mb in range(MICROBATCHES):
                buf.append(
                    f"{ts} DEBUG [rank{r}] [schedules.py:412] pp {pp}/4 microbatch {mb + 1}/{MICROBATCHES} forward "
                    f"{180 + rnd() * 60:.2f} ms backward {360 + rnd() * 90:.2f} ms tokens 8192\n"
                )
            for bucket in (0, 12):
                buf.append(
                    f"{ts} DEBUG [rank{r}] [distributed.py:288] allreduce bucket {bucket}/24 size 25.0 MiB "
                    f"launched on stream 0x7f{rng.randrange(16**8):08x}\n"
                )
            buf.append(
                f"{ts} INFO [rank{r}] [optimizer.py:91] optimizer step {i} took {20 + rnd() * 5:.1f} ms, "
                f"clip_grad {rnd():.3f}, params 1.31e+09\n"
            )
            if i % 10 == 0:
                buf.append(
                    f"{ts} INFO [train] [rank{r}] step {i}/250000 | loss {3.2 - i * 0.00002 + rnd() * 0.05:.4f} "
                    f"| lr 1.500e-04 | grad_norm {rnd():.3f} | {STEP_S:.3f} s/step\n"
                )
            if i % 50 == 25:
                buf.append(
                    f"{ts} INFO [rank{r}] [training.py:1012] throughput {180 + rnd() * 20:.1f} TFLOP/s/GPU, "
                    f"{9000 + rnd() * 500:.0f} tokens/s/GPU, mem allocated {60 + rnd() * 4:.1f} GiB, reserved 72.0 GiB\n"
                )
            if i % 250 == 125:
                buf.append(
                    "/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py:91: UserWarning: None of the "
                    "inputs have requires_grad=True. Gradients will be None\n"
                )
                buf.append("  warnings.warn(\n")
            if i % 1000 == 999:
                buf.append(f"{ts} INFO [rank{r}] saving checkpoint at iteration {i + 1:8d} to /ckpt/run42\n")
                buf.append(
                    f"{ts} INFO [rank{r}]   successfully saved checkpoint at iteration {i + 1:8d} to /ckpt/run42\n"
                )
            if len(buf) > 4096:
                fh.writelines(buf)
                buf.clear()
        fh.writelines(buf)
        if r == p.culprit:
            fh.write("RuntimeError: CUDA error: unspecified launch failure\n")
        else:
            tw = p.t_fail + 600 + rng.randrange(900) / 1000
            us = int((tw - int(tw)) * 1e6)
            clock = time.strftime("%m%d %H:%M:%S", time.gmtime(int(tw)))
            fh.write(
                f"[rank{r}]:[E{clock}.{us:06d}000 ProcessGroupNCCL.cpp:607] [Rank {r}] "
                "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4011, OpType=ALLREDUCE, "
                "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n"
            )
            fh.write(
                f"[rank{r}]:[E{clock}.{us:06d}100 ProcessGroupNCCL.cpp:1664] [PG 1 Rank {r}] "
                "Exception (either an error or timeout) detected by watchdog at work: 4011, last enqueued NCCL work: "
                "4012, last completed NCCL work: 4010.\n"
            )
        return fh.tell()


def _dmesg(p: Plan, host: str, out: Path) -> int:
    rng = p.rng(f"dmesg-{host}")
    end = START + p.steps * STEP_S
    t = START - 600.0
    with out.open("w") as fh:
        while t < end:
            fh.write(f"[{_dmesg_stamp(t)}] mlx5_core 0000:0c:00.0: poll_health: {rng.randrange(10**6)}\n")
            if rng.random() < 0.1:
                fh.write(
                    f"[{_dmesg_stamp(t)}] IPv6: ADDRCONF(NETDEV_CHANGE): ib{rng.randrange(4)}: link becomes ready\n"
                )
            if host == p.chost and t <= p.t_fail < t + 30:
                fh.write(
                    f"[{_dmesg_stamp(p.t_fail)}] NVRM: Xid (PCI:{p.cpci}): 79, pid={9000 + p.culprit}, name=python, "
                    "GPU has fallen off the bus.\n"
                )
            t += 30
        return fh.tell()


def _job(args: tuple[Plan | shapes.Plan, str, int, str]) -> int:
    plan, kind, rank, path = args
    if isinstance(plan, shapes.Plan):
        if kind == "rank":
            return shapes.rank_log(plan, rank, Path(path))
        return shapes.kernel_log(plan, plan.hosts[rank], Path(path))
    if kind == "rank":
        return _rank_log(plan, rank, Path(path))
    return _dmesg(plan, plan.hosts[rank], Path(path))


def _shape_step_bytes(shape: str, ranks: int, nodes: int, seed: int) -> float:
    """``_step_bytes`` for a ``shapes`` shape."""
    import tempfile

    sizes = []
    with tempfile.TemporaryDirectory() as d:
        for steps in (64, 5064):
            plan = shapes.Plan(shape, ranks, nodes, steps, seed)
            r = 0 if plan.culprit and 0 not in plan.silent else 1
            sizes.append(shapes.rank_log(plan, r, Path(d) / "r.log"))
    return (sizes[1] - sizes[0]) / 5000


def _step_bytes(ranks: int, nodes: int, seed: int) -> float:
    """Average bytes one step adds to one rank log (measured on a small sample, deterministic)."""
    import tempfile

    plan = Plan(ranks, nodes, 1000 + 64, seed)
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "r.log"
        with_steps = _rank_log(plan, 0 if plan.culprit else 1, f)
        plan0 = Plan(ranks, nodes, 64, seed)
        base = _rank_log(plan0, 0 if plan0.culprit else 1, f)
    return (with_steps - base) / 1000


def generate(
    out: Path,
    ranks: int,
    nodes: int,
    seed: int,
    *,
    steps: int | None = None,
    size: int | None = None,
    jobs: int = 0,
    shape: str = "classic",
) -> dict[str, object]:
    """Write the bundle into ``out``; ``size`` (total bytes, approximate) or ``steps`` per rank.

    ``shape``: ``classic`` (this module) or one of ``shapes.SHAPES``."""
    if steps is None:
        per = _step_bytes(ranks, nodes, seed) if shape == "classic" else _shape_step_bytes(shape, ranks, nodes, seed)
        steps = max(100, int((size or 10**8) / ranks / per))
    plan: Plan | shapes.Plan = (
        Plan(ranks, nodes, steps, seed) if shape == "classic" else shapes.Plan(shape, ranks, nodes, steps, seed)
    )
    kernel_name = "dmesg.log" if shape == "classic" else "kern.log"
    (out / "nodes").mkdir(parents=True, exist_ok=True)
    work: list[tuple[Plan | shapes.Plan, str, int, str]] = []
    for n, h in enumerate(plan.hosts):
        (out / "nodes" / h).mkdir(exist_ok=True)
        work.append((plan, "dmesg", n, str(out / "nodes" / h / kernel_name)))
    work += [(plan, "rank", r, str(out / f"rank-{r}.log")) for r in range(ranks)]
    if isinstance(plan, shapes.Plan):
        shapes.manifest(plan, out)
    with ProcessPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        total = sum(pool.map(_job, work, chunksize=1))
    return {
        "ranks": ranks,
        "nodes": nodes,
        "steps": steps,
        "seed": seed,
        "files": len(work),
        "bytes": total,
        "culprit_rank": plan.culprit,
        "culprit_node": plan.chost,
        "gpu": plan.cpci,
        "version": VERSION,
        "shape": shape,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--size", type=parse_size, help="total bytes, e.g. 1GiB (default: 20000 steps)")
    p.add_argument("--steps", type=int, help="training steps per rank (about 8 lines each)")
    p.add_argument("--lines", type=int, help="about this many lines per rank (steps = lines / 8)")
    p.add_argument("--ranks", type=int, default=128)
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=0, help="writer processes (default: one per core)")
    p.add_argument("--shape", default="classic", choices=["classic", *shapes.SHAPES])
    a = p.parse_args()
    steps = a.steps if a.steps is not None else (max(1, a.lines // 8) if a.lines else None)
    if steps is None and a.size is None:
        steps = 20_000
    a.out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(generate(a.out, a.ranks, a.nodes, a.seed, steps=steps, size=a.size, jobs=a.jobs, shape=a.shape)))


if __name__ == "__main__":
    main()
