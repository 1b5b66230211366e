"""Turn matcher hits into Findings: fields, time, rank/node/GPU, and multi-line blocks (tracebacks).

Input: a ``FileScan`` of one file plus the bundle (to read lines back). Output: Findings whose
Evidence text is the canonical text of the cited lines. Pure apart from reading bundle lines.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel

from crashcart.catalogue import Catalogue, Signature
from crashcart.ingest.bundle import Bundle, canonical_line
from crashcart.models import BundleFile, Evidence, Finding
from crashcart.scan import followups
from crashcart.scan.reader import FileScan
from crashcart.scan.tracebacks import CARRIED_FIELD, _carried_lines, _traceback
from crashcart.text import clock, prefix
from crashcart.text.gpuid import canonical_pci

_SUMMARY_FIELD = re.compile(r"^\s*(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s*(?P<value>.*)$")
_RANK_LOCAL = re.compile(r"(?P<rank>-?\d+)\s*\(local_rank:\s*(?P<local_rank>\d+)\)")
_HOSTNAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_EXIT_PID = re.compile(r"(?P<exitcode>-?\d+)\s*(?:\(pid:\s*(?P<pid>\d+)\))?")


@dataclass
class IdSource:
    """Deterministic ids: F0001.. for findings, E00001.. for evidence."""

    findings: int = 0
    evidence: int = 0

    def finding(self) -> str:
        self.findings += 1
        return f"F{self.findings:04d}"

    def evidence_id(self) -> str:
        self.evidence += 1
        return f"E{self.evidence:05d}"


def clock_context(bundle: Bundle, bf: BundleFile) -> clock.ClockContext:
    """The clock facts of one file: the bundle's year and collection time, its node's boot time."""
    boot = None
    if bundle.manifest is not None:
        by_host, by_log = _boot_times(bundle.manifest)
        # the last node entry that names this host or this kernel log, as a walk over the nodes would find
        boot = max((by_host.get(bf.host or ""), by_log.get(bf.path)), key=lambda b: b[0] if b else -1)
        boot = boot[1] if boot else None
    reference = bundle.manifest.collected_at if bundle.manifest else None
    return clock.ClockContext(year=bundle.year, reference=reference, boot_time=boot)


_BOOTS: dict[int, tuple[object, tuple[dict[str, Any], dict[str, Any]]]] = {}


def _boot_times(manifest: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(host -> (position, boot time), kernel log -> (position, boot time)) of the manifest's nodes, built
    once per manifest: a bundle of 10,000 rank files on 1,250 nodes asks for every file."""
    got = _BOOTS.get(id(manifest))
    if got is not None and got[0] is manifest:
        return got[1]
    by_host: dict[str, Any] = {}
    by_log: dict[str, Any] = {}
    for i, node in enumerate(manifest.nodes):
        by_host[node.host] = (i, node.boot_time)
        if node.kernel_log is not None:
            by_log[node.kernel_log] = (i, node.boot_time)
    if len(_BOOTS) > 64:
        _BOOTS.clear()
    _BOOTS[id(manifest)] = (manifest, (by_host, by_log))
    return by_host, by_log


