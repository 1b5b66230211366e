"""Tests for ``crashcart.ingest.extract``: every hostile archive is built here with tarfile/zipfile/gzip.

Covers directories, tar/zip round-trips, ``.gz`` members, unsafe names, links and devices, caps
(zip bombs, counts, sizes), corrupt and empty archives, single files, exclusions and cleanup.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crashcart.errors import (
    BundleError,
    BundleNotFound,
    BundleTooLarge,
    CorruptBundle,
    EmptyBundle,
    UnsafeBundlePath,
)
from crashcart.ingest.extract import Materialized, Member, materialize
from crashcart.settings import BundleLimits

MTIME = 1_700_000_000
LIMITS = BundleLimits()

Entry = tuple[str, bytes] | tarfile.TarInfo


# --- builders -------------------------------------------------------------------------------------


def _info(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE, **attrs: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.type = kind
    info.mtime = MTIME
    for key, value in attrs.items():
        setattr(info, key, value)
    return info


def make_tar(path: Path, entries: Iterable[Entry], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tf:  # type: ignore[call-overload]
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tf.addfile(entry)
            else:
                name, data = entry
                tf.addfile(_info(name, len(data)), io.BytesIO(data))
    return path


def make_zip(path: Path, entries: Iterable[tuple[str | zipfile.ZipInfo, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return path


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def paths(mat: Materialized) -> list[str]:
    return [m.path for m in mat.members]


def reasons(mat: Materialized) -> dict[str, str]:
    return {s.path: s.reason for s in mat.skipped}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    w = tmp_path / "work"
    w.mkdir()
    return w


# --- directories ----------------------------------------------------------------------------------


def test_directory_is_read_in_place_and_links_and_fifos_are_skipped(tmp_path: Path, work: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("do not read\n")
    bundle = tmp_path / "bundle"
    (bundle / "nodes" / "n1").mkdir(parents=True)
    (bundle / "rank-0.log").write_text("hello\n")
    (bundle / "nodes" / "n1" / "dmesg.log").write_text("kernel\n" * 10)
    (bundle / "nodes" / "n1" / "kern.log.1.gz").write_bytes(gz(b"old kernel\n"))
    (bundle / "nodes" / "n1" / "kern.log.2.gz").write_bytes(gz(b"older kernel\n")[:-4])
    (bundle / "nodes" / "n1" / "logs.tgz").write_bytes(b"")
    (bundle / "link.log").symlink_to(outside)
    (bundle / "linkdir").symlink_to(tmp_path)
    os.mkfifo(bundle / "pipe")
    (bundle / "expected.json").write_text("{}")
    (bundle / ".DS_Store").write_bytes(b"\0")
    (bundle / "__MACOSX").mkdir()
    (bundle / "__MACOSX" / "._rank-0.log").write_bytes(b"\0")
    before = files_under(bundle)

    mat = materialize(bundle, work, LIMITS)

    assert mat.source_kind == "dir"
    assert paths(mat) == ["nodes/n1/dmesg.log", "nodes/n1/kern.log.1.gz", "rank-0.log"]
    by_path = {m.path: m for m in mat.members}
    plain = by_path["rank-0.log"]
    assert plain.physical == (bundle / "rank-0.log").resolve()
    assert (plain.size, plain.compressed) == (6, False)
    assert plain.mtime == pytest.approx((bundle / "rank-0.log").stat().st_mtime)
    packed = by_path["nodes/n1/kern.log.1.gz"]
    assert packed.compressed and packed.size == len(b"old kernel\n")
    assert packed.physical.read_bytes() == b"old kernel\n"
    assert mat.work is not None and packed.physical.is_relative_to(mat.work)
    assert reasons(mat) == {
        "link.log": "symbolic link (links are not followed)",
        "linkdir": "symbolic link (links are not followed)",
        "pipe": "named pipe (FIFO)",
        "nodes/n1/logs.tgz": "nested archive (unpack it first)",
        "nodes/n1/kern.log.2.gz": "corrupt or truncated .gz file: Compressed file ended before the "
        "end-of-stream marker was reached",
    }
    assert files_under(mat.work) == {"nodes", "nodes/n1", "nodes/n1/kern.log.1.gz"}
    assert files_under(bundle) == before  # nothing written into the user's directory
    mat.cleanup()
    assert not mat.work.exists()
    assert files_under(bundle) == before


def test_directory_without_gz_writes_nothing(tmp_path: Path, work: Path) -> None:
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "a.log").write_text("x\n")
    mat = materialize(bundle, work, LIMITS)
    assert mat.work is None
    assert list(work.iterdir()) == []


def test_directory_skips_the_work_dir_inside_it(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "a.log.gz").write_bytes(gz(b"x\n"))
    mat = materialize(bundle, bundle / ".work", LIMITS)
    assert paths(mat) == ["a.log.gz"]
    mat.cleanup()


def test_empty_directory(tmp_path: Path, work: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmptyBundle):
        materialize(tmp_path / "empty", work, LIMITS)


def test_directory_caps_use_stat_sizes(tmp_path: Path, work: Path) -> None:
    bundle = tmp_path / "b"
    bundle.mkdir()
    for i in range(4):
        (bundle / f"r{i}.log").write_bytes(b"x" * 100)
    with pytest.raises(BundleTooLarge, match="more than 3 files"):
        materialize(bundle, work, BundleLimits(max_files=3))
    with pytest.raises(BundleTooLarge, match="expands past 300 B"):
        materialize(bundle, work, BundleLimits(max_total_bytes=300))
    with pytest.raises(BundleTooLarge, match="per-file limit"):
        materialize(bundle, work, BundleLimits(max_file_bytes=99))


# --- archives: round trips ------------------------------------------------------------------------

ARCHIVE_FILES = {
    "rank-0.log": b"line 1\nline 2\n",
    "nodes/gpu-node-017/dmesg.log": b"[ 1.0] NVRM: Xid 79\n" * 50,
    "empty.log": b"",
}


@pytest.mark.parametrize(
    ("name", "mode"),
    [("b.tar", "w"), ("b.tgz", "w:gz"), ("b.tar.bz2", "w:bz2"), ("b.tar.xz", "w:xz"), ("b.bin", "w:gz")],
    ids=["tar", "tgz", "tbz2", "txz", "tgz-by-magic"],
)
def test_tar_round_trip(tmp_path: Path, work: Path, name: str, mode: str) -> None:
    entries: list[Entry] = [_info("./nodes", kind=tarfile.DIRTYPE)]
    entries += [(f"./{k}" if k.startswith("n") else k, v) for k, v in ARCHIVE_FILES.items()]
    src = make_tar(tmp_path / name, entries, mode)

    mat = materialize(src, work, LIMITS)

    assert mat.source_kind == "tar"
    assert paths(mat) == sorted(ARCHIVE_FILES)
    for m in mat.members:
        assert m.physical.read_bytes() == ARCHIVE_FILES[m.path]
        assert (m.size, m.compressed, m.mtime) == (len(ARCHIVE_FILES[m.path]), False, MTIME)
        assert mat.work is not None and m.physical.is_relative_to(mat.work)
    assert mat.skipped == []


@pytest.mark.parametrize("name", ["b.zip", "b.dat"], ids=["zip", "zip-by-magic"])
def test_zip_round_trip(tmp_path: Path, work: Path, name: str) -> None:
    stamp = (2024, 3, 1, 2, 13, 8)
    entries: list[tuple[str | zipfile.ZipInfo, bytes]] = [("nodes/", b"")]
    entries += [(zipfile.ZipInfo(k, stamp), v) for k, v in ARCHIVE_FILES.items()]
    src = make_zip(tmp_path / name, entries)

    mat = materialize(src, work, LIMITS)

    assert mat.source_kind == "zip"
    assert paths(mat) == sorted(ARCHIVE_FILES)
    for m in mat.members:
        assert m.physical.read_bytes() == ARCHIVE_FILES[m.path]
        assert m.size == len(ARCHIVE_FILES[m.path])
        assert m.mtime is not None and os.path.getmtime(src) != m.mtime
        assert tuple(time.localtime(m.mtime))[:6] == stamp


def test_zip_extended_timestamp_is_utc(tmp_path: Path, work: Path) -> None:
    info = zipfile.ZipInfo("a.log")
    info.extra = struct.pack("<HHBl", 0x5455, 5, 1, MTIME + 1)
    mat = materialize(make_zip(tmp_path / "b.zip", [(info, b"x\n")]), work, LIMITS)
    assert mat.members[0].mtime == MTIME + 1


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["gnu", "pax"])
def test_tar_long_names_and_extended_headers(tmp_path: Path, work: Path, fmt: int) -> None:
    # Long names live in extra header blocks (GNU "L" entries, PAX records) that tarfile reads ahead of
    # the member: the forward-only stream must give it exactly those bytes, then the data.
    deep = "nodes/" + "very-long-directory-name-" * 8 + "/rank-12.log"
    files = {deep: b"NCCL WARN timeout\n" * 3000, "short.log": b"ok\n", "z" * 150 + ".log": b""}
    src = tmp_path / "b.tgz"
    with tarfile.open(src, "w:gz", format=fmt) as tf:
        for name, data in files.items():
            info = _info(name, len(data), pax_headers={"comment": "é" * 600} if fmt == tarfile.PAX_FORMAT else {})
            tf.addfile(info, io.BytesIO(data))

    mat = materialize(src, work, LIMITS)

    assert paths(mat) == sorted(files)
    assert {m.path: m.physical.read_bytes() for m in mat.members} == files


@pytest.mark.parametrize("kind", ["dir", "tar", "tgz", "zip"])
def test_each_member_is_announced_once_complete_on_disk(tmp_path: Path, work: Path, kind: str) -> None:
    files = {"rank-0.log": b"a\n" * 300_000, "k/dmesg.log.gz": gz(b"Xid 79\n" * 10), "x.zip": b"PK", "b.log": b"b\n"}
    if kind == "dir":
        src = tmp_path / "src"
        for name, data in files.items():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes(data)
    elif kind == "zip":
        src = make_zip(tmp_path / "b.zip", files.items())
    else:
        src = make_tar(tmp_path / f"b.{kind}", files.items(), "w:gz" if kind == "tgz" else "w")
    seen: list[tuple[str, bytes]] = []

    heads: dict[str, bytes | None] = {}

    def told(m: Member, head: bytes | None) -> None:
        seen.append((m.path, m.physical.read_bytes()))
        heads[m.path] = head

    mat = materialize(src, work, LIMITS, on_member=told)

    assert sorted(seen) == [(m.path, m.physical.read_bytes()) for m in mat.members]  # complete when told
    for m in mat.members:  # archives hand over the first bytes they hold; files read in place do not
        assert heads[m.path] == (None if kind == "dir" and not m.compressed else m.physical.read_bytes()[:65536])
    assert sorted(p for p, _ in seen) == ["b.log", "k/dmesg.log.gz", "rank-0.log"]  # not the skipped zip
    assert reasons(mat) == {"x.zip": "nested archive (unpack it first)"}


def test_members_announced_before_a_failure_are_removed(tmp_path: Path, work: Path) -> None:
    full = make_tar(tmp_path / "full.tgz", [(f"r{i}.log", os.urandom(200_000)) for i in range(5)], "w:gz")
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size * 3 // 4])
    seen: list[Member] = []
    with pytest.raises(CorruptBundle):
        materialize(cut, work, LIMITS, on_member=lambda m, _: seen.append(m))
    assert seen and not any(m.physical.exists() for m in seen)
    assert list(work.iterdir()) == []


# --- .gz members ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tgz", "zip"])
def test_gz_member_is_decompressed_and_corrupt_one_skipped(tmp_path: Path, work: Path, kind: str) -> None:
    good = gz(b"kernel line\n" * 1000)
    entries = [
        ("nodes/n1/kern.log.1.gz", good),
        ("nodes/n1/kern.log.2.gz", good[: len(good) // 2]),  # truncated
        ("nodes/n1/kern.log.3.gz", b"not gzip at all"),
        ("rank-0.log", b"ok\n"),
    ]
    if kind == "tgz":
        src = make_tar(tmp_path / "b.tgz", entries, "w:gz")
    else:
        src = make_zip(tmp_path / "b.zip", entries)

    mat = materialize(src, work, LIMITS)

    assert paths(mat) == ["nodes/n1/kern.log.1.gz", "rank-0.log"]
    member = mat.members[0]
    assert member.compressed and member.size == 12_000
    assert member.physical.read_bytes() == b"kernel line\n" * 1000
    skipped = reasons(mat)
    assert set(skipped) == {"nodes/n1/kern.log.2.gz", "nodes/n1/kern.log.3.gz"}
    assert all(r.startswith("corrupt or truncated .gz file") for r in skipped.values())
    assert mat.work is not None
    assert files_under(mat.work) == {"nodes", "nodes/n1", "nodes/n1/kern.log.1.gz", "rank-0.log"}


def test_nested_archives_are_skipped(tmp_path: Path, work: Path) -> None:
    inner_tar = make_tar(tmp_path / "inner.tar", [("a.log", b"x\n")]).read_bytes()
    src = make_tar(
        tmp_path / "b.tar",
        [
            ("logs.tar.gz", gz(inner_tar)),
            ("more.zip", b"PK\x05\x06" + b"\0" * 18),
            ("sneaky.gz", gz(inner_tar)),  # a tar inside a plain .gz name
            ("rank-0.log", b"ok\n"),
        ],
    )
    mat = materialize(src, work, LIMITS)
    assert paths(mat) == ["rank-0.log"]
    assert set(reasons(mat).values()) == {"nested archive (unpack it first)"}
    assert len(mat.skipped) == 3
    assert mat.work is not None and not (mat.work / "sneaky.gz").exists()


# --- unsafe names ---------------------------------------------------------------------------------

UNSAFE = ["../x", "/etc/passwd", "a/../../x", "C:/x", "..\\x", "ok/../../../x"]


@pytest.mark.parametrize("kind", ["tar", "zip"])
@pytest.mark.parametrize("name", UNSAFE)
def test_unsafe_member_path_rejects_bundle(tmp_path: Path, kind: str, name: str) -> None:
    work = tmp_path / "deep" / "work"
    work.mkdir(parents=True)
    entries = [("first.log", b"written before the bad member\n"), (name, b"pwned\n")]
    if kind == "tar":
        src = make_tar(tmp_path / "b.tar", entries)
    else:
        src = make_zip(tmp_path / "b.zip", [(zipfile.ZipInfo(n), d) for n, d in entries])
    before = files_under(tmp_path)

    with pytest.raises(UnsafeBundlePath, match="unsafe member path") as err:
        materialize(src, work, LIMITS)

    assert repr(name) in str(err.value)
    assert files_under(tmp_path) == before  # partial work dir removed, nothing escaped
    assert list(work.iterdir()) == []


# --- links, devices, encryption -------------------------------------------------------------------


def test_tar_links_and_devices_are_skipped(tmp_path: Path, work: Path) -> None:
    src = make_tar(
        tmp_path / "b.tar",
        [
            ("rank-0.log", b"ok\n"),
            _info("sym.log", kind=tarfile.SYMTYPE, linkname="/etc/passwd"),
            _info("hard.log", kind=tarfile.LNKTYPE, linkname="rank-0.log"),
            _info("dev/nvidia0", kind=tarfile.CHRTYPE, devmajor=195, devminor=0),
            _info("dev/sda", kind=tarfile.BLKTYPE, devmajor=8, devminor=0),
            _info("fifo", kind=tarfile.FIFOTYPE),
        ],
    )
    mat = materialize(src, work, LIMITS)
    assert paths(mat) == ["rank-0.log"]
    assert reasons(mat) == {
        "sym.log": "symbolic link (links are not followed)",
        "hard.log": "hard link (links are not followed)",
        "dev/nvidia0": "device file",
        "dev/sda": "device file",
        "fifo": "named pipe (FIFO)",
    }
    assert mat.work is not None and files_under(mat.work) == {"rank-0.log"}


def _mark_encrypted(path: Path, name: str) -> None:
    """Set the "encrypted" flag of ``name`` in its local header and central directory record."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        local = zf.getinfo(name).header_offset
    data[local + 6] |= 0x1
    central = data.find(b"PK\x01\x02")
    while central != -1:
        size = struct.unpack_from("<H", data, central + 28)[0]
        if data[central + 46 : central + 46 + size] == name.encode():
            data[central + 8] |= 0x1
        central = data.find(b"PK\x01\x02", central + 4)
    path.write_bytes(bytes(data))


