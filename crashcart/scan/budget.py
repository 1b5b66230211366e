"""Scan stage: how many hit lines of a signature a file's scan holds and its findings itemise.

A bundle of up to ``FINDINGS_BUDGET`` files itemises each file at the full caps; beyond, a file's share shrinks so
that the total stays that of ``FINDINGS_BUDGET`` files (``itemised_per_file``), and the reader holds per signature
no more than that (``hit_limits``; ``trim`` for a scan read while fewer files were offered).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence

from crashcart.catalogue import load_catalogue
from crashcart.scan.findings import CONTEXT_CAP
from crashcart.scan.reader import FileScan

FINDINGS_BUDGET = 128  # files itemised at the full caps; beyond, a file's share of the budget shrinks


def itemised_per_file(files: int, cap: int) -> tuple[int, int]:
    """How many lines of one signature ``build_findings`` itemises per file (failure, context): ``cap`` and
    ``CONTEXT_CAP`` for a bundle of up to ``FINDINGS_BUDGET`` files; for more, the same total shared out
    (never fewer than the first and the last), so 10,000 rank files cost less than 80 times what 128 do.
    Never more for more files: a scan trimmed for fewer files holds all that more files itemise (``trim``).
    """
    if files <= FINDINGS_BUDGET:
        return cap, CONTEXT_CAP
    share = FINDINGS_BUDGET / files
    return max(2, int(cap * share) // 2 * 2), max(2, int(CONTEXT_CAP * share) // 2 * 2)


def trim(fs: FileScan, keep: Sequence[int]) -> None:
    """Keep of ``fs.hits`` only the first and the last ``keep[sig]`` of each signature (``FileScan.dropped``
    counts the rest) and the offsets of the lines kept: what ``build_findings`` itemises in a bundle of more
    than ``FINDINGS_BUDGET`` files, held instead of the reader's ``hit_limits`` for every file until the bundle
    is classified."""
    counts = Counter(sig for sig, _, _ in fs.hits)
    if all(n <= 2 * keep[sig] for sig, n in counts.items()):
        return
    seen: Counter[int] = Counter()
    kept: list[tuple[int, int, bytes | None]] = []
    for hit in fs.hits:
        seen[hit[0]] += 1
        k, n = keep[hit[0]], seen[hit[0]]
        if n <= k or n > counts[hit[0]] - k:
            kept.append(hit)
    fs.dropped += len(fs.hits) - len(kept)
    lines = {line for _, line, _ in kept}
    fs.hits, fs.offsets = kept, {n: off for n, off in fs.offsets.items() if n in lines}


@functools.cache
def hit_limits(cap: int, context_cap: int = CONTEXT_CAP) -> tuple[int, ...]:
    """Hit lines the reader keeps at each end of a file, per signature: exactly what ``build_findings``
    itemises (the first and last half of ``cap`` per signature and file, of ``context_cap`` for a fact
    line: versions, init, progress printed every step), so the reader holds nothing it would drop."""
    return tuple((context_cap if s.role == "context" else cap) // 2 for s in load_catalogue().signatures)