def build_findings(
    cat: Catalogue,
    bundle: Bundle,
    bf: BundleFile,
    fs: FileScan,
    ids: IdSource,
    *,
    cap: int,
    tb_max: int,
    context_cap: int = 0,
) -> tuple[list[Finding], str | None]:
    """Findings of one file, in line order, plus a note when some hits were not itemised."""
    ctx = clock_context(bundle, bf)
    per_line: dict[int, list[tuple[int, bytes | None]]] = defaultdict(list)
    for sig, line, raw in fs.hits:
        s = cat.signatures[sig]
        if (s.kinds or bf.kind == "config") and bf.kind not in s.kinds:
            continue  # a launch script (config) yields only the signatures that ask for config files
        per_line[line].append((sig, raw))
    chosen: list[tuple[int, int, bytes | None]] = []
    for line in sorted(per_line):
        cands = per_line[line]
        ctx_hits = [c for c in cands if cat.signatures[c[0]].role == "context"]
        fail = [c for c in cands if cat.signatures[c[0]].role != "context"]
        if fail:
            best = max(fail, key=lambda c: (cat.signatures[c[0]].priority, -c[0]))
            chosen.append((best[0], line, best[1]))
        chosen.extend((c[0], line, c[1]) for c in ctx_hits)
    context = {sig for sig, _, _ in chosen if cat.signatures[sig].role == "context"}
    chosen, dropped = _cap(chosen, cap, context, context_cap or CONTEXT_CAP)
    note = f"{dropped} repetitive matched lines not itemised" if dropped else None

    inherit = _Inheritor(bundle, bf.path, ctx)
    findings: list[Finding] = []
    consumed: set[int] = set()  # exception lines merged into a traceback finding
    by_line = {(line, sig): raw for sig, line, raw in chosen}
    carried = _carried_lines(cat, chosen)
    for sig, line, raw in chosen:
        if line in consumed and cat.signatures[sig].role != "context":
            continue
        text = canonical_line(raw, bundle.limits.max_line_bytes) if raw is not None else _read1(bundle, bf.path, line)
        if text is None:
            continue
        s = cat.signatures[sig]
        fields = cat.extract(sig, text)
        if fields is None:
            continue  # the fast matcher and the line regex disagree (e.g. a match across lines)
        evidence = [_evidence(bf.path, line, text)]
        if s.block == "traceback":
            tb = _traceback(cat, bundle, bf, line, tb_max, by_line, carried, ctx)
            if tb is None:
                continue
            evidence, s, fields, exc_line = tb
            consumed.add(exc_line)
            if CARRIED_FIELD in fields:
                sig = cat.index[s.id]  # summarised as the kill it carries, not as the wrapper's exception
        elif s.block == "torchrun_summary":
            fields = {**_torchrun_block(bundle, bf.path, line), **fields}
        findings.append(_make_finding(cat, s, sig, bf, text, fields, evidence, ctx, ids, inherit))

    def make(sig: int, text: str, ev: list[Evidence], fields: dict[str, str]) -> Finding:  # for followups
        return _make_finding(cat, cat.signatures[sig], sig, bf, text, fields, ev, ctx, ids, inherit)

    return followups.refine(cat, bundle, bf, findings, make, ids.evidence_id), note


class _Inheritor:
    """Time for a line without a clock: the latest time on the lines just before it (same rank).

    The lines before a finding are read backwards from the finding's own line (``Bundle.lines_before``:
    the scanner indexed its offset), and each line's rank and clock are parsed once per file, however many
    findings look back over it: a finding costs its ``LOOKBACK`` lines at most, amortised O(1) when findings
    crowd together, never a re-read from the last buffer boundary."""

    LOOKBACK = 40

    def __init__(self, bundle: Bundle, path: str, ctx: clock.ClockContext) -> None:
        self._bundle, self._path, self._ctx = bundle, path, ctx
        self._cache: dict[tuple[int, int | None], datetime | None] = {}
        self._lines: dict[int, tuple[int | None, datetime | None]] = {}  # line -> (rank, time), parsed once

    def __call__(self, line: int, rank: int | None) -> datetime | None:
        key = (line, rank)
        if key not in self._cache:
            self._cache[key] = self._find(line, rank)
        return self._cache[key]

    def _find(self, line: int, rank: int | None) -> datetime | None:
        start = max(1, line - self.LOOKBACK)
        known, max_bytes = self._lines, self._bundle.limits.max_line_bytes
        raw: list[bytes] | None = None
        for at in range(line - 1, start - 1, -1):
            got = known.get(at)
            if got is None:
                if raw is None:
                    raw = self._bundle.raw_lines_before(self._path, line, line - start)
                    if raw is None or len(raw) != line - start:  # a giant line, or no offset to read back from
                        return self._scan(self._bundle.read_lines(self._path, start, line - 1), rank)
                got = known[at] = self._parse(canonical_line(raw[at - start], max_bytes))
            if got[0] == rank and got[1] is not None:
                return got[1]
        return None

    def _parse(self, text: str) -> tuple[int | None, datetime | None]:
        """(rank, time) of a line; a line without a time gives none to any rank, so its rank is not looked for
        (``view`` cost more than ``parse_time`` on the clock-less lines a watchdog's look-back crosses)."""
        parsed = clock.parse_time(text, self._ctx)
        if parsed is None or parsed.time is None:
            return None, None
        return prefix.view(text).rank, parsed.time

    def _scan(self, texts: list[str], rank: int | None) -> datetime | None:
        for text in reversed(texts):
            got = self._parse(text)
            if got[0] == rank and got[1] is not None:
                return got[1]
        return None


