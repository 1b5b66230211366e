"""Ingest, step one: turn a bundle source (directory, tar/zip archive, one log or ``.gz``) into files on disk.

Input: a path, a work directory and ``BundleLimits``. Output: ``Materialized`` (members + skipped).
I/O: reads the source; writes only into a fresh directory under ``work_dir``. Archives are streamed,
never extracted wholesale: unsafe names reject the bundle, links and devices are skipped, caps hold.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, Protocol

from crashcart.errors import BundleNotFound, BundleTooLarge, CorruptBundle, EmptyBundle, UnsafeBundlePath
from crashcart.ingest.archive import (
    BLOCK,
    HEAD_BYTES,
    NESTED,
    SourceKind,
    _BadMember,
    _Chunks,
    _detect,
    _human,
    _is_tar_header,
    _read_tar,
    _read_zip,
    _Reader,
    _short,
    _SourceCorrupt,
    _walk_dir,
)
from crashcart.models import SkippedFile
from crashcart.settings import BundleLimits

__all__ = [
    "HEAD_BYTES",
    "Materialized",
    "Member",
    "MemberSink",
    "MemberWriter",
    "OnMember",
    "materialize",
]


@dataclass(frozen=True)
class Member:
    """One file of the bundle: its bundle path and where its (decompressed) bytes are on disk."""

    path: str  # POSIX, relative to the bundle root, as named in the bundle (a ".gz" suffix is kept)
    physical: Path
    size: int  # decompressed size in bytes
    compressed: bool  # True if it was a .gz member we decompressed
    mtime: float | None


@dataclass
class Materialized:
    """What ``materialize`` produced. ``cleanup()`` removes only the directory we created."""

    source: Path
    source_kind: SourceKind
    members: list[Member]  # sorted by path
    skipped: list[SkippedFile]  # sorted by path; macOS metadata and expected.json are never listed
    work: Path | None  # directory we created (None if nothing was written)

    def cleanup(self) -> None:
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Materialized:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


# Told of each member once its bytes are all written (or all handed to the ``MemberWriter``, which has them
# on disk by the time ``materialize`` returns), with its first ``HEAD_BYTES`` when they passed through our
# hands (archive members, ``.gz`` files), else None (files read in place).
OnMember = Callable[[Member, bytes | None], None]


class MemberSink(Protocol):
    """Takes one archive member's bytes, in order, once they passed every check."""

    def write(self, data: bytes, /) -> None: ...

    def close(self, complete: bool) -> None:
        """No more bytes; ``complete`` False: extraction failed midway (the file is removed with the rest)."""
        ...


class MemberWriter(Protocol):
    """Where archive members' bytes go instead of straight into their files (see ``materialize``)."""

    def open(self, path: str, dest: Path) -> MemberSink:
        """A sink for member ``path``, whose bytes belong in ``dest`` (a new file in the work directory)."""
        ...

    def finish(self) -> None:
        """Return once every member opened is complete on disk; raise what failed to write one."""
        ...

    def abort(self) -> None:
        """Extraction failed: return once nothing writes into the work directory any more."""
        ...


