"""``DirectFile``: member bytes written with O_DIRECT from page-aligned staging, so extracting a GiB adds no
fresh page cache (on this VM that costs about 1.4 s of system time per GiB); buffered where O_DIRECT is refused.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from pathlib import Path

from crashcart.ingest.archive import BLOCK

_ALIGN = 4096  # O_DIRECT wants file offsets, lengths and memory aligned (512 on most disks; 4096 is safe)
_staging = threading.local()


class DirectFile:
    """A new file written around the page cache (``O_DIRECT``, where the OS and file system allow it).

    For bytes the caller holds in memory already (an archive member being scanned): buffered writes would
    also put a second copy in the page cache, and on a VM whose free memory is handed back to the host
    (virtio-balloon free page reporting) taking those pages back costs more than the write itself
    (measured: 1 GiB in 1.4 s of system time, against 0.13 s with ``O_DIRECT`` while the disk works).
    Whole aligned blocks go through a page-aligned staging buffer (one per thread, reused); the last,
    partial one is padded and the file then cut to its size. Falls back to plain writes when refused."""

    def __init__(self, dest: Path) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        self._direct = getattr(os, "O_DIRECT", 0)
        try:
            self._fd = os.open(dest, flags | self._direct, 0o666)
        except OSError as exc:
            if not self._direct or exc.errno != errno.EINVAL:
                raise
            self._direct = 0  # e.g. a file system without direct I/O
            self._fd = os.open(dest, flags, 0o666)
        self.path = dest
        self._size = 0
        self._fill = 0  # bytes waiting in the staging buffer

    def __enter__(self) -> DirectFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, data: bytes | bytearray | memoryview, /) -> None:
        view = memoryview(data).cast("B")
        self._size += len(view)
        if not self._direct:
            _write_all(self._fd, view)
            return
        stage = _stage()
        while view:
            n = min(len(view), len(stage) - self._fill)
            stage[self._fill : self._fill + n] = view[:n]
            self._fill += n
            view = view[n:]
            if self._fill == len(stage):
                self._flush(len(stage))

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            if self._fill:
                padded = -(-self._fill // _ALIGN) * _ALIGN
                stage = _stage()
                stage[self._fill : padded] = bytes(padded - self._fill)
                self._flush(padded)
                os.ftruncate(self._fd, self._size)
        finally:
            os.close(self._fd)
            self._fd = -1

    def _flush(self, n: int) -> None:
        with memoryview(_stage()) as stage:
            try:
                _write_all(self._fd, stage[:n])
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # direct I/O refused after all: write this block, and the rest, through the page cache
                import fcntl  # only where O_DIRECT exists (Linux)

                fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~self._direct)
                self._direct = 0
                _write_all(self._fd, stage[:n])
        self._fill = 0


def _stage() -> mmap.mmap:
    """This thread's page-aligned staging buffer (anonymous mmap), made once."""
    stage: mmap.mmap | None = getattr(_staging, "buffer", None)
    if stage is None:
        stage = _staging.buffer = mmap.mmap(-1, BLOCK)
    return stage


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]
