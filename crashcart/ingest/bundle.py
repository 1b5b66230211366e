"""Ingest stage: open a bundle (directory, archive or one log file), classify its files, read lines back.

Input: a path. Output: a ``Bundle`` whose files are real files on disk (archives are extracted safely
by ``extract``), each classified by name and content, plus the optional manifest. I/O: reads the
bundle; writes only into the work directory. ``canonical_line`` defines the exact text of a line that
every Evidence quotes and that ``verify`` compares against.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from crashcart.errors import EmptyBundle, NoLogsFound
from crashcart.ingest import extract, hang_kinds, heads
from crashcart.ingest.manifest import Manifest, _is_manifest, _parse_manifest
from crashcart.ingest.sniff import _binary_reason, _is_utf16, _read_head, _transcode_utf16
from crashcart.models import BundleFile, ClockKind, FileKind, SkippedFile
from crashcart.settings import BundleLimits
from crashcart.text import clock, prefix

SCANNED_KINDS: frozenset[FileKind] = frozenset({"rank_log", "combined_log", "kernel_log", "scheduler", "log"})
HEAD_BYTES = extract.HEAD_BYTES  # what classification reads of each file

_ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_TRUNCATED = " …[line truncated]"
_KERNEL_NAME = re.compile(r"(?:^|[/_.-])(dmesg|kern|kernel|journal|syslog|messages)(?:[/_.-]|$)", re.I)
_SCHED_NAME = re.compile(r"(?:^|[/_.-])(sacct|scontrol|squeue|sinfo|events?|slurmctld|slurmd)(?:[/_.-]|$)", re.I)
_COMBINED_NAME = re.compile(r"(?:^|/)(slurm-\d+(?:_\d+)?\.(?:out|err|log)|.*\.(?:out|err))$", re.I)


# RFC 3164 / journalctl short: "<Mmm dd hh:mm:ss> <host> <tag>"; a monitoring alert may quote such a line after
# its own words ("Xid errors on instance: <host>, Error: May 19 07:08:57 <host> kernel: ..."), so it is searched
# for after any space, comma or colon rather than only at the start.
_SYSLOG_HOST = re.compile(
    r"(?:^|(?<=[\s,:]))(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\S+) "
    r"(?P<host>[A-Za-z0-9][\w.-]*) (?:kernel|systemd|slurmd|nvidia|sshd|[\w.-]+\[\d+\])"
)
_LOG_EXT = {".log", ".out", ".err", ".txt", ".stdout", ".stderr", ""}
LAUNCH_SCRIPT_EXT = frozenset({".sh", ".bash", ".sbatch", ".slurm"})  # config files scanned for launch settings only
_CONFIG_EXT = {".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".json", ".env", ".py", *LAUNCH_SCRIPT_EXT}
_IMAGE_EXT = {".png", ".jpg", ".jpeg", ".gif", ".webp"}


def canonical_line(raw: bytes, max_bytes: int) -> str:
    """The exact text CrashCart quotes for one line of a file.

    Strips the line ending (``\\n`` and a preceding ``\\r``) and ANSI colour/control sequences,
    decodes UTF-8 replacing invalid bytes with U+FFFD, and cuts lines longer than ``max_bytes``
    (marking the cut). Only ``\\n`` ends a line, so line numbers match ``wc -l`` and editors.
    """
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    cut = len(raw) > max_bytes
    if cut:
        raw = raw[:max_bytes]
    if b"\x1b" in raw:
        raw = _ANSI.sub(b"", raw)
    text = raw.decode("utf-8", "replace")
    if cut:
        text = text.rstrip("\ufffd") + _TRUNCATED
    return text


@dataclass
class LineIndex:
    """Sparse index of a file: (first line number, byte offset) at each scan buffer boundary, plus ``known``
    exact offsets of single lines (the scanner's hit lines, and lines located since), so that the lines
    around a finding are read from the finding's own line, not from the buffer boundary before it."""

    checkpoints: list[tuple[int, int]]
    lines: int
    known: dict[int, int] = field(default_factory=dict)  # line -> byte offset of its first byte
    _known_sorted: list[int] | None = field(default=None, repr=False, compare=False)

    def start_for(self, line: int) -> tuple[int, int]:
        """The indexed (line, offset) nearest before or at ``line``; (1, 0) when none is."""
        best = (1, 0)
        i = bisect.bisect_right(self.checkpoints, (line, _NO_OFFSET)) - 1
        if i >= 0:
            best = self.checkpoints[i]
        if self.known:
            keys = self._known_sorted
            if keys is None:
                keys = self._known_sorted = sorted(self.known)
            j = bisect.bisect_right(keys, line) - 1
            if j >= 0 and keys[j] > best[0]:
                best = (keys[j], self.known[keys[j]])
        return best

    def remember(self, line: int, offset: int) -> None:
        if line not in self.known:
            self.known[line] = offset
            if self._known_sorted is not None:
                bisect.insort(self._known_sorted, line)


_NO_OFFSET = 1 << 62  # sorts after every real offset: bisect by line number alone
BACK_READ = 8 * 1024  # first block read backwards from a line (doubled while more lines are needed)
LOCATE_LINES = 4096  # a line's offset is counted on from an indexed line at most this many lines before it
OPEN_FILES = 32  # descriptors a bundle keeps open for reading lines back
BACK_BUDGET = 4 * 1024 * 1024  # beyond this many bytes read backwards, read forwards from the index instead


class Bundle:
    """An opened bundle. Use as a context manager so extracted files are removed afterwards."""

    def __init__(
        self,
        source: Path,
        files: list[BundleFile],
        physical: dict[str, Path],
        skipped: list[SkippedFile],
        manifest: Manifest | None,
        limits: BundleLimits,
        cleanup_dirs: list[Path],
        year: int | None,
    ) -> None:
        self.source = source
        self.files = files
        self.skipped = skipped
        self.manifest = manifest
        self.limits = limits
        self.year = year
        self._physical = physical
        self._index: dict[str, LineIndex] = {}
        self._cleanup_dirs = cleanup_dirs
        self._on_close: list[Callable[[], None]] = []
        self._fds: dict[str, int] = {}  # open descriptors for reading back, least recently used first

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def on_close(self, stop: Callable[[], None]) -> None:
        """Call ``stop`` when the bundle closes, before its files are removed (e.g. to stop threads reading them)."""
        self._on_close.append(stop)

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popitem()[1])
        while self._on_close:
            self._on_close.pop()()
        for d in self._cleanup_dirs:
            shutil.rmtree(d, ignore_errors=True)
        self._cleanup_dirs = []

    def file(self, path: str) -> BundleFile | None:
        return next((f for f in self.files if f.path == path), None)

    def physical(self, path: str) -> Path | None:
        return self._physical.get(path)

    def set_index(self, path: str, index: LineIndex) -> None:
        self._index[path] = index

    def line_count(self, path: str) -> int | None:
        idx = self._index.get(path)
        return idx.lines if idx else None

    def read_lines(self, path: str, start: int, end: int | None = None) -> list[str]:
        """Canonical text of lines ``start``..``end`` (1-based, inclusive); fewer if the file is shorter."""
        end = start if end is None else end
        phys = self._physical.get(path)
        if phys is None or start < 1 or end < start:
            return []
        idx = self._index.get(path)
        line, offset = idx.start_for(start) if idx is not None else (1, 0)
        out: list[str] = []
        max_bytes = self.limits.max_line_bytes
        with phys.open("rb") as fh:
            fh.seek(offset)
            while line <= end:
                raw = fh.readline(max_bytes + 2)
                if not raw:
                    break
                if not raw.endswith(b"\n") and len(raw) > max_bytes:
                    _skip_rest_of_line(fh)
                if line >= start:
                    out.append(canonical_line(raw, max_bytes))
                line += 1
        return out

    def lines_before(self, path: str, line: int, count: int) -> list[str]:
        """``read_lines(path, max(1, line - count), line - 1)``, read backwards from ``line``'s own offset when
        the index knows it (or can find it a few lines on from an indexed line): the cost is the bytes of
        those lines, not of the distance to the last buffer boundary."""
        start = max(1, line - count)
        raw = self.raw_lines_before(path, line, count)
        if raw is None:
            return self.read_lines(path, start, line - 1)
        return [canonical_line(r, self.limits.max_line_bytes) for r in raw]

    def raw_lines_before(self, path: str, line: int, count: int) -> list[bytes] | None:
        """The bytes (newline removed) of the ``count`` lines before ``line`` (fewer at the start of the file),
        read backwards from ``line``'s offset; ``canonical_line`` of each is ``lines_before``. None when the
        offset is not known nearby or a giant line is in the way: then use ``read_lines``."""
        idx = self._index.get(path)
        if idx is None or line <= 1:
            return None if idx is None else []
        fd = self._fd(path)
        if fd is None:
            return None
        offset = self._locate(fd, idx, line)
        return None if offset is None else _read_back(fd, offset, min(count, line - 1))

    def _fd(self, path: str) -> int | None:
        """A read-only descriptor of ``path`` (``os.pread``: no shared position), kept for the next look-up."""
        fd = self._fds.pop(path, None)
        if fd is None:
            phys = self._physical.get(path)
            if phys is None:
                return None
            try:
                fd = os.open(phys, os.O_RDONLY)
            except OSError:
                return None
            while len(self._fds) >= OPEN_FILES:
                os.close(self._fds.pop(next(iter(self._fds))))
        self._fds[path] = fd  # most recently used last
        return fd

    def _locate(self, fd: int, idx: LineIndex, line: int) -> int | None:
        """Byte offset of ``line``: known, or counted on from the indexed line before it (then remembered)."""
        if (known := idx.known.get(line)) is not None:
            return known
        at, pos = idx.start_for(line)
        if line - at > LOCATE_LINES:
            return None  # too far from anything indexed: the caller reads forwards once instead
        while at < line:
            data = os.pread(fd, 64 * 1024, pos)
            if not data:
                return None
            i = -1
            for _ in range(line - at):
                i = data.find(b"\n", i + 1)
                if i == -1:
                    break
            if i == -1:
                at += data.count(b"\n")
                pos += len(data)
            else:
                at, pos = line, pos + i + 1
        idx.remember(line, pos)
        return pos