def materialize(
    source: Path,
    work_dir: Path,
    limits: BundleLimits,
    on_member: OnMember | None = None,
    writer: MemberWriter | None = None,
) -> Materialized:
    """Make every file of ``source`` readable on disk, safely and within ``limits``.

    :param source: a directory, a ``.tar[.gz|.bz2|.xz]``/``.tgz``/``.zip`` archive, a log or a ``.gz`` log.
    :param work_dir: where a fresh extraction directory is created when anything must be written.
    :param on_member: called with each member (``OnMember``) while the rest of an archive is still being
        read, so that a caller can start on it; if ``materialize`` then raises, the members it announced
        are already removed.
    :param writer: receives the bytes of archive members (not ``.gz`` ones) instead of their files, e.g. to
        scan them on other threads while writing them; ``materialize`` returns once it has finished.
    :raises BundleNotFound, BundleTooLarge, UnsafeBundlePath, CorruptBundle, EmptyBundle:
    """
    if not source.exists():
        raise BundleNotFound(f"{source} does not exist; check the path")
    name = source.name or source.resolve().name or str(source)  # as the user named it (not a link target)
    source = source.resolve()
    if not (source.is_dir() or source.is_file()):
        raise BundleNotFound(f"{source} is not a regular file or directory; pass a bundle path")
    b = _Builder(source, name, work_dir, limits, on_member, writer)
    try:
        if source.is_dir():
            _walk_dir(b)
            return b.finish("dir")
        kind, comp = _detect(source, name)
        if kind == "file":
            b.add_in_place(name, source, source.stat())
            return b.finish("file")
        if kind == "gz":
            b.take_file_gz(name, source, None)
            return b.finish("file")
        b.packed = source.stat().st_size
        if b.packed == 0:
            raise EmptyBundle(f"{b.label} is an empty file; pass the complete archive")
        if kind == "zip":
            _read_zip(b)
            return b.finish("zip")
        _read_tar(b, comp)
        return b.finish("tar")
    except (_SourceCorrupt, tarfile.TarError, zipfile.BadZipFile) as exc:
        b.abort()
        cause = exc.__cause__ if isinstance(exc, _SourceCorrupt) and exc.__cause__ else exc
        raise CorruptBundle(
            f"{b.label} is truncated or corrupt: {_short(cause)}; re-create or re-download it"
        ) from cause
    except BaseException:
        b.abort()
        raise


# --- the builder: caps, bookkeeping, writing ------------------------------------------------------


