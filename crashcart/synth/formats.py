"""Synth line formatters: the prefix and timestamp shape of each emitter, as real tools print them.

Input: the World, a job-relative time and a message; output: one line of text (no newline). Pure.
Shapes: Python logging, Megatron, c10d (``[E321 02:07:08.408271257 file:line]``), NCCL
(``host:pid:tid [dev] NCCL INFO``), torchelastic (``W0616 00:37:22.830000 pid file:line]``), kernel.
"""

from __future__ import annotations

from datetime import datetime

from crashcart.synth.world import World


def iso(dt: datetime, *, frac: bool = False) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%f" if frac else "%Y-%m-%dT%H:%M:%S")


def ctime(dt: datetime) -> str:
    """``Mon Nov  2 02:13:07 2026`` (day padded with a space, as ctime(3) does)."""
    return f"{dt:%a %b} {dt.day:2d} {dt:%H:%M:%S %Y}"


def pylog(w: World, t: float, level: str, name: str, msg: str) -> str:
    """A Python ``logging`` line in one of three common formats (chosen per world)."""
    dt = w.at(t)
    ms = f"{dt:%Y-%m-%d %H:%M:%S},{dt.microsecond // 1000:03d}"
    if w.pylog_fmt == 0:
        return f"{ms} - {name} - {level} - {msg}"
    if w.pylog_fmt == 1:
        return f"[{ms}][{name}][{level}] - {msg}"
    return f"{ms} {level} [{name}] {msg}"


def megatron(w: World, t: float, msg: str) -> str:
    return f" [{w.at(t):%Y-%m-%d %H:%M:%S}] {msg}"


def c10d(w: World, t: float, level: str, src: str, msg: str) -> str:
    """c10d C++ log line; the month is not zero padded (``E321`` = March 21)."""
    if w.old_torch:
        return f"[{level} {src}] {msg}"
    dt = w.at(t)
    ns = dt.microsecond * 1000 + int((t * 1e9) % 997)
    return f"[{level}{dt.month}{dt.day:02d} {dt:%H:%M:%S}.{ns:09d} {src}] {msg}"


def nccl(w: World, r: int, msg: str, *, level: str = "INFO", src: str | None = None, tid: int = 0) -> str:
    """``host:pid:tid [localdev] [src] NCCL LEVEL msg``; tid 0 means the main thread."""
    pid = w.pid[r]
    thread = pid if tid == 0 else pid + 37 + tid
    where = f" {src}" if src else ""
    return f"{w.host(r)}:{pid}:{thread} [{w.local[r]}]{where} NCCL {level} {msg}"


def elastic(w: World, node: int, t: float, level: str, src: str, msg: str) -> str:
    """torchrun agent line: glog-like in recent PyTorch, ``logging`` default format in old ones."""
    if w.old_torch:
        name = src.split(":")[0].removesuffix(".py").replace("/", ".")
        full = {"I": "INFO", "W": "WARNING", "E": "ERROR"}[level]
        return f"{full}:{name}:{msg}"
    dt = w.at(t)
    return f"{level}{dt:%m%d %H:%M:%S}.{dt.microsecond:06d} {w.nodes[node].agent_pid} {src}] {msg}"


def kernel(w: World, node: int, t: float, msg: str) -> str:
    """Kernel ring-buffer line in the world's clock style (dmesg -T, raw seconds, or syslog)."""
    n = w.nodes[node]
    mono = t - n.boot
    raw = f"[{mono:12.6f}]"
    if w.kernel_clock == "ctime":
        return f"[{ctime(w.at(t))}] {msg}"
    if w.kernel_clock == "mono":
        return f"{raw} {msg}"
    dt = w.at(t)
    stamp = f"{dt:%b} {dt.day:2d} {dt:%H:%M:%S}"
    return f"{stamp} {n.host} kernel: {raw + ' ' if w.syslog_mono else ''}{msg}"