def _read_back(
    fd: int, offset: int, count: int, *, block: int = BACK_READ, budget: int = BACK_BUDGET
) -> list[bytes] | None:
    """The bytes of the ``count`` lines that end at byte ``offset`` (a line start), read backwards, newlines
    removed; fewer when the file starts sooner; None past ``budget`` bytes (a giant line)."""
    size = block
    while True:
        lo = max(0, offset - size)
        data = os.pread(fd, offset - lo, lo)
        parts = data.split(b"\n")[:-1]  # the bytes end with the newline of the line before ``offset``
        whole = parts if lo == 0 else parts[1:]  # the first piece may be the end of a longer line
        if len(whole) >= count or lo == 0:
            return whole[max(0, len(whole) - count) :]
        if size >= budget:
            return None
        size *= 2


def _skip_rest_of_line(fh: Any) -> None:
    while True:
        chunk = fh.readline(1024 * 1024)
        if not chunk or chunk.endswith(b"\n"):
            return


def open_bundle(
    source: Path,
    work_dir: Path,
    limits: BundleLimits,
    on_member: extract.OnMember | None = None,
    writer: extract.MemberWriter | None = None,
) -> Bundle:
    """Open ``source`` safely and classify what it holds. Raises ``BundleError`` subclasses.

    ``on_member`` is told of each file as soon as ingest has it, before it is classified, and ``writer``
    takes archive members' bytes (see ``extract.materialize``); ``may_be_scanned`` says cheaply whether a
    file can be one the scan reads. An archive's members are classified while the rest is extracted."""
    work_dir.mkdir(parents=True, exist_ok=True)
    looks: dict[Path, _Look] = {}

    def told(member: extract.Member, head: bytes | None) -> None:
        if on_member is not None:
            on_member(member, head)
        if head is not None and not _is_utf16(head):
            looks[member.physical] = _look(member.path, head, limits.max_line_bytes).slim()

    mat = extract.materialize(source, work_dir, limits, told, writer)
    cleanup = [mat.work] if mat.work is not None else []
    try:
        return _classify_all(source, mat, work_dir, limits, cleanup, looks)
    except BaseException:
        for d in cleanup:
            shutil.rmtree(d, ignore_errors=True)
        raise


