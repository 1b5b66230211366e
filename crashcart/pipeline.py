"""The pipeline: bundle -> scan -> topology -> group -> reduce -> verify -> report -> store.

Input: a bundle path and Settings. Output: ``Outcome`` holding the ``diagnosis.json`` document and
what produced it. Each stage is one call; stages never call each other. Errors passing through a
stage get ``.stage`` attached. Blocking work runs in threads so the bot's event loop stays free.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from crashcart.errors import CrashCartError
from crashcart.group import group_findings
from crashcart.ingest.bundle import SCANNED_KINDS, Bundle
from crashcart.locate.topology import attribute, infer_topology
from crashcart.models import Citation, DiagnosisDocument, Evidence, Finding, Group, Topology
from crashcart.reduce.causal import RankLast
from crashcart.reduce.offline import reduce_offline
from crashcart.report.document import RunFacts, build_document
from crashcart.runbook import workflow as runbooks
from crashcart.scan.findings import clock_context
from crashcart.scan.run import Progress, ScanResult, open_scanning, scan
from crashcart.scan.telemetry import GpuSeries
from crashcart.settings import Settings
from crashcart.store import Store
from crashcart.text import prefix
from crashcart.text.clock import ClockContext, parse_time
from crashcart.verify import Verified, verify

if TYPE_CHECKING:
    from crashcart.llm.engine import LlmEngine

StageHook = Callable[[str], None]


@dataclass
class Outcome:
    document: DiagnosisDocument
    verified: Verified
    findings: list[Finding]
    groups: list[Group]
    topology: Topology
    citations: list[Citation]
    stage_seconds: dict[str, float]
    series: list[GpuSeries]  # telemetry, for the timeline picture


@contextmanager
def _stage(name: str, timings: dict[str, float], hook: StageHook | None) -> Iterator[None]:
    if hook:
        hook(name)
    start = time.perf_counter()
    try:
        yield
    except CrashCartError as exc:
        exc.stage = exc.stage or name
        raise
    finally:
        timings[name] = round(time.perf_counter() - start, 4)


async def diagnose(
    source: Path,
    settings: Settings,
    *,
    job_id: str | None = None,
    store: Store | None = None,
    progress: Progress | None = None,
    on_stage: StageHook | None = None,
) -> Outcome:
    """Diagnose one bundle with ``settings.engine``; store the run when ``store`` is given."""
    t: dict[str, float] = {}
    start = time.perf_counter()
    with _stage("ingest", t, on_stage):
        bundle, pool = await asyncio.to_thread(
            open_scanning, source, settings.work_dir, settings.bundle_limits, settings.scan
        )
    llm = _open_llm(settings, store)
    try:
        with _stage("scan", t, on_stage):
            scanned = await asyncio.to_thread(scan, bundle, settings.scan, progress, pool)
        with _stage("topology", t, on_stage):
            topo, findings, last = locate(bundle, scanned)
        if llm is not None:
            with _stage("swarm", t, on_stage):
                findings = [*findings, *await llm.scan(bundle, findings, last, topo)]
        with _stage("group", t, on_stage):
            groups = group_findings(findings)
        with _stage("reduce", t, on_stage):
            if llm is None:
                diagnosis = reduce_offline(groups, findings, topo, last)
            else:
                diagnosis = await llm.reduce(groups, findings, topo, last)
                diagnosis = diagnosis.model_copy(
                    update={"reasoning": [*llm.notes, *diagnosis.reasoning], "partial": llm.partial}
                )
        with _stage("verify", t, on_stage):
            registry = evidence_registry(findings, last)
            verified = await asyncio.to_thread(verify, diagnosis, registry, bundle)
        with _stage("report", t, on_stage):
            sha = await asyncio.to_thread(fingerprint, bundle, scanned)
            facts = RunFacts(
                incident_id=f"cc-{sha[:12]}",
                job_id=job_id or (bundle.manifest.job_id if bundle.manifest else None),
                engine=settings.engine,
                sha256=sha,
                files=len(bundle.files),
                bytes=sum(f.size for f in bundle.files),
                lines=scanned.lines,
                findings=len(findings),
                groups=len(groups),
                seconds=time.perf_counter() - start,
                skipped=[*bundle.skipped, *scanned.failures],
                unaligned=unaligned_clocks(bundle, findings),
                matcher=scanned.matcher,
                scheduler=bundle.manifest.scheduler if bundle.manifest else None,
                llm=llm.stats() if llm is not None else None,
            )
            document = build_document(verified, topo, facts)
        citations = list(verified.citations.values())
        if store is not None:
            with _stage("store", t, on_stage):
                incident_id = await asyncio.to_thread(
                    store.save,
                    document,
                    source=str(source),
                    files=bundle.files,
                    findings=findings,
                    groups=groups,
                    citations=citations,
                )
                await asyncio.to_thread(runbooks.propose, store, incident_id, document.runbook)
                if llm is not None:
                    calls = [asdict(c) for c in llm.client.ledger.calls]
                    await asyncio.to_thread(store.record_calls, incident_id, calls)
    finally:
        bundle.close()
        if llm is not None:
            await llm.close()
    return Outcome(document, verified, findings, groups, topo, citations, t, scanned.series)


def _open_llm(settings: Settings, store: Store | None) -> LlmEngine | None:
    """The LLM engine when chosen; imported only then, so the offline path never loads a model client."""
    if settings.engine != "llm":
        return None
    from crashcart.llm.engine import LlmEngine

    return LlmEngine.open(settings.llm, cache=store)


def locate(bundle: Bundle, scanned: ScanResult) -> tuple[Topology, list[Finding], dict[int, RankLast]]:
    """Topology from the logs, findings attributed to rank/node/GPU, and each rank's last line."""
    topo = infer_topology(bundle.files, scanned.findings, bundle.manifest)
    findings = attribute(scanned.findings, topo)
    return topo, findings, last_lines(bundle, scanned, findings)