@dataclass
class _Builder:
    source: Path
    label: str  # the source's name, used in every message
    work_dir: Path
    limits: BundleLimits
    on_member: OnMember | None = None
    writer: MemberWriter | None = None
    packed: int | None = None  # compressed size of an archive source, for the global ratio cap
    members: list[Member] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    work: Path | None = None
    total: int = 0  # bytes of members we keep (decompressed)
    stream: int = 0  # bytes read out of the archive (decompressed stream, skipped entries included)
    expanded: int = 0  # bytes any decompressor produced
    consumed: Callable[[], int] | None = None  # compressed bytes of the source read so far (a compressed tar)
    current: str | None = None  # the member being read, named when the archive turns out to be a bomb
    _files: set[str] = field(default_factory=set)
    _dirs: set[str] = field(default_factory=set)  # parents of the files taken
    _made: set[Path] = field(default_factory=set)  # directories created in the work dir and checked

    # caps
    def _count(self) -> None:
        if len(self.members) + len(self.skipped) >= self.limits.max_files:
            raise BundleTooLarge(
                f"{self.label} has more than {self.limits.max_files} files (limit CRASHCART_MAX_FILES)"
            )

    def _grow(self, path: str, n: int, member_size: int) -> None:
        self.total += n
        if member_size > self.limits.max_file_bytes:
            raise BundleTooLarge(
                f"{path} in {self.label} is larger than the {_human(self.limits.max_file_bytes)} "
                "per-file limit; trim it before diagnosing"
            )
        if self.total > self.limits.max_total_bytes:
            self._too_big()

    def _too_big(self) -> None:
        raise BundleTooLarge(
            f"{self.label} expands past {_human(self.limits.max_total_bytes)} (limit CRASHCART_MAX_BUNDLE_BYTES)"
        )

    def on_stream(self, n: int) -> None:
        self.stream += n
        # Headers and padding get some slack; skipped entries' data does not escape the cap.
        if self.stream > self.limits.max_total_bytes + 4096 * self.limits.max_files + BLOCK:
            self._too_big()
        self._inflate(n, self.stream, self.packed)

    def _inflate(self, n: int, produced: int, packed: int | None, read: int | None = None) -> None:
        """Zip-bomb guard: bytes produced vs compressed bytes, once past ``ratio_floor_bytes``: the member's
        and the whole source's totals, and what was produced so far against the compressed bytes read so far
        (``read`` for this member; ``consumed`` for a compressed tar), so that a bomb is refused as soon as
        it has expanded past the ratio, not once its whole compressed size has been used up."""
        self.expanded += n
        lim = self.limits
        if produced <= lim.ratio_floor_bytes and self.expanded <= lim.ratio_floor_bytes:
            return
        source_read = self.consumed() if self.consumed is not None else None
        for out, inp in (
            (produced, packed),
            (self.expanded, self.packed),
            (produced, read),
            (self.stream, source_read),
        ):
            if inp is not None and out > lim.ratio_floor_bytes and out > lim.max_ratio * max(inp, 1):
                self.bomb(self.current or self.label, out, inp)

    def bomb(self, member: str, out: int, inp: int) -> NoReturn:
        """Refuse the bundle: ``member`` expands ``out`` bytes from ``inp`` compressed ones, past the ratio."""
        where = member if member == self.label else f"{member} in {self.label}"
        raise BundleTooLarge(
            f"{where} is a decompression bomb: it expands more than {self.limits.max_ratio:g}x its compressed "
            f"size ({_human(out)} from {_human(inp)}); refused before unpacking the rest "
            "(limit CRASHCART_MAX_RATIO); unpack it yourself if it is genuine"
        )

    def watch_source(self, consumed: Callable[[], int]) -> None:
        self.consumed = consumed

    def check_declared(self, path: str, size: int, packed: int) -> None:
        """A zip entry whose declared sizes already exceed the ratio is refused before it is read (zipfile
        never produces more than the declared size)."""
        lim = self.limits
        if size > lim.ratio_floor_bytes and size > lim.max_ratio * max(packed, 1):
            self.bomb(path, size, packed)

    # bookkeeping
    def skip(self, path: str, reason: str) -> None:
        self._count()
        self.skipped.append(SkippedFile(path=path, reason=reason))

    def _claim(self, path: str) -> bool:
        """Reserve ``path`` for a member; False (and a skip record) on a duplicate or a clash."""
        reason = None
        if path in self._files:
            reason = "duplicate entry (the first one is kept)"
        elif path in self._dirs:
            reason = "clashes with a directory of the same name"
        else:
            clash = next((p for p in _parents(path) if p in self._files), None)
            if clash is not None:
                reason = f"clashes with the file {clash}"
        if reason is not None:
            self.skip(path, reason)
            return False
        self._files.add(path)
        self._dirs.update(_parents(path))
        return True

    def _work_root(self) -> Path:
        if self.work is None:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            self.work = Path(tempfile.mkdtemp(prefix="crashcart-", dir=self.work_dir)).resolve()
        return self.work

    def _dest(self, path: str) -> Path:
        """Where member ``path`` is written. Its directory is resolved once (it must stay inside the work
        dir); the file itself is then created with ``O_EXCL``, which never follows a link."""
        root = self._work_root()
        dest = root.joinpath(*path.split("/"))
        parent = dest.parent
        if parent not in self._made:
            if not parent.resolve().is_relative_to(root):
                raise UnsafeBundlePath(f"{self.label}: member {path!r} resolves outside the extraction directory")
            parent.mkdir(parents=True, exist_ok=True)
            self._made.add(parent)
        return dest

    # taking members
    def add_in_place(self, path: str, physical: Path, st: os.stat_result) -> None:
        """A file read where it is (directory bundles, a single plain log)."""
        if not self._claim(path):
            return
        self._count()
        self._grow(path, st.st_size, st.st_size)
        self._add(Member(path, physical, st.st_size, False, st.st_mtime), None)

    def copy(self, path: str, reader: _Chunks, size: int, mtime: float | None) -> None:
        """Copy an archive member into the work directory in bounded blocks."""
        if size > self.limits.max_file_bytes:
            self._grow(path, 0, size)
        if not self._claim(path):
            return
        self._count()
        dest = self._dest(path)
        written = 0
        head = b""
        self.current = path
        sink = self.writer.open(path, dest) if self.writer is not None else _FileSink(dest)
        try:
            while block := reader.read(BLOCK):
                written += len(block)
                self._grow(path, len(block), written)
                sink.write(block)
                if len(head) < HEAD_BYTES:
                    head += block[: HEAD_BYTES - len(head)]
        except BaseException:
            sink.close(complete=False)
            raise
        sink.close(complete=True)
        self._add(Member(path, dest, written, False, mtime), head)

    def take_gz(self, path: str, reader: _Reader, packed: int, mtime: float | None) -> None:
        """Decompress a ``.gz`` member into the work directory; a bad one is skipped, not fatal."""
        if not self._claim(path):
            return
        self._count()
        dest = self._dest(path)
        written = 0
        head = b""
        self.current = path
        start = _tell(reader)
        try:
            with dest.open("xb") as out, gzip.GzipFile(fileobj=reader, mode="rb") as gz:
                while True:
                    try:
                        block = gz.read(BLOCK)
                    except (OSError, EOFError, zlib.error) as exc:
                        raise _BadMember(f"corrupt or truncated .gz file: {_short(exc)}") from exc
                    if not block:
                        break
                    if written == 0 and _is_tar_header(block):
                        raise _BadMember(NESTED)
                    written += len(block)
                    self._grow(path, len(block), written)
                    now = _tell(reader)
                    self._inflate(len(block), written, packed, None if now is None or start is None else now - start)
                    out.write(block)
                    if len(head) < HEAD_BYTES:
                        head += block[: HEAD_BYTES - len(head)]
        except _BadMember as exc:
            dest.unlink(missing_ok=True)
            self._files.discard(path)
            self.skip(path, exc.reason)
            return
        self._add(Member(path, dest, written, True, mtime), head)

    def _add(self, member: Member, head: bytes | None) -> None:
        self.members.append(member)
        if self.on_member is not None:
            self.on_member(member, head)

    def take_file_gz(self, path: str, physical: Path, st: os.stat_result | None) -> None:
        """A ``.gz`` file on disk: the whole source (``st`` None: errors are fatal) or a directory member."""
        whole = st is None
        try:
            raw = physical.open("rb")
        except OSError as exc:
            if whole:
                raise BundleNotFound(f"cannot read {physical}: {exc.strerror}") from exc
            self.skip(path, f"cannot read: {exc.strerror}")
            return
        with raw:
            st = st or os.fstat(raw.fileno())
            before = len(self.skipped)
            self.take_gz(path, raw, st.st_size, st.st_mtime)
        if whole and len(self.skipped) > before:
            bad = self.skipped.pop()
            raise CorruptBundle(f"{self.label} cannot be used: {bad.reason}; re-create it")

    def finish(self, kind: SourceKind) -> Materialized:
        if self.writer is not None:
            self.writer.finish()
        if not self.members:
            self.abort()
            if self.skipped:
                first = self.skipped[0]
                raise EmptyBundle(
                    f"{self.label} has no file we can read ({len(self.skipped)} skipped, "
                    f"e.g. {first.path}: {first.reason})"
                )
            raise EmptyBundle(f"{self.label} holds no files; check it is the right bundle")
        self.members.sort(key=lambda m: m.path)
        self.skipped.sort(key=lambda s: s.path)
        return Materialized(self.source, kind, self.members, self.skipped, self.work)

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None


class _FileSink:
    def __init__(self, dest: Path) -> None:
        self._out = dest.open("xb")

    def write(self, data: bytes, /) -> None:
        self._out.write(data)

    def close(self, complete: bool) -> None:
        self._out.close()


def _tell(reader: object) -> int | None:
    """Compressed bytes read so far from a member's reader, when it can tell."""
    tell = getattr(reader, "tell", None)
    if tell is None:
        return None
    try:
        pos = tell()
    except (OSError, ValueError, AttributeError):
        return None
    return pos if isinstance(pos, int) else None


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
