"""Horovod's stall inspector: the ranks that never submitted a tensor the others wait to reduce.

Horovod's coordinator warns when a tensor was submitted by some ranks and not by the rest for more than
``HOROVOD_STALL_CHECK_TIME_SECONDS`` (60 s by default). The wording, across versions (horovod/horovod):

- v0.9-v0.15 (tensorflow/mpi_ops.cc, then common/operations.cc ``CheckForStalledTensors``, to stderr, one line):
  ``WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are
  waiting for remainder of ranks for more than <N> seconds. This may indicate that different ranks are trying to
  submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. Stalled
  ops: <tensor> [ready ranks: 0, 1], <tensor> [ready ranks: 2]``;
- v0.16 (common/operations.cc, ``LOG(WARNING)`` per tensor): the same sentence, then ``Stalled ops:<tensor>
  [missing ranks: 2, 3]`` on the next line, and ``<tensor> [missing ranks: 2]`` as further log lines;
- v0.17-v0.20 (common/stall_inspector.cc): the sentence, ``Stalled ranks:``, then one line per rank
  ``<rank>[!]: [<tensor>, <tensor> ...]``; v0.21 on: ``Missing ranks:`` (global ranks of the process set); a rank
  marked ``!`` is stalled past ``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`` and the message ends ``One or more rank
  (marked by "!") is stalled for longer than <N> seconds. Will shutdown.`` (``LOG(ERROR)``).

Meaning (the message's own words): either the missing ranks never reached the collective (they hang, are slow or
died: ``rank_hang_or_missing_rank``) or ranks submitted *different* tensors (``collective_mismatch_desync``): some
rank submitted a tensor another rank is missing while missing one that rank submitted. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from crashcart.models import Evidence, Finding
from crashcart.scan.findings import IdSource
from crashcart.scan.hang_evidence.collectives import ranks_text
from crashcart.text.prefix import split_prefix

MARK = b"waiting for remainder of ranks"
_HEAD = re.compile(
    r"One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
    r"waiting for remainder of ranks for more than (?P<seconds>\d+) seconds"
)
_READY = re.compile(r"(?P<tensor>[^\s,\[\]][^\[\]]*?) \[(?P<kind>ready|missing) ranks:(?P<ranks>[\d, ]*)\]")
_RANK_LINE = re.compile(r"^\s*(?P<rank>\d+)(?P<bang>!?): \[(?P<tensors>.*)\]\s*$")
_LIST_HEAD = re.compile(r"^\s*(?:Stalled|Missing) ranks:\s*$")
_SHUTDOWN = re.compile(r'One or more rank \(marked by "!"\) is stalled for longer than (?P<seconds>\d+) seconds')
_LOOK = 64  # rank lines after the sentence
MAX_CULPRITS = 8
# a stall the log runs on long after is one that passed (Horovod repeats the warning every check while stalled,
# and a maintainer's "recoverable stall": one rank doing a full validation): context, not a root
PASSED_AFTER = 200


@dataclass
class Stall:
    """One stall warning: where it is, the ranks missing each tensor, and which lines say so."""

    line: int  # the sentence's line
    end: int  # the last line of the message
    seconds: int
    missing: dict[int, set[str]] = field(default_factory=dict)  # rank -> tensors it did not submit
    ready: dict[str, set[int]] = field(default_factory=dict)  # tensor -> ranks that submitted it (v0.9-v0.15)
    marked: set[int] = field(default_factory=set)  # "!": past the shutdown time
    shutdown: bool = False

    def missing_ranks(self, world: int | None) -> list[int]:
        if self.missing:
            return sorted(self.marked or self.missing)
        if not self.ready or world is None:
            return []
        every = set(range(world))
        for ranks in self.ready.values():
            every &= ranks
        return sorted(set(range(world)) - every)

    def mismatch(self) -> bool:
        """Ranks submitted different tensors: a rank missing tensor A but not B, another missing B but not A."""
        by_tensor: dict[str, set[int]] = {}
        for r, ts in self.missing.items():
            for t in ts:
                by_tensor.setdefault(t, set()).add(r)
        if not by_tensor and self.ready:
            ready = list(self.ready.values())
            return any(a - b and b - a for a in ready for b in ready)
        sets = list(by_tensor.values())
        return any(a - b and b - a for a in sets for b in sets)


def parse(lines: Sequence[str]) -> list[Stall]:
    """Every stall warning in a log's canonical lines (1-based line numbers; ``lines`` may be a ``stacks.Window``
    of a large log's tail, indexed by the file's own line numbers)."""
    out: list[Stall] = []
    n = getattr(lines, "first", 1) - 1
    while n < len(lines):
        text = split_prefix(lines[n]).rest
        m = _HEAD.search(text)
        if m is None:
            n += 1
            continue
        st = Stall(n + 1, n + 1, int(m.group("seconds")))
        _ops(st, text[m.end() :])
        k = n + 1
        while k < len(lines) and k <= n + _LOOK:
            rest = split_prefix(lines[k]).rest
            body = _log_body(rest)
            rm = _RANK_LINE.match(lines[k]) or _RANK_LINE.match(body)  # "3: [t]" reads as an srun prefix too
            if _LIST_HEAD.match(body):
                st.end = k + 1
            elif rm is not None:
                r = int(rm.group("rank"))
                st.missing.setdefault(r, set()).update(t.strip() for t in rm.group("tensors").split(", ") if t.strip())
                if rm.group("bang"):
                    st.marked.add(r)
                st.end = k + 1
            elif body.startswith("Stalled ops:") or (st.missing and _READY.search(body)) or _READY.fullmatch(body):
                _ops(st, body.removeprefix("Stalled ops:"))
                st.end = k + 1
            elif _SHUTDOWN.search(body):
                st.shutdown = True
                st.end = k + 1
                break
            else:
                break
            k += 1
        out.append(st)
        n = k
    return out


def _log_body(text: str) -> str:
    """The message of a Horovod log line (``[<time>: W <file>:<line>] <message>``), or the line."""
    m = re.match(r"^\[(?:[\d-]+ [\d:.]+: )?[TDIWEF] \S+:\d+\] ", text)
    return text[m.end() :] if m else text


def _ops(st: Stall, text: str) -> None:
    """``<tensor> [ready ranks: 0, 1]`` / ``<tensor> [missing ranks: 2]`` items (v0.9-v0.16)."""
    text = text.split("Stalled ops:", 1)[-1]
    for m in _READY.finditer(text):
        ranks = {int(x) for x in re.findall(r"\d+", m.group("ranks"))}
        tensor = m.group("tensor").strip().lstrip(", ").strip()
        if m.group("kind") == "ready":
            st.ready[tensor] = ranks
        else:
            for r in ranks:
                st.missing.setdefault(r, set()).add(tensor)


def findings(stalls: list[tuple[str, Sequence[str], Stall]], ids: IdSource, world: int | None) -> list[Finding]:
    """The missing ranks of each stall (one finding per rank), or a mismatch when ranks submitted different tensors.

    ``stalls``: (file, its canonical lines, a stall of it); ``world``: the job's size when the bundle shows it (the
    oldest wording names the ready ranks only)."""
    out: list[Finding] = []
    seen: set[tuple[int, ...]] = set()
    for path, lines, st in stalls:
        missing = st.missing_ranks(world)
        if tuple(missing) in seen:
            continue  # the same stall in another rank's log
        seen.add(tuple(missing))
        text = "\n".join(lines[st.line - 1 : st.end])
        fields = {"seconds": str(st.seconds), "missing": ranks_text(missing), "source": "horovod stall inspector"}
        tensors = sorted({t for ts in st.missing.values() for t in ts} | set(st.ready))
        if tensors:
            fields["tensors"] = ", ".join(tensors[:6])
        span = (path, st.line, st.end if st.end > st.line else None, text)
        after = sum(1 for ln in lines[st.end :] if ln.strip())
        if after > PASSED_AFTER:
            summary = f"Horovod reported a stall of more than {st.seconds} s, and the log ran on after it"
            out.append(_finding(ids, "passed", summary, None, fields, span))
            continue
        if st.mismatch():
            summary = (
                f"Horovod: ranks submitted different tensors for more than {st.seconds} s (each is missing one "
                f"another submitted): {fields.get('tensors', '?')}"
            )
            out.append(_finding(ids, "mismatch", summary, None, fields, span))
            continue
        how = " and past the shutdown time" if st.marked else ""
        for r in missing[:MAX_CULPRITS]:
            what = ", ".join(sorted(st.missing.get(r, set()))[:3]) or fields.get("tensors", "a tensor")
            summary = (
                f"rank {r} never submitted {what}, which the other ranks have waited to reduce for more than "
                f"{st.seconds} s{how} (Horovod's stall inspector: missing ranks {ranks_text(missing)})"
            )
            out.append(_finding(ids, "missing", summary, r, {**fields, "culprits": str(len(missing))}, span))
        if not missing:
            summary = f"Horovod: a tensor submitted by a subset of ranks waited for the rest over {st.seconds} s"
            out.append(_finding(ids, "missing", summary, None, fields, span))
    return out


def _finding(
    ids: IdSource,
    kind: str,
    summary: str,
    rank: int | None,
    fields: dict[str, str],
    span: tuple[str, int, int | None, str],
) -> Finding:
    path, line, end, text = span
    return Finding(
        id=ids.finding(),
        class_id="collective_mismatch_desync" if kind == "mismatch" else "rank_hang_or_missing_rank",
        signature=f"hang.horovod.{kind}",
        role="context" if kind == "passed" else "root_candidate",
        severity="info" if kind == "passed" else "P2" if kind == "mismatch" else "P1",
        summary=summary,
        rank=rank,
        fields=fields,
        evidence=[Evidence(id=ids.evidence_id(), file=path, line=line, end_line=end, text=text)],
    )
