"""Scan stage (the offline swarm): every log file through the signature catalogue, in parallel.

Input: an opened ``Bundle``. Output: ``ScanResult`` (findings with Evidence, per-file line counts,
hashes and tails, telemetry series). Files are spread across worker threads (a ``ScanPool``); the
catalogue is compiled once and each thread streams its files in newline-aligned buffers. With
``open_scanning`` the threads start on each file as soon as ingest has it on disk, so that an archive's
decompression and the scan of its first members share the cores.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed, wait
from dataclasses import dataclass, field
from pathlib import Path

from crashcart.ingest.bundle import (
    SCANNED_KINDS,
    Bundle,
    is_launch_script,
    may_be_scanned,
    open_bundle,
)
from crashcart.ingest.direct import DirectFile
from crashcart.ingest.extract import Member
from crashcart.models import Finding, SkippedFile
from crashcart.scan import telemetry
from crashcart.scan.budget import FINDINGS_BUDGET, hit_limits, itemised_per_file, trim
from crashcart.scan.feeds import Feed
from crashcart.scan.findings import IdSource
from crashcart.scan.hang_evidence import analyse as hang_analyse
from crashcart.scan.hang_evidence import scan_hang_evidence
from crashcart.scan.lazy import numpy_module
from crashcart.scan.matcher import Matcher, make_matcher
from crashcart.scan.matcher import matcher_name as _matcher_name
from crashcart.scan.numbering import Built, build, renumbered
from crashcart.scan.reader import (
    BACKSCAN_MIN_BYTES,
    NUMPY_MIN_BYTES,
    FileScan,
    scan_file,
    scan_stream,
)
from crashcart.scan.tails import Tails
from crashcart.settings import BundleLimits, ScanSettings

PARALLEL_MIN_BYTES = 16 * 1024 * 1024
STREAM_AHEAD = 64  # archive chunks (1 MiB) decompressed but not scanned yet, at most, over all members
SMALL_FIRST = 1024 * 1024  # files under this are scanned before larger ones waiting (a few ms each)
WRITE_THREADS = 2  # threads beyond one per core while members are extracted: they also wait on the disk
TELEMETRY_MAX_LINES = 2_000_000

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
# scans (physical, path) jobs of ``total`` bytes elsewhere (a Ray cluster: ``scan.cluster``), as ``scan_files`` does
FilesScanner = Callable[[list[tuple[Path, str]], int, Progress | None], dict[str, FileScan]]


@dataclass
class ScanResult:
    findings: list[Finding]
    scans: dict[str, FileScan]
    matcher: str
    failures: list[SkippedFile] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)
    series: list[telemetry.GpuSeries] = field(default_factory=list)
    tails: Mapping[str, list[tuple[int, str]]] = field(default_factory=dict)  # path -> last lines (``Tails``)

    @property
    def lines(self) -> int:
        return sum(s.lines for s in self.scans.values())

    @property
    def bytes(self) -> int:
        return sum(s.nbytes for s in self.scans.values())


def open_scanning(
    source: Path, work_dir: Path, limits: BundleLimits, settings: ScanSettings
) -> tuple[Bundle, ScanPool]:
    """``open_bundle``, scanning every file while the bundle is opened; pass the pool on to ``scan``.

    An archive's members are scanned from memory as they are decompressed, on the pool's threads, which
    also write them to the work directory (around the page cache: ``ingest.direct.DirectFile``); a directory's
    files are scanned while they are classified. Closing the bundle stops the pool."""
    pool = ScanPool(settings, limits.max_line_bytes, extra_threads=WRITE_THREADS)
    try:
        bundle = open_bundle(source, work_dir, limits, on_member=pool.offer, writer=pool)
    except BaseException:
        pool.close()
        raise
    bundle.on_close(pool.close)
    return bundle, pool


def scan(
    bundle: Bundle,
    settings: ScanSettings,
    progress: Progress | None = None,
    pool: ScanPool | None = None,
    files: FilesScanner | None = None,
) -> ScanResult:
    """Scan every log file of ``bundle``; unreadable files become failures, not exceptions.

    :param pool: the pool ``open_scanning`` started (files it already scanned are not read again);
        None: threads are started here, for this call.
    :param files: scans the files instead of this machine (``scan.cluster``); what follows is the same.
    """
    targets = [
        f
        for f in bundle.files
        if f.kind in SCANNED_KINDS or f.kind == "telemetry" or (f.kind == "config" and is_launch_script(f.path))
    ]
    jobs: list[tuple[Path, str]] = []
    for f in sorted(targets, key=lambda f: (-f.size, f.path)):
        phys = bundle.physical(f.path)
        if phys is not None:
            jobs.append((phys, f.path))
    total = sum(f.size for f in targets)
    matcher_name = _matcher_name(settings.matcher)
    scans: dict[str, FileScan] = {}
    tails = Tails(bundle)
    result = ScanResult(findings=[], scans=scans, matcher=matcher_name, tails=tails)
    ids = IdSource()
    caps: list[tuple[int, int]] = []  # (failure, context) lines itemised per file, once the pool counted every file
    ordered = sorted(targets, key=lambda f: f.path)
    by_path = {f.path: f for f in targets}
    coming = {path for _, path in jobs}
    built: dict[str, Built] = {}
    done = 0  # files of ``ordered`` whose findings are in ``result``: a prefix, numbered as in path order

    held: list[FileScan] = []

    def found(fs: FileScan) -> None:
        """A file's scan is in. Once no file waits for a scan thread, the scans in are built (numbered on their
        own unless every file before them in path order has joined) while the last files are scanned: building
        earlier took the GIL from the scans (on (b) their hyperscan callbacks waited for it, and the scan ran
        longer than the building saved)."""
        if fs.path not in by_path:  # not a file of this bundle's (a scanner elsewhere answered more): kept as it came
            scans[fs.path] = fs
            return
        held.append(fs)
        if pool is not None and pool.waiting():
            return
        for got in sorted(held, key=lambda f: f.path):
            take(got)
        held.clear()

    def take(fs: FileScan) -> None:
        """Findings for ``fs``; they join ``result`` (renumbered) in path order, once every file before is in."""
        nonlocal done
        if not caps:
            offered = max(len(targets), pool.offered if pool is not None else 0)  # as the pool counted them (``trim``)
            caps.append(itemised_per_file(offered, settings.max_findings_per_signature_per_file))
        trim(fs, hit_limits(*caps[0]))  # as for the final count, however few were offered when it was trimmed
        while done < len(ordered) and ordered[done].path not in coming:
            done += 1
        if done < len(ordered) and ordered[done].path == fs.path:  # every file before it has joined: no renumbering
            _join(build(bundle, ordered[done], fs, settings, caps[0], ids), bundle, ids, result)
            done += 1
        else:
            built[fs.path] = build(bundle, by_path[fs.path], fs, settings, caps[0])
        while done < len(ordered) and (ordered[done].path in built or ordered[done].path not in coming):
            got = built.pop(ordered[done].path, None)
            if got is not None:
                _join(got, bundle, ids, result)
            done += 1

    if files is not None:
        for fs in files(jobs, total, progress).values():
            found(fs)
    else:
        scan_files(jobs, settings, bundle.limits.max_line_bytes, total, progress, pool, then=found)
    for fs in sorted(held, key=lambda f: f.path):
        take(fs)
    for bf in ordered[done:]:  # held back behind a file that never came (``ScanPool.results`` gave it out before)
        got = built.pop(bf.path, None)
        if got is not None:
            _join(got, bundle, ids, result)
    marks = pool.tail_marks if pool is not None else None
    hangs = scan_hang_evidence(bundle, ids, marks)  # Flight Recorder, stack dumps, RAS reports (issue 18)
    result.findings.extend(hangs.findings)
    result.failures.extend(hangs.failures)
    result.notes.update(hangs.notes)
    return result


def _join(built: Built, bundle: Bundle, ids: IdSource, result: ScanResult) -> None:
    """Into ``result`` with the ids ``ids`` would have given them had they been built now: files join in path
    order, so the numbering is the same whatever order the scans completed in."""
    bf, fs = built.bf, built.fs
    if fs.error:
        result.scans[bf.path] = fs
        result.failures.append(SkippedFile(path=bf.path, reason=fs.error))
        return
    assert isinstance(result.tails, Tails)
    result.tails.add(bf.path, fs.nbytes, fs.lines)
    result.scans[bf.path] = FileScan(fs.path, fs.lines, fs.nbytes, fs.sha256)  # its hits are findings: let them go
    if bf.kind == "telemetry":
        _telemetry(bundle, bf.path, bf.host, fs.lines, ids, result)
        return
    if built.ids is None:  # numbered as it was built
        result.findings.extend(built.findings)
    else:
        result.findings.extend(renumbered(built.findings, ids.findings, ids.evidence))
        ids.findings += built.ids.findings
        ids.evidence += built.ids.evidence
    if built.note:
        result.notes[bf.path] = built.note


def scan_files(
    jobs: list[tuple[Path, str]],
    settings: ScanSettings,
    max_line: int,
    total: int = 0,
    progress: Progress | None = None,
    pool: ScanPool | None = None,
    *,
    matcher: Matcher | None = None,
    then: Callable[[FileScan], None] | None = None,
) -> dict[str, FileScan]:
    """Every file through the catalogue: those ``pool`` has not scanned yet largest first, on its threads
    (or on threads of our own, or in this thread for a small bundle or one worker, with ``matcher`` if given).
    The per-file results of the local scan; a Ray task (``scan.cluster``) calls this too, for its files.
    ``then``: each scan is given to it as it completes (in this thread, while the others go on) instead."""
    scans: dict[str, FileScan] = {}
    done = 0

    def record(fs: FileScan) -> None:
        nonlocal done
        done += fs.nbytes
        if progress:
            progress(done, total)
        if then is None:
            scans[fs.path] = fs
        else:
            then(fs)

    if pool is None and (_workers(settings) <= 1 or total < PARALLEL_MIN_BYTES):
        base = matcher or make_matcher(settings.matcher)
        for phys, path in jobs:
            record(
                scan_file(
                    base,
                    phys,
                    path,
                    buffer_bytes=settings.buffer_bytes,
                    max_line_bytes=max_line,
                    keep_hits=hit_limits(settings.max_findings_per_signature_per_file),
                    keep_tail=False,
                )
            )
        return scans
    with pool or ScanPool(settings, max_line) as threads:
        for fs in threads.results(jobs):
            record(fs)
    return scans


def _workers(settings: ScanSettings) -> int:
    return settings.workers or os.cpu_count() or 1


class ScanPool:
    """Scan threads (``settings.workers``, default one per core) sharing one compiled catalogue, cloned
    per thread. A file is scanned once, small ones first, then in the order submitted; ``results`` collects them.
    As an ``extract.MemberWriter`` it scans archive members from memory while they are extracted: the
    thread reading the archive feeds each member to a pool thread, which scans and writes it.

    Threads, not processes: reading, sha256, hyperscan and numpy release the GIL, so threads use every
    core without forking, re-importing, recompiling the database or pickling results back; the Python
    work left per 1 MiB buffer is a few microseconds."""

    def __init__(self, settings: ScanSettings, max_line_bytes: int, *, extra_threads: int = 0) -> None:
        self._buffer_bytes, self._max_line = settings.buffer_bytes, max_line_bytes
        self._cap = settings.max_findings_per_signature_per_file
        self._keep = hit_limits(self._cap)
        self.offered = 0  # files submitted so far (``itemised_per_file`` shrinks with them: ``trim``)
        threads = _workers(settings) + extra_threads
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="crashcart-scan")
        # the database is compiled (or loaded) once, on a pool thread, while the caller starts reading; numpy is
        # imported on another, and scans that start before it is there go on without it (``numpy_module``)
        self._base = self._threads.submit(make_matcher, settings.matcher)
        if settings.buffer_bytes >= NUMPY_MIN_BYTES:
            self._threads.submit(numpy_module)
        self._local = threading.local()
        self._futures: dict[tuple[Path, str], Future[FileScan]] = {}
        self._taken: set[tuple[Path, str]] = set()  # files whose scan ``results`` gave out (and no longer holds)
        self._streams: list[Future[FileScan]] = []
        self._ahead = threading.Semaphore(STREAM_AHEAD)
        self._waiting: list[tuple[int, int, Path, str, int | None, Future[FileScan]]] = []  # heap: (large, order, ...)
        self._waiting_lock = threading.Lock()
        self._order = itertools.count()
        self.tail_marks: dict[str, hang_analyse.TailMarks] = {}  # path -> its tail, looked at for hang evidence

    def __enter__(self) -> ScanPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def offer(self, member: Member, head: bytes | None = None) -> None:
        """``extract.OnMember``: start on a file just written, unless its name says it is never scanned."""
        if may_be_scanned(member.path):
            self.submit(member.physical, member.path, member.size)

    # extract.MemberWriter
    def open(self, path: str, dest: Path) -> Feed:
        out = DirectFile(dest)  # created here, by the thread reading the archive
        feed = Feed(self._ahead)
        self.offered += 1
        fut = self._futures[dest, path] = self._threads.submit(self._stream, feed, out, path)
        self._streams.append(fut)
        return feed

    def finish(self) -> None:
        for fut in self._streams:
            fut.result()

    def abort(self) -> None:
        wait(self._streams)

    def submit(self, physical: Path, path: str, size: int | None = None) -> None:
        """Scan a file on the next free thread; a file of under ``SMALL_FIRST`` bytes goes before the larger ones
        waiting (a kernel log offered after 64 rank logs is scanned, and its findings built, early)."""
        if (physical, path) not in self._futures and (physical, path) not in self._taken:
            self.offered += 1
            fut: Future[FileScan] = Future()
            self._futures[physical, path] = fut
            small = size is not None and size < SMALL_FIRST
            with self._waiting_lock:
                heapq.heappush(self._waiting, (0 if small else 1, next(self._order), physical, path, size, fut))
            self._threads.submit(self._next)

    def waiting(self) -> bool:
        """Whether a file submitted waits for a thread (all started: the threads are about to fall idle)."""
        with self._waiting_lock:
            return bool(self._waiting)

    def results(self, jobs: list[tuple[Path, str]]) -> Iterator[FileScan]:
        """The scans of ``jobs`` (physical, path) as they complete; those not submitted yet are, in order.
        Files submitted but not among ``jobs`` (classified as not scanned after all) are cancelled."""
        for physical, path in jobs:
            self.submit(physical, path)
        wanted = set(jobs)
        for key, fut in self._futures.items():
            if key not in wanted:
                fut.cancel()
        self._streams = []  # the archive is read (``finish``): these futures are among ``_futures`` too
        pending = {self._futures[job]: job for job in jobs if job not in self._taken}
        for fut in as_completed(list(pending)):
            job = pending.pop(fut)
            del self._futures[job]  # given out once: the pool holds no scan it has handed over
            self._taken.add(job)
            yield fut.result()

    def close(self) -> None:
        """Stop: files not started are dropped, running scans are waited for. Idempotent."""
        self._threads.shutdown(wait=True, cancel_futures=True)
        with self._waiting_lock:
            for *_, fut in self._waiting:
                fut.cancel()

    def _next(self) -> None:
        """One waiting file scanned (each ``submit`` queues one of these): the small ones first, then in order."""
        with self._waiting_lock:
            _, _, physical, path, size, fut = heapq.heappop(self._waiting)
        if not fut.set_running_or_notify_cancel():
            return  # cancelled (``results``: classified as not scanned after all)
        try:
            fut.set_result(self._scan(physical, path, size))
        except BaseException as exc:  # as ThreadPoolExecutor's own work items: the caller gets it from the future
            fut.set_exception(exc)

    def _scan(self, physical: Path, path: str, size: int | None = None) -> FileScan:
        fs = scan_file(
            self._matcher(),
            physical,
            path,
            buffer_bytes=self._buffer_bytes,
            max_line_bytes=self._max_line,
            keep_hits=self._keep_for(size),
            keep_tail=False,
        )
        self._mark_tail(physical, fs)
        return self._trimmed(fs)

    def _mark_tail(self, physical: Path, fs: FileScan) -> None:
        """A large file's tail looked at for hang evidence (``tail_marks``) here, in parallel with the other
        files and while the page cache holds its end, not by one thread once the whole bundle is scanned."""
        if fs.error is None and fs.nbytes > hang_analyse.MAX_LOG_READ:
            with contextlib.suppress(OSError):  # read again (and reported) by the hang-evidence pass
                if (got := hang_analyse.tail_marks(physical, fs.lines, fs.nbytes)) is not None:
                    self.tail_marks[fs.path] = got

    def _keep_for(self, size: int | None) -> Sequence[int]:
        """Hits the reader keeps of a file of ``size`` bytes: past ``FINDINGS_BUDGET`` files, a file too small for
        ``backscan`` keeps only what that many files itemise (what ``_trimmed`` would cut it to after; at 10,000
        files one hit at each end of a signature instead of 100), so its other hits are never copied and sorted."""
        if self.offered > FINDINGS_BUDGET and size is not None and size < BACKSCAN_MIN_BYTES:
            return hit_limits(*itemised_per_file(self.offered, self._cap))
        return self._keep

    def _trimmed(self, fs: FileScan) -> FileScan:
        """Past ``FINDINGS_BUDGET`` files, ``fs`` holding only what that many files itemise (``trim``): more
        files are offered later, never fewer, and they itemise no more."""
        if self.offered > FINDINGS_BUDGET:
            trim(fs, hit_limits(*itemised_per_file(self.offered, self._cap)))
        return fs

    def _stream(self, feed: Feed, out: DirectFile, path: str) -> FileScan:
        reread: list[int] = []

        def written() -> int:  # the member as written, for the last hits of signatures no longer scanned for
            out.close()
            reread.append(os.open(out.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
            return reread[-1]

        try:
            with out:
                fs = scan_stream(
                    self._matcher(),
                    feed,
                    path,
                    buffer_bytes=self._buffer_bytes,
                    max_line_bytes=self._max_line,
                    sink=out.write,
                    keep_hits=self._keep,
                    reread=written,
                    keep_tail=False,
                )
            self._mark_tail(out.path, fs)
            return self._trimmed(fs)
        except BaseException as exc:
            feed.fail(exc)
            raise
        finally:
            for fd in reread:
                os.close(fd)

    def _matcher(self) -> Matcher:
        matcher: Matcher | None = getattr(self._local, "matcher", None)
        if matcher is None:
            matcher = self._local.matcher = self._base.result().clone()
        return matcher


def _telemetry(bundle: Bundle, path: str, host: str | None, lines: int, ids: IdSource, result: ScanResult) -> None:
    text = bundle.read_lines(path, 1, min(lines, TELEMETRY_MAX_LINES))
    if not telemetry.looks_like_telemetry(path, text[:20]):
        return
    got = telemetry.analyse_telemetry(path, text, host_hint=host)
    result.series.extend(got.series)
    for f in got.findings:
        evidence = [ev.model_copy(update={"id": ids.evidence_id()}) for ev in f.evidence]
        result.findings.append(f.model_copy(update={"id": ids.finding(), "evidence": evidence}))
    if lines > TELEMETRY_MAX_LINES:
        result.notes[path] = f"only the first {TELEMETRY_MAX_LINES} lines of telemetry analysed"