def test_zip_symlink_and_encrypted_entries_are_skipped(tmp_path: Path, work: Path) -> None:
    link = zipfile.ZipInfo("link.log")
    link.create_system = 3
    link.external_attr = (0o120777) << 16
    src = make_zip(tmp_path / "b.zip", [("rank-0.log", b"ok\n"), (link, b"/etc/passwd"), ("locked.log", b"x")])
    _mark_encrypted(src, "locked.log")
    mat = materialize(src, work, LIMITS)
    assert paths(mat) == ["rank-0.log"]
    assert reasons(mat) == {
        "link.log": "symbolic link (links are not followed)",
        "locked.log": "encrypted zip entry (passwords are not supported)",
    }


def test_duplicate_and_clashing_entries_keep_the_first(tmp_path: Path, work: Path) -> None:
    src = make_tar(tmp_path / "b.tar", [("a", b"first\n"), ("a", b"second\n"), ("a/b.log", b"x\n")])
    mat = materialize(src, work, LIMITS)
    assert paths(mat) == ["a"]
    assert mat.members[0].physical.read_bytes() == b"first\n"
    assert mat.skipped[0].reason == "duplicate entry (the first one is kept)"
    assert mat.skipped[1].model_dump() == {"path": "a/b.log", "reason": "clashes with the file a"}


