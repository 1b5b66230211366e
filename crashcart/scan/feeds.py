"""Forward-only byte sources for the scanner: a stream read ahead on a thread, and an archive member handed
from the thread reading the archive to the thread scanning it. Both offer ``readinto`` (``reader.Readable``).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from dataclasses import dataclass
from typing import Any


class _Chunked:
    """``readinto`` over a sequence of chunks that ``_next`` hands out (None at the end); an error ``_next``
    raises ends the stream too."""

    _current: memoryview  # what is left of the chunk being read
    _done: bool

    def _next(self) -> bytes | None:
        raise NotImplementedError

    def readinto(self, buffer: memoryview, /) -> int:
        if not self._current:
            if self._done:
                return 0
            try:
                got = self._next()
            except BaseException:
                self._done = True
                raise
            if got is None:
                self._done = True
                return 0
            self._current = memoryview(got)
        n = min(len(buffer), len(self._current))
        buffer[:n] = self._current[:n]
        self._current = self._current[n:]
        return n


class ReadAhead(_Chunked):
    """Reads a stream on a background thread, up to ``depth`` chunks ahead, so that decompressing (zlib
    releases the GIL) overlaps scanning. Memory: at most ``depth + 2`` chunks. Errors re-raise in the reader.
    Read it to the end (or ``close()`` it) before touching the underlying stream again."""

    def __init__(self, stream: Any, *, chunk: int = 1 << 20, depth: int = 4) -> None:
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=depth)
        self._stream, self._chunk = stream, chunk
        self._current = memoryview(b"")
        self._done = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="crashcart-readahead", daemon=True)
        self._thread.start()

    def _fill(self) -> None:
        try:
            while not self._stop.is_set():
                data = self._stream.read(self._chunk)
                self._queue.put(data)
                if not data:
                    return
        except BaseException as exc:  # handed to the reading thread
            self._queue.put(exc)

    def _next(self) -> bytes | None:
        got = self._queue.get()
        if isinstance(got, BaseException):
            raise got
        return got or None

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self._queue.get(timeout=0.05)
        self._thread.join()


@dataclass(frozen=True)
class _End:
    complete: bool


class Feed(_Chunked):
    """One archive member's bytes, handed from the thread reading the archive (which ``write``s them, an
    ``extract.MemberSink``) to a thread scanning them (``scan_stream`` reads it).

    ``budget`` bounds the chunks waiting in all the feeds that share it, so that the archive's reader can
    run ahead into the next members (scanned by other threads) while memory stays bounded. If the scanning
    side fails it calls ``fail``: the writer's next ``write`` raises that error, and the feed is drained so
    that the writer is never left blocked."""

    def __init__(self, budget: threading.Semaphore) -> None:
        self._queue: queue.SimpleQueue[bytes | _End] = queue.SimpleQueue()
        self._budget = budget
        self._current = memoryview(b"")
        self._done = False
        self._error: BaseException | None = None

    # the writing side
    def write(self, data: bytes, /) -> None:
        if self._error is not None:
            raise self._error
        self._budget.acquire()
        self._queue.put(data)

    def close(self, complete: bool) -> None:
        self._queue.put(_End(complete))

    # the reading side
    def _next(self) -> bytes | None:
        got = self._queue.get()
        if isinstance(got, _End):
            if not got.complete:
                raise EOFError("the archive stopped being read in the middle of this member")
            return None
        self._budget.release()
        return got

    def fail(self, error: BaseException) -> None:
        self._error = error
        while not self._done:
            if isinstance(self._queue.get(), _End):
                self._done = True
            else:
                self._budget.release()