CONTEXT_CAP = 64  # fact lines (versions, init, progress) itemised per signature and file


def _cap(
    chosen: list[tuple[int, int, bytes | None]], cap: int, context: set[int] | None = None, context_cap: int = 0
) -> tuple[list[tuple[int, int, bytes | None]], int]:
    """Keep the first and last half of the hits of a signature that fires more often than its limit."""
    counts: dict[int, int] = defaultdict(int)
    for sig, _, _ in chosen:
        counts[sig] += 1
    limit = {s: ((context_cap or CONTEXT_CAP) if context and s in context else cap) for s in counts}
    over = {s for s, n in counts.items() if n > limit[s]}
    if not over:
        return chosen, 0
    seen: dict[int, int] = defaultdict(int)
    kept: list[tuple[int, int, bytes | None]] = []
    dropped = 0
    for item in chosen:
        sig = item[0]
        seen[sig] += 1
        half = limit[sig] // 2
        if sig in over and half < seen[sig] <= counts[sig] - half:
            dropped += 1
            continue
        kept.append(item)
    return kept, dropped


def _read1(bundle: Bundle, path: str, line: int) -> str | None:
    got = bundle.read_lines(path, line)
    return got[0] if got else None


def _make_finding(
    cat: Catalogue,
    s: Signature,
    sig: int,
    bf: BundleFile,
    text: str,
    fields: dict[str, str],
    evidence: list[Evidence],
    ctx: clock.ClockContext,
    ids: IdSource,
    inherit: Callable[[int, int | None], datetime | None] | None = None,
) -> Finding:
    class_id, role, severity = s.class_id, s.role, s.severity
    if class_id in {"xid", "sxid"}:
        code = fields.get("xid" if class_id == "xid" else "sxid", "")
        info = cat.xid_info(int(code)) if code.isdigit() and class_id == "xid" else None
        if class_id == "sxid":
            info = cat.sxids.get(int(code)) if code.isdigit() else None
            class_id = info.class_id if info else "nvswitch_fabric_manager_error"
        if info is not None:
            class_id, role, severity = info.class_id, info.role, info.severity
            fields = {**fields, "mnemonic": info.mnemonic}
    pre = prefix.view(text)
    parsed = clock.parse_time(text, ctx)
    when = parsed.time if parsed else None
    if when is None and s.role != "context" and inherit is not None:
        when = inherit(evidence[0].line, pre.rank)
        ran = fields.get("ran_ms", "")
        if when is not None and ran.isdigit():
            # a watchdog line without a clock: the rank's last line was written when the collective
            # began, and the watchdog fired ran_ms later
            when += timedelta(milliseconds=int(ran))
            fields = {**fields, "_time": "estimated: the previous line's time plus ran_ms"}
        elif when is not None:
            fields = {**fields, "_time": "inherited from an earlier line"}
    rank = _int(fields.get("rank"))
    subject = _int(fields.get("ranks", "").strip())  # a report about one other rank ("ranks [7] are lagging")
    if subject is not None:
        rank = subject
        fields = {**fields, "_reported_by": str(pre.rank if pre.rank is not None else bf.rank)}
    if rank is None:
        rank = pre.rank if pre.rank is not None else bf.rank
    node = None if bf.kind == "kernel_log" and bf.host else fields.get("host") or fields.get("node") or pre.host
    if subject is not None:
        node = None  # the subject rank's node comes from the topology, not from the reporter's line
    if node is not None and not _HOSTNAME.fullmatch(node):
        node = None  # e.g. a Lustre server NID "10.20.33.61@o2ib2" is not one of the job's nodes
    if node is None and bf.host:
        fields = {**fields, "_file_host": bf.host}
    gpu = None
    for key in ("pci", "gpu_pci", "busid"):
        if fields.get(key):
            gpu = canonical_pci(fields[key])
            if gpu:
                break
    numbered = [_numbered(ev, ids) for ev in evidence]
    if parsed is not None:
        fields = {**fields, "_clock": parsed.kind}
    values = {  # the strings many findings repeat are interned (their fields are: ``Catalogue.extract``)
        "id": ids.finding(),
        "class_id": class_id,
        "signature": s.id,
        "role": role,
        "severity": severity,
        "summary": sys.intern(cat.summarize(sig, fields)),
        "time": when,
        "rank": rank,
        "node": sys.intern(node) if node is not None else None,
        "gpu": sys.intern(gpu) if gpu is not None else None,
        "fields": dict(fields),
        "evidence": numbered,
        "source": "rule",
    }
    return _trusted(Finding, _FINDING_GIVEN, values)