def xid(pci: str, code: int, msg: str, *, pid: int | None = None, name: str | None = None) -> str:
    """``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., msg``."""
    who = ""
    if pid is not None:
        who = f" pid={pid}, name={name or 'pt_main_thread'},"
    elif name is not None:
        who = " pid='<unknown>', name=<unknown>,"
    return f"NVRM: Xid (PCI:{pci}): {code},{who} {msg}"


def traceback(frames: list[tuple[str, int, str, str]], last: list[str]) -> list[str]:
    """A Python traceback: header, ``File ...`` frames with their source line, then the exception lines."""
    out = ["Traceback (most recent call last):"]
    for path, lineno, func, code in frames:
        out += [f'  File "{path}", line {lineno}, in {func}', f"    {code}"]
    return out + last


def train_frames(
    w: World,
    *tail: tuple[str, int, str, str],
    call: str = "loss = train_step(model, batch, optimizer, scaler)",
    line: int = 301,
) -> list[tuple[str, int, str, str]]:
    """The outer frames of a training script down to the training loop (running ``call``), then ``tail``."""
    script = f"/workspace/{w.script}"
    errors = "/usr/local/lib/python3.10/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py"
    return [
        (script, 412, "<module>", "main()"),
        (errors, 346, "wrapper", "return f(*args, **kwargs)"),
        (script, 388, "main", "train(cfg, model, optimizer, train_loader)"),
        (script, line, "train", call),
        *tail,
    ]


def data_frames(w: World, *tail: tuple[str, int, str, str]) -> list[tuple[str, int, str, str]]:
    """Frames of ``next(data_iter)`` down into the dataset (single-process DataLoader path), then ``tail``."""
    data = "/usr/local/lib/python3.10/dist-packages/torch/utils/data"
    return train_frames(
        w,
        (f"{data}/dataloader.py", 631, "__next__", "data = self._next_data()"),
        (
            f"{data}/dataloader.py",
            675,
            "_next_data",
            "data = self._dataset_fetcher.fetch(index)  # may raise StopIteration",
        ),
        (
            f"{data}/_utils/fetch.py",
            51,
            "fetch",
            "data = [self.dataset[idx] for idx in possibly_batched_index]",
        ),
        *tail,
        call="batch = next(data_iter)",
        line=297,
    )


def nccl_busid(pci: str) -> str:
    """NCCL's ``busId`` spelling of a canonical ``0000:3b:00`` id: ``3b000``."""
    dom, bus, dev = pci.split(":")
    head = dom.lstrip("0")
    return f"{head}{bus}{dev}0"


def smi_busid(pci: str) -> str:
    """nvidia-smi / DCGM spelling: ``00000000:3B:00.0``."""
    dom, bus, dev = pci.split(":")
    return f"0000{dom}:{bus.upper()}:{dev.upper()}.0"


def hostlist(hosts: list[str]) -> str:
    """Slurm-style compressed host list: ``gpu-node-[017-018,020]``."""
    groups: dict[str, list[str]] = {}
    order: list[str] = []
    for h in hosts:
        i = len(h)
        while i > 0 and h[i - 1].isdigit():
            i -= 1
        prefix, num = h[:i], h[i:]
        if prefix not in groups:
            groups[prefix] = []
            order.append(prefix)
        groups[prefix].append(num)
    parts: list[str] = []
    for prefix in order:
        nums = groups[prefix]
        if len(nums) == 1 or not all(nums):
            parts.extend(prefix + n for n in nums)
            continue
        ranges: list[str] = []
        start = prev = nums[0]
        for n in [*nums[1:], ""]:
            if n and int(n) == int(prev) + 1 and len(n) == len(prev):
                prev = n
                continue
            ranges.append(start if start == prev else f"{start}-{prev}")
            start = prev = n
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


def tasklist(ids: list[int]) -> str:
    """``0-2,4-7`` style list used by srun."""
    out: list[str] = []
    ids = sorted(ids)
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)
