"""Stack dumps of every process: ``py-spy dump``, Python ``faulthandler`` all-thread dumps, gdb ``thread apply all bt``.

Formats (what the tools print):

- py-spy (``py-spy dump --pid P``, src/dump.rs): ``Process <pid>: <cmdline>``, ``Python v<ver> (<exe>)``, then per
  thread ``Thread <tid> (<idle|active|gil>): "<name>"`` and one frame per line, innermost first,
  ``    <function> (<file>:<line>)`` (``--locals`` adds indented ``Arguments:``/``Locals:`` lines);
- faulthandler (``faulthandler.dump_traceback(all_threads=True)``, a signal handler or ``dump_traceback_later``):
  ``Thread 0x<id> (most recent call first):`` or ``Current thread 0x<id> (most recent call first):``, then
  ``  File "<file>", line <n> in <function>``, innermost first; possibly behind ``[rankN]:`` prefixes in a rank's log;
- gdb/cuda-gdb (``thread apply all bt``): ``Thread <n> (Thread 0x<addr> (LWP <lwp>) "<name>"):`` then
  ``#<i>  0x<pc> in <function> (<args>) at <file>:<line>`` (or ``#<i>  <function> (...)``).

Each process's main thread is reduced to where it is: in a collective (the first frame that is a c10d/NCCL/gloo
call) or elsewhere (its innermost frame). Processes are grouped by that place across ranks; when most wait in a
collective and a few do not, the few are the culprits (TAXONOMY §1 rule 3). Pure but for reading the files.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from crashcart.ingest.hang_kinds import FH_THREAD, GDB_FRAME, GDB_THREAD, PYSPY_PROC, PYSPY_THREAD
from crashcart.text.prefix import rank_of_path, split_prefix

MAX_STACK_FILE = 16 * 1024 * 1024
FRAMES_CITED = 6

_PYSPY_PROC = PYSPY_PROC
_PYSPY_THREAD = PYSPY_THREAD
_PYSPY_FRAME = re.compile(r"^\s{4}(?P<func>\S.*?) \((?P<file>[^()]+?):(?P<line>\d+)\)\s*$")
_FH_THREAD = FH_THREAD
_FH_STACK = re.compile(r"^Stack \(most recent call first\):\s*$")
_FH_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)\s*$')
_GDB_THREAD = GDB_THREAD
_GDB_FRAME = GDB_FRAME
_COLLECTIVE = re.compile(
    r"(?:^|[_.:])(?:all_?reduce|all_?gather\w*|reduce_?scatter\w*|broadcast\w*|barrier|monitored_barrier|all_?to_?all\w*"
    r"|gather|scatter|send|recv|irecv|isend|batch_isend_irecv|wait)$|^nccl[A-Z]\w*|ProcessGroupNCCL|ProcessGroupGloo"
    r"|gloo::|c10d::",
)
_DIST_FILE = re.compile(r"distributed_c10d\.py|c10d_logger\.py|ProcessGroup\w+\.(?:cpp|hpp)|/gloo/|libnccl")

Tool = str  # "py-spy", "faulthandler", "gdb"


@dataclass
class Frame:
    func: str
    file: str
    line: int  # the dump's line holding this frame
    src: str = "?"  # the source line the frame names


@dataclass
class Thread:
    name: str
    header: int  # the dump's line of the thread header
    frames: list[Frame] = field(default_factory=list)  # innermost first
    current: bool = False


@dataclass
class Process:
    path: str
    tool: Tool
    rank: int | None
    pid: str | None
    threads: list[Thread] = field(default_factory=list)
    lines: list[str] = field(default_factory=list, repr=False)  # the file's canonical lines (for citations)

    def main(self) -> Thread | None:
        named = [t for t in self.threads if t.name == "MainThread" or t.name == "1"]
        if named:
            return named[0]
        module = [t for t in self.threads if t.frames and t.frames[-1].func == "<module>"]
        if module:
            return module[0]
        return self.threads[0] if self.threads else None


def parse(path: str, lines: list[str], file_rank: int | None) -> list[Process]:
    """Every process dump in ``lines`` (canonical text of the file, line 1 first)."""
    procs: list[Process] = []
    cur: Process | None = None
    thread: Thread | None = None
    fallback = file_rank if file_rank is not None else _rank_in_name(path)
    for n, raw in enumerate(lines, start=1):
        pre = split_prefix(raw)
        ln = pre.rest
        rank = pre.rank if pre.rank is not None else fallback
        if m := _PYSPY_PROC.match(ln):
            cur = Process(path, "py-spy", _rank_in_cmd(m.group("cmd"), rank), m.group("pid"))
            procs.append(cur)
            thread = None
            continue
        if (m := _PYSPY_THREAD.match(ln)) and (cur is None or cur.tool == "py-spy"):
            name = m.group("name") or m.group("tid")
            if cur is None or any(t.name == name for t in cur.threads):
                # a dump pasted without its "Process <pid>:" header: each dump lists a thread once
                cur = Process(path, "py-spy", rank, None)
                procs.append(cur)
            thread = Thread(name, n)
            cur.threads.append(thread)
            continue
        if (m := _PYSPY_FRAME.match(ln)) and thread is not None and cur is not None and cur.tool == "py-spy":
            thread.frames.append(Frame(m.group("func"), m.group("file"), n, m.group("line")))
            continue
        if (m := _FH_THREAD.match(ln)) or _FH_STACK.match(ln):
            if cur is None or cur.tool != "faulthandler" or cur.rank != rank or _ends_dump(cur, m):
                cur = Process(path, "faulthandler", rank, None)
                procs.append(cur)
            tid = m.group("tid") if m else "stack"
            thread = Thread(tid, n, current=bool(m and m.group("current") != "Thread"))
            cur.threads.append(thread)
            continue
        if (m := _FH_FRAME.match(ln)) and thread is not None and cur is not None and cur.tool == "faulthandler":
            thread.frames.append(Frame(m.group("func"), m.group("file"), n, m.group("line")))
            continue
        if m := _GDB_THREAD.match(ln):
            if cur is None or cur.tool != "gdb" or any(t.name == m.group("num") for t in cur.threads):
                cur = Process(path, "gdb", rank, m.group("lwp") if m.group("num") == "1" else None)
                procs.append(cur)
            thread = Thread(m.group("num"), n)
            cur.threads.append(thread)
            continue
        if (m := _GDB_FRAME.match(ln)) and thread is not None and cur is not None and cur.tool == "gdb":
            thread.frames.append(Frame(m.group("func"), m.group("file") or "", n))
            continue
        if (
            cur is not None
            and cur.tool == "faulthandler"
            and thread is not None
            and ln.strip()
            and not ln.startswith(" ")
        ):
            thread = None  # the dump ended; what follows is the log again
    for p in procs:
        p.lines = lines
    return [p for p in procs if p.threads]


def _ends_dump(cur: Process, m: re.Match[str] | None) -> bool:
    """A faulthandler dump lists each thread once: a second dump in the same log starts a new process record."""
    return m is not None and any(t.name == m.group("tid") for t in cur.threads)


_TORCHRUN_LOG = re.compile(r"attempt_\d+/(\d+)/std(?:err|out)\.log$")


def _rank_in_name(path: str) -> int | None:
    rank = rank_of_path(path)
    if rank is not None:
        return rank
    layout = _TORCHRUN_LOG.search(path)  # torchrun --log-dir: <run>/attempt_<n>/<local rank>/stderr.log
    if layout is not None and not re.search(r"(?:^|/)node[-_]?\d+/", path):
        return int(layout.group(1))  # one agent: the local rank is the global rank
    m = re.search(r"rank[_-]?(\d+)", PurePosixPath(path).name, re.I)
    return int(m.group(1)) if m else None


def _rank_in_cmd(cmd: str, rank: int | None) -> int | None:
    m = re.search(r"--(?:node_)?rank[= ](\d+)\b", cmd)
    return rank if rank is not None or m is None or "node_rank" in m.group(0) else int(m.group(1))


def in_collective(frame: Frame) -> bool:
    return bool(_COLLECTIVE.search(frame.func) or _DIST_FILE.search(frame.file))


@dataclass(frozen=True)
class Place:
    """Where a process's main thread is: ``collective`` or not, and the frame that says so."""

    collective: bool
    func: str
    where: str  # "all_reduce (distributed_c10d.py)"


