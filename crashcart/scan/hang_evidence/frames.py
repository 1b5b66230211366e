"""What one stack frame of a dump is, and what a dumped process is, for ``stacks``' comparison across ranks.

A frame is a *wait on the peers* (a collective, a barrier, an NCCL or GPU synchronisation: torch.distributed's
``distributed_c10d.py``, DeepSpeed's ``deepspeed/comm``, Megatron's ``p2p_communication.py``, Horovod's
``mpi_ops.py``; natively NCCL, c10d, gloo and ``cuda*Synchronize``), *library* code (the standard library, torch and
the other frameworks, native frames), or the program's *own* code. py-spy shortens a file to its path below the
``sys.path`` entry that holds it (``torch/utils/data/dataloader.py``, ``threading.py``, the script as ``train.py``),
and with ``--native`` names a frame without line by its shared object (``epoll_wait (/usr/lib/libc.so.6)``).

A process is a training *rank*, a *launcher* (torchrun's elastic agent, ``torch.distributed.launch``, DeepSpeed's
and Accelerate's launchers, Horovod's runner) or a *DataLoader worker* (``_worker_loop``, torch/utils/data/
_utils/worker.py): only ranks take part in collectives, so only ranks are compared. Pure.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Literal, Protocol

Role = Literal["rank", "launcher", "dataloader_worker"]


class FrameLike(Protocol):
    @property
    def func(self) -> str: ...
    @property
    def file(self) -> str: ...


# Python files whose frames are a wait on the other ranks (torch.distributed but its elastic launcher and its
# checkpoint writer, whose own collectives go through distributed_c10d; DeepSpeed's comm layer, Megatron's pipeline
# p2p, Horovod's ops), and torch.cuda's synchronize
_WAIT_FILE = re.compile(
    r"(?:^|/)torch/distributed/(?!elastic/|run\.py|launch\.py|launcher/|checkpoint/)|(?:^|/)distributed_c10d\.py$"
    r"|c10d_logger\.py$"
    r"|(?:^|/)deepspeed/comm/|p2p_communication\.py$|(?:^|/)horovod/(?:torch|tensorflow|keras|_keras|mxnet|common)/"
)
_CUDA_SYNC_FILE = re.compile(r"(?:^|/)torch/cuda/(?:__init__|streams)\.py$")
# collective calls by name, wherever they are defined (apex, fairscale, a wrapper of the program's own)
_COLLECTIVE_NAME = re.compile(
    r"(?:^|[_.:])(?:all_?reduce\w*|all_?gather\w*|reduce_?scatter\w*|broadcast\w*"
    r"|barrier|monitored_barrier|all_?to_?all\w*|batch_isend_irecv)$"
)
# native: NCCL's API, c10d's process groups, gloo, the CUDA runtime/driver synchronisations, Horovod's wait
_NATIVE_WAIT = re.compile(
    r"^nccl[A-Z]\w*|ProcessGroupNCCL|ProcessGroupGloo|^gloo::|^c10d::|cuda(?:Stream|Device|Event)Synchronize"
    r"|cu(?:Stream|Event|Ctx)Synchronize|horovod_\w*wait"
)
_NATIVE_WAIT_FILE = re.compile(r"libnccl|ProcessGroup\w+\.(?:cpp|hpp)|/gloo/")
_NATIVE_FILE = re.compile(r"\.so(?:\.[\d.]+)?$|\.(?:c|cc|cpp|cxx|h|hpp|cu|cuh)$|^\?$|^$|^\[")
# packages whose frames are not the program's own (py-spy shows them below their site-packages entry)
_LIBRARIES = frozenset(
    {
        "torch",
        "deepspeed",
        "transformers",
        "accelerate",
        "datasets",
        "apex",
        "transformer_engine",
        "numpy",
        "tqdm",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "horovod",
        "fairscale",
        "peft",
        "trl",
        "safetensors",
        "huggingface_hub",
        "fsspec",
        "pyarrow",
        "pandas",
        "PIL",
        "webdataset",
        "torchvision",
        "triton",
        "wandb",
        "tensorboard",
        "filelock",
        "urllib3",
        "requests",
        "h5py",
        "zmq",
        "ray",
    }
)
_STDLIB = frozenset(sys.stdlib_module_names) - {"test", "code", "this", "site"}  # names a program's folder may have
_LAUNCHER_FILE = re.compile(
    r"(?:^|/)torch/distributed/(?:elastic/agent/|run\.py$|launch\.py$|launcher/)|(?:^|/)deepspeed/launcher/"
    r"|(?:^|/)accelerate/commands/|(?:^|/)horovod/runner/"
)
_LAUNCHER_CMD = re.compile(
    r"(?:^|[/\s])torchrun\b|torch\.distributed\.(?:run|launch)\b|deepspeed\.launcher|\baccelerate launch\b"
    r"|(?:^|[/\s])horovodrun\b|(?:^|[/\s])deepspeed\s"
)
_WORKER_LOOP = re.compile(r"(?:^|/)torch/utils/data/_utils/worker\.py$")


def is_native(f: FrameLike) -> bool:
    """A frame py-spy's ``--native`` added (a C/C++ function, named by its shared object or source file)."""
    return _NATIVE_FILE.search(f.file) is not None