@dataclass(frozen=True)
class _Look:
    """What a file's first ``HEAD_BYTES`` say about it: its classification but for the manifest's part."""

    kind: FileKind | None
    note: str | None
    lines: list[str]
    rank: int | None
    clock: ClockKind

    def slim(self) -> _Look:
        """Without the head's lines but a kernel log's first 200 (``_host_of``): 10,000 files, not 10,000 heads."""
        return _Look(self.kind, self.note, self.lines[:200] if self.kind == "kernel_log" else [], self.rank, self.clock)


def _look(path: str, head: bytes, max_line_bytes: int) -> _Look:
    kind, note = _kind_of(path, head)
    if kind is None:
        return _Look(None, note, [], None, "none")
    lines = _head_lines(head, max_line_bytes)
    found = clock.detect_clock(lines) if kind in SCANNED_KINDS else "none"
    return _Look(kind, note, lines, _rank_of(path, kind, lines), found)


def _classify_all(
    source: Path,
    mat: extract.Materialized,
    work_dir: Path,
    limits: BundleLimits,
    cleanup: list[Path],
    looks: dict[Path, _Look] | None = None,
) -> Bundle:
    """Classify every member: from ``looks`` (taken while extracting) where there, else from its head."""
    if not mat.members:
        raise EmptyBundle(f"{source.name} holds no files")
    skipped = list(mat.skipped)
    physical: dict[str, Path] = {}
    manifest: Manifest | None = None
    looked: list[tuple[extract.Member, _Look]] = []
    for m in mat.members:
        physical[m.path] = m.physical
        look = (looks or {}).get(m.physical)
        if look is None:
            head = _read_head(m.physical)
            if _is_utf16(head):
                physical[m.path] = _transcode_utf16(m.physical, work_dir, cleanup)
                head = _read_head(physical[m.path])
            look = _look(m.path, head, limits.max_line_bytes).slim()
        looked.append((m, look))
        if _is_manifest(m.path):
            manifest = _parse_manifest(physical[m.path])

    files: list[BundleFile] = []
    nodes = reversed(manifest.nodes) if manifest is not None else ()  # kernel log -> the first node naming it
    kernel_hosts = {n.kernel_log: n.host for n in nodes if n.kernel_log is not None}
    for m, look in looked:
        if look.kind is None:
            skipped.append(SkippedFile(path=m.path, reason=look.note or "not a log"))
            physical.pop(m.path, None)
            continue
        files.append(
            BundleFile(
                path=m.path,
                kind=look.kind,
                size=m.size,
                host=_host_of(m.path, look.kind, look.lines, kernel_hosts),
                rank=look.rank,
                clock=look.clock,
                compressed=m.compressed,
                note=look.note,
            )
        )
    if not any(f.kind in SCANNED_KINDS or f.kind in {"telemetry", "hang_evidence"} for f in files):
        names = ", ".join(s.path for s in skipped[:3])
        why = f" (skipped: {names})" if names else ""
        raise NoLogsFound(f"{source.name} has no log, kernel, scheduler or telemetry files{why}")
    year = _bundle_year(manifest, [physical[f.path] for f in files], limits.max_line_bytes)
    return Bundle(source, files, physical, skipped, manifest, limits, cleanup, year)