# --- caps -----------------------------------------------------------------------------------------


def _zeros_zip(path: Path, total: int) -> Path:
    chunk = bytes(1024 * 1024)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("zeros.log", "w") as out:
        for _ in range(total // len(chunk)):
            out.write(chunk)
    return path


class _Zeros:
    """``total`` zero bytes, produced on demand (never held in memory)."""

    def __init__(self, total: int) -> None:
        self.left = total

    def read(self, size: int = -1) -> bytes:
        n = min(self.left, 1024 * 1024 if size < 0 else size)
        self.left -= n
        return bytes(n)


def _zeros_tgz(path: Path, total: int) -> Path:
    with tarfile.open(path, "w:gz", compresslevel=1) as tf:
        tf.addfile(_info("zeros.log", total), _Zeros(total))
    return path


BOMB_LIMITS = BundleLimits(ratio_floor_bytes=1024 * 1024, max_ratio=50)


@pytest.mark.parametrize("build", [_zeros_zip, _zeros_tgz], ids=["zip", "tgz"])
def test_decompression_bomb_is_stopped_and_work_removed(
    tmp_path: Path, work: Path, build: Callable[[Path, int], Path]
) -> None:
    src = build(tmp_path / "bomb", 200 * 1024 * 1024)
    assert src.stat().st_size < 1024 * 1024
    with pytest.raises(BundleTooLarge, match="50x its compressed size"):
        materialize(src, work, BOMB_LIMITS)
    assert list(work.iterdir()) == []


def test_gz_member_bomb_in_directory(tmp_path: Path, work: Path) -> None:
    bundle = tmp_path / "b"
    bundle.mkdir()
    with gzip.open(bundle / "kern.log.gz", "wb", compresslevel=1) as fh:
        for _ in range(20):
            fh.write(bytes(1024 * 1024))
    with pytest.raises(BundleTooLarge, match="compressed size"):
        materialize(bundle, work, BOMB_LIMITS)
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("kind", ["tgz", "zip"])
def test_too_many_files(tmp_path: Path, work: Path, kind: str) -> None:
    entries = [(f"rank-{i}.log", b"x\n") for i in range(6)]
    src = make_tar(tmp_path / "b.tgz", entries, "w:gz") if kind == "tgz" else make_zip(tmp_path / "b.zip", entries)
    with pytest.raises(BundleTooLarge, match="more than 5 files"):
        materialize(src, work, BundleLimits(max_files=5))
    assert list(work.iterdir()) == []
    assert len(materialize(src, work, BundleLimits(max_files=6)).members) == 6


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_single_member_too_large(tmp_path: Path, work: Path, kind: str) -> None:
    entries = [("small.log", b"x" * 10), ("big.log", b"x" * 5000)]
    src = make_tar(tmp_path / "b.tar", entries) if kind == "tar" else make_zip(tmp_path / "b.zip", entries)
    with pytest.raises(BundleTooLarge, match=r"big\.log in b\.\w+ is larger than the 4\.0 KiB per-file limit"):
        materialize(src, work, BundleLimits(max_file_bytes=4096))
    assert list(work.iterdir()) == []


def test_gz_member_expanding_past_file_cap(tmp_path: Path, work: Path) -> None:
    src = make_tar(tmp_path / "b.tar", [("kern.log.gz", gz(b"y" * 10_000))])
    with pytest.raises(BundleTooLarge, match=r"kern\.log\.gz .* per-file limit"):
        materialize(src, work, BundleLimits(max_file_bytes=4096))


def test_total_size_cap_message(tmp_path: Path, work: Path) -> None:
    src = make_tar(tmp_path / "b.tgz", [(f"r{i}.log", b"z" * 4096) for i in range(4)], "w:gz")
    with pytest.raises(BundleTooLarge) as err:
        materialize(src, work, BundleLimits(max_total_bytes=10_000))
    assert str(err.value) == "b.tgz expands past 9.8 KiB (limit CRASHCART_MAX_BUNDLE_BYTES)"
    assert list(work.iterdir()) == []


def test_skipped_data_still_counts_against_the_stream_cap(tmp_path: Path, work: Path) -> None:
    # Nested archives are skipped, but tar must still read past their data: that is bounded too.
    src = make_tar(tmp_path / "b.tar", [("x.zip", b"z" * 3 * 1024 * 1024), ("a.log", b"ok\n")])
    with pytest.raises(BundleTooLarge, match="expands past"):
        materialize(src, work, BundleLimits(max_total_bytes=1000, max_files=2))


# --- corrupt, empty, missing ----------------------------------------------------------------------


def test_truncated_tgz_is_corrupt(tmp_path: Path, work: Path) -> None:
    full = make_tar(tmp_path / "full.tgz", [(f"r{i}.log", os.urandom(20_000)) for i in range(5)], "w:gz")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(CorruptBundle, match=r"^cut\.tar\.gz is truncated or corrupt: ") as err:
        materialize(cut, work, LIMITS)
    assert isinstance(err.value.__cause__, Exception)
    assert "\n" not in str(err.value)
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("mode", ["w", "w:gz"])
def test_archive_cut_inside_a_member_is_corrupt_and_leaves_nothing(tmp_path: Path, work: Path, mode: str) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)  # a member longer than one read block, cut in its middle
    full = make_tar(tmp_path / "full.tar", [("a.log", b"first\n"), ("big.log", data)], mode)
    raw = full.read_bytes() if mode == "w" else gzip.decompress(full.read_bytes())
    cut_at = raw.index(data[:64]) + 2 * 1024 * 1024
    cut = tmp_path / ("cut.tar" if mode == "w" else "cut.tar.gz")
    cut.write_bytes(raw[:cut_at] if mode == "w" else gzip.compress(raw[:cut_at]))
    with pytest.raises(CorruptBundle, match=r"is truncated or corrupt: .*unexpected end of data"):
        materialize(cut, work, LIMITS)
    assert list(work.iterdir()) == []


