"""The scan on Ray (issue 19) against the local scan, on this machine, in one run.

    python bench/cluster.py [--rounds 3] [--data bench/data]

For each 1 GiB benchmark bundle (the real-shaped ``megatron`` one of ``bench/shapes.py`` when it is there, and
``genbundle``'s classic one): ``crashcart diagnose`` locally (one thread, and one per core) and with the scan
on a local Ray of 1 and of 2 worker CPUs; checks that every diagnosis is identical (``--json``, seconds zeroed);
then Ray's own cost per task (empty tasks) and per byte (Ray on 1 CPU against the local scan on 1 thread), and
how many bytes the tasks send back. Prints one table and a JSON line (the figures ``bench/SCALING.md`` uses).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import genbundle

from crashcart.pipeline import diagnose
from crashcart.scan.cluster import Cluster
from crashcart.settings import Settings

GiB = 1024**3


def _bundle(data: Path, shape: str) -> Path | None:
    name = f"{shape}-r64-{GiB}-s0" if shape != "classic" else f"r64-{GiB}-s0"
    out, meta = data / name, data / f"{name}.json"
    if meta.is_file() and out.is_dir():
        return out
    try:
        info = genbundle.generate(out, 64, 8, 0, size=GiB, shape=shape)
    except (TypeError, ValueError, AttributeError):  # genbundle without real shapes (before issue 16 lands)
        return None
    meta.write_text(json.dumps({**info, "size": GiB}))
    return out


def _doc(outcome: Any) -> dict[str, Any]:
    doc = outcome.document.model_dump(mode="json", by_alias=True)
    doc["stats"]["seconds"] = 0.0
    return dict(doc)


def _run(bundle: Path, settings: Settings, cluster: Cluster | None = None) -> tuple[float, float, dict[str, Any]]:
    start = time.perf_counter()
    outcome = asyncio.run(diagnose(bundle, settings, cluster=cluster))
    return time.perf_counter() - start, outcome.stage_seconds["scan"], _doc(outcome)


def _empty() -> int:
    return 0


def _task_overhead(ray: Any, n: int = 400) -> float:
    """Seconds per task of Ray's own: submit, schedule, run nothing, return a small object."""
    remote = ray.remote(num_cpus=1)(_empty)
    ray.get([remote.remote() for _ in range(20)])  # workers started
    start = time.perf_counter()
    ray.get([remote.remote() for _ in range(n)])
    return (time.perf_counter() - start) / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parent / "data")
    args = p.parse_args()
    import ray

    args.data.mkdir(parents=True, exist_ok=True)
    work = args.data / "cluster-work"
    bundles = [b for b in (_bundle(args.data, "megatron"), _bundle(args.data, "classic")) if b is not None]
    base = Settings(_env_file=None, db=work / "db", work_dir=work)  # type: ignore[call-arg]
    one = base.model_copy(update={"workers": 1})
    rows: list[dict[str, Any]] = []
    figures: dict[str, Any] = {"bundles": {}}
    for bundle in bundles:
        size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
        got: dict[str, list[tuple[float, float]]] = {}
        docs: dict[str, dict[str, Any]] = {}
        sent: dict[str, int] = {}
        tasks: dict[str, int] = {}
        for _ in range(args.rounds):  # interleaved rounds, medians
            for name, settings in (("local, 1 thread", one), ("local, 2 threads", base)):
                wall, scan, doc = _run(bundle, settings)
                got.setdefault(name, []).append((wall, scan))
                docs[name] = doc
        for cpus in (1, 2):
            name = f"Ray, {cpus} worker{'s' if cpus > 1 else ''}"
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="warning")
            try:
                _run(bundle, base, Cluster.connect("local"))  # workers started, hyperscan database loaded
                for _ in range(args.rounds):
                    c = Cluster.connect("local")
                    wall, scan, doc = _run(bundle, base, c)
                    got.setdefault(name, []).append((wall, scan))
                    docs[name] = doc
                    sent[name] = sum(len(pickle.dumps(r)) for r in c.tasks)
                    tasks[name] = len(c.tasks)
                if cpus == 1:
                    figures["task_overhead_s"] = _task_overhead(ray)
            finally:
                ray.shutdown()
        reference = docs["local, 2 threads"]
        for name, times in got.items():
            wall = statistics.median(t for t, _ in times)
            scan = statistics.median(s for _, s in times)
            rows.append(
                {
                    "bundle": bundle.name,
                    "run": name,
                    "wall_s": round(wall, 3),
                    "scan_s": round(scan, 3),
                    "scan_MBps": round(size / scan / 1e6, 1),
                    "tasks": tasks.get(name, 0),
                    "returned_bytes": sent.get(name, 0),
                    "identical": docs[name] == reference,
                }
            )
        by = {r["run"]: r for r in rows if r["bundle"] == bundle.name}
        per_byte = (by["Ray, 1 worker"]["scan_s"] - by["local, 1 thread"]["scan_s"]) / size
        figures["bundles"][bundle.name] = {
            "bytes": size,
            "ray_extra_s_per_GiB": round(per_byte * GiB, 3),
            "returned_bytes": sent.get("Ray, 2 workers", 0),
            "findings": reference["stats"]["findings"],
            "files": reference["stats"]["files"],
        }
    print(f"{'bundle':32} {'run':18} {'wall s':>7} {'scan s':>7} {'scan MB/s':>9} {'tasks':>5} {'sent KB':>8} same")
    for r in rows:
        print(
            f"{r['bundle']:32} {r['run']:18} {r['wall_s']:7.2f} {r['scan_s']:7.2f} {r['scan_MBps']:9.0f} "
            f"{r['tasks']:5d} {r['returned_bytes'] / 1024:8.0f} {'yes' if r['identical'] else 'NO'}"
        )
    print(f"Ray task overhead: {figures['task_overhead_s'] * 1e3:.2f} ms per empty task")
    print(json.dumps({"rows": rows, **figures}))
    if not all(r["identical"] for r in rows):
        raise SystemExit("a diagnosis on Ray differs from the local one")


if __name__ == "__main__":
    main()
