"""Recognise hang evidence by content (whatever the file is called): ingest's classification hook.

Flight Recorder dumps (a pickle whose first opcodes build the dump's dict, or JSON with its keys), stack dumps
(``py-spy dump``, gdb ``thread apply all bt``, a file that starts with a ``faulthandler`` dump) and NCCL RAS
reports. The answer is the note the bundle file carries; ``crashcart.scan.hang_evidence`` reads the files. Pure.
"""

from __future__ import annotations

import re
from typing import Literal

from crashcart.text.prefix import split_prefix

HangNote = Literal[
    "Flight Recorder dump (pickle)",
    "Flight Recorder dump (JSON)",
    "py-spy dump",
    "gdb backtrace",
    "faulthandler dump",
    "NCCL RAS report",
]
NOTES: tuple[HangNote, ...] = (
    "Flight Recorder dump (pickle)",
    "Flight Recorder dump (JSON)",
    "py-spy dump",
    "gdb backtrace",
    "faulthandler dump",
    "NCCL RAS report",
)

# py-spy src/dump.rs (0.2-0.4): "Process <pid>: <cmdline>", "Python v<version> (<exe>)" (a core dump: no exe), then
# per thread 'Thread <tid> (<idle|active|active+gil>): "<name>"' (no name when the threading module has none; a core
# dump prints "(gil)" or no state); py-spy 0.1 (src/main.rs): "<exe>", "Python version <version>", then
# "Thread 0x<id>[/0x<os id>] (<state>)" and frames indented by a tab and a space
PYSPY_PROC = re.compile(r"^Process (?P<pid>\d+): (?P<cmd>.*)$")
PYSPY_THREAD = re.compile(
    r"^Thread (?P<tid>0x[0-9A-Fa-f]+(?:/0x[0-9A-Fa-f]+)?|\d+)(?: \((?P<state>idle|active|active\+gil|gil)\))?"
    r'(?:: "(?P<name>[^"]*)")?\s*$'
)
PYSPY_PYTHON = re.compile(r"^Python v\d[^\s(]*(?: \(.*\))?\s*$|^Python version \d\S*\s*$")
PYSPY_FRAME = re.compile(r"^(?: {3,4}|\t ?)(?P<func>\S.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$")
FH_THREAD = re.compile(
    r"^(?P<current>Current thread|Thread) (?P<tid>0x[0-9a-fA-F]+)(?: \[[^\]]*\])? \(most recent call first\):\s*$"
)
GDB_THREAD = re.compile(
    r'^Thread (?P<num>\d+) \(Thread (?P<addr>0x[0-9a-f]+) \(LWP (?P<lwp>\d+)\)(?: "(?P<name>[^"]*)")?\):'
)
GDB_FRAME = re.compile(
    r"^#(?P<i>\d+)\s+(?:0x[0-9a-f]+ in )?(?P<func>[^\s(]+)(?: \(.*?\))?(?: (?:at|from) (?P<file>\S+))?"
)
_RAS_SIGNS = (
    "Communicators...",
    "Job summary",
    "RAS Monitor Mode",
    "Missing communicator data",
    "Communicator ranks have",
)


def flight_recorder_form(head: bytes) -> Literal["pickle", "json"] | None:
    """Is this (by its first bytes) a Flight Recorder dump, and in which form?"""
    if head[:1] == b"\x80" and len(head) > 2 and 2 <= head[1] <= 5:  # pickle protocol 2..5
        sample = head[:4096]
        return "pickle" if b"pg_config" in sample or b"entries" in sample else None
    if head.lstrip()[:1] != b"{":
        return None
    sample = head[:65536]
    if b'"entries"' in sample and (b'"pg_config"' in sample or b'"pg_status"' in sample):
        return "json"
    if b'"collective_seq_id"' in sample and b'"profiling_name"' in sample:
        return "json"
    return None


def stack_tool(text: str) -> Literal["py-spy", "gdb", "faulthandler"] | None:
    """The tool that wrote a file that *is* a stack dump (a log holding one is a log, read as well)."""
    raw = text.split("\n", 40)[:40]
    if not any("hread " in ln or ln.rstrip().endswith("[") for ln in raw):
        return None  # every form below needs a "Thread "/"thread " line in these lines, or a "[" one (py-spy --json)
    lines = [split_prefix(ln).rest for ln in raw]
    firsts = [ln for ln in lines if ln.strip()][:3]
    threads = [m for ln in lines if (m := PYSPY_THREAD.match(ln)) and (m.group("state") or m.group("name"))]
    heads = [ln for ln in lines if ln.strip()][:3]
    at = next((i for i, ln in enumerate(heads) if PYSPY_PROC.match(ln) or PYSPY_PYTHON.match(ln)), None)
    # the dump opens the file, after at most the command that wrote it or py-spy 0.1's "<exe>" line: a log with a dump
    # further down stays a log (its lines are scanned, and the dump in it read as well)
    if threads and at is not None and (at == 0 or (at == 1 and ("py-spy" in heads[0] or heads[0].startswith("/")))):
        return "py-spy"
    first = PYSPY_THREAD.match(firsts[0]) if firsts else None
    if first is not None and first.group("state") and len(firsts) > 1 and PYSPY_FRAME.match(firsts[1]):
        return "py-spy"  # a dump kept from its first thread on
    if firsts[:1] == ["["] and any(ln.startswith('    "thread_id": ') for ln in lines[:12]):
        return "py-spy"  # py-spy dump --json (src/dump.rs: serde_json pretty, one object per thread)
    if any(GDB_THREAD.match(ln) for ln in lines[:10]) and any(GDB_FRAME.match(ln) for ln in lines):
        return "gdb"
    if firsts and FH_THREAD.match(firsts[0]):
        return "faulthandler"
    return None


def is_ras(text: str) -> bool:
    sample = text[:65536]
    return ("=====" in sample and any(s in sample for s in _RAS_SIGNS)) or "] PEER_DEAD: Process " in sample


def kind_of(head: bytes) -> HangNote | None:
    """The note of a hang-evidence file, from its first bytes; None: not one."""
    form = flight_recorder_form(head)
    if form is not None:
        return "Flight Recorder dump (pickle)" if form == "pickle" else "Flight Recorder dump (JSON)"
    if head[:1] == b"\x80":
        return None
    text = head[:65536].decode("utf-8", "replace")
    tool = stack_tool(text)
    if tool is not None:
        notes: dict[str, HangNote] = {
            "py-spy": "py-spy dump",
            "gdb": "gdb backtrace",
            "faulthandler": "faulthandler dump",
        }
        return notes[tool]
    if is_ras(text):
        return "NCCL RAS report"
    return None