def test_members_are_copied_exactly_across_read_blocks(tmp_path: Path, work: Path) -> None:
    sizes = [0, 1, 1024 * 1024 - 1, 1024 * 1024, 1024 * 1024 + 1, 2 * 1024 * 1024 + 513]
    members = [(f"m{i}.log", os.urandom(n)) for i, n in enumerate(sizes)]
    src = make_tar(tmp_path / "many.tgz", members, "w:gz")
    with materialize(src, work, LIMITS) as mat:
        assert {m.path: m.physical.read_bytes() for m in mat.members} == dict(members)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("b.zip", b"PK\x03\x04 this is not really a zip"),
        ("b.tar", b"garbage " * 200),
        ("b.tgz", b"plain text, not gzip\n"),
        ("b.log.gz", b"plain text, not gzip\n"),
        ("b.log.gz", gz(b"x" * 100)[:-8]),
    ],
    ids=["zip", "tar", "tgz", "gz", "gz-truncated"],
)
def test_corrupt_sources(tmp_path: Path, work: Path, name: str, data: bytes) -> None:
    (tmp_path / name).write_bytes(data)
    with pytest.raises(CorruptBundle):
        materialize(tmp_path / name, work, LIMITS)
    assert list(work.iterdir()) == []


def test_truncated_zip_is_corrupt(tmp_path: Path, work: Path) -> None:
    full = make_zip(tmp_path / "full.zip", [("a.log", os.urandom(50_000)), ("b.log", os.urandom(50_000))])
    data = bytearray(full.read_bytes())
    data[100:200] = bytes(100)  # damage a.log's compressed data; the central directory stays intact
    (tmp_path / "bad.zip").write_bytes(bytes(data))
    with pytest.raises(CorruptBundle, match=r"bad\.zip is truncated or corrupt"):
        materialize(tmp_path / "bad.zip", work, LIMITS)
    assert list(work.iterdir()) == []


