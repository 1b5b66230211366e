"""Tests for the deterministic incident generator (crashcart.synth)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crashcart.synth import CLASSES, LAYOUTS, build_story, compatible_layouts, synthesize
from crashcart.text.gpuid import canonical_pci

PCI = re.compile(r"\b(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?\b")

# One signature per symptom class, to prove each listed symptom is really in the bundle.
SYMPTOM_SIGNATURE = {
    "nccl_watchdog_timeout": r"Watchdog caught collective operation timeout|lagging ranks|didn't finish",
    "nccl_remote_peer_failure": r"Connection closed by remote peer|ncclRemoteError",
    "torchelastic_childfailed_summary": r"ChildFailedError|closing signal SIGTERM|failed \(exitcode",
    "dataloader_worker_failure": r"DataLoader worker \(pid",
    "gpu_app_fault_xid": r"Xid \(PCI:[0-9a-f:]+\): (?:13|31|43|45),",
    "cuda_kernel_fault": r"CUDA error: |Cuda failure '",
    "ib_completion_error": r"Got completion from peer",
    "launcher_rendezvous_store_failure": r"store based barrier|RendezvousTimeoutError",
    "host_oom_kill": r"out of memory: Killed process",
    "scheduler_preemption_or_timelimit": r"CANCELLED AT",
    "gpu_engine_hang_reset_required": r"\): 154, GPU recovery action changed",
    "nccl_watchdog_stuck_heartbeat": r"Heartbeat monitor timed out|watchdog got stuck",
}


def read_bundle(out: Path) -> dict[str, list[str]]:
    return {
        p.relative_to(out).as_posix(): p.read_text(encoding="utf-8").split("\n")[:-1]
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "expected.json" and p.suffix != ".png"
    }


def rank_named(text: str, path: str, rank: int) -> bool:
    if re.search(rf"rank[-_]{rank}\.", path):
        return True
    forms = (
        rf"\[rank{rank}\]",
        rf"\bRank {rank}\b",
        rf"\brank\s*:?\s*{rank}\b",
        rf"ranks \[{rank}\]",
        rf"^\s*{rank}: ",
    )
    return any(re.search(f, text) for f in forms)


def check_bundle(out: Path, labels: dict[str, object]) -> None:
    """Every invariant a generated bundle must satisfy."""
    assert json.loads((out / "expected.json").read_text()) == labels
    assert set(labels) == {"root_cause_class", "culprit", "root_cause_lines", "symptom_classes"}
    files = read_bundle(out)
    assert sum((out / f).stat().st_size for f in files) < 1_000_000
    for f in files:
        assert (out / f).read_bytes().endswith(b"\n")
    cls = labels["root_cause_class"]
    roots = labels["root_cause_lines"]
    culprit = labels["culprit"]
    assert isinstance(roots, list) and isinstance(culprit, dict)
    if cls == "unknown":
        assert roots == [] and culprit == {"node": None, "rank": None, "gpu": None}
    else:
        assert roots
    cited: list[tuple[str, str]] = []
    for ref in roots:
        lines = files[ref["file"]]
        assert 1 <= ref["line"] <= len(lines), ref
        cited.append((ref["file"], lines[ref["line"] - 1]))
    # a root-cause line is never word for word the same as a non-root line
    positions = {(ref["file"], ref["line"]) for ref in roots}
    texts = {text for _, text in cited}
    for f, lines in files.items():
        for i, line in enumerate(lines, 1):
            assert (f, i) in positions or line not in texts, f"{f}:{i} repeats a root line"
    # culprit fields are established by the cited evidence
    node, rank, gpu = culprit["node"], culprit["rank"], culprit["gpu"]
    if node is not None:
        mapped = rank is not None and any(
            node in line and f"rank {rank} nranks" in line for lines in files.values() for line in lines
        )
        assert mapped or any(node in t or node in f or node in "\n".join(files[f]) for f, t in cited)
    if rank is not None:
        assert any(rank_named(t, f, rank) for f, t in cited), (rank, cited[:2])
    if gpu is not None:
        assert gpu == canonical_pci(gpu)
        assert any(canonical_pci(m) == gpu for _, t in cited for m in PCI.findall(t))
    # symptoms are TAXONOMY classes other than the root, and really present
    symptoms = labels["symptom_classes"]
    assert isinstance(symptoms, list) and cls not in symptoms
    blob = "\n".join(line for lines in files.values() for line in lines)
    for sym in symptoms:
        assert sym in CLASSES
        if sym in SYMPTOM_SIGNATURE:
            assert re.search(SYMPTOM_SIGNATURE[sym], blob, re.IGNORECASE), sym


def test_class_list() -> None:
    assert len(CLASSES) == 37 and len(set(CLASSES)) == 37
    assert CLASSES[-1] == "unknown"
    assert {"gpu_fallen_off_bus", "rank_hang_or_missing_rank", "straggler_fail_slow"} <= set(CLASSES)
    assert set(LAYOUTS) == {"per_rank", "per_node", "slurm_combined", "torchrun_prefixed", "k8s"}
    for cls in CLASSES:
        assert set(compatible_layouts(cls)) <= set(LAYOUTS)


@pytest.mark.parametrize("cls", CLASSES)
def test_every_class_two_seeds_two_layouts(cls: str, tmp_path: Path) -> None:
    layouts = compatible_layouts(cls)
    for seed in (0, 1):
        for k in range(2):
            lay = layouts[(2 * seed + k) % len(layouts)]
            out = tmp_path / f"{seed}-{lay}-{k}"
            labels = synthesize(cls, out, seed=seed, layout=lay)
            assert labels["root_cause_class"] == cls
            check_bundle(out, labels)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_deterministic(tmp_path: Path) -> None:
    for cls in ("gpu_fallen_off_bus", "rank_hang_or_missing_rank", "k8s_pod_eviction_or_oomkilled"):
        a = synthesize(cls, tmp_path / f"{cls}-a", seed=7)
        b = synthesize(cls, tmp_path / f"{cls}-b", seed=7)
        assert a == b
        assert _snapshot(tmp_path / f"{cls}-a") == _snapshot(tmp_path / f"{cls}-b")
    synthesize("gpu_fallen_off_bus", tmp_path / "seed8", seed=8)
    assert _snapshot(tmp_path / "seed8") != _snapshot(tmp_path / "gpu_fallen_off_bus-a")


def test_large_and_uneven_jobs(tmp_path: Path) -> None:
    for cls in ("gpu_fallen_off_bus", "python_exception_rank_crash", "unknown"):
        out = tmp_path / f"big-{cls}"
        labels = synthesize(cls, out, ranks=64, nodes=8, seed=3)
        files = read_bundle(out)
        assert sum(len(v) for v in files.values()) > 64 * 20
        culprit = labels["culprit"]
        assert isinstance(culprit, dict)
        if culprit["rank"] is not None:
            assert 0 <= culprit["rank"] < 64
    for ranks, nodes in ((6, 4), (5, 2), (3, 1)):
        out = tmp_path / f"uneven-{ranks}-{nodes}"
        check_bundle(out, synthesize("cuda_oom", out, ranks=ranks, nodes=nodes, seed=2))


def test_layout_shapes(tmp_path: Path) -> None:
    synthesize("cuda_oom", tmp_path / "a", seed=4, layout="per_node")
    files = read_bundle(tmp_path / "a")
    assert any(re.fullmatch(r"logs/[\w.-]+/rank_\d+\.out", f) for f in files)
    assert any(re.fullmatch(r"[\w.-]+/kern\.log", f) for f in files)
    synthesize("cuda_oom", tmp_path / "b", seed=4, layout="slurm_combined")
    files = read_bundle(tmp_path / "b")
    (slurm,) = [f for f in files if re.fullmatch(r"slurm-\d+\.out", f)]
    assert sum(bool(re.match(r"\s*\d+: ", line)) for line in files[slurm]) > 50
    assert any(f.startswith("sacct.") for f in files)
    synthesize("cuda_oom", tmp_path / "c", seed=4, layout="torchrun_prefixed")
    files = read_bundle(tmp_path / "c")
    node_logs = [f for f in files if f.startswith("torchrun/")]
    assert node_logs and any(re.match(r"(\[default\d+\]:)?\[rank\d+\]:", ln) for ln in files[node_logs[0]])
    synthesize("cuda_oom", tmp_path / "d", seed=4, layout="k8s")
    files = read_bundle(tmp_path / "d")
    pods = [f for f in files if f.startswith("pods/") and f.endswith(".log")]
    record = json.loads(files[pods[0]][0])
    assert list(record) == ["time", "stream", "log"] and record["log"].endswith("\n")
    assert json.loads((tmp_path / "d" / "events.json").read_text())["kind"] == "List"
    synthesize("cuda_oom", tmp_path / "e", seed=4, layout="per_rank")
    assert any(re.fullmatch(r"rank-\d+\.log", f) for f in read_bundle(tmp_path / "e"))


def test_boot_relative_kernel_clock_comes_with_boot_times(tmp_path: Path) -> None:
    seen = 0
    for seed in range(12):
        out = tmp_path / str(seed)
        synthesize("gpu_fallen_off_bus", out, seed=seed, layout="per_rank")
        kernel = [f for f in read_bundle(out) if f.endswith("dmesg.log")]
        if kernel and re.match(r"\[\s*\d+\.\d{6}\] ", read_bundle(out)[kernel[0]][0]):
            manifest = json.loads((out / "manifest.json").read_text())
            assert all("boot_time" in n and "host" in n for n in manifest["nodes"])
            seen += 1
    assert seen


def test_symptoms_follow_the_cause() -> None:
    """Cascade and teardown lines come after the first root-cause line on the job clock."""
    cascade = {"nccl_watchdog_timeout", "nccl_remote_peer_failure", "torchelastic_childfailed_summary"}
    for cls in (
        "gpu_fallen_off_bus",
        "python_exception_rank_crash",
        "host_oom_kill",
        "network_filesystem_hang",
        "nccl_watchdog_stuck_heartbeat",
        "cuda_oom",
        "pcie_aer_error",
    ):
        for seed in range(3):
            story = build_story(cls, ranks=8, nodes=2, seed=seed, layout=None)
            lines = [ln for stream in story.streams.values() for ln in stream]
            first_root = min(ln.t for ln in lines if ln.root)
            after = [ln.t for ln in lines if ln.symptom in cascade]
            assert after and min(after) > first_root, (cls, seed)


def test_traps_present(tmp_path: Path) -> None:
    everything = []
    for cls in ("python_exception_rank_crash", "gpu_fallen_off_bus", "cuda_kernel_fault", "host_oom_kill"):
        for seed in range(4):
            out = tmp_path / f"{cls}-{seed}"
            synthesize(cls, out, seed=seed)
            everything += [ln for lines in read_bundle(out).values() for ln in lines]
    blob = "\n".join(everything)
    assert "NCCL WARN NET/Plugin" in blob  # benign early WARN
    assert "emptying cache and retrying" in blob  # a CUDA OOM that was caught; training went on
    assert re.search(r"Xid \(PCI:[0-9a-f:]+\): 45,", blob)  # teardown Xid after the root event


@pytest.mark.parametrize("cls", ["gpu_thermal_power_throttling", "straggler_fail_slow"])
def test_telemetry_only_classes(cls: str, tmp_path: Path) -> None:
    for seed in range(2):
        out = tmp_path / str(seed)
        labels = synthesize(cls, out, seed=seed)
        files = read_bundle(out)
        assert {ref["file"] for ref in labels["root_cause_lines"]} == {"telemetry/dcgm.csv"}
        logs = "\n".join(ln for f, lines in files.items() if f != "telemetry/dcgm.csv" for ln in lines)
        assert not re.search(r"throttl|slowdown|thermal|straggler", logs, re.IGNORECASE)


def test_hung_rank_never_prints_a_timeout() -> None:
    for seed in range(4):
        story = build_story("rank_hang_or_missing_rank", ranks=8, nodes=2, seed=seed, layout=None)
        culprit = story.culprit_rank
        assert culprit is not None
        mine = [ln.text for ln in story.streams[("rank", culprit)]]
        assert not any("Watchdog caught" in t for t in mine)
        others = [
            ln.text for (kind, r), lines in story.streams.items() if kind == "rank" and r != culprit for ln in lines
        ]
        assert any("Watchdog caught collective operation timeout" in t for t in others)


def test_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        synthesize("no_such_class", tmp_path / "a")
    with pytest.raises(ValueError):
        synthesize("cuda_oom", tmp_path / "b", layout="tarball")
    with pytest.raises(ValueError):
        synthesize("k8s_pod_eviction_or_oomkilled", tmp_path / "c", layout="per_rank")
    with pytest.raises(ValueError):
        synthesize("cuda_oom", tmp_path / "d", ranks=2, nodes=3)
    with pytest.raises(ValueError):
        synthesize("slurm_node_failure", tmp_path / "e", ranks=4, nodes=1)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("x")
    with pytest.raises(ValueError):
        synthesize("cuda_oom", tmp_path / "full")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cls=st.sampled_from(CLASSES),
    seed=st.integers(0, 10_000),
    shape=st.sampled_from([(8, 2), (4, 4), (12, 3)]),
)
def test_invariants_hold_for_any_seed(tmp_path: Path, cls: str, seed: int, shape: tuple[int, int]) -> None:
    ranks, nodes = shape
    out = tmp_path / f"{cls}-{seed}-{ranks}-{nodes}"
    if out.exists():
        return
    check_bundle(out, synthesize(cls, out, ranks=ranks, nodes=nodes, seed=seed))
