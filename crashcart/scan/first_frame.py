"""Scan stage: the first frame of a stack whose header says which stack it is (issue 14, capability 10).

``native.frame0`` matches a frame #0 on its own line (c10's ``frame #0:``, gdb's ``#0``, glog's ``PC: @``), and
also the headers after which the first frame comes unnumbered:

- CPython Python/traceback.c (3.x) ``_Py_DumpTracebackThreads``, which faulthandler prints on a fatal signal:
  ``Current thread 0x<id> (most recent call first):`` then ``  File "<path>", line <n> in <func>``, innermost
  first;
- glog src/signalhandler.cc (0.3-0.7) ``*** SIG<X> (@0x..) received by PID <p> (TID 0x..) ...; stack trace: ***``
  and src/utilities.cc ``*** Check failure stack trace: ***``, then ``    @     0x<addr>  <symbol|(unknown)>``.

For those, the finding cites the first frame line after the header (same rank prefix), with its function; a header
with no frame after it goes. Pure apart from reading bundle lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from crashcart.catalogue import Catalogue
from crashcart.ingest.bundle import Bundle
from crashcart.models import BundleFile, Evidence, Finding
from crashcart.text import prefix

SIGNATURE = "native.frame0"
HEADER_FIELDS = ("thread", "glog_stack")
LOOK = 3  # lines after a header where its first frame may be (faulthandler may leave a blank line)
_PY_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_GLOG_FRAME = re.compile(r"^\s*@ +0x[0-9a-fA-F]+ +(?P<pc>\S.*?)\s*$")


def first_frames(
    cat: Catalogue, bundle: Bundle, bf: BundleFile, findings: list[Finding], evidence_id: Callable[[], str]
) -> list[Finding]:
    """``findings`` with each stack header's frame0 finding citing the stack's first frame instead."""
    if not any(f.signature == SIGNATURE and _header(f) for f in findings):
        return findings
    out: list[Finding] = []
    for f in findings:
        if f.signature != SIGNATURE or not _header(f):
            out.append(f)
            continue
        got = _frame(bundle, bf, f.evidence[0].line, f.evidence[0].text)
        if got is None:
            continue  # a header alone says no frame
        at, text, fields = got
        fields = {
            **{k: v for k, v in f.fields.items() if k not in HEADER_FIELDS},
            **fields,
            "_header_line": str(f.evidence[0].line),
        }
        ev = Evidence(id=evidence_id(), file=bf.path, line=at, text=text)
        summary = cat.summarize(cat.index[SIGNATURE], fields)
        out.append(f.model_copy(update={"evidence": [ev], "fields": fields, "summary": summary}))
    return out


def _header(f: Finding) -> bool:
    return any(f.fields.get(k) for k in HEADER_FIELDS)


def _frame(bundle: Bundle, bf: BundleFile, line: int, head: str) -> tuple[int, str, dict[str, str]] | None:
    want = prefix.view(head).rank
    glog = "stack trace: ***" in head
    for at, text in enumerate(bundle.read_lines(bf.path, line + 1, line + LOOK), start=line + 1):
        view = prefix.view(text)
        if view.rank != want:
            continue
        if not view.rest.strip():
            continue
        m = (_GLOG_FRAME if glog else _PY_FRAME).match(view.rest)
        if m is None:
            return None
        if glog:
            return at, text, {"pc": m["pc"]}
        return at, text, {"func": m["func"], "lib": f"{m['file']}:{m['line']}"}
    return None
