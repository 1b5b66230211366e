"""Scan stage (the offline swarm): every log file through the signature catalogue, in parallel.

Input: an opened ``Bundle``. Output: ``ScanResult`` (findings with Evidence, per-file line counts,
hashes and tails, telemetry series). Files are spread across worker processes, largest first; each
worker compiles the catalogue once and streams its files in newline-aligned buffers.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from crashcart import telemetry
from crashcart.bundle import SCANNED_KINDS, Bundle, LineIndex, canonical_line
from crashcart.models import Finding, SkippedFile
from crashcart.scan.catalogue import load_catalogue
from crashcart.scan.findings import IdSource, build_findings
from crashcart.scan.matcher import Matcher, make_matcher
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


_WORKER_MATCHER: Matcher | None = None


def _init_worker(kind: str) -> None:
    global _WORKER_MATCHER
    _WORKER_MATCHER = make_matcher(kind)  # type: ignore[arg-type]


def _work(job: tuple[str, str, int, int]) -> FileScan:
    physical, path, buffer_bytes, max_line = job
    assert _WORKER_MATCHER is not None
    return scan_file(_WORKER_MATCHER, Path(physical), path, buffer_bytes=buffer_bytes, max_line_bytes=max_line)


def scan(bundle: Bundle, settings: ScanSettings, progress: Progress | None = None) -> ScanResult:
    """Scan every log file of ``bundle``; unreadable files become failures, not exceptions."""
    cat = load_catalogue()
    targets = [f for f in bundle.files if f.kind in SCANNED_KINDS or f.kind == "telemetry"]
    jobs: list[tuple[str, str, int, int]] = []
    for f in sorted(targets, key=lambda f: (-f.size, f.path)):
        phys = bundle.physical(f.path)
        if phys is not None:
            jobs.append((str(phys), f.path, settings.buffer_bytes, bundle.limits.max_line_bytes))
    total = sum(f.size for f in targets)
    workers = settings.workers or os.cpu_count() or 1
    scans: dict[str, FileScan] = {}
    done = 0
    matcher_name: str
    if workers > 1 and total >= PARALLEL_MIN_BYTES and len(jobs) > 1:
        matcher_name = make_matcher(settings.matcher).name
        ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(settings.matcher,)
        ) as pool:
            for fs in pool.map(_work, jobs, chunksize=1):
                scans[fs.path] = fs
                done += fs.nbytes
                if progress:
                    progress(done, total)
    else:
        matcher = make_matcher(settings.matcher)
        matcher_name = matcher.name
        for where, path, buf, max_line in jobs:
            fs = scan_file(matcher, Path(where), path, buffer_bytes=buf, max_line_bytes=max_line)
            scans[path] = fs
            done += fs.nbytes
            if progress:
                progress(done, total)

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
        if note:
            result.notes[bf.path] = note
    return result


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