def test_empty_archives(tmp_path: Path, work: Path) -> None:
    with pytest.raises(EmptyBundle):
        materialize(make_tar(tmp_path / "e.tar", []), work, LIMITS)
    with pytest.raises(EmptyBundle):
        materialize(make_tar(tmp_path / "e.tgz", [], "w:gz"), work, LIMITS)
    with pytest.raises(EmptyBundle):
        materialize(make_zip(tmp_path / "e.zip", []), work, LIMITS)
    (tmp_path / "zero.tar.gz").write_bytes(b"")
    with pytest.raises(EmptyBundle):
        materialize(tmp_path / "zero.tar.gz", work, LIMITS)
    only_link = make_tar(tmp_path / "l.tar", [_info("x", kind=tarfile.SYMTYPE, linkname="y")])
    with pytest.raises(EmptyBundle, match=r"1 skipped, e\.g\. x: symbolic link"):
        materialize(only_link, work, LIMITS)
    assert list(work.iterdir()) == []


def test_missing_source(tmp_path: Path, work: Path) -> None:
    with pytest.raises(BundleNotFound, match="does not exist"):
        materialize(tmp_path / "nope.tgz", work, LIMITS)


# --- single files ---------------------------------------------------------------------------------


def test_single_plain_log(tmp_path: Path, work: Path) -> None:
    log = tmp_path / "slurm-123.out"
    log.write_text("0: hello\n1: world\n")
    mat = materialize(log, work, LIMITS)
    assert mat.source_kind == "file"
    assert mat.members == [Member("slurm-123.out", log.resolve(), 18, False, log.stat().st_mtime)]
    assert mat.work is None and list(work.iterdir()) == []


