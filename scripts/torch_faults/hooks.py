"""What a case needs around its torchrun job: setups (context managers) and actions taken while it runs.

A setup is ``hook(job)`` used as a context manager: it may prepend a wrapper to every agent's command (a private
mount namespace, a memory cgroup) and clean up afterwards. An action is ``action(job)``, called once the agents have
started; it returns when it has done its thing (or the job ended first). Every setup and action touches only what the
generator itself started: a port on 127.0.0.1, a tmpfs inside a private mount namespace, a child of this process's
own memory cgroup, and the pids that the job's ranks report.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

Wrapper = Callable[[list[str]], list[str]]


@dataclass
class Job:
    """One run of one case: where it runs, what wraps its commands, and what the hooks found."""

    case_id: str
    work: Path
    port: int
    python: str  # the torch venv's interpreter
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)
    wrappers: list[Wrapper] = field(default_factory=list)
    extra_files: dict[str, str] = field(default_factory=dict)
    extra_bytes: dict[str, bytes] = field(default_factory=dict)  # binary files kept as they are (pickles)
    notes: list[str] = field(default_factory=list)

    @property
    def markers(self) -> Path:
        return self.work / "markers"

    def wrap(self, cmd: list[str]) -> list[str]:
        for wrapper in reversed(self.wrappers):
            cmd = wrapper(cmd)
        return cmd

    def running(self) -> bool:
        return any(p.poll() is None for p in self.agents)


Setup = Callable[[Job], contextlib.AbstractContextManager[None]]
Action = Callable[[Job], None]


# --- setups --------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def other_job_on_port(job: Job) -> Iterator[None]:
    """Another job already holds the master port: a TCPStore server (what torchrun's rendezvous hosts) started on
    it beforehand, in a process of its own that the generator ends afterwards."""
    code = (
        "import sys, time, torch.distributed as d; "
        "s = d.TCPStore('127.0.0.1', int(sys.argv[1]), is_master=True, wait_for_workers=False); "
        "print('ready', flush=True); time.sleep(600)"
    )
    squatter = subprocess.Popen(
        [job.python, "-c", code, str(job.port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert squatter.stdout is not None
        if squatter.stdout.readline().strip() != "ready":
            raise RuntimeError("the TCPStore that should hold the port did not start")
        job.notes.append(f"Another job's TCPStore server listened on 127.0.0.1:{job.port} before torchrun started")
        yield
    finally:
        squatter.kill()
        squatter.wait()


def old_checkpoint(path: str, hidden: int, keep: float = 1.0) -> Setup:
    """A checkpoint left by an earlier run of the same script with ``--hidden`` ``hidden``, written before the job
    starts (by torch.save in the torch venv) at ``path`` under the work dir; with ``keep`` < 1 only that fraction of
    its bytes is left (a save cut short, as a preempted or killed run leaves it)."""

    @contextlib.contextmanager
    def setup(job: Job) -> Iterator[None]:
        target = job.work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        code = (
            "import sys, torch, torch.nn as nn; h = int(sys.argv[2]); "
            "m = nn.Sequential(nn.Linear(32, h), nn.GELU(), nn.Linear(h, 10)); "
            "torch.save({'step': 50, 'model': m.state_dict()}, sys.argv[1])"
        )
        subprocess.run([job.python, "-c", code, str(target), str(hidden)], check=True)
        job.notes.append(f"{path} was written beforehand by a run with --hidden {hidden}")
        if keep < 1.0:
            data = target.read_bytes()
            target.write_bytes(data[: int(len(data) * keep)])
            job.notes.append(f"Then cut to its first {keep:.0%} of {len(data)} bytes, as a save that was interrupted")
        yield

    return setup


def private_tmpfs(target: str, size: str, readonly: bool = False) -> Setup:
    """Run the agents in a private mount namespace with a small tmpfs on ``target`` (absolute, or under the work
    dir), read-only if ``readonly``. The host's mount of that path is never touched: the namespace and its tmpfs
    vanish with the job."""

    @contextlib.contextmanager
    def setup(job: Job) -> Iterator[None]:
        path = target if target.startswith("/") else str(job.work / target)
        options = f"ro,size={size}" if readonly else f"size={size}"
        script = 'mkdir -p "$1" && mount -t tmpfs -o "$2" crashcart-tmpfs "$1" && shift 2 && exec "$@"'

        def wrapper(cmd: list[str]) -> list[str]:
            return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", path, options, *cmd]

        job.wrappers.append(wrapper)
        kind = "read-only " if readonly else ""
        job.notes.append(f"The job saw {path} as a {size} {kind}tmpfs in a private mount namespace (unshare --mount)")
        yield

    return setup


def _own_memory_cgroup() -> tuple[Path, str]:
    """This process's memory cgroup directory and the path the kernel prints for it (v1 first, then v2)."""
    entries = [line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines()]
    for _, controllers, path in entries:
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/"), path
    unified = Path("/sys/fs/cgroup")
    for hierarchy, _, path in entries:
        if hierarchy == "0" and "memory" in (unified / "cgroup.controllers").read_text().split():
            return unified / path.lstrip("/"), path
    raise RuntimeError("no memory cgroup controller is available")


def _dmesg() -> list[str] | None:
    done = subprocess.run(["dmesg"], capture_output=True, text=True, check=False)
    return done.stdout.splitlines() if done.returncode == 0 else None


def memory_cgroup(limit_mib: int) -> Setup:
    """Run the job in a child of this process's own memory cgroup, limited to ``limit_mib``, and keep the kernel's
    OOM-kill report from dmesg. cgroup v2 ``memory.max`` when the unified hierarchy has the memory controller, else
    cgroup v1 ``memory.limit_in_bytes``. The parent's path (it names this sandbox's supervisor) becomes ``/job``."""

    @contextlib.contextmanager
    def setup(job: Job) -> Iterator[None]:
        parent, kernel_path = _own_memory_cgroup()
        group = parent / f"crashcart-{job.case_id}"
        v2 = (parent / "memory.max").exists()
        group.mkdir(exist_ok=True)
        (group / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(limit_mib * 1024 * 1024))
        before = _dmesg()
        script = 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"'
        job.wrappers.append(lambda cmd: ["sh", "-c", script, "sh", str(group), *cmd])
        knob = "memory.max" if v2 else "memory.limit_in_bytes (cgroup v1; v2 has no memory controller here)"
        job.notes.append(f"The job ran in a child memory cgroup with {knob} = {limit_mib} MiB")
        try:
            yield
        finally:
            after = _dmesg()
            if before is None or after is None:
                job.notes.append("Dmesg was not readable here, so the kernel's OOM lines are missing")
            else:
                report = _oom_report(after[len(before) :])
                text = "\n".join(report).replace(kernel_path.rstrip("/") + "/", "/job/")
                job.extra_files["dmesg.log"] = text + "\n" if text else ""
                job.notes.append(
                    "The file dmesg.log holds the kernel's lines from 'invoked oom-killer' to 'Killed process', as "
                    "dmesg printed them during the run, with the parent cgroup path replaced by /job"
                )
            for _ in range(50):
                with contextlib.suppress(OSError):
                    group.rmdir()
                    break
                time.sleep(0.1)

    return setup


def _oom_report(lines: list[str]) -> list[str]:
    """The kernel's OOM-kill block(s) among new dmesg lines: 'invoked oom-killer' up to 'Killed process' (and the
    reaper's line right after it, if any)."""
    out: list[str] = []
    inside = False
    for line in lines:
        if "invoked oom-killer" in line:
            inside = True
        if inside:
            out.append(line)
        if inside and re.search(r"Killed process \d+", line):
            inside = False
        elif out and not inside and "oom_reaper" in line:
            out.append(line)
    return out


# --- actions -------------------------------------------------------------------------------------------------------


def _wait_for_step(job: Job, rank: int, step: int, timeout: float = 120.0) -> int | None:
    """The pid of ``rank`` once it reports ``step`` (or later), or None if the job ended or the wait timed out."""
    marker = job.markers / f"rank{rank}.json"
    deadline = time.monotonic() + timeout
    while job.running() and time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            state = json.loads(marker.read_text())
            if state["step"] >= step:
                return int(state["pid"])
        time.sleep(0.05)
    return None


def signal_rank(rank: int, step: int, sig: signal.Signals) -> Action:
    """Send ``sig`` to one rank's process from outside, once it has reached ``step``."""

    def action(job: Job) -> None:
        pid = _wait_for_step(job, rank, step)
        if pid is None:
            raise RuntimeError(f"rank {rank} never reached step {step}")
        os.kill(pid, sig)

    return action


def signal_launcher(step: int, sig: signal.Signals) -> Action:
    """Send ``sig`` to torchrun itself (as a scheduler does at a time limit or preemption) once rank 0 is at
    ``step``."""

    def action(job: Job) -> None:
        if _wait_for_step(job, 0, step) is None:
            raise RuntimeError(f"rank 0 never reached step {step}")
        job.agents[0].send_signal(sig)

    return action


def dump_stacks(ranks: int, step: int, delay: float, tool: str) -> Action:
    """Once every rank has reached ``step``, wait ``delay`` seconds (the job hangs meanwhile), then take every rank's
    stacks as on-call does: ``py-spy dump --pid`` per rank, kept as ``stacks/py-spy-rank<r>.txt``, or SIGUSR1 to
    each rank, whose ``faulthandler.register`` prints every thread's stack to its stderr."""

    def action(job: Job) -> None:
        pids = {r: _wait_for_step(job, r, step) for r in range(ranks)}
        if any(p is None for p in pids.values()):
            raise RuntimeError(f"not every rank reached step {step}")
        time.sleep(delay)
        py_spy = str(Path(job.python).with_name("py-spy"))
        for r, pid in sorted(pids.items()):
            assert pid is not None
            if tool == "py-spy":
                got = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
                job.extra_files[f"stacks/py-spy-rank{r}.txt"] = got.stdout
            else:
                os.kill(pid, signal.SIGUSR1)

    return action


def keep_flight_recorder(job: Job) -> None:
    """Copy the ranks' Flight Recorder dumps (``$TORCH_FR_DUMP_TEMP_FILE<rank>``) into the bundle's ``fr/``."""
    for path in sorted((job.work / "fr").glob("comm_lib_trace_rank_*")):
        job.extra_bytes[f"fr/{path.name}"] = path.read_bytes()
