"""Ranks that ran different collectives (TAXONOMY class 4), from what the failing ranks print: the input size
of the timed-out work (ProcessGroupNCCL), the collective fingerprints of ``TORCH_DISTRIBUTED_DEBUG=DETAIL``
(ProcessGroupWrapper), and the call sites in the tracebacks of timeouts raised as Python exceptions (gloo).
Each function answers rank -> why it is odd, or nothing when no clear majority says which side is odd. Pure.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from crashcart.models import Finding


def odd_sizes(wd: list[Finding]) -> dict[int, str]:
    """Ranks whose timed-out collective has another size than most ranks' same one: ProcessGroupNCCL's
    ``WorkNCCL(SeqNum=s, OpType=op, NumelIn=n, ...)`` names the collective and its input size, so one SeqNum
    with two NumelIn values is ranks running different collectives (TAXONOMY class 4: a shape mismatch)."""
    sizes: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
    for f in wd:
        seq, op, numel = f.fields.get("seq"), f.fields.get("op"), f.fields.get("numel_in")
        if f.rank is not None and seq and op and numel:
            sizes[seq, op].setdefault(f.rank, numel)
    out: dict[int, str] = {}
    for (seq, op), by_rank in sizes.items():
        usual, n = Counter(by_rank.values()).most_common(1)[0]
        if len(set(by_rank.values())) > 1 and n > len(by_rank) / 2:  # a clear majority says what the size is
            out.update(
                {
                    r: f"ran {op} #{seq} with {v} elements where the others had {usual}"
                    for r, v in by_rank.items()
                    if v != usual
                }
            )
    return out


_RUNNING = re.compile(r"Rank (\d+) is running collective: (?=CollectiveFingerPrint\()")
_FP_PART = re.compile(r"OpType=(\w+)|TensorShape=(\[[^\]]*\])")


def _fingerprints(text: str) -> list[tuple[int, str]]:
    """The (rank, fingerprint) pairs of a ProcessGroupWrapper mismatch message (c10d ProcessGroupWrapper.cpp,
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL``): "Rank <own> is running collective: CollectiveFingerPrint(...), but Rank
    <other> is running collective: CollectiveFingerPrint(...)." Each fingerprint is read to its balanced closing
    parenthesis (older releases nest ``TensorOptions(...)`` in it)."""
    out: list[tuple[int, str]] = []
    for m in _RUNNING.finditer(text):
        depth, i = 0, m.end()
        for j in range(m.end(), len(text)):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0 and text[j] == ")":
                i = j + 1
                break
        if i > m.end():
            out.append((int(m.group(1)), text[m.end() : i]))
    return out


def _describe(fp: str) -> str:
    parts = {k: v for m in _FP_PART.finditer(fp) for k, v in zip(("op", "shape"), m.groups(), strict=True) if v}
    return " with shape ".join(x for x in (parts.get("op"), parts.get("shape")) if x) or "another collective"


def odd_fingerprints(desync: list[Finding]) -> dict[int, str]:
    """Ranks whose own collective fingerprint differs from what a clear majority of ranks run. Each rank
    compares its fingerprint with every rank's and names the first that differs, so the odd rank names rank
    0 and the others name it: only the fingerprints say which side is odd, and two ranks alone never do.
    A rank's own fingerprint is the one trusted: the other side of the message is deserialised from what
    the rank received, and when the serialised lengths differ it is a decoded shape tensor, not a
    fingerprint."""
    by_rank: dict[int, str] = {}
    for f in desync:
        if pairs := _fingerprints(f.evidence[0].text):
            by_rank.setdefault(*pairs[0])
    if len(by_rank) < 3:
        return {}
    usual, n = Counter(by_rank.values()).most_common(1)[0]
    if n <= len(by_rank) / 2:
        return {}
    return {
        r: f"runs {_describe(fp)} where {n} other ranks run {_describe(usual)}"
        for r, fp in sorted(by_rank.items())
        if fp != usual
    }


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_PATH_SEP = re.compile(r"[/\\]")
_TORCH_DIR = re.compile(r"[/\\]torch[/\\]")


def call_site(traceback: str) -> str | None:
    """Where the program called into PyTorch, from a Python traceback: the last frame before the first frame
    under ``torch/`` (``train.py:98``), or None when no frame is under ``torch/``."""
    frames = [m for line in traceback.splitlines() if (m := _FRAME.search(line))]
    for i, m in enumerate(frames):
        if _TORCH_DIR.search(m["file"]):
            if i == 0:
                return None
            caller = frames[i - 1]
            name = _PATH_SEP.split(caller["file"])[-1]
            return f"{name}:{caller['line']}"
    return None


def _site_of(f: Finding) -> str | None:
    span = next((e for e in f.evidence[1:] if e.end_line is not None), None)
    return call_site(span.text) if span is not None else None


def unranked_sites(wd: list[Finding]) -> dict[str, list[Finding]]:
    """Collective timeouts that name no rank (a pasted console of unprefixed ranks), by the call site their
    tracebacks show; empty unless there are two sites or more. Ranks blocked at different call sites ran
    different collectives, though no line says which rank was where."""
    by_site: dict[str, list[Finding]] = defaultdict(list)
    for f in wd:
        if (site := _site_of(f)) is not None:
            if f.rank is not None:
                return {}
            by_site[site].append(f)
    return dict(by_site) if len(by_site) > 1 else {}


def odd_sites(wd: list[Finding]) -> dict[int, str]:
    """Ranks that timed out in a collective called from another place than the others' (TAXONOMY class 4,
    and §1.3: the minority of grouped stack traces): a collective timeout raised as a Python exception (gloo's
    ``Timed out waiting ...ms for recv``) carries its traceback, so each rank says where it called the
    collective that never completed. Ranks blocked at different call sites ran different collectives. With a
    clear majority the others are the odd ones; two ranks that differ are both named, and neither is the
    culprit (``explain._culprit``)."""
    sites: dict[int, str] = {}
    for f in wd:
        if f.rank is not None and (site := _site_of(f)):
            sites.setdefault(f.rank, site)
    if len(sites) < 2 or len(set(sites.values())) < 2:
        return {}
    usual, n = Counter(sites.values()).most_common(1)[0]
    if len(sites) == 2:
        return {r: f"timed out in a collective it called at {s}" for r, s in sorted(sites.items())}
    if n <= len(sites) / 2:
        return {}
    return {
        r: f"timed out in a collective called at {s} where {n} other ranks called it at {usual}"
        for r, s in sorted(sites.items())
        if s != usual
    }