def test_single_gz_log(tmp_path: Path, work: Path) -> None:
    log = tmp_path / "dmesg.log.gz"
    log.write_bytes(gz(b"[ 1.0] NVRM: Xid 79\n" * 3))
    mat = materialize(log, work, LIMITS)
    assert mat.source_kind == "file"
    (member,) = mat.members
    assert (member.path, member.size, member.compressed) == ("dmesg.log.gz", 60, True)
    assert member.physical.read_bytes() == b"[ 1.0] NVRM: Xid 79\n" * 3
    assert mat.work is not None and member.physical.is_relative_to(mat.work)
    mat.cleanup()
    assert log.exists()


def test_single_binary_file_is_still_a_member(tmp_path: Path, work: Path) -> None:
    blob = tmp_path / "core.dump"
    blob.write_bytes(bytes(range(256)) * 4)
    mat = materialize(blob, work, LIMITS)
    assert paths(mat) == ["core.dump"] and mat.members[0].size == 1024


def test_single_file_caps(tmp_path: Path, work: Path) -> None:
    log = tmp_path / "big.log"
    log.write_bytes(b"x" * 2000)
    with pytest.raises(BundleTooLarge, match="per-file limit"):
        materialize(log, work, BundleLimits(max_file_bytes=1000))


# --- exclusions and cleanup -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_expected_json_and_macos_metadata_are_never_listed(tmp_path: Path, work: Path, kind: str) -> None:
    entries = [
        ("expected.json", b'{"root_cause_class": "x"}'),
        ("case-7/expected.json", b"{}"),
        ("__MACOSX/._rank-0.log", b"\0"),
        ("logs/.DS_Store", b"\0"),
        ("logs/._rank-0.log", b"\0"),
        ("logs/rank-0.log", b"ok\n"),
        ("nodes/n1/expected.json", b"{}"),  # deep: an ordinary file
    ]
    src = make_tar(tmp_path / "b.tar", entries) if kind == "tar" else make_zip(tmp_path / "b.zip", entries)
    mat = materialize(src, work, LIMITS)
    assert paths(mat) == ["logs/rank-0.log", "nodes/n1/expected.json"]
    assert mat.skipped == []
    assert mat.work is not None
    assert not any(p.endswith("expected.json") and "nodes" not in p for p in files_under(mat.work))