def _head_lines(head: bytes, max_bytes: int) -> list[str]:
    """``canonical_line`` of each non-empty line of ``head`` (the last one dropped when it may be cut)."""
    lines: list[str] | list[bytes]
    if len(head) <= max_bytes and b"\r" not in head and b"\x1b" not in head:
        try:  # nothing for canonical_line to strip or cut, and valid UTF-8: decode all the lines at once
            lines = head.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            lines = head.split(b"\n")
    else:
        lines = head.split(b"\n")
    if len(lines) > 1 and len(head) == HEAD_BYTES:
        lines = lines[:-1]  # the last piece may be a partial line
    keep = [p for p in lines if p or len(lines) == 1]
    return [p if isinstance(p, str) else canonical_line(p, max_bytes) for p in keep]


def is_launch_script(path: str) -> bool:
    """A job or launch script (``*.sh``, ``*.sbatch``, ``*.slurm``): a config file the scan reads for the few
    signatures that opt in with ``kinds = ["config", ...]`` (MASTER_ADDR and the like), never for failures."""
    return PurePosixPath(path.removesuffix(".gz")).suffix.lower() in LAUNCH_SCRIPT_EXT


def may_be_scanned(path: str) -> bool:
    """False for a file that by its name alone is never a ``SCANNED_KINDS`` or telemetry file (an image,
    the manifest); anything else may be, depending on its content."""
    suffix = PurePosixPath(path.removesuffix(".gz")).suffix.lower()
    return not _is_manifest(path) and suffix not in _IMAGE_EXT


