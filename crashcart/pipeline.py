"""The pipeline, as sequencing only.

Stages: ingest -> scan -> locate -> findings -> group -> reduce -> verify -> report -> store.

Input: a bundle path and Settings. Output: ``Outcome`` holding the ``diagnosis.json`` document and what
produced it. Each stage is one call into its package; stages never call each other. The engine (offline
or LLM, ``crashcart.engine``) adds findings and decides the diagnosis given the offline answer. Errors
passing through a stage get ``.stage`` attached, and each stage's wall time is recorded. Blocking work
runs in threads so the bot's event loop stays free.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from crashcart.engine import Engine, open_engine
from crashcart.errors import CrashCartError
from crashcart.group import group_findings
from crashcart.ingest import fingerprint, open_bundle, unaligned_clocks
from crashcart.locate import locate
from crashcart.models import Citation, DiagnosisDocument, Finding, Group, Topology
from crashcart.reduce import reduce_offline
from crashcart.report import RunFacts, build_document
from crashcart.runbook import propose_runbook
from crashcart.scan import GpuSeries, Progress, open_scanning, scan
from crashcart.scan.cluster import Cluster, changed_files, open_cluster
from crashcart.settings import Settings
from crashcart.store import Store
from crashcart.verify import Verified, cited_files, evidence_registry, single_node, verify

StageHook = Callable[[str], None]


@dataclass(repr=False)  # asyncio.run formats the finished task, result included (Python 3.11's signal
class Outcome:  # handler restore, via Enum's error message): a generated repr of every finding took seconds
    document: DiagnosisDocument
    verified: Verified
    findings: list[Finding]
    groups: list[Group]
    topology: Topology
    citations: list[Citation]
    stage_seconds: dict[str, float]
    series: list[GpuSeries]  # telemetry, for the timeline picture

    def __repr__(self) -> str:
        return f"Outcome({self.document.incident_id}, {len(self.findings)} findings)"


@contextmanager
def _frozen() -> Iterator[None]:
    """The objects the scan left (findings, scans, the catalogue) out of the cyclic collector's reach until the
    report is built: the stages after the scan copy findings but make few cycles, yet each full collection
    traversed every finding (at 10,000 rank files two in topology, 2.4 s). Unfrozen however the stages end,
    so a long-running caller (the bot) collects them as usual afterwards."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


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
    engine: Engine | None = None,
    cluster: Cluster | None = None,
) -> Outcome:
    """Diagnose one bundle with ``engine`` (default: the one ``settings.engine`` names); store the run when
    ``store`` is given. A directory bundle is scanned on ``cluster`` (default: the Ray that
    ``settings.ray_address`` names, if any). The pipeline closes the engine and the cluster."""
    t: dict[str, float] = {}
    start = time.perf_counter()
    engine = engine or open_engine(settings, cache=store)
    try:
        with _stage("ingest", t, on_stage):
            directory = await asyncio.to_thread(source.is_dir)
            if (cluster or settings.ray_address) and directory:  # a directory fans out on Ray; an archive opens here
                cluster = cluster or open_cluster(str(settings.ray_address))  # here: Ray's init wants the main thread
                bundle = await asyncio.to_thread(open_bundle, source, settings.work_dir, settings.bundle_limits)
                pool = None
            else:
                cluster = None
                bundle, pool = await asyncio.to_thread(
                    open_scanning, source, settings.work_dir, settings.bundle_limits, settings.scan
                )
        try:
            with _stage("scan", t, on_stage):
                files = cluster.files_scanner(source, settings.scan, bundle.limits.max_line_bytes) if cluster else None
                scanned = await asyncio.to_thread(scan, bundle, settings.scan, progress, pool, files)
            with _frozen():  # gc: see ``_frozen``
                with _stage("topology", t, on_stage):
                    topo, rules, last = locate(bundle, scanned)
                with _stage("findings", t, on_stage):
                    findings = [*rules, *await engine.find(bundle, rules, last, topo)]
                with _stage("group", t, on_stage):
                    rule_groups = group_findings(rules)
                    groups = rule_groups if len(findings) == len(rules) else group_findings(findings)
                with _stage("reduce", t, on_stage):
                    offline = reduce_offline(rule_groups, rules, topo, last)
                    diagnosis = await engine.reduce(groups, findings, topo, last, offline)
                with _stage("verify", t, on_stage):
                    registry = evidence_registry(findings, last)
                    changed = None
                    if cluster:  # the scan read the files elsewhere: are they still the bytes it hashed?
                        cited = cited_files(diagnosis, registry)
                        changed = await asyncio.to_thread(changed_files, cited, scanned.scans, bundle.physical)
                    one_node = single_node(topo)  # a local rank in an argv is the rank
                    verified = await asyncio.to_thread(verify, diagnosis, registry, bundle, changed, one_node=one_node)
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
                        llm=engine.stats(),
                    )
                    document = build_document(verified, topo, facts, findings, last)
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
                    await asyncio.to_thread(propose_runbook, store, incident_id, document.runbook)
                    await asyncio.to_thread(store.record_calls, incident_id, engine.calls())
        finally:
            bundle.close()
    finally:
        if cluster:
            cluster.close()
        await engine.close()
    return Outcome(document, verified, findings, groups, topo, citations, t, scanned.series)
