"""``py-spy dump --json`` (py-spy 0.2+, src/dump.rs ``serde_json::to_string_pretty(&traces)``), read line by line.

The dump is a JSON array of ``StackTrace`` objects (src/stack_trace.rs), one per thread, printed by serde's pretty
printer with two-space indents in field order: ``pid``, ``thread_id``, ``thread_name``, ``os_thread_id``,
``active``, ``owns_gil``, ``frames`` (each ``name``, ``filename``, ``module``, ``short_filename``, ``line``,
``locals``, ...) and ``process_info`` (``pid``, ``command_line``, ``parent``). Reading it by lines (not ``json``)
keeps each frame's own line number, so a citation is the dump's own text. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from crashcart.scan.hang_evidence import stacks

_TRACE_FIELD = re.compile(r'^    "(?P<key>pid|thread_name|process_info)": (?P<value>.*?),?\s*$')
_FRAME_FIELD = re.compile(r'^        "(?P<key>name|filename|short_filename|line)": (?P<value>.*?),?\s*$')
_CMD = re.compile(r'^      "command_line": (?P<value>".*"),?\s*$')
_OPEN = re.compile(r"^  \{\s*$")


def looks_like(lines: Sequence[str]) -> bool:
    """The first lines of a ``py-spy dump --json``."""
    head = [ln for ln in lines[:12] if ln.strip()]
    return bool(head) and head[0].strip() == "[" and any(ln.startswith('    "thread_id": ') for ln in head)


def _str(value: str) -> str:
    try:
        got = json.loads(value)
    except ValueError:
        return value.strip('"')
    return got if isinstance(got, str) else ""


def parse(path: str, lines: Sequence[str], rank: int | None) -> list[stacks.Process]:
    """The processes of the dump: threads grouped by ``pid``, frames innermost first as py-spy lists them."""
    by_pid: dict[str, stacks.Process] = {}
    thread: stacks.Thread | None = None
    frame: dict[str, str] = {}
    start = 0
    pid = ""
    cur: stacks.Process | None = None

    def close_frame() -> None:
        if thread is not None and frame.get("name"):
            file = frame.get("short_filename") or frame.get("filename", "")
            thread.frames.append(stacks.Frame(frame["name"], file, int(frame["at"]), frame.get("line", "?")))
        frame.clear()

    for n, ln in enumerate(lines, start=1):
        if _OPEN.match(ln):
            close_frame()
            thread, start, pid = None, n, ""
            continue
        if m := _TRACE_FIELD.match(ln):
            key, value = m.group("key"), m.group("value")
            if key == "pid":
                pid = value
                cur = by_pid.setdefault(pid, stacks.Process(path, "py-spy", rank, pid))
            elif key == "thread_name" and cur is not None:
                name = _str(value) if value != "null" else ""  # null: the threading module named none
                thread = stacks.Thread(name or f"thread@{start}", n)  # cited from this line on
                cur.threads.append(thread)
            elif key == "process_info":
                close_frame()
            continue
        if (m := _FRAME_FIELD.match(ln)) and thread is not None:
            key, value = m.group("key"), m.group("value")
            if key == "name":
                close_frame()
                frame["name"], frame["at"] = _str(value), str(n)
            elif key == "line":
                frame["line"] = value if value.isdigit() and value != "0" else "?"
            else:
                frame[key] = _str(value) if value != "null" else ""
            continue
        if (m := _CMD.match(ln)) and cur is not None and cur.cmd is None:
            cur.cmd = _str(m.group("value"))
    close_frame()
    out = [p for p in by_pid.values() if p.threads]
    for p in out:
        p.lines = lines
    return out
