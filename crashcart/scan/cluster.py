"""Scan stage on a Ray cluster: a directory bundle's files fanned out to Ray tasks, split by bytes.

Input: the scan's jobs (physical path, bundle path) and ``ScanSettings``. Output: the per-file ``FileScan``s that
``run.scan_files`` makes on this machine (hit lines, line-index checkpoints, sha256, line counts, last lines:
kilobytes per file, never the log bytes), so the driver runs the rest of the pipeline unchanged. I/O: Ray,
imported only here and only when a cluster is asked for; each task reads its files where they are, on a
filesystem every worker mounts at the same path. ``changed_files`` re-hashes cited files at verify time.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crashcart.errors import BundleNotVisible, ClusterError, ClusterUnavailable
from crashcart.scan.matcher import Matcher, make_matcher
from crashcart.scan.reader import FileScan
from crashcart.scan.run import FilesScanner, Progress, scan_files
from crashcart.settings import ScanSettings

TASK_BYTES = 256 * 1024**2  # a task's share of the bundle, at most (a larger file is one task of its own)
MIN_TASK_BYTES = 16 * 1024**2  # below this, Ray's per-task cost is no longer small against the scan
TASK_FILES = 2_000  # files per task, at most (ten thousand small files still make several tasks)
TASKS_PER_CPU = 4  # a bundle is cut into about this many tasks per worker CPU, so that they balance
IN_FLIGHT_PER_CPU = 2  # tasks submitted and not collected yet, per worker CPU: bounded driver memory
MAX_RETRIES = 3  # a task whose worker died is run again this many times (Ray's own retry)
CONNECT_TIMEOUT_S = 5.0
HASH_BLOCK = 4 * 1024**2

log = logging.getLogger(__name__)
_matcher: Matcher | None = None  # one per Ray worker process, reused by every task it runs


@dataclass
class Task:
    """One Ray task: files of the bundle, about ``TASK_BYTES`` together."""

    jobs: list[tuple[str, str]] = field(default_factory=list)  # (absolute physical path, bundle path)
    nbytes: int = 0


@dataclass
class TaskResult:
    """What a task sends back: its files' scans, and where and how long it ran."""

    node: str
    host: str
    scans: list[FileScan]
    seconds: float
    missing_root: bool = False