def _kind_of(path: str, head: bytes) -> tuple[FileKind | None, str | None]:
    """Classify one file by name and content; (None, reason) means: do not analyse it."""
    name = PurePosixPath(path.removesuffix(".gz")).name
    suffix = PurePosixPath(name).suffix.lower()
    if _is_manifest(path):
        return "manifest", None
    if suffix in _IMAGE_EXT or head.startswith((b"\x89PNG", b"\xff\xd8\xff")):
        return "dashboard", None
    if not head:
        return None, "empty file"
    if hang := hang_kinds.kind_of(head):  # Flight Recorder, stack dumps, RAS: by content, whatever the name
        return "hang_evidence", hang
    if why := _binary_reason(head):
        packed = " once decompressed" if path.endswith(".gz") else ""
        return None, f"binary data, not text: {why}{packed}"
    text = head[:16384].decode("utf-8", "replace")
    if suffix == ".csv" or (suffix == ".json" and "DCGM_" in text) or "DCGM_FI_" in text[:2000]:
        return ("telemetry" if "DCGM" in text or "clocks" in text or "temperature" in text else "other"), None
    if suffix in {".json", ".yaml", ".yml"} and ('"involvedObject"' in text or "involvedObject:" in text):
        return "scheduler", None
    if _SCHED_NAME.search(name) and suffix not in {".py", ".sh"}:
        return "scheduler", None
    if suffix in _CONFIG_EXT and not _KERNEL_NAME.search(name):
        return "config", None
    lines = text.split("\n")[:200]
    if _KERNEL_NAME.search(name) or heads.kernel_lines(lines) > len(lines) // 3:
        return "kernel_log", None
    ranks = heads.named_ranks(lines)
    if len(ranks) >= 2:
        return "combined_log", None
    if prefix.rank_of_path(path) is not None or len(ranks) == 1:
        return "rank_log", None
    if _COMBINED_NAME.search(path):
        return "log", None
    if suffix in _LOG_EXT or suffix.isdigit() or suffix.lstrip(".").isdigit():
        return "log", None
    return "log", None


def _host_of(path: str, kind: FileKind, lines: list[str], kernel_hosts: dict[str, str]) -> str | None:
    if path in kernel_hosts:
        return kernel_hosts[path]
    if kind == "kernel_log":
        for ln in lines[:200]:
            m = _SYSLOG_HOST.search(ln)
            if m:
                return m.group("host")
    return prefix.host_of_path(path)


def _rank_of(path: str, kind: FileKind, lines: list[str]) -> int | None:
    if kind != "rank_log":
        return None
    rank = prefix.rank_of_path(path)
    if rank is not None:
        return rank
    ranks = {p.rank for p in map(prefix.view, filter(prefix.may_name_rank, lines[:200])) if p.rank is not None}
    return ranks.pop() if len(ranks) == 1 else None


def _bundle_year(manifest: Manifest | None, heads: list[Path], max_line_bytes: int) -> int | None:
    """The manifest's collection year, else that of the first of ``heads`` (files in order) whose head gives one."""
    if manifest is not None and manifest.collected_at is not None:
        return manifest.collected_at.year
    for phys in heads:  # heads are read again, until one gives a year: classification keeps none
        with contextlib.suppress(OSError):
            if (year := clock.infer_year(_head_lines(_read_head(phys), max_line_bytes))) is not None:
                return year
    return None
