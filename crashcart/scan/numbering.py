"""Scan stage: a file's findings built as soon as its scan is in, whatever order the scans complete in, and
numbered as if every file had been built in path order (``renumbered``), so the ids never depend on the order.

Input: one file's ``FileScan`` and the bundle. Output: ``Built`` (its findings numbered from ``F0001``/``E00001``
of their own, its note). Pure apart from reading bundle lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from crashcart.catalogue import load_catalogue
from crashcart.ingest.bundle import Bundle, LineIndex
from crashcart.models import BundleFile, Finding
from crashcart.scan.findings import IdSource, build_findings
from crashcart.scan.reader import FileScan
from crashcart.settings import ScanSettings


@dataclass
class Built:
    """One scanned file's findings, numbered by an ``IdSource`` of their own until they join the bundle's."""

    bf: BundleFile
    fs: FileScan
    findings: list[Finding]
    ids: IdSource | None  # their own numbering, or None: numbered by the bundle's ``IdSource`` already
    note: str | None


def build(
    bundle: Bundle,
    bf: BundleFile,
    fs: FileScan,
    settings: ScanSettings,
    caps: tuple[int, int],
    ids: IdSource | None = None,
) -> Built:
    """A scanned file's findings (none for a failure or telemetry: the join does those), with ids of their own, or
    from ``ids`` (the bundle's, when every file before this one in path order has joined: nothing to renumber)."""
    numbering = IdSource() if ids is None else ids
    own = numbering if ids is None else None
    if fs.error:
        return Built(bf, fs, [], own, None)
    bundle.set_index(bf.path, LineIndex(checkpoints=fs.checkpoints, lines=fs.lines, known=fs.offsets))
    if bf.kind == "telemetry":
        return Built(bf, fs, [], own, None)
    found, note = build_findings(
        load_catalogue(),
        bundle,
        bf,
        fs,
        numbering,
        cap=caps[0],
        context_cap=caps[1],
        tb_max=settings.traceback_max_lines,
    )
    if fs.dropped or fs.uncounted:  # the reader kept only the first and last hits of a frequent signature
        more = f"{'at least ' if fs.uncounted else ''}{fs.dropped} more matched lines not kept (bounded memory)"
        note = "; ".join(filter(None, [note, more]))
    fs.hits, fs.offsets, fs.checkpoints = [], {}, []  # findings now (the index holds the checkpoints)
    return Built(bf, fs, found, own, note)


def renumbered(findings: list[Finding], f_base: int, e_base: int) -> list[Finding]:
    """``findings`` numbered by an ``IdSource`` that had given ``f_base`` and ``e_base`` ids before (``IdSource``'s
    formats: ``F0001``, ``E00001``); an evidence without an id keeps none.

    In place: the findings of a ``Built`` are held by nothing else until they join the bundle's, so their ids are
    rewritten rather than copied (alone 0.73 s for the 28k findings of 1,000 rank files; in a whole diagnose the
    difference is within noise, bench/README eighth pass). Frozen models refuse ``setattr``, not their
    ``__dict__``; nothing has hashed them yet. An evidence two findings share is renumbered once, as the copies
    each got the same new id."""
    if not f_base and not e_base:
        return findings
    done: set[int] = set()
    for f in findings:
        if id(f) in done:
            continue
        done.add(id(f))
        for e in f.evidence:
            if e.id and id(e) not in done:
                done.add(id(e))
                e.__dict__["id"] = f"E{e_base + int(e.id[1:]):05d}"
        f.__dict__["id"] = f"F{f_base + int(f.id[1:]):04d}"
    return findings