def place(p: Process) -> tuple[Place, Thread, int] | None:
    t = p.main()
    if t is None or not t.frames:
        return None
    for i, fr in enumerate(t.frames):
        if in_collective(fr):
            outer = next((f for f in t.frames[i:] if not in_collective(f)), fr)
            return Place(True, fr.func, f"{fr.func} ({PurePosixPath(outer.file).name}, in {outer.func})"), t, i
    fr = t.frames[0]
    return Place(False, fr.func, f"{fr.func} ({PurePosixPath(fr.file).name}:{fr.src})"), t, 0


@dataclass
class Odd:
    """The minority processes: where they are, where the rest are."""

    culprits: list[Process]
    others: list[Process]
    culprit_place: Place
    others_place: Place
    mismatch: bool


def odd_ones(procs: list[Process]) -> Odd | None:
    """Processes whose main thread is not where the majority's is; None when nothing stands out."""
    placed = [(p, pl[0]) for p in procs if (pl := place(p)) is not None]
    if len(placed) < 2:
        return None
    waiting = [(p, pl) for p, pl in placed if pl.collective]
    elsewhere = [(p, pl) for p, pl in placed if not pl.collective]
    if waiting and elsewhere and len(elsewhere) <= len(waiting):
        return Odd([p for p, _ in elsewhere], [p for p, _ in waiting], elsewhere[0][1], _common(waiting), False)
    if len(placed) >= 3:  # no collective frame to go by (DDP waits inside autograd): the majority's place
        counts = Counter(pl.func for _, pl in placed)
        if len(counts) >= 2:
            (major, n), (_, m) = counts.most_common(2)
            if n > m and n * 2 > len(placed):
                odd = [(p, pl) for p, pl in placed if pl.func != major]
                rest = [(p, pl) for p, pl in placed if pl.func == major]
                both = all(pl.collective for _, pl in placed)
                return Odd([p for p, _ in odd], [p for p, _ in rest], odd[0][1], rest[0][1], both)
    return None


def _common(items: list[tuple[Process, Place]]) -> Place:
    return Counter(pl for _, pl in items).most_common(1)[0][0]


def read_text_lines(physical: Path, canonical: Callable[[bytes, int], str], max_bytes: int) -> list[str] | None:
    """The file's canonical lines, or None when it is too large to read whole here."""
    if physical.stat().st_size > MAX_STACK_FILE:
        return None
    with physical.open("rb") as fh:
        return [canonical(raw, max_bytes) for raw in fh]
