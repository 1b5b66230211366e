"""The scan on a Ray cluster (issue 19): the same diagnosis as the local scan, and its faults.

Ray starts once for the module (2 CPUs, on this machine) and is shut down at the end; a diagnosis with
``ray_address="local"`` uses that Ray. Tests that need no Ray (the task plan, Ray missing, a cluster that
cannot be reached) run without it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crashcart.errors import BundleNotVisible
from crashcart.evaluate import find_cases
from crashcart.pipeline import diagnose
from crashcart.scan import cluster
from crashcart.scan.cluster import TaskResult, plan_tasks, scan_task
from crashcart.settings import ScanSettings, Settings

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning")
    try:
        yield ray
    finally:
        ray.shutdown()


def _settings(tmp: Path, **kw: Any) -> Settings:
    return Settings(_env_file=None, db=tmp / "db.sqlite", work_dir=tmp / "work", **kw)  # type: ignore[call-arg]


def _doc(outcome: Any) -> dict[str, Any]:
    doc = outcome.document.model_dump(mode="json", by_alias=True)
    doc["stats"]["seconds"] = 0.0
    return dict(doc)


def _cases() -> list[Path]:
    dirs = [ROOT / "incidents", ROOT / "incidents" / "real", ROOT / "incidents" / "torch"]
    dirs.append(ROOT / "tests" / "data" / "foreign")  # other shapes; .gz logs are decompressed and scanned here
    cases = find_cases(dirs)
    return sorted({c for c in cases if c.is_dir()})


def test_tasks_split_by_bytes_not_by_file_count() -> None:
    big = [(f"/b/huge{i}", f"huge{i}", 1000) for i in range(3)]
    small = [(f"/b/s{i}", f"s{i}", 1) for i in range(3000)]
    tasks = plan_tasks(big + small, workers=2, task_bytes=1000)
    assert sorted(t.nbytes for t in tasks)[-3:] == [1000, 1000, 1000]  # each huge file alone
    assert all(len(t.jobs) <= cluster.TASK_FILES for t in tasks)
    assert sum(len(t.jobs) for t in tasks) == 3003
    assert max(t.nbytes for t in tasks) - min(t.nbytes for t in tasks) <= 1000
    assert len(plan_tasks([("/b/a", "a", 5), ("/b/b", "b", 5)], workers=2)) == 2  # one per worker


async def test_diagnosis_is_identical_on_ray(ray_local: Any, tmp_path: Path) -> None:
    cases = _cases()
    assert len(cases) >= 100
    here, there = _settings(tmp_path), _settings(tmp_path, ray_address="local")
    different = []
    for case in cases:
        local = _doc(await diagnose(case, here))
        remote = _doc(await diagnose(case, there))
        if local != remote:
            different.append(case.name)
    assert different == []


async def test_ray_scan_reports_progress_and_uses_every_worker(
    ray_local: Any, tmp_path: Path, make_bundle: Any
) -> None:
    bundle = make_bundle({f"rank-{r}.log": f"[rank{r}]: step {r}\n" * 2000 for r in range(8)})
    seen: list[tuple[int, int]] = []
    await diagnose(bundle, _settings(tmp_path, ray_address="local"), progress=lambda d, t: seen.append((d, t)))
    total = sum(f.stat().st_size for f in bundle.iterdir())
    assert seen and seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def _kill_first_attempt(root: str, jobs: list[tuple[str, str]], settings: ScanSettings, max_line: int) -> TaskResult:
    """A task body whose first attempts tell their pid and wait; the one the test kills never goes on, the retry
    (and any other task) then runs the real task."""
    marks = Path(root).parent / "attempts"
    mine = os.getpid()
    if not any(marks.glob("killed-*")):
        (marks / f"pid-{mine}").write_text("")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(marks.glob("killed-*")):
            time.sleep(0.02)
        if (marks / f"killed-{mine}").exists():
            time.sleep(60)  # SIGKILL is on its way
    return scan_task(root, jobs, settings, max_line)


async def test_a_worker_killed_mid_task_is_retried(ray_local: Any, tmp_path: Path, make_bundle: Any) -> None:
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/
    case = ROOT / "incidents" / "gpu-fell-off-bus"
    bundle = make_bundle({str(p.relative_to(case)): p.read_bytes() for p in case.rglob("*") if p.is_file()})
    marks = bundle.parent / "attempts"
    marks.mkdir()
    expected = _doc(await diagnose(bundle, _settings(tmp_path / "a")))
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pids = sorted(marks.glob("pid-*"))
            if pids:
                pid = int(pids[0].name.removeprefix("pid-"))
                (marks / f"killed-{pid}").write_text("")
                os.kill(pid, signal.SIGKILL)  # the Ray worker process running that task
                killed.append(pid)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=killer)
    thread.start()
    ray_cluster = cluster.Cluster.connect("local")
    ray_cluster.task = _kill_first_attempt
    try:
        got = _doc(await diagnose(bundle, _settings(tmp_path / "b"), cluster=ray_cluster))
    finally:
        thread.join()
    assert killed, "no task attempt was seen"
    assert got == expected
    assert all(r.scans for r in ray_cluster.tasks)


async def test_a_worker_that_cannot_see_the_bundle_names_path_and_node(
    ray_local: Any, tmp_path: Path, make_bundle: Any
) -> None:
    bundle = make_bundle({"rank-0.log": "[rank0]: RuntimeError: CUDA error: an illegal memory access\n"})
    moved = bundle.with_name("elsewhere")

    def on_stage(name: str) -> None:
        if name == "scan":  # the driver opened it; now the workers cannot find it
            bundle.rename(moved)

    with pytest.raises(BundleNotVisible) as err:
        await diagnose(bundle, _settings(tmp_path, ray_address="local"), on_stage=on_stage)
    assert str(bundle) in err.value.detail and "Ray node" in err.value.detail
    assert err.value.stage == "scan"


async def test_a_file_changed_during_the_run_is_not_verified(ray_local: Any, tmp_path: Path) -> None:
    case = ROOT / "incidents" / "gpu-fell-off-bus"
    bundle = tmp_path / "bundle"
    for p in case.rglob("*"):
        if p.is_file():
            (bundle / p.relative_to(case)).parent.mkdir(parents=True, exist_ok=True)
            (bundle / p.relative_to(case)).write_bytes(p.read_bytes())
    log = bundle / "nodes" / "h100-b06-40" / "kern.log"

    def on_stage(name: str) -> None:
        if name == "topology":  # scanned, not verified yet: the file is rewritten (same lines, one byte more)
            log.write_bytes(log.read_bytes() + b"\n")

    outcome = await diagnose(bundle, _settings(tmp_path, ray_address="local"), on_stage=on_stage)
    changed = [c for c in outcome.citations if c.file == "nodes/h100-b06-40/kern.log"]
    assert changed and all(not c.verified and c.status == "file_changed" for c in changed)
    why = " ".join(outcome.document.model_dump(mode="json", by_alias=True)["reasoning"])
    assert "changed during the run" in why and "kern.log" in why


def _cli(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = f"{prelude}import sys; from crashcart.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_ray_installed_exit_2_one_line(tmp_path: Path) -> None:
    case = str(ROOT / "incidents" / "gpu-fell-off-bus")
    done = _cli("diagnose", case, "--no-store", "--cluster", "local", prelude="import sys; sys.modules['ray'] = None; ")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "pip install 'crashcart[ray]'" in done.stderr
    assert done.stdout == ""


def test_an_unreachable_cluster_is_exit_2_never_a_local_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    case = str(ROOT / "incidents" / "gpu-fell-off-bus")
    monkeypatch.setenv("CRASHCART_RAY_ADDRESS", "ray://127.0.0.1:9")  # the setting, as the bot reads it too
    done = _cli("diagnose", case, "--no-store", "--json")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "ray://127.0.0.1:9" in done.stderr
    assert done.stdout == ""


def test_a_malformed_ray_address_is_a_configuration_error() -> None:
    done = _cli("diagnose", str(ROOT / "incidents" / "gpu-fell-off-bus"), "--cluster", "head:10001")
    assert done.returncode == 2 and "ray://HOST:PORT or local" in done.stderr


def test_ray_is_never_imported_without_the_option(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys; from pathlib import Path; from crashcart.pipeline import diagnose; "
        "from crashcart.settings import Settings; "
        f"asyncio.run(diagnose(Path({str(ROOT / 'incidents' / 'gpu-fell-off-bus')!r}), "
        f"Settings(_env_file=None, db=Path({str(tmp_path / 'db')!r}), work_dir=Path({str(tmp_path / 'w')!r})))); "
        "assert 'ray' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    _ = asyncio  # the module's tests are async; keep the import explicit


async def test_the_bot_status_shows_scan_progress(slack: Any) -> None:
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.status import StatusUpdater

    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    status = StatusUpdater(client, "C1", "1.0", "Analysing bundle x", interval_s=0)
    status.on_stage("ingest")
    status.on_stage("scan")
    status.on_progress(42 * 2**20, 100 * 2**20)  # what the pipeline's progress hook says, relayed by the analysis
    await status.push()
    await status.close()
    shown = str(slack.calls_to("chat.update")[-1].params)
    assert "scan 42 %" in shown and "ingest" in shown