def is_collective_name(func: str) -> bool:
    """A collective's own name (``all_reduce``, ``barrier``, ``gather``) of a frame that waits; ``Work.wait`` is
    none, nor is point-to-point (``send``/``recv``, ``batch_isend_irecv``: pipeline stages waiting on each other
    while data-parallel peers wait in ``all_reduce`` is no mismatch)."""
    name = func.rsplit(".", 1)[-1]
    return name != "batch_isend_irecv" and (_COLLECTIVE_NAME.search(func) is not None or name in _ROOTED_NAMES)


_ROOTED_NAMES = frozenset({"gather", "scatter", "reduce", "gather_object", "scatter_object_list"})


def is_wait(f: FrameLike) -> bool:
    """Does this frame wait on the other ranks (a collective, a barrier, an NCCL or GPU synchronisation)?"""
    if is_native(f):
        return bool(_NATIVE_WAIT.search(f.func) or _NATIVE_WAIT_FILE.search(f.file))
    if _WAIT_FILE.search(f.file):
        return True
    name = f.func.rsplit(".", 1)[-1]
    if _CUDA_SYNC_FILE.search(f.file):
        return name == "synchronize"
    return _top(f.file) not in _STDLIB and _COLLECTIVE_NAME.search(f.func) is not None


def _top(file: str) -> str:
    """The top-level module or package of a (py-spy-shortened) file path."""
    path = file.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            path = path.rsplit(marker, 1)[1]
    if re.search(r"/lib/python3[\d.]*/", path):
        path = re.split(r"/lib/python3[\d.]*/", path)[-1]
    head = path.lstrip("/").split("/", 1)[0]
    return head.removesuffix(".py")


def is_library(f: FrameLike) -> bool:
    """Not the program's own code: native, the standard library, or a framework's package."""
    if is_native(f) or f.file.startswith("<"):
        return True
    path = f.file.replace("\\", "/")
    if re.search(r"(?:site|dist)-packages/|/lib/python3[\d.]*/", path):
        return True
    return _top(path) in _STDLIB or _top(path) in _LIBRARIES or "megatron/core/" in path


def activity(frames: Sequence[FrameLike]) -> str | None:
    """What the frames (innermost first) say the thread is busy with, in a few words; None: nothing known."""
    py = [f for f in frames if not is_native(f)]
    if not py:
        return None
    if any(f.file.endswith(_DATALOADER) for f in py):  # the main process's iterator (not a worker's own loop)
        return "DataLoader fetch"
    if any(f.func.rsplit(".", 1)[-1] in _GENERATE and ("generation/" in f.file or not is_library(f)) for f in py):
        return "generation"
    inner = py[0]
    name = inner.func.rsplit(".", 1)[-1]
    top = _top(inner.file)
    if top == "multiprocessing" or (top == "connection" and name in {"recv", "_recv", "poll", "_poll"}):
        return "waiting on another process (multiprocessing)"
    if top in {"threading", "queue"} and name in {"acquire", "wait", "get", "join", "_wait_for_tstate_lock"}:
        return "lock or condition wait"
    if top in {"pickle", "shutil", "io", "_pyio", "gzip", "tarfile"} or any(_SAVE.search(f.file) for f in py[:4]):
        return "file I/O"  # torch.save/load, a distributed checkpoint's writer, safetensors
    if top in {"socket", "selectors", "ssl", "http", "urllib"}:
        return "network I/O"
    if top == "subprocess":
        return "waiting on a subprocess"
    if any(re.search(r"eval|valid", f.func, re.I) and not is_library(f) for f in py):
        return "evaluation"
    return None


def telling(frames: Sequence[FrameLike]) -> int | None:
    """The index of the frame that says what ``activity`` says (the innermost DataLoader or generation frame)."""
    doing = activity(frames)
    for i, f in enumerate(frames):
        if doing == "DataLoader fetch" and f.file.endswith(_DATALOADER):
            return i
        if doing == "generation" and f.func.rsplit(".", 1)[-1] in _GENERATE:
            return i
    return None


_DATALOADER = "torch/utils/data/dataloader.py"
_SAVE = re.compile(r"torch/serialization\.py$|torch/distributed/checkpoint/|(?:^|/)safetensors/")
_GENERATE = frozenset({"generate", "_sample", "greedy_search", "beam_search", "_beam_search"})


def role(frames: Sequence[FrameLike], cmdline: str | None) -> Role:
    """A training rank, a launcher, or a DataLoader worker, from the main thread's frames and the command line."""
    if any(f.func.endswith("_worker_loop") and _WORKER_LOOP.search(f.file) for f in frames):
        return "dataloader_worker"
    if any(is_wait(f) for f in frames):
        return "rank"
    if any(_LAUNCHER_FILE.search(f.file) for f in frames):
        return "launcher"
    if cmdline and _LAUNCHER_CMD.search(cmdline) and not any(not is_library(f) for f in frames):
        return "launcher"
    return "rank"
