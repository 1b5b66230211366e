"""Each rank's last line: where a rank stopped, and the last time it showed progress.

Input: the bundle, the scan's per-file tails and the attributed findings. Output: ``{rank: RankLast}``.
A rank whose last timestamped line is not in the scan's tail is read back from the file's end.
"""

from __future__ import annotations

from datetime import datetime

from crashcart.ingest.bundle import Bundle
from crashcart.models import Evidence, Finding, RankLast
from crashcart.scan.findings import clock_context
from crashcart.scan.run import ScanResult
from crashcart.text import prefix
from crashcart.text.clock import ClockContext, parse_time

EXTENDED_TAIL = 4000  # lines read back when a rank's last timestamped line is not in the scan's tail


def last_lines(
    bundle: Bundle,
    scanned: ScanResult,
    findings: list[Finding],
    file_ranks: dict[str, int] | None = None,
    local_ranks: dict[int, int] | None = None,
) -> dict[int, RankLast]:
    """Per rank: the last line with a clock it wrote (progress, not the clock-less teardown after it),
    as Evidence, and its time; a rank with no such line gets its last non-empty line and no time.
    ``file_ranks`` names the rank of files whose path gives only a local rank (torchrun log folders);
    ``local_ranks`` maps a ``[defaultN]:`` local rank to its global rank where the job's shape says so."""
    file_ranks = file_ranks or {}
    local_ranks = local_ranks or {}
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
        file_rank = bf.rank if bf.rank is not None else file_ranks.get(bf.path)
        found, fallback = _last_per_rank(tail, file_rank, ctx, local_ranks)
        want = ranks_in.get(bf.path, set()) | set(fallback)
        total = bundle.line_count(bf.path) or 0
        if want - set(found) and total > len(tail):  # some rank's last progress is further up: read back
            start = max(1, total - EXTENDED_TAIL + 1)
            more = list(enumerate(bundle.read_lines(bf.path, start, total), start=start))
            found, fallback = _last_per_rank(more, file_rank, ctx, local_ranks)
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
    lines: list[tuple[int, str]], file_rank: int | None, ctx: ClockContext, local_ranks: dict[int, int]
) -> tuple[dict[int, tuple[int, str, datetime]], dict[int, tuple[int, str]]]:
    """From the end: each rank's last timestamped line, and its last non-empty line."""
    found: dict[int, tuple[int, str, datetime]] = {}
    fallback: dict[int, tuple[int, str]] = {}
    for n, text in reversed(lines):
        if not text.strip():
            continue
        rank = None
        if prefix.may_name_rank(text) or "[default" in text:  # else view finds neither a rank nor a local rank
            pre = prefix.view(text)
            rank = pre.rank
            if rank is None and pre.local is not None:
                rank = local_ranks.get(pre.local)
        rank = file_rank if rank is None else rank
        if rank is None or rank in found:
            continue
        fallback.setdefault(rank, (n, text))
        parsed = parse_time(text, ctx)
        if parsed is not None and parsed.time is not None:
            found[rank] = (n, text, parsed.time)
    return found, fallback
