"""Scan stage threads: ``open_scanning`` (scan while the bundle is still being opened) against ``open_bundle``
then ``scan``, on a shipped incident as a directory and as a ``.tar.gz``, plus failures and shutdown."""

from __future__ import annotations

import codecs
import shutil
import tarfile
import threading
from pathlib import Path

import pytest

from crashcart.errors import CorruptBundle, NoLogsFound
from crashcart.ingest.bundle import open_bundle
from crashcart.scan.run import ScanResult, open_scanning, scan
from crashcart.settings import Settings

INCIDENT = Path(__file__).resolve().parents[1] / "incidents" / "cuda-oom"
EXTRA: dict[str, bytes] = {
    "win/rank-9.log": codecs.BOM_UTF16_LE + "first\r\nCUDA out of memory\r\n".encode("utf-16-le"),  # transcoded
    "dash.png": b"\x89PNG\r\n\x1a\n" + b"\x00" * 100,  # never offered to the pool
    "core.bin": b"\x00\x01\x02" * 1000,  # offered, then classified as binary: its scan is not used
    "train.yaml": b"lr: 0.1\n",
}


def _summary(r: ScanResult) -> tuple[dict[str, object], list[object], object, object, object]:
    scans: dict[str, object] = {
        p: (fs.lines, fs.nbytes, fs.sha256, fs.hits, fs.checkpoints, fs.tail, fs.error) for p, fs in r.scans.items()
    }
    return scans, [f.model_dump() for f in r.findings], r.failures, r.notes, dict(r.tails)


def _bundle_dir(tmp_path: Path) -> Path:
    root = tmp_path / "bundle"
    shutil.copytree(INCIDENT, root)
    for name, data in EXTRA.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def _tgz(root: Path) -> Path:
    out = root.parent / "bundle.tar.gz"
    with tarfile.open(out, "w:gz") as tf:
        tf.add(root, arcname="bundle")
    return out


@pytest.mark.parametrize("kind", ["dir", "tgz"])
def test_scanning_while_opening_finds_the_same(tmp_path: Path, settings: Settings, kind: str) -> None:
    root = _bundle_dir(tmp_path)
    source = root if kind == "dir" else _tgz(root)
    with open_bundle(source, settings.work_dir, settings.bundle_limits) as b:
        want = _summary(scan(b, settings.scan))
        names = {p.removeprefix("bundle/") for p in want[0]}
        assert "win/rank-9.log" in names and "core.bin" not in names

    bundle, pool = open_scanning(source, settings.work_dir, settings.bundle_limits, settings.scan)
    with bundle:
        assert _summary(scan(bundle, settings.scan, pool=pool)) == want
    assert list(settings.work_dir.iterdir()) == []


def test_one_worker_and_a_small_bundle_agree(tmp_path: Path, settings: Settings) -> None:
    source = _tgz(_bundle_dir(tmp_path))
    one = settings.scan.model_copy(update={"workers": 1})
    with open_bundle(source, settings.work_dir, settings.bundle_limits) as b:
        want = _summary(scan(b, one))
    bundle, pool = open_scanning(source, settings.work_dir, settings.bundle_limits, one)
    with bundle:
        assert _summary(scan(bundle, one, pool=pool)) == want


@pytest.mark.parametrize("failure", ["corrupt", "no-logs"])
def test_a_failed_open_stops_the_threads_and_removes_the_files(
    tmp_path: Path, settings: Settings, failure: str
) -> None:
    before = threading.active_count()
    if failure == "corrupt":
        full = _tgz(_bundle_dir(tmp_path))
        source = tmp_path / "cut.tar.gz"
        source.write_bytes(full.read_bytes()[: full.stat().st_size * 2 // 3])
    else:
        root = tmp_path / "pictures"
        root.mkdir()
        (root / "a.png").write_bytes(EXTRA["dash.png"])
        (root / "core.bin").write_bytes(EXTRA["core.bin"])
        source = _tgz(root)
    with pytest.raises(CorruptBundle if failure == "corrupt" else NoLogsFound):
        open_scanning(source, settings.work_dir, settings.bundle_limits, settings.scan)
    assert threading.active_count() == before
    assert list(settings.work_dir.iterdir()) == []


def test_closing_the_bundle_stops_the_pool_without_a_scan(tmp_path: Path, settings: Settings) -> None:
    before = threading.active_count()
    bundle, _ = open_scanning(_tgz(_bundle_dir(tmp_path)), settings.work_dir, settings.bundle_limits, settings.scan)
    bundle.close()
    assert threading.active_count() == before
    assert list(settings.work_dir.iterdir()) == []
