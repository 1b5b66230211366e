"""Synth scenario kit: the moves scenarios share (a rank crashes with a traceback, hangs, hits a CUDA
error after a hardware event, a kernel Xid block), so each scenario states only what is specific.

Input/output: a Story, mutated in place. Pure, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeVar

from crashcart.synth import formats as fmt
from crashcart.synth.story import Fate, Story

CUDA_ADVICE = [
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be "
    "incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
]
HEARTBEAT_S = 480.0
T = TypeVar("T")


def pick(s: Story, options: Sequence[T]) -> T:
    return options[s.rng.randrange(len(options))]


def default_t0(s: Story) -> float:
    """A moment well into training: 90-170 logged steps after the first one."""
    w = s.world
    n_log = s.rng.randrange(90, 170)
    return w.t_train0 + n_log * w.log_every * w.step_time + s.rng.uniform(0.2, 0.8) * w.step_time


def new_torch(s: Story) -> None:
    """Scenarios whose signature exists only in recent PyTorch (heartbeat monitor, desync report)."""
    if s.world.old_torch:
        s.world = dataclasses.replace(s.world, old_torch=False, timeout_ms=600000)


def startup(s: Story, t0: float, reach: str) -> None:
    """The job fails while starting: no training steps; every rank gets ``reach``."""
    s.t0 = t0
    for r in range(s.world.ranks):
        s.reach[r] = reach
        s.stop[r] = t0
    s.caught_oom = False
    s.dataloader_noise = False


def crash(
    s: Story,
    r: int,
    t: float,
    last: Sequence[str],
    *,
    roots: Sequence[int] = (0,),
    pre: Sequence[str] = (),
    pre_roots: Sequence[int] = (),
    frames: list[tuple[str, int, str, str]] | None = None,
    code: int = 1,
    symptom: str | None = None,
    after: Sequence[str] = (),
) -> float:
    """Rank ``r`` prints ``pre``, a traceback ending in ``last``, then ``after``, and exits with ``code``.

    ``roots`` index into ``last``; ``pre_roots`` into ``pre``. Returns the exit time.
    """
    tb = fmt.traceback(frames if frames is not None else fmt.train_frames(s.world), list(last))
    head = len(pre) + len(tb) - len(last)
    idx = [*pre_roots, *(head + i for i in roots)]
    s.block(("rank", r), t, [*pre, *tb, *after], roots=idx, symptom=symptom)
    t_exit = t + s.rng.uniform(0.2, 1.2)
    s.fate[r] = Fate("exit", t_exit, code)
    s.stop[r] = min(s.stop.get(r, t), t)
    return t_exit


def hang(s: Story, r: int, t: float) -> None:
    """Rank ``r`` stops making progress at ``t``: its log just stops."""
    s.fate[r] = Fate("hang", t)
    s.stop[r] = t


def cuda_error(msg: str) -> list[str]:
    return [f"RuntimeError: CUDA error: {msg}", *CUDA_ADVICE]


def heartbeat(s: Story, r: int, t_stuck: float, *, root: bool, symptom: str | None = None) -> float:
    """The watchdog-heartbeat monitor kills a rank whose watchdog is stuck in a CUDA/NCCL call."""
    w = s.world
    t = t_stuck + HEARTBEAT_S + s.rng.uniform(0.5, 8.0)
    pg = f"[PG 0 (default_pg) Rank {r}]"
    stuck = (
        f"{pg} ProcessGroupNCCL's watchdog got stuck for {int(HEARTBEAT_S)} seconds without making progress "
        "in "
        "monitoring enqueued collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) "
        "hang "
        "blocking the watchdog, and could be triggered by another thread holding the GIL inside a CUDA api "
        "(for "
        "example, CudaEventDestroy), or other deadlock-prone behaviors.If you suspect the watchdog is not "
        "actually "
        "stuck and a longer timeout would help, you can either increase the timeout "
        "(TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC)"
        " to a larger value or disable the heartbeat monitor (TORCH_NCCL_ENABLE_MONITORING=0).If either of "
        "aforementioned helps, feel free to file an issue to PyTorch about the short timeout or false "
        "positive abort;"
        " otherwise, please attempt to debug the hang. "
    )
    lines = [
        (
            "E",
            "ProcessGroupNCCL.cpp:1375",
            f"{pg} First PG on this rank that detected no heartbeat of its watchdog.",
        ),
        (
            "E",
            "ProcessGroupNCCL.cpp:1413",
            f"{pg} Heartbeat monitor timed out! Process will be terminated after "
            f"dumping debug info. workMetaList_.size()={s.rng.randrange(1, 6)}",
        ),
        ("F", "ProcessGroupNCCL.cpp:1224", stuck),
    ]
    for i, (lvl, src, msg) in enumerate(lines):
        tt = t + i * 0.002
        is_root = root and i in (1, 2)
        s.rank(r, tt, fmt.c10d(w, tt, lvl, src, msg), root=is_root, symptom=None if is_root else symptom)
    s.fate[r] = Fate("exit", t + s.rng.uniform(1.0, 4.0), -6)
    s.stop[r] = min(s.stop.get(r, t_stuck), t_stuck)
    return t


def gpu_victim(s: Story, r: int, t: float, err: str, *, how: str = "crash") -> None:
    """The rank on a failed GPU: a CUDA error (symptom), or a stuck watchdog, or a silent hang."""
    w = s.world
    if how == "crash":
        frames = fmt.train_frames(w, (f"/workspace/{w.script}", 242, "train_step", "loss.backward()"))
        crash(s, r, t, cuda_error(err), roots=(), frames=frames, symptom="cuda_kernel_fault")
    elif how == "heartbeat" and not w.old_torch:
        hang(s, r, t)
        heartbeat(s, r, t, root=False, symptom="nccl_watchdog_stuck_heartbeat")
    else:
        hang(s, r, t)


def kernel_lines(
    s: Story, n: int, t: float, msgs: Sequence[str], roots: Sequence[int] = (0,), symptom: str | None = None
) -> float:
    return s.kernel_block(n, t, msgs, roots=roots, symptom=symptom)


def uuid(s: Story) -> str:
    h = f"{s.rng.getrandbits(128):032x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def nccl_error(
    s: Story,
    r: int,
    t: float,
    kind: str,
    last_error: str,
    *,
    roots: Sequence[int] = (),
    symptom: str | None = None,
    code: int = 1,
) -> float:
    """A collective raises ``DistBackendError`` (NCCL error code text ``kind``) with its ``Last error:``."""
    w = s.world
    head = {
        "cuda": (
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
            "ncclUnhandledCudaError: Call to CUDA function failed.",
        ),
        "system": (
            "unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
        ),
        "remote": (
            "remote process exited or there was a network error",
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        ),
        "usage": (
            "invalid usage (run with NCCL_DEBUG=WARN for details)",
            "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
        ),
    }[kind]
    frames = [
        *fmt.train_frames(w)[:4],
        (
            "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py",
            2288,
            "all_reduce",
            "work = group.allreduce([tensor], opts)",
        ),
    ]
    last = [
        "torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
        f"1691, {head[0]}, NCCL version {w.stack.nccl}",
        head[1],
        "Last error:",
        last_error,
    ]
    return crash(s, r, t, last, roots=roots, frames=frames, code=code, symptom=symptom)


def watchdog_exception(s: Story, r: int, t: float, err: str, *, root: bool, symptom: str | None = None) -> float:
    """The CUDA error surfaces in the NCCL watchdog thread: c10d line, advice, ``terminate called``."""
    w = s.world
    pg = f"[PG 0 (default_pg) Rank {r}]"
    msg = f"{pg} Process group watchdog thread terminated with exception: CUDA error: {err}"
    s.rank(
        r,
        t,
        fmt.c10d(w, t, "E", "ProcessGroupNCCL.cpp:1515", msg),
        root=root,
        symptom=None if root else symptom,
    )
    tail = [
        *CUDA_ADVICE,
        "",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {msg}",
    ]
    s.block(("rank", r), t + 0.0005, tail, symptom=symptom)
    s.fate[r] = Fate("exit", t + s.rng.uniform(0.2, 1.0), -6)
    s.stop[r] = min(s.stop.get(r, t), t)
    return t