def test_cleanup_removes_only_the_work_dir(tmp_path: Path, work: Path) -> None:
    (work / "other-run").mkdir()
    (work / "keep.txt").write_text("x")
    src = make_tar(tmp_path / "b.tgz", [("a.log", b"x\n")], "w:gz")
    with materialize(src, work, LIMITS) as mat:
        assert mat.work is not None and mat.work.parent == work.resolve()
        assert mat.members[0].physical.exists()
    assert not mat.work.exists()
    assert sorted(p.name for p in work.iterdir()) == ["keep.txt", "other-run"]
    assert src.exists()
    mat.cleanup()  # idempotent


def test_work_dir_is_created_if_missing(tmp_path: Path) -> None:
    src = make_zip(tmp_path / "b.zip", [("a.log", b"x\n")])
    mat = materialize(src, tmp_path / "new" / "work", LIMITS)
    assert mat.work is not None and mat.work.parent == (tmp_path / "new" / "work").resolve()


# --- property: damaged archives never leak a third-party exception ---------------------------------


def _sample_archives() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        entries = [("rank-0.log", b"NCCL WARN timeout\n" * 40), ("k.log.gz", gz(b"Xid 79\n" * 40))]
        return {
            "b.tgz": make_tar(root / "b.tgz", entries, "w:gz").read_bytes(),
            "b.tar.xz": make_tar(root / "b.tar.xz", entries, "w:xz").read_bytes(),
            "b.tar": make_tar(root / "b.tar", entries).read_bytes(),
            "b.zip": make_zip(root / "b.zip", entries).read_bytes(),
        }


