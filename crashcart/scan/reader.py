"""Stream one file through a matcher in newline-aligned buffers, never holding the whole file.

Input: a path on disk (``scan_file``) or a forward-only stream such as an archive member being
decompressed (``scan_stream``, optionally copying every byte to a sink in the same pass), and a
``Matcher``. Output: a ``FileScan`` with exact 1-based line numbers of every hit, the raw bytes of each hit
line, a sparse line index (checkpoints), the line count, the sha256 and (unless ``keep_tail=False``) the last
lines. Runs in worker threads: the heavy steps (``readinto``, sha256, hyperscan, numpy) release the GIL.

Per buffer the bytes are touched by: one ``readinto`` into a reused ``bytearray`` (a partial last line
is moved to the front, never concatenated with the next block), sha256, the matcher, and one newline
count (numpy, about 20 GB/s; ``bytes.count`` does 3 GB/s and holds the GIL). A buffer with many hits is
mapped to lines in a few vectorised steps. Memory is bounded: a signature that fires on every line
keeps its first and last ``KEEP_HITS`` lines per file (``FileScan.dropped`` counts the rest).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from crashcart.scan import backscan
from crashcart.scan.lazy import numpy_module
from crashcart.scan.lines import last_byte, mv_lines, tail_lines
from crashcart.scan.matcher import Matcher, MatcherName

TAIL_BYTES = 64 * 1024
GIANT = 4  # a line longer than this many buffers is scanned in buffer-sized pieces
NUMPY_MIN_BYTES = 64 * 1024  # below this, bytes.count beats numpy's call overhead
MANY_HITS = 64  # from this many matches in one buffer, map them to lines with numpy
KEEP_HITS = 4_000  # per signature and file, the first and the last this many hit lines are kept (bounded memory)
BACKSCAN_MIN_BYTES = 1024 * 1024  # after this many bytes of a file, a signature whose first hits are held stops being
# scanned for, and its last hits are found reading the file backwards (``backscan``)
BACKSCAN_MAX_SWITCHES = 4  # matchers built per file for that (each set of signatures is compiled once)


@dataclass
class FileScan:
    path: str
    lines: int = 0
    nbytes: int = 0
    sha256: str = ""
    checkpoints: list[tuple[int, int]] = field(default_factory=list)
    hits: list[tuple[int, int, bytes | None]] = field(default_factory=list)  # (sig, line, raw or None)
    tail: list[tuple[int, bytes]] = field(default_factory=list)
    error: str | None = None
    dropped: int = 0  # hit lines of over-frequent signatures not kept: only the first and last KEEP_HITS are
    offsets: dict[int, int] = field(default_factory=dict)  # line -> byte offset of its start, for kept hit lines
    uncounted: list[int] = field(default_factory=list)  # signatures not scanned for in the middle of the file


class Readable(Protocol):
    def readinto(self, buffer: memoryview, /) -> int | None: ...


def scan_file(
    matcher: Matcher,
    physical: Path,
    path: str,
    *,
    buffer_bytes: int,
    max_line_bytes: int,
    keep_hits: int | Sequence[int] | None = None,
    backscan_min_bytes: int = BACKSCAN_MIN_BYTES,
    keep_tail: bool = True,
) -> FileScan:
    """Scan ``physical`` (shown as ``path``); OS errors become ``FileScan.error``, never exceptions.

    :param keep_hits: hit lines kept per signature at each end of the file: one number for every
        signature or one per signature index (default ``KEEP_HITS``; the benchmark's match check keeps them
        all). With one per signature, past its first ``backscan_min_bytes`` a file stops being scanned for a
        signature whose first hits are held, and its last ones are read back from the end (``backscan``).
    """
    out = FileScan(path=path)
    try:
        with physical.open("rb", buffering=0) as fh:
            scanner = _Scanner(matcher, out, buffer_bytes, max_line_bytes, keep_hits, backscan=backscan_min_bytes)
            ends_with_newline = scanner.run(fh, reread=fh.fileno)
            fh.seek(max(0, out.nbytes - TAIL_BYTES))  # without keep_tail, ``scan.tails.file_tail`` reads it when asked
            out.tail = tail_lines(fh.read(TAIL_BYTES), out.nbytes, out.lines, ends_with_newline) if keep_tail else []
    except OSError as exc:
        out.error = f"unreadable: {exc.strerror or exc}"
    return out


def scan_stream(
    matcher: Matcher,
    stream: Readable,
    path: str,
    *,
    buffer_bytes: int,
    max_line_bytes: int,
    sink: Callable[[memoryview], object] | None = None,
    keep_hits: int | Sequence[int] | None = None,
    reread: Callable[[], int] | None = None,
    backscan_min_bytes: int = BACKSCAN_MIN_BYTES,
    keep_tail: bool = True,
) -> FileScan:
    """Scan a forward-only stream (an archive member while it is decompressed), the same as ``scan_file``.

    ``sink`` receives every byte in order, in the same pass (e.g. ``open(dest, "wb").write``: extract and
    scan at once, reading the data once). The tail is kept from the last bytes seen. Errors of the stream
    or the sink propagate (the caller knows whether the archive or the disk failed). ``reread``, when
    given, is called once the stream has ended and returns a descriptor of the whole member as written (the
    caller closes it), from which the last hits of signatures no longer scanned for are read (``scan_file``).
    """
    out = FileScan(path=path)
    tail = bytearray()

    def keep(chunk: memoryview) -> None:
        if sink is not None:
            sink(chunk)
        if len(chunk) >= TAIL_BYTES:
            tail[:] = chunk[-TAIL_BYTES:]
        else:
            tail.extend(chunk)
            del tail[: max(0, len(tail) - TAIL_BYTES)]

    scanner = _Scanner(matcher, out, buffer_bytes, max_line_bytes, keep_hits, backscan=backscan_min_bytes)
    ends_with_newline = scanner.run(stream, keep, reread=reread)
    out.tail = tail_lines(bytes(tail), out.nbytes, out.lines, ends_with_newline) if keep_tail else []
    return out


class _Scanner:
    """State of one pass over one file."""

    def __init__(
        self,
        matcher: Matcher,
        out: FileScan,
        buffer_bytes: int,
        max_line_bytes: int,
        keep_hits: int | Sequence[int] | None = None,
        *,
        backscan: int | None = None,
    ) -> None:
        self.matcher, self.out = matcher, out
        self.full = matcher
        self.keeps: Sequence[int] | None = None
        self.keep = KEEP_HITS
        if isinstance(keep_hits, Sequence):
            self.keeps = keep_hits
        elif keep_hits is not None:
            self.keep = keep_hits
        self.buffer_bytes = max(1, buffer_bytes)
        self.max_line_bytes = max_line_bytes
        self.wants_np = buffer_bytes >= NUMPY_MIN_BYTES
        self.np = numpy_module(wait=False) if self.wants_np else None
        self.line = 1  # line number of the first byte of the next piece
        self.offset = 0  # file offset of the first byte of the next piece
        self.at_line_start = True
        self.seen: set[tuple[int, int]] = set()  # (sig, line) hits of the piece, and of a line it continues
        self.counts: dict[int, int] = {}
        self.head_seq: list[int] = []  # sequence number of each hit in out.hits
        self.head_off: list[int] = []  # byte offset of each hit's line in out.hits (-1: began in an earlier piece)
        self.later: dict[int, deque[tuple[int, int, int, bytes | None, int]]] = {}  # sig -> last KEEP_HITS (seq, ...)
        self.seq = 0
        self.cut = False  # the current piece ends inside a (giant) line that the next piece continues
        # a signature whose first hits are held is no longer scanned for in a big file: sig -> offset where it stopped
        self.stopped: dict[int, int] = {}
        self.stopped_lines: dict[int, int] = {}  # offset where signatures stopped -> its line number
        self.switches = 0  # matchers built so far for the signatures still scanned for
        self.backscan_from = backscan if self.keeps is not None else None  # bytes read before any stops

    def run(
        self,
        fh: Readable,
        on_chunk: Callable[[memoryview], None] | None = None,
        *,
        reread: Callable[[], int] | None = None,
    ) -> bool:
        """Read ``fh`` to the end, filling ``self.out``; True when the file ends with a newline.

        :param reread: gives a descriptor of the same file, complete, from which the last hits of
            signatures no longer scanned for are read back (without it, every signature is scanned for to
            the end); called once, after the last byte was read, only when needed."""
        size = self.buffer_bytes
        buf = bytearray(size)
        digest = hashlib.sha256()
        have = 0  # bytes at the front of ``buf`` carried over: a partial line, never a newline
        last = -1
        while True:
            if have + size > len(buf):
                buf.extend(bytes(have + size - len(buf)))  # a long line: grow (no view is alive here)
            with memoryview(buf) as mv:
                n = _fill(fh, mv[have : have + size])
                if n:
                    digest.update(mv[have : have + n])
                    if on_chunk is not None:
                        on_chunk(mv[have : have + n])
                    last = buf[have + n - 1]
                end = have + n
                if n == 0:
                    stop = end
                else:
                    cut = buf.rfind(b"\n", have, end)
                    if cut == -1 and end < GIANT * size:
                        have = end
                        continue
                    stop = end if cut == -1 else cut + 1
                self.cut = n > 0 and stop == end and buf[stop - 1] != 0x0A  # a giant line goes on
                if stop:
                    self._piece(buf, mv, stop)
                    start = self.backscan_from
                    if reread is not None and start is not None and self.offset >= start and self.at_line_start:
                        self._stop_saturated()
                rest = end - stop
                if rest:
                    buf[:rest] = mv[stop:end].tobytes()
                have = rest
            if n == 0:
                break
        if self.stopped and reread is not None:
            self._backscan(reread(), last == 0x0A)
        out = self.out
        offsets = out.offsets
        for (_, line, _), off in zip(out.hits, self.head_off, strict=True):
            if off >= 0:
                offsets[line] = off
        if self.later:  # put the kept last hits of frequent signatures back in file order
            for d in self.later.values():
                offsets.update((line, off) for _, _, line, _, off in d if off >= 0)
            head = zip(self.head_seq, out.hits, strict=True)

            def order(x: tuple[int, tuple[int, int, bytes | None]]) -> tuple[int, int]:
                return x[1][1], x[0]  # by line; on one line, in the order found (read-back hits last)

            tails = [((q, (sig, line, raw)) for q, sig, line, raw, _ in d) for d in self.later.values()]
            out.hits = [hit for _, hit in heapq.merge(head, *tails, key=order)]
        out.nbytes = self.offset
        out.lines = self.line - 1 + (1 if self.offset and last != 0x0A else 0)
        out.sha256 = digest.hexdigest()
        return last == 0x0A

    def _piece(self, buf: bytearray, mv: memoryview, stop: int) -> None:
        """Scan ``buf[:stop]``, which starts at ``self.line`` and ends at a newline (or a giant line's cut)."""
        if self.at_line_start:
            self.out.checkpoints.append((self.line, self.offset))
            self.seen.clear()
        else:  # a giant line goes on: remember only its hits
            self.seen = {key for key in self.seen if key[1] == self.line}
        piece = mv[:stop]
        matches = self.matcher.scan(piece)
        if self.np is None and self.wants_np:  # numpy was still being imported when this file began
            self.np = numpy_module(wait=False)
        if self.np is not None and stop >= NUMPY_MIN_BYTES:
            arr = self.np.frombuffer(piece, dtype=self.np.uint8)
            if len(matches) >= MANY_HITS:
                newlines = int(self.np.count_nonzero(arr == 0x0A))
                self._many(buf, arr, stop, matches)
            elif matches:  # the lines from numpy's newlines: counting them with bytes.count held the GIL
                nl = self.np.flatnonzero(arr == 0x0A)
                newlines = len(nl)
                self._few(buf, stop, matches, nl)
            else:
                newlines = int(self.np.count_nonzero(arr == 0x0A))
            matches = []
            del arr
        else:
            newlines = buf.count(b"\n", 0, stop)
        if matches:
            self._few(buf, stop, matches)
        del piece
        self.line += newlines
        self.offset += stop
        self.at_line_start = buf[stop - 1] == 0x0A

    def _stop_saturated(self) -> None:
        """Stop scanning for the signatures whose first hits are all held (their last ones come from
        ``backscan``); a matcher for the rest is built, at most ``BACKSCAN_MAX_SWITCHES`` times per file."""
        assert self.keeps is not None
        full = [s for s, n in self.counts.items() if n > self._limit(s) and s not in self.stopped]
        if not full or self.switches >= BACKSCAN_MAX_SWITCHES:
            return
        rest = frozenset(range(len(self.keeps))) - set(self.stopped) - set(full)
        self.switches += 1
        for s in full:
            self.stopped[s] = self.offset
        self.stopped_lines.setdefault(self.offset, self.line)
        self.matcher = self.full.only(rest) if rest else _NoSignature()
        self.out.uncounted = sorted(self.stopped)

    def _backscan(self, fd: int, ends_with_newline: bool) -> None:
        """The last hits of the signatures no longer scanned for, merged into ``self.later``."""
        need = {s: self._limit(s) for s in self.stopped}
        got, complete = backscan.last_hits(
            fd,
            self.offset,
            self.line + (0 if ends_with_newline or not self.offset else 1),
            self.full.only(frozenset(self.stopped)),
            self.stopped,
            need,
            block=self.buffer_bytes,
            max_line_bytes=self.max_line_bytes,
        )
        if not complete:  # a line too long to read backwards: scan the rest of the file forwards for them
            got = self._forward_rest(fd)
        for s, hits in got.items():
            later = self.later.get(s)
            before = list(later) if later is not None else []
            self.seq += len(hits)
            seq0 = self.seq - len(hits)  # after every forward hit: merged by line first, then this
            new = [(seq0 + i + 1, s, h.line, h.raw, h.offset) for i, h in enumerate(hits)]
            self.later[s] = deque((before + new)[max(0, len(before) + len(new) - need[s]) :], maxlen=max(1, need[s]))

    def _forward_rest(self, fd: int) -> dict[int, list[backscan.BackHit]]:
        """``backscan``'s answer the slow way: from where the first signature stopped, to the end."""
        floor = min(self.stopped.values())
        sub = _Scanner(
            self.full.only(frozenset(self.stopped)),
            FileScan(path=self.out.path),
            self.buffer_bytes,
            self.max_line_bytes,
            [self._limit(s) if s in self.stopped else 0 for s in range(len(self.keeps or ()))],
        )
        sub.line, sub.offset = self.stopped_lines[floor], floor
        with os.fdopen(os.dup(fd), "rb", buffering=0) as fh:
            fh.seek(floor)
            sub.run(fh)
        got: dict[int, list[backscan.BackHit]] = {s: [] for s in self.stopped}
        for sig, line, raw in sub.out.hits:
            off = sub.out.offsets.get(line, -1)
            if sig in got and off >= self.stopped[sig] and raw is not None:
                got[sig].append(backscan.BackHit(sig, line, off, raw))
        return {s: hits[len(hits) - min(len(hits), self._limit(s)) :] for s, hits in got.items()}

    def _limit(self, sig: int) -> int:
        """Hit lines of ``sig`` kept at each end of the file."""
        keeps = self.keeps
        return keeps[sig] if keeps is not None and sig < len(keeps) else self.keep

    def _raw(self, buf: bytearray, start: int, stop: int) -> bytes | None:
        if start == 0 and not self.at_line_start:
            return None  # the line began in an earlier piece (a giant line): read it back later
        nl = buf.find(b"\n", start, stop)
        limit = start + self.max_line_bytes + 1
        if nl == -1 and self.cut and stop < limit:
            return None  # the line goes on in the next piece and we do not hold enough of it
        return bytes(buf[start : min(stop if nl == -1 else nl, limit)])

    def _keep(self, sig: int, line: int, buf: bytearray, start: int, stop: int) -> None:
        """Record a hit; beyond KEEP_HITS for its signature, only the latest of them are held."""
        self.seq += 1
        n = self.counts[sig] = self.counts.get(sig, 0) + 1
        off = -1 if start == 0 and not self.at_line_start else self.offset + start
        keep = self._limit(sig)
        if n <= keep:
            self.out.hits.append((sig, line, self._raw(buf, start, stop)))
            self.head_seq.append(self.seq)
            self.head_off.append(off)
            return
        later = self.later.get(sig)
        if later is None:
            later = self.later[sig] = deque(maxlen=keep)
        if len(later) == keep:
            self.out.dropped += 1
        later.append((self.seq, sig, line, self._raw(buf, start, stop), off))

    def _few(self, buf: bytearray, stop: int, matches: list[tuple[int, int]], nl: Any = None) -> None:
        """Each hit to its line (newlines up to its last byte), once per (signature, line); ``nl``: the piece's
        newline positions (numpy), which give the lines without counting bytes under the GIL."""
        positions = sorted((last_byte(buf, end), sig) for sig, end in matches)
        seen = self.seen
        if nl is not None:
            before = nl.searchsorted([pos for pos, _ in positions], side="right").tolist()
            starts = [int(nl[k - 1]) + 1 if k else 0 for k in before]
            for (_, sig), k, start in zip(positions, before, starts, strict=True):
                key = (sig, self.line + k)
                if key not in seen:
                    seen.add(key)
                    self._keep(sig, self.line + k, buf, start, stop)
            return
        cur_line, cur_pos = self.line, 0
        for pos, sig in positions:
            start = buf.rfind(b"\n", 0, pos + 1) + 1
            if start > cur_pos:
                cur_line += buf.count(b"\n", cur_pos, start)
                cur_pos = start
            key = (sig, cur_line)
            if key in seen:
                continue
            seen.add(key)
            self._keep(sig, cur_line, buf, start, stop)

    def _many(self, buf: bytearray, arr: Any, stop: int, matches: list[tuple[int, int]]) -> None:
        """Like ``_few``, vectorised for a buffer full of hits: one pass finds every newline, one search
        maps every hit to its line, one split cuts the lines; Python touches only the hits that are kept."""
        np = self.np
        assert np is not None
        nl = np.flatnonzero(arr == 0x0A)
        flat = np.fromiter(itertools.chain.from_iterable(matches), dtype=np.int64, count=2 * len(matches))
        sig, end = flat[0::2], flat[1::2]
        last = np.maximum(end - 1, 0)
        last -= (arr[last] == 0x0A) & (last > 0)  # a match ending on a newline belongs to the line before it
        idx = np.searchsorted(nl, last, side="left")  # newlines before the hit's last byte = line within piece
        order = np.lexsort((sig, last, idx))  # like _few: by position, then signature
        idx, sig = idx[order], sig[order]
        _, first = np.unique(idx * (int(sig.max()) + 1) + sig, return_index=True)
        first.sort()
        idx, sig = idx[first], sig[first]  # one hit per (line, signature), in position order
        if self.seen:  # hits on a giant line that an earlier piece already reported
            dup = np.fromiter(((s, self.line) in self.seen for s in sig[idx == 0].tolist()), dtype=bool)
            keep = np.ones(len(idx), dtype=bool)
            keep[np.flatnonzero(idx == 0)[dup]] = False
            idx, sig = idx[keep], sig[keep]
        end_line = self.line + len(nl)
        self.seen.update((s, end_line) for s in sig[idx == len(nl)].tolist())
        seq = self.seq + 1 + np.arange(len(idx))
        self.seq += len(idx)
        take: list[Any] = []  # positions (into idx) whose raw line we need: head hits and kept tail hits
        tails: list[tuple[int, Any]] = []
        for s in np.unique(sig).tolist():
            at = np.flatnonzero(sig == s)
            before = self.counts.get(s, 0)
            self.counts[s] = before + len(at)
            keep = self._limit(s)
            head = at[: max(0, keep - before)]
            rest = at[len(head) :][-keep:] if keep else at[:0]
            self.out.dropped += len(at) - len(head) - len(rest)
            take += [head, rest]
            if len(rest):
                tails.append((s, rest))
        if not take:
            return
        need = np.concatenate(take)
        lines = mv_lines(buf, stop)
        raw: dict[int, bytes | None] = {}
        off: dict[int, int] = {}
        starts = np.concatenate((np.zeros(1, dtype=np.int64), nl + 1))[idx[need]] + self.offset
        for i, k, o in zip(need.tolist(), idx[need].tolist(), starts.tolist(), strict=True):
            raw[i] = self._raw_line(lines, k, len(nl))
            off[i] = -1 if k == 0 and not self.at_line_start else o
        hits, head_seq, head_off = self.out.hits, self.head_seq, self.head_off
        tail_set = {int(i) for _, rest in tails for i in rest.tolist()}
        for i in sorted(raw):
            if i in tail_set:
                continue
            hits.append((int(sig[i]), self.line + int(idx[i]), raw[i]))
            head_seq.append(int(seq[i]))
            head_off.append(off[i])
        for s, rest in tails:
            later = self.later.get(s)
            keep = self._limit(s)
            if later is None:
                later = self.later[s] = deque(maxlen=keep)
            self.out.dropped += max(0, len(later) + len(rest) - keep)
            later.extend((int(seq[i]), s, self.line + int(idx[i]), raw[i], off[i]) for i in rest.tolist())

    def _raw_line(self, lines: list[bytes], k: int, newlines: int) -> bytes | None:
        """``_raw`` for line ``k`` of the piece, from the piece already split at newlines."""
        if k == 0 and not self.at_line_start:
            return None
        text = lines[k]
        limit = self.max_line_bytes + 1
        if k == newlines and self.cut and len(text) < limit:
            return None
        return text[:limit] if len(text) > limit else text


class _NoSignature:
    """The matcher once every signature has stopped being scanned for."""

    name: MatcherName = "re"

    def scan(self, buf: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
        return []

    def only(self, sigs: frozenset[int]) -> _NoSignature:
        return self


def _fill(fh: Readable, view: memoryview) -> int:
    """Read until ``view`` is full or the stream ends (streams may return short reads); bytes read."""
    got = 0
    while got < len(view):
        n = fh.readinto(view[got:]) or 0
        if n == 0:
            break
        got += n
    return got
