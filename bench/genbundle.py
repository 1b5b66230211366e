"""Generate a large, deterministic benchmark bundle: many ranks, many lines, one real root cause.

Usage: python bench/genbundle.py OUT --ranks 128 --lines 20000 [--nodes 16] [--seed 0]
The root cause is an Xid 79 on one node's kernel log; every other rank prints the NCCL watchdog
timeout ten minutes later. Lines are shaped like real PyTorch/NCCL/Megatron output.
"""

from __future__ import annotations

import argparse
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

PCI = ["0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00", "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00"]


def _bus(pci: str) -> str:
    return pci.split(":")[1] + "000"


def generate(out: Path, ranks: int, lines: int, nodes: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    per_node = max(1, ranks // nodes)
    hosts = [f"gpu-node-{i:03d}" for i in range(nodes)]
    start = datetime(2026, 11, 30, 0, 0, 0, tzinfo=UTC)
    step_s = 1.7
    fail_step = lines - 60
    t_fail = start + timedelta(seconds=fail_step * step_s)
    culprit = rng.randrange(ranks)
    chost = hosts[culprit // per_node]
    cpci = PCI[(culprit % per_node) % len(PCI)]
    (out / "nodes").mkdir(parents=True, exist_ok=True)
    for h in hosts:
        d = out / "nodes" / h
        d.mkdir(exist_ok=True)
        with (d / "dmesg.log").open("w") as fh:
            for i in range(400):
                t = start + timedelta(seconds=i * 30)
                fh.write(f"[{t:%a %b %d %H:%M:%S %Y}] mlx5_core 0000:0c:00.0: poll_health: {rng.randrange(10**6)}\n")
            if h == chost:
                fh.write(
                    f"[{t_fail:%a %b %d %H:%M:%S %Y}] NVRM: Xid (PCI:{cpci}): 79, pid={9000 + culprit}, name=python, GPU has fallen off the bus.\n"
                )
    for r in range(ranks):
        host = hosts[r // per_node]
        local = r % per_node
        pci = PCI[local % len(PCI)]
        with (out / f"rank-{r}.log").open("w") as fh:
            fh.write(f"{host}:{9000 + r}:{9100 + r} [{local}] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
            fh.write(
                f"{host}:{9000 + r}:{9100 + r} [{local}] NCCL INFO comm 0x55d0a1b2 rank {r} nranks {ranks} "
                f"cudaDev {local} nvmlDev {local} busId {_bus(pci)} commId 0x9f1c2d3e - Init COMPLETE\n"
            )
            stop = fail_step if r == culprit else lines - 4
            for i in range(stop):
                t = start + timedelta(seconds=i * step_s)
                loss = 3.2 - i * 0.00002 + rng.random() * 0.05
                fh.write(
                    f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} INFO [train] [rank{r}] step {i}/250000 | "
                    f"loss {loss:.4f} | lr 1.500e-04 | grad_norm {rng.random():.3f} | {step_s:.3f} s/step\n"
                )
            if r == culprit:
                fh.write("RuntimeError: CUDA error: unspecified launch failure\n")
                continue
            tw = t_fail + timedelta(milliseconds=600_000 + rng.randrange(900))
            fh.write(
                f"[rank{r}]:[E{tw:%m%d %H:%M:%S}.{tw.microsecond:06d}000 ProcessGroupNCCL.cpp:607] [Rank {r}] "
                "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4011, OpType=ALLREDUCE, "
                "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n"
            )
            fh.write(
                f"[rank{r}]:[E{tw:%m%d %H:%M:%S}.{tw.microsecond:06d}100 ProcessGroupNCCL.cpp:1664] [PG 1 Rank {r}] "
                "Exception (either an error or timeout) detected by watchdog at work: 4011, last enqueued NCCL work: "
                "4012, last completed NCCL work: 4010.\n"
            )
    return {"culprit_rank": culprit, "culprit_node": chost, "gpu": cpci}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--ranks", type=int, default=128)
    p.add_argument("--lines", type=int, default=20_000)
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    print(generate(a.out, a.ranks, a.lines, a.nodes, a.seed))


if __name__ == "__main__":
    main()
