"""The whole offline pipeline on small inline bundles, shaped the way real clusters write them."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crashcart.pipeline import diagnose
from crashcart.settings import Settings
from crashcart.store import Store

HOSTS = ["gpu-node-016", "gpu-node-017"]
BUS = ["18000", "3b000"]


def _rank_log(rank: int, *, timeout: bool, crash: str | None = None) -> str:
    host = HOSTS[rank // 2]
    local = rank % 2
    lines = [
        f"{host}:{4000 + rank}:{4100 + rank} [{local}] NCCL INFO NCCL version 2.21.5+cuda12.4",
        f"{host}:{4000 + rank}:{4100 + rank} [{local}] NCCL INFO comm 0x5581a2c0 rank {rank} nranks 4 cudaDev {local} nvmlDev {local} busId {BUS[local]} commId 0x9f1c2d3e4b5a6978 - Init COMPLETE",
    ]
    for step in range(1, 6):
        lines.append(f"[rank{rank}]:2026-11-30 02:0{step}:00,000 INFO step {step * 100} loss 2.{9 - step}1 lr 3e-4")
    if crash:
        lines.append(crash)
    if timeout:
        lines += [
            f"[rank{rank}]:[E1130 02:23:07.{408271257 + rank} ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
            f"[rank{rank}]:[E1130 02:23:07.465150152 ProcessGroupNCCL.cpp:1664] [PG 1 Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.",
        ]
    return "\n".join(lines) + "\n"


def _xid_bundle(make_bundle) -> Path:  # type: ignore[no-untyped-def]
    dmesg_ok = "[Mon Nov 30 01:00:00 2026] Linux version 5.15.0-91-generic\n[Mon Nov 30 01:00:05 2026] nvidia: loading out-of-tree module taints kernel.\n"
    dmesg_bad = dmesg_ok + (
        "[Mon Nov 30 02:13:07 2026] NVRM: GPU at PCI:0000:3b:00: GPU-5c0e2f9a-71d3-4c4e-9a0e-2b1f3c4d5e6f\n"
        "[Mon Nov 30 02:13:07 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=4003, name=python, GPU has fallen off the bus.\n"
        "[Mon Nov 30 02:13:07 2026] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
    )
    files = {
        "nodes/gpu-node-016/dmesg.txt": dmesg_ok,
        "nodes/gpu-node-017/dmesg.txt": dmesg_bad,
    }
    for r in range(4):
        files[f"ranks/rank{r}/stderr.log"] = _rank_log(r, timeout=r != 3)
    return make_bundle(files)


def test_xid79_on_one_node_is_the_root_and_timeouts_are_symptoms(make_bundle, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    out = asyncio.run(diagnose(_xid_bundle(make_bundle), settings))
    rc = out.document.root_cause
    assert rc.class_ == "gpu_fallen_off_bus"
    assert rc.culprit.node == "gpu-node-017"
    assert rc.culprit.rank == 3
    assert rc.culprit.gpu == "0000:3b:00"
    assert rc.citations and all(c.verified for c in rc.citations)
    assert any("Xid" in c.text and c.file == "nodes/gpu-node-017/dmesg.txt" for c in rc.citations)
    symptoms = {s.class_: s for s in out.document.symptoms}
    assert symptoms["nccl_watchdog_timeout"].ranks == [0, 1, 2]
    assert rc.confidence >= 0.7


def test_expected_json_never_changes_the_answer(make_bundle, settings: Settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = _xid_bundle(make_bundle)
    first = asyncio.run(diagnose(root, settings)).document.model_dump(by_alias=True)
    (root / "expected.json").write_text(json.dumps({"root_cause_class": "cuda_oom"}))
    second = asyncio.run(diagnose(root, settings)).document.model_dump(by_alias=True)
    for d in (first, second):
        d["stats"]["seconds"] = 0
    assert first == second


def test_same_answer_from_a_tarball_and_stored_once(make_bundle, settings: Settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = _xid_bundle(make_bundle)
    tar = shutil.make_archive(str(tmp_path / "incident"), "gztar", root_dir=root)
    with Store(settings.store) as store:
        a = asyncio.run(diagnose(root, settings, store=store)).document
        b = asyncio.run(diagnose(Path(tar), settings, store=store)).document
        assert a.incident_id == b.incident_id
        assert a.root_cause == b.root_cause
        assert store.get(a.incident_id).summary.runs == 2


def test_rank_crash_traceback_beats_watchdog_cascade(make_bundle, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    crash = "\n".join(
        [
            "[rank2]:Traceback (most recent call last):",
            '[rank2]:  File "/workspace/train.py", line 211, in <module>',
            "[rank2]:    main()",
            '[rank2]:  File "/workspace/data.py", line 88, in __getitem__',
            "[rank2]:    sample = self.index[idx]",
            "[rank2]:KeyError: 'shard-00417'",
        ]
    )
    files = {f"rank-{r}.log": _rank_log(r, timeout=r != 2, crash=crash if r == 2 else None) for r in range(4)}
    out = asyncio.run(diagnose(make_bundle(files), settings))
    rc = out.document.root_cause
    assert rc.class_ == "python_exception_rank_crash"
    assert rc.culprit.rank == 2
    assert any(c.end_line is not None and c.end_line - c.line == 5 for c in rc.citations)
    assert all(c.verified for c in rc.citations)


def test_only_timeouts_and_no_odd_rank_is_unknown(make_bundle, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    files = {f"rank-{r}.log": _rank_log(r, timeout=True) for r in range(4)}
    out = asyncio.run(diagnose(make_bundle(files), settings))
    assert out.document.root_cause.class_ == "unknown"
    assert out.document.symptoms[0].count >= 4


def test_every_evidence_the_scan_creates_verifies(settings: Settings) -> None:
    """Not only the cited lines: every Evidence of every finding re-reads equal from the bundle."""
    from crashcart.ingest.bundle import open_bundle
    from crashcart.scan.run import scan
    from crashcart.verify import check

    root = Path(__file__).resolve().parent.parent
    for case in ["incidents/gpu-fell-off-bus", "incidents/k8s-oomkilled", "tests/data/foreign/xid79-lightning-tee"]:
        with open_bundle(root / case, settings.work_dir, settings.bundle_limits) as bundle:
            found = scan(bundle, settings.scan)
            registry = {ev.id: ev for f in found.findings for ev in f.evidence}
            assert registry
            bad = [(i, c.status) for i in registry if not (c := check(i, registry, bundle)).verified]
            assert bad == []


@hsettings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from(["srun", "torch", "mpi"]), st.booleans()), min_size=1, max_size=60
    )
)
def test_demultiplexed_lines_keep_their_numbers(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[int, str, bool]]
) -> None:
    """A combined log with interleaved rank prefixes: each finding cites its real line and its prefix's rank."""
    from crashcart.ingest.bundle import open_bundle
    from crashcart.scan.run import scan

    styles = {"srun": "{r}: ", "torch": "[rank{r}]:", "mpi": "[1,{r}]<stderr>:"}
    lines, expected = [], {}
    for i, (rank, style, failing) in enumerate(plan, start=1):
        body = "RuntimeError: CUDA error: an illegal memory access was encountered" if failing else f"step {i} loss 2.5"
        lines.append(styles[style].format(r=rank) + body)
        if failing:
            expected[i] = rank
    root = tmp_path_factory.mktemp("demux")
    (root / "slurm-42.out").write_text("\r\n".join(lines) + "\r\n")
    settings = Settings(_env_file=None, db=root / "db", work_dir=tmp_path_factory.mktemp("w"))  # type: ignore[call-arg]
    with open_bundle(root, settings.work_dir, settings.bundle_limits) as bundle:
        found = scan(bundle, settings.scan)
        got = {f.evidence[0].line: f.rank for f in found.findings if f.class_id == "cuda_kernel_fault"}
    assert got == expected
