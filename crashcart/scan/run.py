"""Scan stage (the offline swarm): every log file through the signature catalogue, in parallel.

Input: an opened ``Bundle``. Output: ``ScanResult`` (findings with Evidence, per-file line counts,
hashes and tails, telemetry series). Files are spread across worker threads, largest first; the
catalogue is compiled once and each thread streams its files in newline-aligned buffers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from crashcart import telemetry
from crashcart.bundle import SCANNED_KINDS, Bundle, LineIndex, canonical_line
from crashcart.models import Finding, SkippedFile
from crashcart.scan.catalogue import load_catalogue
from crashcart.scan.findings import IdSource, build_findings
from crashcart.scan.matcher import Matcher, make_matcher
from crashcart.scan.matcher import matcher_name as _matcher_name
from crashcart.scan.reader import FileScan, scan_file
from crashcart.settings import ScanSettings

PARALLEL_MIN_BYTES = 16 * 1024 * 1024
TELEMETRY_MAX_LINES = 2_000_000

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


@dataclass
class ScanResult:
    findings: list[Finding]
    scans: dict[str, FileScan]
    matcher: str
    failures: list[SkippedFile] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)
    series: list[telemetry.GpuSeries] = field(default_factory=list)
    tails: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    @property
    def lines(self) -> int:
        return sum(s.lines for s in self.scans.values())

    @property
    def bytes(self) -> int:
        return sum(s.nbytes for s in self.scans.values())


def scan(bundle: Bundle, settings: ScanSettings, progress: Progress | None = None) -> ScanResult:
    """Scan every log file of ``bundle``; unreadable files become failures, not exceptions."""
    cat = load_catalogue()
    targets = [f for f in bundle.files if f.kind in SCANNED_KINDS or f.kind == "telemetry"]
    jobs: list[tuple[Path, str]] = []
    for f in sorted(targets, key=lambda f: (-f.size, f.path)):
        phys = bundle.physical(f.path)
        if phys is not None:
            jobs.append((phys, f.path))
    total = sum(f.size for f in targets)
    scans = _scan_files(jobs, settings, bundle.limits.max_line_bytes, total, progress)
    matcher_name = _matcher_name(settings.matcher)

    result = ScanResult(findings=[], scans=scans, matcher=matcher_name)
    ids = IdSource()
    for bf in sorted(targets, key=lambda f: f.path):
        got = scans.get(bf.path)
        if got is None:
            continue
        fs = got
        if fs.error:
            result.failures.append(SkippedFile(path=bf.path, reason=fs.error))
            continue
        bundle.set_index(bf.path, LineIndex(checkpoints=fs.checkpoints, lines=fs.lines))
        result.tails[bf.path] = [(n, canonical_line(raw, bundle.limits.max_line_bytes)) for n, raw in fs.tail]
        if bf.kind == "telemetry":
            _telemetry(bundle, bf.path, bf.host, fs.lines, ids, result)
            continue
        found, note = build_findings(
            cat,
            bundle,
            bf,
            fs,
            ids,
            cap=settings.max_findings_per_signature_per_file,
            tb_max=settings.traceback_max_lines,
        )
        result.findings.extend(found)
        if fs.dropped:  # the reader kept only the first and last hits of a signature that fired everywhere
            note = "; ".join(filter(None, [note, f"{fs.dropped} more matched lines not kept (bounded memory)"]))
        if note:
            result.notes[bf.path] = note
    return result


def _scan_files(
    jobs: list[tuple[Path, str]], settings: ScanSettings, max_line: int, total: int, progress: Progress | None
) -> dict[str, FileScan]:
    """Every file through the catalogue, largest first, on ``settings.workers`` threads (one per core).

    Threads, not processes: reading, sha256, hyperscan and numpy release the GIL, so threads use every
    core without forking, re-importing, recompiling the database or pickling results back; the Python
    work left per 1 MiB buffer is a few microseconds."""
    base = make_matcher(settings.matcher)  # compiles the database once, shared by every thread
    workers = min(settings.workers or os.cpu_count() or 1, len(jobs))
    scans: dict[str, FileScan] = {}
    done = 0

    def record(fs: FileScan) -> None:
        nonlocal done
        scans[fs.path] = fs
        done += fs.nbytes
        if progress:
            progress(done, total)

    if workers <= 1 or total < PARALLEL_MIN_BYTES:
        for phys, path in jobs:
            record(scan_file(base, phys, path, buffer_bytes=settings.buffer_bytes, max_line_bytes=max_line))
        return scans
    local = threading.local()

    def work(job: tuple[Path, str]) -> FileScan:
        matcher: Matcher | None = getattr(local, "matcher", None)
        if matcher is None:
            matcher = local.matcher = base.clone()
        return scan_file(matcher, job[0], job[1], buffer_bytes=settings.buffer_bytes, max_line_bytes=max_line)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="crashcart-scan") as pool:
        for fut in as_completed([pool.submit(work, job) for job in jobs]):
            record(fut.result())
    return scans


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