def plan_tasks(jobs: list[tuple[str, str, int]], workers: int, task_bytes: int | None = None) -> list[Task]:
    """Cut (physical, path, size) jobs into tasks by bytes, not by file count: largest files first, each into the
    task with the fewest bytes so far (a file over the task size alone), so a few huge files and ten thousand
    small ones both balance; at least one task per worker while there are files enough. ``task_bytes``
    (default: about ``TASKS_PER_CPU`` tasks per worker, between ``MIN_TASK_BYTES`` and ``TASK_BYTES``) is the
    target size of a task."""
    total = sum(size for _, _, size in jobs)
    target = task_bytes or min(TASK_BYTES, max(MIN_TASK_BYTES, total // max(1, workers * TASKS_PER_CPU)))
    count = max(1, -(-total // max(1, target)), -(-len(jobs) // TASK_FILES), min(len(jobs), workers))
    tasks = [Task() for _ in range(count)]
    for phys, path, size in sorted(jobs, key=lambda j: (-j[2], j[1])):
        open_tasks = [t for t in tasks if len(t.jobs) < TASK_FILES]
        if not open_tasks:
            open_tasks = [Task()]
            tasks.append(open_tasks[0])
        task = min(open_tasks, key=lambda t: t.nbytes)
        task.jobs.append((phys, path))
        task.nbytes += size
    return [t for t in tasks if t.jobs]


def scan_task(root: str, jobs: list[tuple[str, str]], settings: ScanSettings, max_line: int) -> TaskResult:
    """The body of a Ray task: scan these files where they are, with ``run.scan_files`` (one thread: the task
    has one CPU), and return their ``FileScan``s. A root this node cannot see is reported, not scanned."""
    global _matcher
    start = time.perf_counter()
    node, host = _node_id(), socket.gethostname()
    if not os.path.isdir(root):
        return TaskResult(node=node, host=host, scans=[], seconds=0.0, missing_root=True)
    if _matcher is None:
        _matcher = make_matcher(settings.matcher)
    one = settings.model_copy(update={"workers": 1})
    got = scan_files([(Path(p), path) for p, path in jobs], one, max_line, matcher=_matcher)
    scans = [got[path] for _, path in jobs]
    return TaskResult(node=node, host=host, scans=scans, seconds=time.perf_counter() - start)


def _node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


class Cluster:
    """A connection to Ray for the scan stage. ``connect`` opens it; ``scan_files`` is a ``run.FilesScanner``;
    ``close`` shuts Ray down only if this connection started it."""

    def __init__(self, ray: Any, address: str, *, owned: bool, task_bytes: int | None = None) -> None:
        self._ray = ray
        self.address = address
        self._owned = owned
        self.task_bytes = task_bytes
        self.tasks: list[TaskResult] = []  # every task's result, in the order they finished
        self._remote: Any = None
        self.task: Callable[..., TaskResult] = scan_task  # the task's body (a test may wrap it)

    @classmethod
    def connect(cls, address: str, *, task_bytes: int | None = None) -> Cluster:
        """Connect to ``ray://HOST:PORT``, or start a Ray on this machine (``local``); reuse a Ray this process
        already started. Raises ``ClusterUnavailable`` with what to fix: never falls back to a local scan."""
        try:
            import ray
        except ImportError:
            raise ClusterUnavailable(
                f"--cluster {address} needs Ray on this machine: pip install 'crashcart[ray]' (or drop --cluster)"
            ) from None
        if ray.is_initialized():
            return cls(ray, address, owned=False, task_bytes=task_bytes)
        if address != "local":
            _probe(address)
        try:
            if address == "local":
                ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
            else:
                ray.init(address, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError, OSError) as exc:
            raise ClusterUnavailable(
                f"cannot connect to the Ray cluster at {address}: {' '.join(str(exc).split())[:200]}"
            ) from None
        return cls(ray, address, owned=True, task_bytes=task_bytes)

    def workers(self) -> int:
        """CPUs of the cluster: one task runs on each."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def files_scanner(self, root: Path, settings: ScanSettings, max_line: int) -> FilesScanner:
        """A ``run.FilesScanner`` for the bundle opened from the directory ``root``."""
        return functools.partial(self._scan_files, os.path.abspath(root), settings, max_line)

    def _scan_files(
        self,
        root: str,
        settings: ScanSettings,
        max_line: int,
        jobs: list[tuple[Path, str]],
        total: int,
        progress: Progress | None,
    ) -> dict[str, FileScan]:
        """Files under ``root`` on Ray tasks (bounded in flight, results as they finish); any others (logs
        decompressed into this machine's work directory) here, in a thread meanwhile."""
        remote: list[tuple[str, str, int]] = []
        here: list[tuple[Path, str]] = []
        for phys, path in jobs:
            absolute = os.path.abspath(phys)
            if absolute.startswith(root.rstrip(os.sep) + os.sep):
                remote.append((absolute, path, _size(absolute)))
            else:
                here.append((phys, path))
        done = 0
        scans: dict[str, FileScan] = {}

        def record(got: Iterable[FileScan]) -> None:
            nonlocal done
            for fs in got:
                scans[fs.path] = fs
                done += fs.nbytes
            if progress:
                progress(min(done, total), total)

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="crashcart-local") as pool:
            local = pool.submit(scan_files, here, settings, max_line) if here else None
            tasks = plan_tasks(remote, self.workers(), self.task_bytes)
            for result in self._run(root, tasks, settings, max_line):
                record(result.scans)
            if local is not None:
                record(local.result().values())
        return scans

    def _run(self, root: str, tasks: list[Task], settings: ScanSettings, max_line: int) -> Iterator[TaskResult]:
        ray = self._ray
        if self._remote is None:
            self._remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)(self.task)
        limit = self.workers() * IN_FLIGHT_PER_CPU
        pending: dict[Any, Task] = {}
        todo = list(reversed(tasks))
        while todo or pending:
            while todo and len(pending) < limit:
                task = todo.pop()
                pending[self._remote.remote(root, task.jobs, settings, max_line)] = task
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    result: TaskResult = ray.get(ref)
                except ray.exceptions.RayError as exc:  # a task that failed after its retries
                    first = task.jobs[0][1] if task.jobs else "?"
                    detail = " ".join(str(exc).split())[:300]
                    raise ClusterError(
                        f"a scan task ({len(task.jobs)} files from {first}) failed after {MAX_RETRIES} retries: "
                        f"{type(exc).__name__}: {detail}"
                    ) from None
                if result.missing_root:
                    raise BundleNotVisible(
                        f"{root} is not visible on Ray node {result.host} ({result.node[:12]}): the bundle must be a "
                        "directory every worker mounts at the same path (an archive is opened on this machine only)"
                    )
                self.tasks.append(result)
                yield result

    def close(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()


def changed_files(
    files: Iterable[str], scans: dict[str, FileScan], physical: Callable[[str], Path | None]
) -> dict[str, str]:
    """Cited files whose bytes are no longer those the scan hashed: {path: why}. Hashed here, in threads."""

    def check(path: str) -> tuple[str, str | None]:
        fs, phys = scans.get(path), physical(path)
        if fs is None or not fs.sha256 or phys is None:
            return path, None
        try:
            now = _sha256(phys)
        except OSError as exc:
            return path, f"unreadable at verify time ({exc.strerror or exc})"
        if now != fs.sha256:
            return path, f"changed since it was scanned (sha256 {fs.sha256[:12]} then, {now[:12]} now)"
        return path, None

    wanted = sorted(set(files))
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        return {path: why for path, why in pool.map(check, wanted) if why is not None}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb", buffering=0) as fh:
        while block := fh.read(HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _probe(address: str) -> None:
    """Fail fast, in one line, when nothing listens at ``ray://HOST:PORT`` (Ray's own client waits 30 s)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ClusterUnavailable(
            f"cannot reach the Ray cluster at {address} ({reason}): check that the head node runs Ray with its client "
            "server on that port and that this machine can reach it, or drop --cluster / CRASHCART_RAY_ADDRESS"
        ) from None


def open_cluster(address: str) -> Cluster:
    """``Cluster.connect``: the pipeline's way in (``settings.ray_address``)."""
    return Cluster.connect(address)
