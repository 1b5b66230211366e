"""The scan pool runs small files before larger ones waiting, and each file's findings are built as its scan
completes; whatever order that is, the findings (ids included) are those of one thread scanning in path order."""

from __future__ import annotations

from pathlib import Path

from crashcart.ingest.bundle import open_bundle
from crashcart.scan.run import FINDINGS_BUDGET, SMALL_FIRST, ScanPool, open_scanning, scan
from crashcart.settings import Settings

# PyTorch ProcessGroupNCCL.cpp watchdog (torch 2.x) and the kernel's NVRM Xid line (nvidia driver, os-interface)
WATCHDOG = (
    "[rank{r}]:[E1201 08:48:38.123456 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=18658, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran "
    "for 600012 milliseconds before timing out."
)
XID = "[Tue Dec  1 08:38:36 2026] NVRM: Xid (PCI:0000:2a:00): 79, pid=2104, GPU has fallen off the bus."
# the same collective once more, as the watchdog thread's exception (torch 2.x ProcessGroupNCCL.cpp:1515) and the
# ``what()`` of the c10::DistBackendError it terminates with: both match nccl.watchdog_thread_terminated too
TERMINATED = (
    "[rank{r}]:[E1201 08:48:38.223999 ProcessGroupNCCL.cpp:1515] [PG 1 Rank {r}] Process group watchdog thread "
    "terminated with exception: "
)
WHAT = "  what():  [PG 1 Rank {r}] Process group watchdog thread terminated with exception: "
STEP = "[2026-12-01 08:38:{s:02d}] iteration {i:>8d}/  250000 | consumed samples: {c:>12d} | lm loss: 3.18 |"


def _bundle(root: Path) -> Path:
    """Rank logs at the top (walked, offered and scanned first), kernel logs in ``nodes/`` (path order: first)."""
    for r in range(6):
        p = root / f"rank-{r}.log"
        p.parent.mkdir(parents=True, exist_ok=True)
        steps = [STEP.format(s=i % 60, i=i, c=512 * i) for i in range(300 + 40 * r)]
        p.write_text("\n".join([*steps, WATCHDOG.format(r=r)]) + "\n")
    for n in range(3):
        p = root / "nodes" / f"gpu-node-00{n}" / "dmesg.log"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(
            "[Tue Dec  1 08:00:00 2026] mlx5_core 0000:0c:00.0: poll_health\n" + (XID + "\n" if n == 1 else "")
        )
    return root


def test_findings_numbered_as_in_path_order_whatever_the_scan_order(tmp_path: Path, settings: Settings) -> None:
    root = _bundle(tmp_path / "b")
    bundle, pool = open_scanning(root, settings.work_dir, settings.bundle_limits, settings.scan)
    with bundle:
        pooled = scan(bundle, settings.scan, pool=pool)
    with open_bundle(root, settings.work_dir, settings.bundle_limits) as bundle:
        serial = scan(bundle, settings.scan)  # one thread, path order, one IdSource
    assert [f.model_dump() for f in pooled.findings] == [f.model_dump() for f in serial.findings]
    assert [f.id for f in pooled.findings] == [f"F{i:04d}" for i in range(1, len(pooled.findings) + 1)]
    assert pooled.findings[0].evidence[0].file == "nodes/gpu-node-001/dmesg.log"  # the Xid: first in path order
    assert pooled.notes == serial.notes and dict(pooled.tails) == dict(serial.tails)


def test_a_small_file_goes_before_the_larger_ones_waiting(tmp_path: Path, settings: Settings) -> None:
    one = settings.scan.model_copy(update={"workers": 1})
    files = {}
    for name in ("a", "b", "c", "small"):
        files[name] = tmp_path / f"{name}.log"
        files[name].write_text(f"{name}\n")
    with ScanPool(one, 65536) as pool:
        for name in ("a", "b", "c"):
            pool.submit(files[name], name, SMALL_FIRST * 2)
        pool.submit(files["small"], "small", 10)
        done = [fs.path for fs in pool.results([(files[n], n) for n in ("a", "b", "c", "small")])]
    assert done.index("small") < done.index("b") < done.index("c")


def test_closing_cancels_the_files_still_waiting(tmp_path: Path, settings: Settings) -> None:
    one = settings.scan.model_copy(update={"workers": 1})
    p = tmp_path / "f.log"
    p.write_text("x\n")
    pool = ScanPool(one, 65536)
    for i in range(50):
        pool.submit(p, f"f{i}.log", SMALL_FIRST * 2)
    pool.close()
    futures = list(pool._futures.values())
    assert all(f.done() for f in futures)  # scanned before the close, or cancelled: none left pending


def test_findings_past_the_budget_do_not_depend_on_when_each_scan_completed(tmp_path: Path, settings: Settings) -> None:
    """Past ``FINDINGS_BUDGET`` files the pool trims each scan for the files offered when it completed (the fewer,
    the more it keeps) and a line may match a signature trimmed away and another that is not: the findings are
    those of the final count's trim, whether a scan completed early, late, on a pool or without one (issue 16:
    the watchdog count of bench (d) changed from run to run)."""
    root = tmp_path / "b"
    root.mkdir()
    for r in range(FINDINGS_BUDGET + 32):
        steps = [STEP.format(s=i % 60, i=i, c=512 * i) for i in range(20)]
        dog = WATCHDOG.format(r=r)
        lines = [*steps, dog, TERMINATED.format(r=r) + dog, "terminate called", WHAT.format(r=r) + dog]
        (root / f"rank-{r}.log").write_text("\n".join(lines) + "\n")
    few = settings.scan.model_copy(update={"max_findings_per_signature_per_file": 4})  # 1 line kept per end
    runs = []
    for workers in (1, 2):
        each = few.model_copy(update={"workers": workers})
        bundle, pool = open_scanning(root, settings.work_dir, settings.bundle_limits, each)
        with bundle:
            runs.append(scan(bundle, each, pool=pool))
    with open_bundle(root, settings.work_dir, settings.bundle_limits) as bundle:
        runs.append(scan(bundle, few.model_copy(update={"workers": 1})))  # no pool: no scan trimmed before
    dumps = [[f.model_dump() for f in run.findings] for run in runs]
    assert dumps[0] == dumps[1] == dumps[2]
    assert runs[0].notes == runs[1].notes == runs[2].notes
    assert {f.signature for f in runs[0].findings} >= {"nccl.watchdog_timeout", "nccl.watchdog_thread_terminated"}


def test_renumbering_in_place_counts_a_shared_evidence_once() -> None:
    """Two findings of one file citing one evidence object (as a follow-up may) get the same new id for it, the
    base added once; the findings keep every other field."""
    from crashcart.models import Evidence, Finding
    from crashcart.scan.numbering import renumbered

    shared = Evidence(id="E00002", file="rank-0.log", line=4, text="x")
    own = Evidence(id="E00001", file="rank-0.log", line=3, text="y")
    blank = Evidence(id="", file="rank-0.log", line=5, text="z")
    made = [
        Finding(
            id=f"F000{i}", class_id="c", signature="s", role="context", severity="info", summary=f"{i}", evidence=ev
        )
        for i, ev in ((1, [own, shared]), (2, [shared, blank]))
    ]
    out = renumbered(made, 10, 100)
    assert [f.id for f in out] == ["F0011", "F0012"]
    assert [[e.id for e in f.evidence] for f in out] == [["E00101", "E00102"], ["E00102", ""]]
    assert [f.summary for f in out] == ["1", "2"] and out[0].evidence[1] is out[1].evidence[0]
    assert renumbered(out, 0, 0) is out