_Model = TypeVar("_Model", bound=BaseModel)


def _trusted(cls: type[_Model], given: set[str], values: dict[str, Any]) -> _Model:
    """A ``cls`` holding ``values`` (every field, in declaration order) made without validating them: the scanner's
    findings are made from values already valid (roles and severities from the validated catalogue, ints, str,
    datetimes), and validation was a third of making one (~5 us of a finding and its evidence). ``given``: the names
    a validated instance made with the same keywords says it was given (one set shared, as ``models._Shared``
    shares it). The same instance as ``cls(**given values)`` (``tests/test_shortcuts_pass9.py``)."""
    made = cls.__new__(cls)
    object.__setattr__(made, "__dict__", values)
    object.__setattr__(made, "__pydantic_fields_set__", given)
    object.__setattr__(made, "__pydantic_extra__", None)
    object.__setattr__(made, "__pydantic_private__", None)
    return made


def _evidence(path: str, line: int, text: str) -> Evidence:
    """``Evidence(id="", file=path, line=line, text=text)``, made as ``_trusted`` makes it."""
    if line < 1:
        raise ValueError(f"line {line} of {path}: lines are numbered from 1")
    values = {"id": "", "file": path, "line": int(line), "end_line": None, "text": text, "locator": None}
    return _trusted(Evidence, _EVIDENCE_GIVEN, values)


_EVIDENCE_GIVEN = Evidence(id="", file="-", line=1, text="").__pydantic_fields_set__
_FINDING_GIVEN = Finding(
    id="",
    class_id="",
    signature="",
    role="context",
    severity="info",
    summary="",
    time=None,
    rank=None,
    node=None,
    gpu=None,
    fields={},
    source="rule",
    evidence=[Evidence(id="", file="-", line=1, text="")],
).__pydantic_fields_set__


def _numbered(ev: Evidence, ids: IdSource) -> Evidence:
    """``ev`` with the next evidence id: a fresh one (no id yet, made for this finding and held by nothing else) is
    given it in place, as ``numbering.renumbered`` does; one that has an id is copied."""
    if ev.id:
        return ev.model_copy(update={"id": ids.evidence_id()})
    ev.__dict__["id"] = ids.evidence_id()
    return ev


def _int(value: str | None) -> int | None:
    if not value:  # None or "": most findings name no rank in their fields (an exception each cost more)
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _torchrun_block(bundle: Bundle, path: str, line: int) -> dict[str, str]:
    """Fields of a torchelastic failure summary block starting at ``line``."""
    out: dict[str, str] = {}
    for text in bundle.read_lines(path, line + 1, line + 14):
        m = _SUMMARY_FIELD.match(prefix.view(text).rest)
        if not m:
            continue
        key, value = m.group("key"), m.group("value").strip()
        if key == "rank" and (rl := _RANK_LOCAL.match(value)):
            out.setdefault("rank", rl.group("rank"))
            out.setdefault("local_rank", rl.group("local_rank"))
        elif key == "exitcode" and (ep := _EXIT_PID.match(value)):
            out.setdefault("exitcode", ep.group("exitcode"))
            if ep.group("pid"):
                out.setdefault("pid", ep.group("pid"))
        elif key == "host":
            out.setdefault("host", value)
        elif key == "time":
            out.setdefault("failure_time", value)
    return out


def first_time(findings: list[Finding]) -> datetime | None:
    times = [f.time for f in findings if f.time is not None]
    return min(times) if times else None