EXTENDED_TAIL = 4000  # lines read back when a rank's last timestamped line is not in the scan's tail


def last_lines(bundle: Bundle, scanned: ScanResult, findings: list[Finding]) -> dict[int, RankLast]:
    """Per rank: the last line with a clock it wrote (progress, not the clock-less teardown after it),
    as Evidence, and its time; a rank with no such line gets its last non-empty line and no time."""
    ranks_in: dict[str, set[int]] = {}
    for f in findings:
        if f.rank is not None:
            ranks_in.setdefault(f.evidence[0].file, set()).add(f.rank)
    out: dict[int, RankLast] = {}
    ids = iter(range(1, 10**9))
    for bf in bundle.files:
        if bf.kind not in {"rank_log", "combined_log", "log"}:
            continue
        ctx = clock_context(bundle, bf)
        tail = scanned.tails.get(bf.path, [])
        found, fallback = _last_per_rank(tail, bf.rank, ctx)
        want = ranks_in.get(bf.path, set()) | set(fallback)
        total = bundle.line_count(bf.path) or 0
        if want - set(found) and total > len(tail):  # some rank's last progress is further up: read back
            start = max(1, total - EXTENDED_TAIL + 1)
            more = list(enumerate(bundle.read_lines(bf.path, start, total), start=start))
            found, fallback = _last_per_rank(more, bf.rank, ctx)
        for rank in set(found) | set(fallback):
            if rank in out and out[rank].time is not None:
                continue
            n, text, when = found[rank] if rank in found else (*fallback[rank], None)
            ev = Evidence(id=f"L{next(ids):05d}", file=bf.path, line=n, text=text)
            out[rank] = RankLast(evidence=ev, time=when)
    for f in findings:  # progress lines only: teardown after a hang does not make a rank alive
        if f.rank is None or f.time is None or f.role != "context" or "_time" in f.fields:
            continue
        rl = out.setdefault(f.rank, RankLast(evidence=None, time=None))
        if rl.time is None or f.time > rl.time:
            rl.time = f.time
    return out


def _last_per_rank(
    lines: list[tuple[int, str]], file_rank: int | None, ctx: ClockContext
) -> tuple[dict[int, tuple[int, str, datetime]], dict[int, tuple[int, str]]]:
    """From the end: each rank's last timestamped line, and its last non-empty line."""
    found: dict[int, tuple[int, str, datetime]] = {}
    fallback: dict[int, tuple[int, str]] = {}
    for n, text in reversed(lines):
        if not text.strip():
            continue
        rank = prefix.view(text).rank
        rank = file_rank if rank is None else rank
        if rank is None or rank in found:
            continue
        fallback.setdefault(rank, (n, text))
        parsed = parse_time(text, ctx)
        if parsed is not None and parsed.time is not None:
            found[rank] = (n, text, parsed.time)
    return found, fallback


def evidence_registry(findings: list[Finding], last: dict[int, RankLast]) -> dict[str, Evidence]:
    reg = {ev.id: ev for f in findings for ev in f.evidence}
    reg.update({rl.evidence.id: rl.evidence for rl in last.values() if rl.evidence is not None})
    return reg


def fingerprint(bundle: Bundle, scanned: ScanResult) -> str:
    """sha256 over (path, content sha256) of every analysed file, so the archive format does not matter."""
    h = hashlib.sha256()
    for bf in sorted(bundle.files, key=lambda f: f.path):
        fs = scanned.scans.get(bf.path)
        digest = fs.sha256 if fs is not None and fs.sha256 else _sha_file(bundle.physical(bf.path))
        h.update(f"{bf.path}\0{digest}\n".encode())
    return h.hexdigest()


def _sha_file(path: Path | None) -> str:
    if path is None:
        return ""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1024 * 1024):
            h.update(block)
    return h.hexdigest()


def unaligned_clocks(bundle: Bundle, findings: list[Finding]) -> list[str]:
    """Files with findings whose clock cannot be put on the common one (their order is kept instead)."""
    with_findings = {f.evidence[0].file for f in findings if f.role in {"root_candidate", "confirmation"}}
    boots = {n.host for n in bundle.manifest.nodes if n.boot_time} if bundle.manifest else set()
    out = []
    for bf in bundle.files:
        if bf.kind not in SCANNED_KINDS or bf.path not in with_findings:
            continue
        if bf.clock == "none":
            out.append(f"{bf.path} (no timestamps)")
        elif bf.clock == "boot_relative" and bf.host not in boots:
            out.append(f"{bf.path} (seconds since boot, boot time unknown)")
        elif bf.clock == "no_year" and bundle.year is None:
            out.append(f"{bf.path} (no year)")
    return out
