"""Benchmark bundles shaped like real training jobs (issue 16), beside ``genbundle``'s classic shape.

Shapes (every byte a function of the arguments; one ``random.Random`` per file):

- ``megatron``: a Megatron-LM job with ``NCCL_DEBUG=INFO``. Most lines carry no clock: NCCL INFO init and
  channel chatter for several communicators, NCCL INFO collective lines every step, Python warnings, handled
  tracebacks (a retried data fetch), thread dumps (py-spy style, from a hang detector); the iteration line
  carries Megatron's ``[YYYY-MM-DD HH:MM:SS]`` clock. Kernel logs use seconds-since-boot clocks (boot times
  in ``manifest.json``). Root cause: Xid 79 on one node; that rank stops; every other rank but three prints
  the NCCL watchdog burst ten minutes later (clocked ``[E...]`` lines, then ``terminate called``, ``what():``,
  C++ ``frame #N`` lines and a Python thread dump, none with a clock).
- ``dense``: the ``megatron`` shape where one clock-less line (``Gradient overflow.  Skipping step``)
  follows every 9 lines: 10 % of the lines match a signature, tens of thousands of times per rank.
- ``clean``: ``dense`` with that line replaced by a line of the same length matching nothing (the
  comparison for ``dense``: same size, same line count).
"""

from __future__ import annotations

import json
import random
import time
import zlib
from pathlib import Path

START = 1_796_083_200  # 2026-12-01T00:00:00Z
STEP_S = 1.7
BOOT_AGO = 86_400 * 3 + 1234.5  # nodes booted this long before START
PCI = ["0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00", "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00"]
SHAPES = ("megatron", "dense", "clean")
DENSE_EVERY = 9  # dense: one matching line after every 9 others
SILENT = 3  # ranks (besides the culprit) that are killed without printing the watchdog burst


