"""NCCL RAS reports (NCCL >= 2.24): the ``ncclras`` client's text output (and its 2.29 monitor mode).

Built from NCCL's documentation (user guide, Troubleshooting -> RAS) and the strings of ``src/ras/client_support.cc``;
no real RAS capture was available here, so the tests use the documented excerpts. What is read:

- ``DEAD`` / ``1 job process is considered dead (unreachable via the RAS network)`` followed by
  ``Process <pid> on node <host> managing GPU <n>``;
- ``#<g>-<c> (<hash>) INCOMPLETE`` / ``Missing communicator data from <n> rank(s)`` / ``The missing rank: 21``, or
  ``Rank <r> -- GPU <n> managed by process <pid> on node <host>`` lines;
- ``#<g>-<c> (<hash>) MISMATCH`` / ``Communicator ranks have different collective operation counts`` /
  ``<n> ranks have launched up to operation <k>`` then the outliers' ``Rank <r> -- GPU ...`` lines, or
  ``Rank <r> has launched up to operation <k> -- GPU ...``;
- monitor mode: ``[<time>] PEER_DEAD: Process <pid> on node <host> managing GPU <n>``.

Ranks are communicator ranks (``#g-c`` names the communicator), which equal global ranks for the world
communicator. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_COMM = re.compile(r"^\s*#(?P<g>\d+)-(?P<c>\d+) \((?P<hash>[0-9a-fx]+)\) (?P<what>[A-Z,]+)\s*$")
_RANK_LINE = re.compile(
    r"^\s*Rank (?P<rank>\d+)(?: has launched up to operation (?P<op>\d+)| has status (?P<status>\w+))?"
    r" -- (?:GPU (?P<gpu>\S+) managed by process (?P<pid>\d+) on node (?P<host>\S+)|\[process information not found\])"
)
_MISSING_RANKS = re.compile(r"^\s*The missing ranks?: (?P<ranks>[\d, ]+)\s*$")
_LAUNCHED = re.compile(r"^\s*(?P<n>\d+) ranks have launched up to operation (?P<op>\d+)\s*$")
_DEAD = re.compile(
    r"^\s*(?:\[(?P<time>[^\]]+)\] PEER_DEAD: )?Process (?P<pid>\d+) on node (?P<host>\S+) managing GPUs? (?P<gpu>\S+)"
)
_DEAD_HEAD = re.compile(r"considered dead|^\s*DEAD\s*$")


@dataclass
class RasFact:
    kind: str  # "dead", "missing", "behind"
    line: int
    rank: int | None
    host: str | None
    pid: str | None
    comm: str | None
    detail: str


@dataclass
class RasReport:
    facts: list[RasFact] = field(default_factory=list)


def parse(lines: list[str]) -> RasReport:
    out = RasReport()
    comm: str | None = None
    what = ""
    dead = False
    majority_op: int | None = None
    current_op: int | None = None
    for n, ln in enumerate(lines, start=1):
        if m := _COMM.match(ln):
            comm, what, dead = f"#{m.group('g')}-{m.group('c')} ({m.group('hash')})", m.group("what"), False
            majority_op = current_op = None
            continue
        if _DEAD_HEAD.search(ln):
            dead, comm = True, None
            continue
        if (m := _DEAD.match(ln)) and (dead or m.group("time")):
            out.facts.append(
                RasFact(
                    "dead",
                    n,
                    None,
                    m.group("host"),
                    m.group("pid"),
                    None,
                    f"process {m.group('pid')} on node "
                    f"{m.group('host')} (GPU {m.group('gpu')}) is considered dead by RAS",
                )
            )
            continue
        if comm is None:
            continue
        if m := _MISSING_RANKS.match(ln):
            for r in re.findall(r"\d+", m.group("ranks")):
                out.facts.append(
                    RasFact(
                        "missing",
                        n,
                        int(r),
                        None,
                        None,
                        comm,
                        f"RAS: communicator {comm} is missing data from rank {r}",
                    )
                )
            continue
        if m := _LAUNCHED.match(ln):
            current_op = int(m.group("op"))
            majority_op = current_op if majority_op is None else majority_op
            continue
        if m := _RANK_LINE.match(ln):
            rank = int(m.group("rank"))
            if "INCOMPLETE" in what and "MISMATCH" not in what:
                kind, detail = "missing", f"RAS: rank {rank} of communicator {comm} did not respond (INCOMPLETE)"
            elif (op := int(m.group("op")) if m.group("op") else current_op) is not None and (
                majority_op is None or op < majority_op
            ):
                kind = "behind"
                detail = f"RAS: rank {rank} of communicator {comm} has launched up to operation {op}"
                if majority_op is not None and majority_op != op:
                    detail += f", the most ranks up to {majority_op}"
            else:
                continue
            out.facts.append(RasFact(kind, n, rank, m.group("host"), m.group("pid"), comm, detail))
    return out
