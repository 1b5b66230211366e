"""A .tar.gz bundle: extract then scan (what ``crashcart diagnose`` does today) vs scanning while decompressing.

Usage: python bench/tgz.py BUNDLE.tar.gz [--rounds 2]      (bench/run.py writes one: bench/data/r64-*.tar.gz)

Measured, in one process, on a warm page cache, each the median of ``--rounds``:
  A. today: ``open_bundle`` (crashcart.ingest.extract: stream the tar, write every member to the work dir) then the
     scan stage over the extracted files;
  B. extract with 1 MiB tar/gzip reads (tarfile's default is 10 KiB records), then the same scan stage;
  C. stream + tee: one pass, each member decompressed on a read-ahead thread, scanned and written to the work
     dir at once (``reader.scan_stream(..., sink=file.write)``): the files the bundle needs later exist;
  D. stream only: as C without writing (the lower bound; the bundle could not re-read lines afterwards).
  E. ``crashcart.scan.run.open_scanning`` then ``scan``: members scanned from memory on the pool's threads
     while the archive is read, written with O_DIRECT, classified on the way (what ``diagnose`` runs once
     the pipeline calls it).
Every variant must produce the same per-file line counts, sha256 and hits as A.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from crashcart.ingest.bundle import open_bundle
from crashcart.scan.feeds import ReadAhead
from crashcart.scan.matcher import make_matcher
from crashcart.scan.reader import FileScan, scan_file, scan_stream
from crashcart.scan.run import open_scanning, scan
from crashcart.settings import Settings

MiB = 1 << 20
Result = dict[str, tuple[int, str, list[tuple[int, int, bytes | None]]]]


def _summary(scans: dict[str, FileScan]) -> Result:
    """Per file, keyed by its path below the archive's top directory (if it has one)."""
    tops = {p.split("/", 1)[0] for p in scans}
    top = tops.pop() + "/" if len(tops) == 1 and all("/" in p for p in scans) else ""
    return {p.removeprefix(top): (fs.lines, fs.sha256, fs.hits) for p, fs in scans.items()}


def today(tgz: Path, work: Path) -> tuple[Result, dict[str, float]]:
    settings = Settings(_env_file=None, work_dir=work, db=work / "db")  # type: ignore[call-arg]
    t0 = time.perf_counter()
    with open_bundle(tgz, settings.work_dir, settings.bundle_limits) as b:
        t1 = time.perf_counter()
        r = scan(b, settings.scan)
        t2 = time.perf_counter()
    return _summary(r.scans), {"extract": t1 - t0, "scan": t2 - t1}


def scanning_while_opening(tgz: Path, work: Path) -> tuple[Result, dict[str, float]]:
    settings = Settings(_env_file=None, work_dir=work, db=work / "db")  # type: ignore[call-arg]
    t0 = time.perf_counter()
    bundle, pool = open_scanning(tgz, settings.work_dir, settings.bundle_limits, settings.scan)
    with bundle:
        t1 = time.perf_counter()
        r = scan(bundle, settings.scan, pool=pool)
        t2 = time.perf_counter()
    return _summary(r.scans), {"open+scan": t1 - t0, "findings": t2 - t1, "close": time.perf_counter() - t2}


def big_reads_then_scan(tgz: Path, work: Path) -> tuple[Result, dict[str, float]]:
    dest = Path(tempfile.mkdtemp(dir=work))
    t0 = time.perf_counter()
    with tgz.open("rb") as raw, tarfile.open(fileobj=raw, mode="r|gz", bufsize=MiB) as tar:
        for info in tar:
            if info.isfile():
                src = tar.extractfile(info)
                assert src is not None
                target = dest / info.name
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("wb") as out:
                    shutil.copyfileobj(src, out, MiB)
    t1 = time.perf_counter()
    settings = Settings(_env_file=None, work_dir=work, db=work / "db")  # type: ignore[call-arg]
    with open_bundle(dest, settings.work_dir, settings.bundle_limits) as b:
        t2 = time.perf_counter()
        r = scan(b, settings.scan)
        t3 = time.perf_counter()
    shutil.rmtree(dest)
    return _summary(r.scans), {"extract": t1 - t0, "classify": t2 - t1, "scan": t3 - t2}


def streamed(tgz: Path, work: Path, *, write: bool) -> tuple[Result, dict[str, float]]:
    matcher = make_matcher()
    dest = Path(tempfile.mkdtemp(dir=work))
    got: dict[str, FileScan] = {}
    t0 = time.perf_counter()
    with tgz.open("rb") as raw, tarfile.open(fileobj=raw, mode="r|gz", bufsize=MiB) as tar:
        for info in tar:
            if not info.isfile():
                continue
            src = tar.extractfile(info)
            assert src is not None
            ahead = ReadAhead(src)
            if write:
                target = dest / info.name
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("wb", buffering=0) as out:
                    fs = scan_stream(
                        matcher, ahead, info.name, buffer_bytes=MiB, max_line_bytes=64 * 1024, sink=out.write
                    )
            else:
                fs = scan_stream(matcher, ahead, info.name, buffer_bytes=MiB, max_line_bytes=64 * 1024)
            ahead.close()
            got[info.name] = fs
    t1 = time.perf_counter()
    if write:  # the written files are complete: rescanning one gives the same result
        name = next(iter(got))
        assert scan_file(matcher, dest / name, name, buffer_bytes=MiB, max_line_bytes=64 * 1024).hits == got[name].hits
    shutil.rmtree(dest)
    return _summary(got), {"total": t1 - t0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tgz", type=Path)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    variants: list[tuple[str, Callable[[Path, Path], tuple[Result, dict[str, float]]]]] = [
        ("A extract (crashcart.ingest.extract) then scan", today),
        ("B extract with 1 MiB reads then scan", big_reads_then_scan),
        ("C stream: decompress + scan + write at once", lambda t, w: streamed(t, w, write=True)),
        ("D stream: decompress + scan, no write", lambda t, w: streamed(t, w, write=False)),
        ("E open_scanning then scan", scanning_while_opening),
    ]
    walls: dict[str, list[float]] = {name: [] for name, _ in variants}
    parts: dict[str, dict[str, float]] = {}
    reference: Result | None = None
    with tempfile.TemporaryDirectory(prefix="crashcart-tgz-") as tmp:
        for _ in range(a.rounds):
            for name, fn in variants:
                t = time.perf_counter()
                result, split = fn(a.tgz, Path(tmp))
                walls[name].append(time.perf_counter() - t)
                parts[name] = split
                if reference is None:
                    reference = result
                elif result != reference:
                    sys.exit(f"{name}: results differ from A ({sorted(set(result) ^ set(reference))[:4]})")
    size = sum(v[0] for v in (reference or {}).values())
    print(f"# {a.tgz.name}: {a.tgz.stat().st_size:,} bytes compressed, {len(reference or {})} logs, {size:,} lines")
    print("| variant | wall s | parts (last round) |")
    print("|---|---:|---|")
    for name, _ in variants:
        split = ", ".join(f"{k} {v:.2f}" for k, v in parts[name].items())
        print(f"| {name} | {statistics.median(walls[name]):.2f} | {split} |")


if __name__ == "__main__":
    main()
