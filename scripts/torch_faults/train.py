"""A tiny data-parallel training job that torchrun launches, with one optional injected fault.

Run by ``scripts/make_torch_incidents.py`` under ``torchrun`` (CPU, gloo, 127.0.0.1); never imported by CrashCart.
It trains a small MLP on a synthetic classification set with DDP, logs progress lines every few steps, saves
checkpoints on rank 0, and, when ``--fault NAME`` is given, makes rank ``--fault-rank`` fail at step ``--fault-step``
in the way NAME describes (see ``FAULTS``). Everything is seeded; only timestamps and pids change between runs.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


@dataclass
class Run:
    """What a fault can see and touch: the parsed arguments, this rank, and the clock."""

    args: argparse.Namespace
    rank: int
    world: int
    started: float

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def log(self, text: str) -> None:
        print(text, flush=True)


# --- the data path -------------------------------------------------------------------------------------------------


class SyntheticRecords(Dataset[dict[str, torch.Tensor]]):
    """Seeded feature/label records, read through a dict as a real dataset's decoded samples would be.

    ``bad`` maps sample indices to what is wrong with that record: ``missing_label`` (the key is absent),
    ``inf_features`` (a corrupt sample), ``kill_worker`` (the DataLoader worker reading it is SIGKILLed),
    ``worker_raise`` (decoding it raises inside the worker), ``stall_worker`` (reading it takes a minute, as a read
    from a stalled remote store does) or ``label_out_of_range`` (its label is one past the last class).
    """

    def __init__(self, size: int, features: int, classes: int, bad: dict[int, str]) -> None:
        gen = torch.Generator().manual_seed(1234)
        self.weights = torch.randn(features, classes, generator=gen)
        self.size = size
        self.features = features
        self.bad = bad

    def __len__(self) -> int:
        return self.size

    def _record(self, index: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(index)
        x = torch.randn(self.features, generator=gen)
        return {"features": x, "label": (x @ self.weights).argmax()}

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        record = self._record(index)
        problem = self.bad.get(index)
        if problem == "missing_label":
            del record["label"]
        elif problem == "inf_features":
            record["features"][3] = math.inf
        elif problem == "kill_worker":
            os.kill(os.getpid(), signal.SIGKILL)
        elif problem == "worker_raise":
            raise ValueError(f"corrupt record {index}: could not decode field 'features' (truncated at byte 4096)")
        elif problem == "stall_worker":
            time.sleep(60.0)
        elif problem == "label_out_of_range":
            record["label"] = torch.tensor(self.weights.shape[1])
        return {"features": record["features"], "label": record["label"]}


def make_loader(run: Run, bad_kind: str | None) -> tuple[DataLoader[dict[str, torch.Tensor]], DistributedSampler[int]]:
    args = run.args
    size = args.steps * args.batch_size * run.world
    sampler: DistributedSampler[int] = DistributedSampler(
        range(size), num_replicas=run.world, rank=run.rank, shuffle=True, seed=0
    )
    bad: dict[int, str] = {}
    if bad_kind is not None and run.rank == args.fault_rank:
        # the first sample this rank reads at the fault step
        bad[list(sampler)[(args.fault_step - 1) * args.batch_size]] = bad_kind
    dataset = SyntheticRecords(size, args.features, args.classes, bad)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.num_workers,
        persistent_workers=args.num_workers > 0,
        drop_last=True,
        timeout=args.loader_timeout,
    )
    return loader, sampler


# --- faults --------------------------------------------------------------------------------------------------------


def fault_segfault(run: Run) -> None:
    run.log(f"rank {run.rank}: loading fused kernel extension")
    ctypes.string_at(0)


def fault_abort(run: Run) -> None:
    run.log(f"rank {run.rank}: native allocator consistency check failed")
    os.abort()


def fault_hang(run: Run) -> None:
    # waits on a prefetch thread that never signals: the rank is alive but never reaches the next collective
    threading.Event().wait()


def fault_slow(run: Run) -> None:
    chunks = run.args.slow_chunks
    run.log(f"rank {run.rank}: rebuilding the token-length index before step {run.args.fault_step} ({chunks} shards)")
    a = torch.randn(384, 384)
    for chunk in range(1, chunks + 1):
        until = time.monotonic() + run.args.slow_seconds / chunks
        while time.monotonic() < until:
            a = torch.tanh(a @ a)
        run.log(f"rank {run.rank}: index shard {chunk}/{chunks} done elapsed {run.elapsed():.1f}s")


def _refresh_shard_cache(lock: threading.Lock) -> None:
    # a helper that takes the cache lock its caller already holds: a non-reentrant lock, so it waits forever
    with lock:
        pass


def fault_deadlock(run: Run) -> None:
    run.log(f"rank {run.rank}: refreshing the shard cache")
    lock = threading.Lock()
    with lock:
        _refresh_shard_cache(lock)


def fault_exit(run: Run) -> None:
    # a helper that ends the process with a status of its own and no message (as some libraries' checks do)
    sys.exit(3)


def fault_host_oom(run: Run) -> None:
    run.log(f"rank {run.rank}: caching the training shard in host memory")
    held = []
    for n in range(1, 1000):
        held.append(torch.ones(64 * 1024 * 1024 // 4))
        if n % 4 == 0:
            run.log(f"rank {run.rank}: cached {n * 64} MiB")


# Faults that run at the start of the fault step on the fault rank.
STEP_FAULTS: dict[str, Callable[[Run], None]] = {
    "segfault": fault_segfault,
    "abort": fault_abort,
    "hang": fault_hang,
    "deadlock": fault_deadlock,
    "slow": fault_slow,
    "host_oom": fault_host_oom,
    "exit": fault_exit,
}
# Faults carried by one bad record that the fault rank reads at the fault step.
DATA_FAULTS = {
    "keyerror": "missing_label",
    "nan_loss": "inf_features",
    "worker_killed": "kill_worker",
    "worker_raise": "worker_raise",
    "loader_stall": "stall_worker",
    "bad_label": "label_out_of_range",
}
# Faults in a later part of the step: the metrics all_reduce (mismatch), a regulariser whose backward is 0 * inf
# (nan_grad), an auxiliary head this rank stops using (unused_param), a custom autograd Function whose backward
# returns too few gradients (bad_backward), a checkpoint shard written to slow storage (slow_ckpt). (A full disk, a
# signal from outside, a held port or a cgroup limit come from the generator's hooks; the job itself then runs with
# ``--fault none``.)
OTHER_FAULTS = {"mismatch", "nan_grad", "unused_param", "bad_backward", "slow_ckpt", "none"}
FAULTS = sorted([*STEP_FAULTS, *DATA_FAULTS, *OTHER_FAULTS])


# --- hang evidence: Flight Recorder dumps and stack dumps -----------------------------------------------------------


class FlightRecorderWatchdog(threading.Thread):
    """Write torch's own Flight Recorder dump bytes for this rank once no step has started for ``after`` seconds (as
    ProcessGroupNCCL's watchdog does on a timeout; gloo dumps nothing by itself). The file is
    ``$TORCH_FR_DUMP_TEMP_FILE<rank>`` (torch's default prefix ``~/.cache/torch/comm_lib_trace_rank_``)."""

    def __init__(self, run: Run, after: float, form: str) -> None:
        super().__init__(daemon=True, name="fr-watchdog")
        self.job, self.after, self.form = run, after, form
        self.progress = time.monotonic()

    def step(self) -> None:
        self.progress = time.monotonic()

    def run(self) -> None:  # type: ignore[override]
        while True:  # every stall longer than ``after`` rewrites the dump: the last one is what the job left
            while time.monotonic() - self.progress < self.after:
                time.sleep(0.2)
            stalled = self.progress
            self.dump()
            while self.progress == stalled:
                time.sleep(0.2)

    def dump(self) -> None:
        from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

        default = str(Path.home() / ".cache/torch/comm_lib_trace_rank_")
        prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE", default)  # noqa: TID251 - torch's own variable
        path = Path(f"{prefix}{self.job.rank}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_dump_fr_trace_json() if self.form == "json" else _dump_fr_trace())
        print(
            f"rank {self.job.rank}: no progress for {self.after:.0f}s, Flight Recorder dump written to {path}",
            file=sys.stderr,
            flush=True,
        )


def tensor_parallel_group(run: Run) -> dist.ProcessGroup | None:
    """With ``--tp N``: this rank's tensor-parallel group (ranks in consecutive blocks of N); every rank creates all."""
    if run.args.tp <= 1:
        return None
    mine = None
    for start in range(0, run.world, run.args.tp):
        group = dist.new_group(list(range(start, start + run.args.tp)))
        if start <= run.rank < start + run.args.tp:
            mine = group
    return mine


# --- the loop ------------------------------------------------------------------------------------------------------


def reduce_metrics(run: Run, loss_sum: float, count: int, step: int) -> float:
    values = [loss_sum, float(count)]
    if run.args.fault == "mismatch" and run.rank == run.args.fault_rank and step >= run.args.fault_step:
        # a rank-conditional extra metric: this rank all_reduces three numbers, the others two
        values.append(float(step))
    buf = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    return float(buf[0] / buf[1])


class WithAuxHead(nn.Module):
    """The MLP plus an auxiliary head whose output is added to the logits, when the step uses it."""

    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, classes))
        self.aux = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor, use_aux: bool = True) -> torch.Tensor:
        out = self.body(x)
        return out + 0.1 * self.aux(x) if use_aux else out