SAMPLES = _sample_archives()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(sorted(SAMPLES)),
    cut=st.floats(0.0, 1.0),
    flips=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 255)), max_size=4),
)
def test_damaged_archives_raise_only_bundle_errors(
    tmp_path: Path, name: str, cut: float, flips: list[tuple[float, int]]
) -> None:
    data = bytearray(SAMPLES[name])
    for where, xor in flips:
        data[int(where * (len(data) - 1))] ^= xor
    data = data[: max(1, int(cut * len(data)))] if cut < 0.98 else data
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        src = Path(d) / name
        src.write_bytes(bytes(data))
        work = Path(d) / "work"
        try:
            mat = materialize(src, work, LIMITS)
        except BundleError:
            assert not work.exists() or list(work.iterdir()) == []
        else:
            assert mat.members
            for m in mat.members:
                assert m.physical.is_file() and m.physical.stat().st_size == m.size
            mat.cleanup()


# --- writing around the page cache ----------------------------------------------------------------


@pytest.mark.parametrize("sizes", [[0], [1], [4096], [5000, 1], [1 << 20, 3, (1 << 20) + 7]], ids=str)
def test_direct_file_writes_exact_bytes(tmp_path: Path, sizes: list[int]) -> None:
    from crashcart.ingest.direct import DirectFile

    chunks = [os.urandom(n) for n in sizes]
    with DirectFile(tmp_path / "f") as out:
        for c in chunks:
            out.write(memoryview(c))
    assert (tmp_path / "f").read_bytes() == b"".join(chunks)
    with pytest.raises(FileExistsError):
        DirectFile(tmp_path / "f")
