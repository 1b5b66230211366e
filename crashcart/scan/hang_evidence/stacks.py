"""Stack dumps of every process: ``py-spy dump``, Python ``faulthandler`` all-thread dumps, gdb ``thread apply all bt``.

Formats (what the tools print):

- py-spy 0.2-0.4 (``py-spy dump --pid P``, src/dump.rs): ``Process <pid>: <cmdline>``, ``Python v<ver> (<exe>)``,
  ``Parent Process <pid>: <cmdline>`` for a child (``--subprocesses``), then per thread
  ``Thread <tid> (<idle|active|active+gil>): "<name>"`` (no name when ``threading`` has none; a core dump prints
  ``(gil)`` or no state) and one frame per line, innermost first, ``    <function> (<file>:<line>)``, or
  ``    <function> (<file or shared object>)`` for a frame without a line (``--native``); ``--locals`` adds
  ``Arguments:``/``Locals:`` lines indented further. py-spy 0.1 (src/main.rs): ``<exe>``, ``Python version <ver>``,
  ``Thread 0x<id>[/0x<os id>] (<state>)``, frames indented by a tab and a space. Several dumps may share a file (one
  per ``Process`` header, or a thread name seen twice) or a rank's log;
- faulthandler (``faulthandler.dump_traceback(all_threads=True)``, a signal handler or ``dump_traceback_later``):
  ``Thread 0x<id> (most recent call first):`` or ``Current thread 0x<id> (most recent call first):``, then
  ``  File "<file>", line <n> in <function>``, innermost first; possibly behind ``[rankN]:`` prefixes in a rank's log;
- gdb/cuda-gdb (``thread apply all bt``): ``Thread <n> (Thread 0x<addr> (LWP <lwp>) "<name>"):`` then
  ``#<i>  0x<pc> in <function> (<args>) at <file>:<line>`` (or ``#<i>  <function> (...)``).

Each training rank's main thread is reduced to where it is (``frames``): waiting on its peers (the first frame that
is a collective, a barrier, an NCCL or GPU synchronisation) or elsewhere (what it is busy with, its innermost frame
and the innermost frame of the program's own code). Launchers and DataLoader workers take no part in collectives and
are left out. Ranks are grouped by that place; when most wait on their peers and a few do not, the few are the
culprits (TAXONOMY §1 rule 3). Pure but for reading the files.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import overload

from crashcart.ingest.hang_kinds import (
    FH_THREAD,
    GDB_FRAME,
    GDB_THREAD,
    PYSPY_FRAME,
    PYSPY_PROC,
    PYSPY_PYTHON,
    PYSPY_THREAD,
)
from crashcart.scan.hang_evidence import frames
from crashcart.text.prefix import rank_of_path, split_prefix

MAX_STACK_FILE = 16 * 1024 * 1024
FRAMES_CITED = 6
FRAMES_SPAN = 16  # the program's own frame within this many frames is cited in the thread's span

_PYSPY_PROC = PYSPY_PROC
_PYSPY_THREAD = PYSPY_THREAD
_PYSPY_FRAME = PYSPY_FRAME
_PYSPY_PARENT = re.compile(r"^Parent Process (?P<pid>\d+): ")
# the shell prompt a dump was pasted under names its node: "user@gpu46:~$ py-spy dump --pid 1234",
# "[root@node-3 ~]# sudo py-spy dump -p 1234"
_PROMPT = re.compile(
    r"(?:^|\s|\[)[\w.-]+@(?P<host>[A-Za-z][\w-]*(?:\.[\w-]+)*)[: ][^$#]*[$#] +(?:sudo +(?:-\S+ +)*)?(?:\S*/)?"
    r"py-spy +dump\b"
)
# A literal of every line that can open a dump or change the parser's state outside one (process, Python,
# thread and stack headers, faulthandler's timeout, a prompt running py-spy): a line without any is skipped
# unless a thread is open. A new kind of header adds its literal here (tests/test_stack_headers.py checks it).
HEADER_WORDS = re.compile(r"hread |Process |Python v|Stack \(|Timeout \(|py-spy")
_FH_THREAD = FH_THREAD
_FH_STACK = re.compile(r"^Stack \(most recent call first\):\s*$")
# CPython Modules/faulthandler.c format_timeout: dump_traceback_later's watchdog fired, "Timeout (H:MM:SS[.us])!"
_FH_TIMEOUT = re.compile(r"^Timeout \((?P<after>\d+:\d\d:\d\d)(?:\.\d+)?\)!\s*$")
_FH_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)\s*$')
_GDB_THREAD = GDB_THREAD
_GDB_FRAME = GDB_FRAME
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
    lines: Sequence[str] = field(default_factory=list, repr=False)  # the file's canonical lines (for citations)
    cmd: str | None = None  # py-spy's command line
    parent: str | None = None  # py-spy's "Parent Process" (a child dumped with --subprocesses)
    local_rank: int | None = None  # --local_rank / --local-rank in the command line
    host: str | None = None  # the node the dump file belongs to
    host_line: int | None = None  # the line that names it (a shell prompt), when the file's path does not
    stalled: tuple[str, int] | None = None  # faulthandler.dump_traceback_later fired: (after H:MM:SS, its line)

    def role(self) -> frames.Role:
        t = self.main()
        return frames.role(t.frames if t else [], self.cmd)

    def main(self) -> Thread | None:
        named = [t for t in self.threads if t.name == "MainThread" or t.name == "1"]
        if named:
            return named[0]
        module = [t for t in self.threads if any(f.func == "<module>" for f in t.frames[-3:])]
        if module:
            return module[0]
        return self.threads[0] if self.threads else None


class Window(Sequence[str]):
    """The lines of a file from line ``first`` on (a large log's tail), indexed by the file's own line numbers less
    one, as a whole file's list would be."""

    def __init__(self, first: int, lines: list[str]) -> None:
        self.first, self._lines = first, lines

    def __len__(self) -> int:
        return self.first - 1 + len(self._lines)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        off = self.first - 1
        if isinstance(i, slice):
            start = max((i.start or 0) - off, 0)
            stop = None if i.stop is None else max(i.stop - off, 0)
            return self._lines[start:stop]
        if i < off:
            raise IndexError(i)
        return self._lines[i - off]


def parse(path: str, lines: Sequence[str], file_rank: int | None) -> list[Process]:
    """Every process dump in ``lines`` (canonical text of the file, line 1 first, or a ``Window`` of its tail)."""
    procs: list[Process] = []
    cur: Process | None = None
    thread: Thread | None = None
    fallback = file_rank if file_rank is not None else _rank_in_name(path)
    prompt: tuple[str, int] | None = None
    timeout: tuple[str, int] | None = None
    body, first = (lines._lines, lines.first) if isinstance(lines, Window) else (lines, 1)
    for n, raw in enumerate(body, start=first):
        if thread is None and not HEADER_WORDS.search(raw):
            continue  # outside a dump only a header line changes anything (a 4 MiB tail is ~20 k log lines)
        pre = split_prefix(raw)
        ln = pre.rest
        rank = pre.rank if pre.rank is not None else fallback
        if m := _PYSPY_PROC.match(ln):
            cmd = m.group("cmd")
            cur = Process(path, "py-spy", _rank_in_cmd(cmd, rank), m.group("pid"), cmd=cmd, local_rank=_local(cmd))
            if pre.host:
                cur.host, cur.host_line = pre.host, n  # pdsh/clush "<host>: " before each line
            elif prompt is not None:
                cur.host, cur.host_line = prompt
            prompt = None
            procs.append(cur)
            thread = None
            continue
        if m := _PROMPT.search(raw):
            prompt = (m.group("host"), n)
            thread = None
            continue
        if PYSPY_PYTHON.match(ln):
            if ln.startswith("Python version") or cur is None or cur.tool != "py-spy" or cur.threads:
                cur = Process(path, "py-spy", rank, None)  # py-spy 0.1 names no pid: "<exe>", "Python version <v>"
                procs.append(cur)
            thread = None
            continue
        if (m := _PYSPY_PARENT.match(ln)) and cur is not None and cur.tool == "py-spy":
            cur.parent = m.group("pid")
            continue
        if (
            (m := _PYSPY_THREAD.match(ln))
            and (m.group("state") or m.group("name"))
            and (cur is None or cur.tool == "py-spy")
        ):
            name = m.group("name") or m.group("tid")
            if cur is None or any(t.name == name for t in cur.threads):
                # a dump pasted without its "Process <pid>:" header: each dump lists a thread once
                cur = Process(path, "py-spy", rank, None)
                procs.append(cur)
            thread = Thread(name, n)
            cur.threads.append(thread)
            continue
        if (m := _PYSPY_FRAME.match(ln)) and thread is not None and cur is not None and cur.tool == "py-spy":
            thread.frames.append(Frame(m.group("func"), m.group("file"), n, m.group("line") or "?"))
            continue
        if cur is not None and cur.tool == "py-spy" and thread is not None and ln.strip() and ln[:1] not in " \t":
            thread = None  # the dump ended (a separator, the log again): no frame follows; the line is read on
        if tm := _FH_TIMEOUT.match(ln):
            timeout = (tm.group("after"), n)
            thread = None
            continue
        if (m := _FH_THREAD.match(ln)) or _FH_STACK.match(ln):
            if cur is None or cur.tool != "faulthandler" or cur.rank != rank or _ends_dump(cur, m) or timeout:
                cur = Process(path, "faulthandler", rank, None)
                procs.append(cur)
            if timeout is not None:
                cur.stalled, timeout = timeout, None
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


def _local(cmd: str) -> int | None:
    """``--local_rank=N`` (torch.distributed.launch, DeepSpeed's launcher) or ``--local-rank N`` in a command line."""
    m = re.search(r"--local[_-]rank[= ](\d+)\b", cmd)
    return int(m.group(1)) if m else None


def _rank_in_cmd(cmd: str, rank: int | None) -> int | None:
    m = re.search(r"--(?:node_)?rank[= ](\d+)\b", cmd)
    return rank if rank is not None or m is None or "node_rank" in m.group(0) else int(m.group(1))


def in_collective(frame: Frame) -> bool:
    """Does the frame wait on the other ranks (``frames.is_wait``)?"""
    return frames.is_wait(frame)


@dataclass(frozen=True)
class Place:
    """Where a process's main thread is: ``collective`` or not, and the frame that says so."""

    collective: bool
    func: str  # what ranks are grouped by: the collective's name, or what the thread is busy with
    where: str  # "all_reduce (distributed_c10d.py, in train_step)", "get (queue.py:180) (DataLoader fetch), ..."
    named: bool = False  # ``func`` names a collective (all_reduce, barrier), not a generic wait
    known: bool = False  # outside a collective, the frames say what it does (a DataLoader fetch, a lock, generation)


def place(p: Process) -> tuple[Place, Thread, int] | None:
    """Where the main thread is, the thread, and the index of the frame that says so."""
    t = p.main()
    if t is None or not t.frames:
        return None
    waits = [i for i, fr in enumerate(t.frames) if in_collective(fr)]
    if waits:
        py = [i for i in waits if not frames.is_native(t.frames[i])]
        named = [i for i in py if frames.is_collective_name(t.frames[i].func)]
        i = (named or py or waits)[0]
        fr = t.frames[i]
        outer = next((f for f in t.frames[i:] if not in_collective(f) and not frames.is_native(f)), fr)
        where = f"{fr.func} ({PurePosixPath(outer.file).name}, in {outer.func})"
        return Place(True, fr.func.rsplit(".", 1)[-1], where, bool(named)), t, i
    i = next((k for k, f in enumerate(t.frames) if not frames.is_native(f)), 0)
    fr = t.frames[i]
    doing = frames.activity(t.frames)
    where = (f"{doing} at " if doing else "") + f"{fr.func} ({PurePosixPath(fr.file).name}:{fr.src})"
    own = own_frame(t)
    if own is not None and t.frames[own] is not fr:
        o = t.frames[own]
        where += f", from {o.func} ({PurePosixPath(o.file).name}:{o.src})"
    return Place(False, doing or fr.func, where, known=doing is not None), t, i


def own_frame(t: Thread) -> int | None:
    """The index of the innermost frame of the program's own code (not the standard library, a framework, native)."""
    return next((i for i, f in enumerate(t.frames) if not frames.is_library(f)), None)


@dataclass
class Odd:
    """The minority processes: where they are, where the rest are."""

    culprits: list[Process]
    others: list[Process]
    culprit_place: Place
    others_place: Place
    mismatch: bool


def ranks_only(procs: list[Process]) -> list[Process]:
    """The training processes (no launcher, no DataLoader worker), each once: a process dumped twice counts as its
    last dump."""
    last: dict[tuple[int | None, str, str], Process] = {}
    out: list[Process] = []
    for p in procs:
        if p.role() != "rank":
            continue
        if p.pid is None:
            out.append(p)
            continue
        key = (p.rank, p.host or str(PurePosixPath(p.path).parent), p.pid)
        if key in last:
            out.remove(last[key])
        last[key] = p
        out.append(p)
    return out


def odd_ones(procs: list[Process]) -> Odd | None:
    """Processes whose main thread is not where the majority's is; None when nothing stands out."""
    placed = [(p, pl[0]) for p in ranks_only(procs) if (pl := place(p)) is not None]
    if len(placed) < 2:
        return None
    waiting = [(p, pl) for p, pl in placed if pl.collective]
    elsewhere = [(p, pl) for p, pl in placed if not pl.collective]
    if waiting and elsewhere:
        if len(elsewhere) > len(waiting):
            return None  # most are busy elsewhere: the job was running, or nothing stands out
        return Odd([p for p, _ in elsewhere], [p for p, _ in waiting], elsewhere[0][1], _common(waiting), False)
    if len(placed) >= 3:  # no collective frame to go by (DDP waits inside autograd), or all in one: the majority
        counts = Counter(pl.func for _, pl in placed)
        if len(counts) >= 2:
            (major, n), (_, m) = counts.most_common(2)
            if n > m and n * 2 > len(placed):
                odd = [(p, pl) for p, pl in placed if pl.func != major]
                rest = [(p, pl) for p, pl in placed if pl.func == major]
                both = all(pl.named for _, pl in placed)  # two named collectives: a mismatch
                if all(pl.collective for _, pl in placed) and not both:
                    return None  # one waits in all_reduce, another in Work.wait: the same wait, seen twice
                return Odd([p for p, _ in odd], [p for p, _ in rest], odd[0][1], rest[0][1], both)
    return None


# what a whole job may be stuck in when no rank waits in a collective (a blocking wait, not computation)
BLOCKING = frozenset(
    {
        "DataLoader fetch",
        "lock or condition wait",
        "waiting on another process (multiprocessing)",
        "file I/O",
        "network I/O",
        "waiting on a subprocess",
    }
)


def all_stuck(procs: list[Process]) -> tuple[Place, list[Process]] | None:
    """Every rank (two or more) blocked in the same kind of wait outside any collective (a DataLoader fetch, a
    lock): the job hangs there, on every rank at once; None otherwise."""
    placed = [(p, pl[0]) for p in ranks_only(procs) if (pl := place(p)) is not None]
    if len(placed) < 2 or any(pl.collective for _, pl in placed):
        return None
    kinds = {pl.func for _, pl in placed}
    if len(kinds) != 1 or not kinds <= BLOCKING:
        return None
    return placed[0][1], [p for p, _ in placed]


def busy_workers(procs: list[Process], parent: str | None) -> list[tuple[Process, Place, Thread]]:
    """DataLoader workers (of ``parent`` when the dumps say whose) that are loading, not idle: their main thread is
    in the dataset's own code or torch's fetch (_utils/fetch.py) under ``_worker_loop``, not waiting for indices."""
    out: list[tuple[Process, Place, Thread]] = []
    for p in procs:
        if p.role() != "dataloader_worker" or (parent is not None and p.parent is not None and p.parent != parent):
            continue
        t = p.main()
        if t is None:
            continue
        loop = next((i for i, f in enumerate(t.frames) if f.func.endswith("_worker_loop")), len(t.frames))
        inner = t.frames[:loop]
        if not any(not frames.is_library(f) or f.file.endswith("torch/utils/data/_utils/fetch.py") for f in inner):
            continue  # waiting on its index queue: idle
        got = place(p)
        if got is not None:
            out.append((p, got[0], t))
    return out


def _common(items: list[tuple[Process, Place]]) -> Place:
    return Counter(pl for _, pl in items).most_common(1)[0][0]


def read_text_lines(physical: Path, canonical: Callable[[bytes, int], str], max_bytes: int) -> list[str] | None:
    """The file's canonical lines, or None when it is too large to read whole here."""
    if physical.stat().st_size > MAX_STACK_FILE:
        return None
    with physical.open("rb") as fh:
        return [canonical(raw, max_bytes) for raw in fh]