def make_model(args: argparse.Namespace) -> nn.Module:
    if args.fault == "unused_param":
        return WithAuxHead(args.features, args.hidden, args.classes)
    return nn.Sequential(nn.Linear(args.features, args.hidden), nn.GELU(), nn.Linear(args.hidden, args.classes))


class ClipOutlierLogits(torch.autograd.Function):
    """Clamp logits to +-limit, passing the gradient straight through. Its backward returns one gradient although
    forward took two inputs (the limit needs a None): the bug only shows once the code path runs."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, logits: torch.Tensor, limit: float) -> torch.Tensor:
        return logits.clamp(-limit, limit)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor]:  # type: ignore[override]
        return (grad,)


def forward(run: Run, ddp: nn.Module, features: torch.Tensor, step: int) -> torch.Tensor:
    faulty = run.rank == run.args.fault_rank and step >= run.args.fault_step
    if run.args.fault == "unused_param":
        # this rank skips the auxiliary head from the fault step on (a rank-conditional code path); DDP was not
        # told about unused parameters, so its reducer never finishes the step
        return ddp(features, use_aux=not faulty)
    if run.args.fault == "bad_backward" and faulty:
        # a rarely taken path: this rank's batch has outlier logits, so they go through the custom clip Function
        run.log(f"rank {run.rank}: outlier logits at step {step}, clipping to +-5")
        return ClipOutlierLogits.apply(ddp(features), 5.0)
    return ddp(features)


def regulariser(run: Run, logits: torch.Tensor, step: int) -> torch.Tensor | None:
    if run.args.fault == "nan_grad" and run.rank == run.args.fault_rank and step == run.args.fault_step:
        # a hand-written L2 distance to a detached copy of itself: its value is 0, and the gradient of sqrt at 0 is
        # infinite, so the square's backward multiplies 0 by inf
        return 1e-3 * torch.sqrt(((logits - logits.detach()) ** 2).sum())
    return None


def average_gradients(run: Run, model: nn.Module) -> None:
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= run.world


def save_checkpoint(run: Run, model: nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    path = Path(run.args.ckpt_dir) / f"step_{step:06d}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    run.log(f"saving checkpoint to {path}")
    torch.save({"step": step, "model": model.state_dict(), "optim": opt.state_dict()}, path)
    run.log(f"saved checkpoint {path} ({path.stat().st_size / 1e6:.1f} MB)")


class SlowStorage:
    """A file whose writes go at ``rate`` bytes a second (a congested network filesystem)."""

    def __init__(self, path: Path, rate: float) -> None:
        self.file = path.open("wb")
        self.rate = rate

    def write(self, data: bytes) -> int:
        time.sleep(len(data) / self.rate)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def save_shard(run: Run, model: nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    """Every rank writes its own shard (model and optimizer state), then all meet in a monitored barrier."""
    path = Path(run.args.ckpt_dir) / f"step_{step:06d}" / f"shard_rank{run.rank}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    run.log(f"rank {run.rank}: saving checkpoint shard to {path}")
    began = time.monotonic()
    state = {"step": step, "model": model.state_dict(), "optim": opt.state_dict()}
    if run.args.fault == "slow_ckpt" and run.rank == run.args.fault_rank:
        out = SlowStorage(path, run.args.slow_write_rate)
        try:
            torch.save(state, out)
        finally:
            out.close()
    else:
        torch.save(state, path)
    size = path.stat().st_size / 1e6
    run.log(f"rank {run.rank}: saved checkpoint shard {path} ({size:.2f} MB in {time.monotonic() - began:.1f}s)")
    dist.monitored_barrier(timeout=timedelta(seconds=run.args.barrier_timeout))


def mark(run: Run, step: int) -> None:
    if run.args.marker_dir:
        tmp = Path(run.args.marker_dir) / f".rank{run.rank}.json"
        tmp.write_text(json.dumps({"pid": os.getpid(), "step": step}))
        tmp.replace(tmp.with_name(f"rank{run.rank}.json"))


def train(run: Run) -> None:
    args = run.args
    torch.manual_seed(args.seed + run.rank)
    loader, sampler = make_loader(run, DATA_FAULTS.get(args.fault))
    model = make_model(args)
    # DDP buckets and all-reduces the gradients; "manual" averages them with one all_reduce per parameter
    ddp = DistributedDataParallel(model) if args.grad_sync == "ddp" else model
    if args.resume_from:
        state = torch.load(args.resume_from, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        run.log(f"resumed from {args.resume_from} (step {state['step']})")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    if run.rank == 0:
        params = sum(p.numel() for p in model.parameters())
        run.log(f"model: {params / 1e3:.1f}K parameters, world size {run.world}, {args.steps} steps")
    sampler.set_epoch(0)
    tp_group = tensor_parallel_group(run)
    watchdog = FlightRecorderWatchdog(run, args.fr_dump_after, args.fr_form) if args.fr_dump_after else None
    if watchdog is not None:
        watchdog.start()
    batches = iter(loader)
    try:
        loss_sum, count = 0.0, 0
        for step in range(1, args.steps + 1):
            mark(run, step)
            if watchdog is not None:
                watchdog.step()
            batch = next(batches)
            if step == args.fault_step and run.rank == args.fault_rank and args.fault in STEP_FAULTS:
                STEP_FAULTS[args.fault](run)
            if tp_group is not None:  # the tensor-parallel part of the step: its own collective in its own group
                dist.all_reduce(torch.ones(8), group=tp_group)
            logits = forward(run, ddp, batch["features"], step)
            loss = F.cross_entropy(logits, batch["label"])
            extra = regulariser(run, logits, step)
            if extra is not None:
                loss = loss + extra
            value = loss.item()
            if not math.isfinite(value):
                run.log(f"Loss is {value}, stopping training")
                sys.exit(1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if args.grad_sync == "manual":
                average_gradients(run, model)
            opt.step()
            sched.step()
            loss_sum, count = loss_sum + value, count + 1
            time.sleep(args.step_time)
            if args.straggle and run.rank == args.fault_rank and step >= args.fault_step:
                time.sleep(args.straggle * (step - args.fault_step + 1))
            if step % args.log_every == 0:
                mean = reduce_metrics(run, loss_sum, count, step)
                lr = sched.get_last_lr()[0]
                run.log(f"step {step}/{args.steps} loss {mean:.4f} lr {lr:.1e} elapsed {run.elapsed():.1f}s")
                loss_sum, count = 0.0, 0
            if args.ckpt_every and step % args.ckpt_every == 0 and args.ckpt_sharded:
                save_shard(run, model, opt, step)
            elif args.ckpt_every and step % args.ckpt_every == 0:
                if run.rank == 0:
                    save_checkpoint(run, model, opt, step)
                dist.barrier()
    except RuntimeError:
        if watchdog is not None:  # a collective timed out here: dump now, as ProcessGroupNCCL's watchdog does
            watchdog.dump()
        raise
    run.log(f"rank {run.rank}: training complete, {args.steps} steps in {run.elapsed():.1f}s")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--step-time", type=float, default=0.05, help="seconds of simulated work per step")
    p.add_argument("--grad-sync", choices=["ddp", "manual"], default="ddp")
    p.add_argument("--ckpt-dir", default="checkpoints")
    p.add_argument("--ckpt-every", type=int, default=0)
    p.add_argument("--ckpt-sharded", action="store_true", help="every rank saves a shard, then a monitored barrier")
    p.add_argument("--barrier-timeout", type=float, default=30.0, help="the monitored barrier's timeout in seconds")
    p.add_argument("--slow-write-rate", type=float, default=2000.0, help="bytes/s of the slow_ckpt rank's writes")
    p.add_argument("--loader-timeout", type=float, default=0.0, help="the DataLoader's timeout (0: wait forever)")
    p.add_argument("--pg-timeout", type=float, default=1800.0, help="process-group timeout in seconds")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=35)
    p.add_argument("--slow-seconds", type=float, default=30.0)
    p.add_argument("--slow-chunks", type=int, default=6)
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel group size (a second process group)")
    p.add_argument(
        "--fr-dump-after",
        type=float,
        default=0.0,
        help="write the Flight Recorder dump after this many seconds without a step (0: never)",
    )
    p.add_argument("--fr-form", choices=["json", "pickle"], default="json")
    p.add_argument("--faulthandler-signal", action="store_true", help="SIGUSR1 prints every thread's stack")
    p.add_argument(
        "--straggle",
        type=float,
        default=0.0,
        help="the fault rank sleeps this long more each step from the fault step on (a rank that gets slower)",
    )
    p.add_argument("--resume-from", default="", help="load the model's state from this checkpoint first")
    p.add_argument("--nofile", type=int, default=0, help="the fault rank's RLIMIT_NOFILE soft limit (0: unchanged)")
    p.add_argument("--detect-anomaly", action="store_true", help="torch.autograd.set_detect_anomaly(True)")
    p.add_argument("--no-record", action="store_true", help="do not wrap the entry point in torchelastic's @record")
    p.add_argument("--marker-dir", default="", help="where each rank writes its pid and step (for outside signals)")
    return p.parse_args(argv)


def run_job(args: argparse.Namespace) -> None:
    if args.faulthandler_signal:
        import faulthandler

        faulthandler.register(signal.SIGUSR1, all_threads=True)
    if args.detect_anomaly:
        torch.autograd.set_detect_anomaly(True)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.pg_timeout))
    run = Run(args, dist.get_rank(), dist.get_world_size(), time.monotonic())
    if args.nofile and run.rank == args.fault_rank:  # this rank's node has a low `ulimit -n`
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    run.log(f"rank {run.rank}/{run.world} pid {os.getpid()} torch {torch.__version__} backend gloo")
    try:
        train(run)
    finally:
        dist.destroy_process_group()


def main() -> None:
    args = parse()
    # @record writes torchelastic's error file (and turns on faulthandler); many real scripts don't use it
    (run_job if args.no_record else record(run_job))(args)


if __name__ == "__main__":
    main()
