"""PyTorch Flight Recorder dumps: recognise, parse (JSON, or pickle with the plain loader), and locate entries.

A dump is what ``torch._C._distributed_c10d._dump_fr_trace()`` (pickle) or ``_dump_fr_trace_json()`` (JSON, one
line) returns, written per rank to ``<prefix><rank>`` (``TORCH_FR_DUMP_TEMP_FILE``, default
``~/.cache/torch/comm_lib_trace_rank_``; the older ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``). Its keys (torch 2.13,
dump ``version`` "2.10"): ``version``, ``pg_config`` (per PG: ``name``, ``desc``, ``ranks``), ``pg_status`` (per
PG: ``last_enqueued_collective``, ``last_started_collective``, ``last_completed_collective``; strings in the JSON
form), ``entries`` (the ring buffer, oldest first: ``record_id``, ``pg_id``, ``process_group`` [name, desc],
``collective_seq_id``, ``p2p_seq_id``, ``op_id``, ``profiling_name`` (``nccl:all_reduce``, ``gloo:broadcast``),
``time_created_ns``, ``input_sizes``, ``input_dtypes``, ``output_sizes``, ``state`` (scheduled / started /
completed), ``timeout_ms``, ``is_p2p``, ``retired``, ``frames`` (pickle only)). The rank is not in the dump: it
is the number that ends the file name.

An entry is cited by a locator, ``entries[<i>]``, on the line where the entry begins (line 1 of the usual
one-line JSON; line 1 of a pickle); the cited text is ``entry_text`` of that entry, which ``verify`` re-derives
from the file (``reread``). Pure but for reading the file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from crashcart.ingest.hang_kinds import flight_recorder_form
from crashcart.scan.hang_evidence.safe_pickle import BadPickle, UnsafePickle, load_plain
from crashcart.text.prefix import rank_of_path

MAX_DUMP_BYTES = 64 * 1024 * 1024  # torch's default ring of 2,000 entries with stacks is a few MB
MAX_ENTRIES = 200_000
Form = Literal["json", "pickle"]

_TRAILING_RANK = re.compile(r"(\d+)$")


class DumpRefused(Exception):
    """A file that looks like a dump but cannot be used; the message is the reason."""


@dataclass(frozen=True)
class Entry:
    index: int  # position in ``entries``
    line: int  # the line the entry begins on
    seq: int  # collective_seq_id (p2p_seq_id for a p2p entry)
    op: str  # profiling_name
    pg: str  # process group name (process_group[0])
    pg_desc: str
    sizes: str  # input_sizes, compact JSON
    dtypes: str
    state: str
    time_ns: int | None
    timeout_ms: int | None
    p2p: bool
    frame: str | None  # the innermost user frame, when the dump holds stacks (pickle form)


@dataclass
class Dump:
    path: str
    form: Form
    rank: int | None
    version: str
    entries: list[Entry]
    pg_status: dict[str, dict[str, int]] = field(default_factory=dict)
    pg_ranks: dict[str, list[int]] = field(default_factory=dict)
    pg_desc: dict[str, str] = field(default_factory=dict)


def rank_of(path: str) -> int | None:
    """The rank a dump belongs to: the number its file name ends with (``comm_lib_trace_rank_3``,
    ``fr_trace_3.json``), else a rank its path names."""
    name = PurePosixPath(path).name
    stem = re.sub(r"\.(json|pkl|pickle|bin|dump)$", "", name, flags=re.I)
    m = _TRAILING_RANK.search(stem)
    if m:
        return int(m.group(1))
    return rank_of_path(path)


def load(physical: Path, path: str, form: Form, max_bytes: int = MAX_DUMP_BYTES) -> Dump:
    """Parse one dump. Raises ``DumpRefused`` with the reason (too large, truncated, hostile, not a dump)."""
    size = physical.stat().st_size
    if size > max_bytes:
        raise DumpRefused(f"Flight Recorder dump of {size:,} bytes, over the {max_bytes:,}-byte limit: not read")
    data = physical.read_bytes()
    raw: Any
    if form == "pickle":
        try:
            raw = load_plain(data)
        except (UnsafePickle, BadPickle) as exc:
            raise DumpRefused(f"Flight Recorder pickle {exc}") from exc
    else:
        try:
            raw = json.loads(data.decode("utf-8", "replace"))
        except (ValueError, RecursionError) as exc:
            raise DumpRefused(f"Flight Recorder JSON is truncated or not JSON: {str(exc)[:160]}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("entries"), list):
        raise DumpRefused("not a Flight Recorder dump: no 'entries' list")
    entries_raw = raw["entries"]
    if len(entries_raw) > MAX_ENTRIES:
        raise DumpRefused(f"Flight Recorder dump with {len(entries_raw):,} entries, over {MAX_ENTRIES:,}: not read")
    lines = _entry_lines(data, len(entries_raw)) if form == "json" else None
    entries = []
    for i, e in enumerate(entries_raw):
        if not isinstance(e, dict):
            raise DumpRefused(f"Flight Recorder entry {i} is not a record")
        entries.append(_entry(i, lines[i] if lines else 1, e))
    return Dump(
        path=path,
        form=form,
        rank=rank_of(path),
        version=str(raw.get("version", "")),
        entries=entries,
        pg_status=_pg_status(raw.get("pg_status")),
        pg_ranks=_pg_ranks(raw.get("pg_config")),
        pg_desc=_pg_desc(raw.get("pg_config")),
    )


def _entry_lines(data: bytes, count: int) -> list[int]:
    """The line each entry begins on: each entry holds one ``"collective_seq_id"`` key (its stack frames none)."""
    out: list[int] = []
    line, pos = 1, 0
    key = b'"collective_seq_id"'
    while len(out) < count:
        at = data.find(key, pos)
        if at < 0:
            break
        line += data.count(b"\n", pos, at)
        out.append(line)
        pos = at + len(key)
    out.extend([out[-1] if out else 1] * (count - len(out)))
    return out


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.lstrip("-").isdigit() and len(v) < 40:
        return int(v)
    return None


def _compact(v: Any, budget: int = 160) -> str:
    try:
        text = json.dumps(v, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):
        text = "?"
    return text if len(text) <= budget else text[: budget - 1] + "…"


def _entry(i: int, line: int, e: dict[str, Any]) -> Entry:
    pg = e.get("process_group")
    name, desc = (
        (str(pg[0]), str(pg[1])) if isinstance(pg, list | tuple) and len(pg) == 2 else (str(e.get("pg_id")), "")
    )
    p2p = e.get("is_p2p") is True
    seq = _int(e.get("p2p_seq_id" if p2p else "collective_seq_id"))
    return Entry(
        index=i,
        line=line,
        seq=seq if seq is not None else -1,
        op=str(e.get("profiling_name", "?"))[:80],
        pg=name[:80],
        pg_desc=desc[:80],
        sizes=_compact(e.get("input_sizes")),
        dtypes=_compact(e.get("input_dtypes"), 80),
        state=str(e.get("state", "?"))[:20],
        time_ns=_int(e.get("time_created_ns")),
        timeout_ms=_int(e.get("timeout_ms")),
        p2p=p2p,
        frame=_user_frame(e.get("frames")),
    )


def _user_frame(frames: Any) -> str | None:
    """The innermost frame outside torch: where the program called the collective."""
    if not isinstance(frames, list):
        return None
    for fr in frames[:64]:
        if not isinstance(fr, dict):
            continue
        filename = str(fr.get("filename", ""))
        if "/torch/" in filename or filename.startswith("<"):
            continue
        return f"{fr.get('name', '?')} ({PurePosixPath(filename).name}:{fr.get('line', '?')})"[:120]
    return None


def _pg_status(v: Any) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    if isinstance(v, dict):
        for pg, st in list(v.items())[:1000]:
            if isinstance(st, dict):
                out[str(pg)] = {str(k): n for k, val in st.items() if (n := _int(val)) is not None}
    return out


def _pg_ranks(v: Any) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    if not isinstance(v, dict):
        return out
    for pg, cfg in list(v.items())[:1000]:
        if not isinstance(cfg, dict):
            continue
        ranks: Any = cfg.get("ranks")
        if isinstance(ranks, str):
            try:
                ranks = json.loads(ranks)
            except ValueError:
                continue
        if isinstance(ranks, list) and ranks and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            out[str(cfg.get("name") or pg)] = [int(r) for r in ranks[:100_000]]
    return out


def _pg_desc(v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        return {}
    return {
        str(c.get("name") or pg): str(c.get("desc", ""))[:80] for pg, c in list(v.items())[:1000] if isinstance(c, dict)
    }


def who(dump: Dump) -> str:
    return f"rank {dump.rank}'s" if dump.rank is not None else "this"


def entry_text(dump: Dump, e: Entry) -> str:
    """The cited text of one entry: its locator, the rank, and what the entry says (re-derived by ``verify``)."""
    desc = f" ({e.pg_desc})" if e.pg_desc and e.pg_desc != "undefined" else ""
    seq = f"p2p_seq_id {e.seq}" if e.p2p else f"collective_seq_id {e.seq}"
    frame = f", called from {e.frame}" if e.frame else ""
    return (
        f"entries[{e.index}] of {who(dump)} Flight Recorder dump ({dump.form}): {e.op} {seq} of PG {e.pg}{desc}, "
        f"input_sizes {e.sizes}, state {e.state}{frame}"
    )


def reread(physical: Path, path: str, locator: str) -> tuple[int, str] | None:
    """(line, text) of the entry ``locator`` names, parsed afresh from the file; None when it is not there."""
    m = re.fullmatch(r"entries\[(\d+)\]", locator)
    if m is None:
        return None
    try:
        with physical.open("rb") as fh:
            head = fh.read(65536)
        form = flight_recorder_form(head)
        if form is None:
            return None
        dump = load(physical, path, form)
    except (DumpRefused, OSError):
        return None
    i = int(m.group(1))
    if i >= len(dump.entries):
        return None
    e = dump.entries[i]
    return e.line, entry_text(dump, e)