class Plan:
    def __init__(self, shape: str, ranks: int, nodes: int, steps: int, seed: int) -> None:
        rng = random.Random(seed * 7 + len(shape))
        self.shape, self.ranks, self.nodes, self.steps, self.seed = shape, ranks, nodes, steps, seed
        self.per_node = max(1, ranks // nodes)
        self.hosts = [f"gpu-node-{i:03d}" for i in range(nodes)]
        self.culprit = rng.randrange(ranks)
        self.silent = set(rng.sample([r for r in range(ranks) if r != self.culprit], min(SILENT, ranks - 1)))
        self.fail_step = max(1, steps - 60)
        self.t_fail = START + self.fail_step * STEP_S + 0.25
        self.chost = self.host_of(self.culprit)
        self.cpci = PCI[(self.culprit % self.per_node) % len(PCI)]

    def host_of(self, rank: int) -> str:
        return self.hosts[min(rank // self.per_node, self.nodes - 1)]

    def rng(self, what: str) -> random.Random:
        return random.Random(self.seed * 1_000_003 + zlib.crc32(f"{self.shape}/{what}".encode()))

    def boot(self, host: str) -> float:
        return START - BOOT_AGO - (self.hosts.index(host) * 17.25)


def _who(p: Plan, r: int) -> str:
    pid = 9000 + r
    return f"{p.host_of(r)}:{pid}:{pid + 100} [{r % p.per_node}]"


def _header(p: Plan, r: int) -> list[str]:
    who, local = _who(p, r), r % p.per_node
    out = [
        f"{who} NCCL INFO Bootstrap : Using eth0:10.0.{r // 256}.{r % 256}<0>\n",
        f"{who} NCCL INFO NCCL version 2.21.5+cuda12.4\n",
        f"{who} NCCL INFO cudaDriverVersion 12040\n",
        f"{who} NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB eth0:10.0.0.1<0>\n",
        f"{who} NCCL INFO Using network IB\n",
    ]
    for comm in range(4):  # data-, tensor-, pipeline-parallel and the world communicator
        cid = f"0x{zlib.crc32(f'{comm}'.encode()):08x}"
        for ch in range(32):
            peer = (r + 1 + comm) % p.ranks
            via = "P2P/IPC/read" if peer // p.per_node == r // p.per_node else "NET/IB/0/GDRDMA"
            out.append(f"{who} NCCL INFO Channel {ch:02d}/0 : {r}[{local}] -> {peer}[{peer % p.per_node}] via {via}\n")
        out += [
            f"{who} NCCL INFO Connected all rings\n",
            f"{who} NCCL INFO Connected all trees\n",
            f"{who} NCCL INFO threadThresholds 8/8/64 | 512/8/64 | 512 | 512\n",
            f"{who} NCCL INFO comm 0x55d0a1b2{r:04x} rank {r} nranks {p.ranks} cudaDev {local} nvmlDev {local} "
            f"busId {PCI[local % len(PCI)].split(':')[1]}000 commId {cid} - Init COMPLETE\n",
        ]
    return out


_TB = (
    "Traceback (most recent call last):\n"
    '  File "/workspace/megatron/core/datasets/blended_dataset.py", line 212, in _fetch\n'
    "    return self._client.get(key, timeout=30)\n"
    '  File "/opt/conda/lib/python3.11/site-packages/urllib3/connectionpool.py", line 790, in urlopen\n'
    "    response = self._make_request(\n"
    "ConnectionResetError: [Errno 104] Connection reset by peer\n"
    "retrying shard fetch in 2.0 s (attempt 1/5)\n"
)


def _thread_dump(pid: int) -> list[str]:
    out = []
    for k, (fn, line) in enumerate((("wait", 320), ("_worker_loop", 308), ("run", 975), ("train_step", 611))):
        out.append(f"Thread 0x00007f{pid:04x}{k:02x}c0 (most recent call first):\n")
        out.append(f'  File "/opt/conda/lib/python3.11/threading.py", line {line}, in {fn}\n')
        out.append('  File "/workspace/megatron/training/training.py", line 1181, in train\n')
        out.append("\n")
    return out


def _burst(p: Plan, r: int, rng: random.Random) -> list[str]:
    tw = p.t_fail + 600 + rng.randrange(900) / 1000
    us = int((tw - int(tw)) * 1e6)
    clock = time.strftime("%m%d %H:%M:%S", time.gmtime(int(tw)))
    e = f"[rank{r}]:[E{clock}.{us:06d}"
    wd = (
        f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4011, OpType=ALLREDUCE, "
        "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out."
    )
    out = [
        f"{e}000 ProcessGroupNCCL.cpp:607] {wd}\n",
        f"{e}100 ProcessGroupNCCL.cpp:1664] [PG 1 Rank {r}] Exception (either an error or timeout) detected by "
        "watchdog at work: 4011, last enqueued NCCL work: 4012, last completed NCCL work: 4010.\n",
        f"{e}200 ProcessGroupNCCL.cpp:621] [Rank {r}] Some NCCL operations have failed or timed out. Due to the "
        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.\n",
        f"{e}300 ProcessGroupNCCL.cpp:627] [Rank {r}] To avoid data inconsistency, we are taking the entire process down.\n",
        f"{e}400 ProcessGroupNCCL.cpp:1515] [PG 1 Rank {r}] Process group watchdog thread terminated with exception: {wd}\n",
    ]
    frames = [
        "c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3a1c2b4446 in /opt/conda/lib/python3.11/site-packages/torch/lib/libc10.so)",
        "c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x7f3a1d5e0772 in /opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so)",
        "c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7f3a1d5e7bb3 in /opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so)",
        "c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d (0x7f3a1d5e961d in /opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so)",
        "<unknown function> + 0xdc253 (0x7f3a6a0b0253 in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        "<unknown function> + 0x94ac3 (0x7f3a6a9b8ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
        "clone + 0x44 (0x7f3a6aa49a04 in /lib/x86_64-linux-gnu/libc.so.6)",
    ]
    for where in ("checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609", None):
        if where is None:
            out.append("terminate called after throwing an instance of 'c10::DistBackendError'\n")
            out.append(f"  what():  [PG 1 Rank {r}] Process group watchdog thread terminated with exception: {wd}\n")
            where = "ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521"
        out.append(f"Exception raised from {where} (most recent call first):\n")
        out += [f"frame #{i}: {f}\n" for i, f in enumerate(frames)]
        out.append("\n")
    out.append("Fatal Python error: Aborted\n\n")
    out += _thread_dump(9000 + r)
    return out


def rank_log(p: Plan, r: int, path: Path) -> int:
    rng = p.rng(f"rank-{r}")
    rnd = rng.random
    who = _who(p, r)
    stop = p.fail_step if r == p.culprit else p.steps - 4
    dense = p.shape in ("dense", "clean")
    n = 0  # lines written since the last dense line
    with path.open("w") as fh:
        fh.writelines(_header(p, r))
        buf: list[str] = []

        def put(line: str) -> None:
            nonlocal n
            buf.append(line)
            if not dense:
                return
            n += 1
            if n == DENSE_EVERY:
                n = 0
                if p.shape == "dense":
                    buf.append("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0\n")
                else:
                    buf.append("Gradient scaled.    Keeping step, loss scaler 0 holding the loss scale at 32768.0\n")

        for i in range(stop):
            t = START + i * STEP_S
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(int(t)))
            for op, count in (("AllReduce", 1048576), ("ReduceScatter", 262144), ("AllGather", 262144)):
                put(
                    f"{who} NCCL INFO {op}: opCount {i * 3:x} sendbuff 0x7f{rng.randrange(16**8):08x} recvbuff "
                    f"0x7f{rng.randrange(16**8):08x} count {count} datatype 7 op 0 root 0 comm 0x55d0a1b2{r:04x} "
                    f"[nranks={p.ranks}] stream 0x55d0c3{r:04x}\n"
                )
            put(
                f" [{stamp}] iteration {i + 1:8d}/  250000 | consumed samples: {(i + 1) * 512:12d} | elapsed time per "
                f"iteration (ms): {1700 + rnd() * 40:.1f} | learning rate: 1.500E-04 | global batch size:   512 | "
                f"lm loss: {3.2 - i * 0.00002 + rnd() * 0.05:.6E} | loss scale: 1.0 | grad norm: {rnd() + 0.2:.3f} | "
                "number of skipped iterations:   0 | number of nan iterations:   0 |\n"
            )
            if i % 100 == 50:
                put(
                    "/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py:91: UserWarning: None of the "
                    "inputs have requires_grad=True. Gradients will be None\n"
                )
                put("  warnings.warn(\n")
            if i % 2000 == 1000:
                for line in _TB.splitlines(keepends=True):
                    put(line)
            if i % 5000 == 2500:
                put(f"hang detector: step {i} slower than 3x the median; dumping Python threads\n")
                for line in _thread_dump(9000 + r):
                    put(line)
            if len(buf) > 4096:
                fh.writelines(buf)
                buf.clear()
        fh.writelines(buf)
        if r == p.culprit:
            fh.write(f"[rank{r}]: RuntimeError: CUDA error: unspecified launch failure\n")
        elif r not in p.silent:
            fh.writelines(_burst(p, r, rng))
        return fh.tell()


def kernel_log(p: Plan, host: str, path: Path) -> int:
    rng = p.rng(f"kern-{host}")
    boot = p.boot(host)
    t, end = START - 600.0, START + p.steps * STEP_S
    with path.open("w") as fh:
        while t < end:
            since = t - boot
            fh.write(f"[{since:12.6f}] mlx5_core 0000:0c:00.0: poll_health:{rng.randrange(10**6)}\n")
            if rng.random() < 0.2:
                fh.write(
                    f"[{since + 0.5:12.6f}] IPv6: ADDRCONF(NETDEV_CHANGE): ib{rng.randrange(4)}: link becomes ready\n"
                )
            if host == p.chost and t <= p.t_fail < t + 5:
                s = p.t_fail - boot
                fh.write(
                    f"[{s:12.6f}] NVRM: Xid (PCI:{p.cpci}): 79, pid={9000 + p.culprit}, name=python, "
                    "GPU has fallen off the bus.\n"
                )
                fh.write(
                    f"[{s + 0.000004:12.6f}] NVRM: GPU at PCI:{p.cpci}: GPU-3f1c2d3e-aaaa-bbbb-cccc-0123456789ab\n"
                )
                fh.write(f"[{s + 0.000009:12.6f}] NVRM: GPU Board Serial Number: 1650921012345\n")
            t += 5
        return fh.tell()


def manifest(p: Plan, out: Path) -> None:
    nodes = [
        {
            "host": h,
            "boot_time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(p.boot(h))))
            + f".{round((p.boot(h) % 1) * 1e6):06d}Z",
            "kernel_log": f"nodes/{h}/kern.log",
        }
        for h in p.hosts
    ]
    doc = {"job_id": "4242", "scheduler": "slurm", "collected_at": "2026-12-02T00:00:00Z", "nodes": nodes}
    (out / "manifest.json").write_text(json.dumps(doc, indent=1) + "\n")
