"""Decompression bombs (issue 16): refused as soon as the output passes the ratio, naming the member and saying
"bomb" — not once the whole compressed size has been used up. Small crafted bombs in tmp dirs."""

from __future__ import annotations

import functools
import gzip
import io
import re
import tarfile
import zipfile
from pathlib import Path

import pytest

from crashcart.errors import BundleTooLarge
from crashcart.ingest.extract import materialize
from crashcart.settings import BundleLimits

MiB = 1024 * 1024
LIMITS = BundleLimits(ratio_floor_bytes=MiB, max_ratio=50)
TOTAL = 64 * MiB  # what each bomb would expand to


class _Zeros(io.RawIOBase):
    """``total`` zero bytes, produced on demand (never held in memory)."""

    def __init__(self, total: int) -> None:
        self.left = total

    def readable(self) -> bool:
        return True

    def readinto(self, buf: memoryview) -> int:  # type: ignore[override]
        n = min(self.left, len(buf), MiB)
        buf[:n] = bytes(n)
        self.left -= n
        return n


def _tgz(path: Path, name: str, data: io.RawIOBase | bytes, size: int) -> Path:
    with tarfile.open(path, "w:gz", compresslevel=9) as tf:
        info = tarfile.TarInfo(name)
        info.size = size
        tf.addfile(info, io.BufferedReader(data) if isinstance(data, io.RawIOBase) else io.BytesIO(data))
    return path


@functools.cache
def _gz_bytes(total: int) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0) as gz:
        block = bytes(MiB)
        for _ in range(total // MiB):
            gz.write(block)
    return out.getvalue()


def _produced(message: str) -> float:
    """The bytes the refusal says were produced, in MiB."""
    m = re.search(r"\((\d+(?:\.\d+)?) (KiB|MiB|GiB) from ", message)
    assert m, message
    return float(m.group(1)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m.group(2)]


def test_zip_bomb_is_refused_before_its_entry_is_read(tmp_path: Path) -> None:
    src = tmp_path / "bundle.zip"
    with zipfile.ZipFile(src, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("logs/rank-0.log", b"step 1 ok\n")
        with zf.open("logs/rank-1.log", "w", force_zip64=True) as fh:
            for _ in range(TOTAL // MiB):
                fh.write(bytes(MiB))
    assert src.stat().st_size < MiB
    with pytest.raises(BundleTooLarge) as err:
        materialize(src, tmp_path / "work", LIMITS)
    msg = str(err.value)
    assert "bomb" in msg and "logs/rank-1.log" in msg and "50x" in msg
    assert _produced(msg) == TOTAL / MiB  # the declared size: nothing was decompressed
    assert list((tmp_path / "work").iterdir()) == []


def test_tgz_bomb_is_refused_once_past_the_ratio(tmp_path: Path) -> None:
    src = _tgz(tmp_path / "bundle.tar.gz", "rank-7.log", _Zeros(TOTAL), TOTAL)
    with pytest.raises(BundleTooLarge) as err:
        materialize(src, tmp_path / "work", LIMITS)
    msg = str(err.value)
    assert "bomb" in msg and "rank-7.log" in msg
    assert _produced(msg) < TOTAL / MiB / 4  # stopped soon after the floor (the gzip reader reads ahead)
    assert list((tmp_path / "work").iterdir()) == []


@pytest.mark.parametrize("container", ["dir", "tar", "zip"])
def test_log_gz_member_bomb_is_refused_once_past_the_ratio(tmp_path: Path, container: str) -> None:
    payload = _gz_bytes(TOTAL)
    assert len(payload) < MiB
    if container == "dir":
        src = tmp_path / "bundle"
        (src / "nodes").mkdir(parents=True)
        (src / "nodes" / "kern.log.gz").write_bytes(payload)
    elif container == "tar":
        src = _tgz(tmp_path / "bundle.tar.gz", "nodes/kern.log.gz", payload, len(payload))
    else:
        src = tmp_path / "bundle.zip"
        with zipfile.ZipFile(src, "w", compression=zipfile.ZIP_STORED) as zf:
            zf.writestr("nodes/kern.log.gz", payload)
    with pytest.raises(BundleTooLarge) as err:
        materialize(src, tmp_path / "work", LIMITS)
    msg = str(err.value)
    assert "bomb" in msg and "nodes/kern.log.gz" in msg
    assert _produced(msg) < TOTAL / MiB / 4
    assert not (tmp_path / "work").exists() or list((tmp_path / "work").iterdir()) == []


def test_a_compressible_log_below_the_ratio_is_not_a_bomb(tmp_path: Path) -> None:
    lines = b"".join(b"2026-11-30 02:13:%02d,000 INFO step %d loss 3.2\n" % (i % 60, i) for i in range(200_000))
    src = _tgz(tmp_path / "bundle.tar.gz", "rank-0.log", lines, len(lines))
    got = materialize(src, tmp_path / "work", LIMITS)
    assert [m.path for m in got.members] == ["rank-0.log"]
    got.cleanup()
