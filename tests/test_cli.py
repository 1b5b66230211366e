"""The command line contract (DESIGN §4.1): JSON on stdout only, exit codes, one-line errors, stored runs."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from crashcart.cli import main

XID_LOG = (
    "[Mon Nov 30 02:13:07 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=4003, name=python, GPU has fallen off the bus.\n"
)
RANK_LOG = (
    "gpu-node-017:4003:4103 [1] NCCL INFO comm 0x55 rank 3 nranks 4 cudaDev 1 nvmlDev 1 busId 3b000 commId 0x9 - Init COMPLETE\n"
    "[rank3]:2026-11-30 02:13:00,000 INFO step 100 loss 2.1\n"
)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CRASHCART_DB", str(tmp_path / "db.sqlite"))
    monkeypatch.setenv("CRASHCART_WORK_DIR", str(tmp_path / "work"))
    return tmp_path


def _bundle(root: Path) -> Path:
    (root / "nodes" / "gpu-node-017").mkdir(parents=True)
    (root / "nodes" / "gpu-node-017" / "dmesg.log").write_text(XID_LOG)
    (root / "rank-3.log").write_text(RANK_LOG)
    return root


def test_json_is_the_only_thing_on_stdout(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diagnose", str(_bundle(env / "b")), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)  # exactly one JSON document, nothing else
    assert out.count("\n") == 1
    assert doc["schema"] == "crashcart.diagnosis/v1"
    assert doc["root_cause"]["class"] == "gpu_fallen_off_bus"
    for key in (
        "incident_id",
        "job_id",
        "engine",
        "bundle",
        "contributing",
        "symptoms",
        "hypotheses",
        "timeline",
        "runbook",
        "stats",
    ):
        assert key in doc


def test_out_dir_and_stored_runs(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = _bundle(env / "b")
    assert main(["diagnose", str(bundle), "--out", str(env / "out")]) == 0
    written = json.loads((env / "out" / "diagnosis.json").read_text())
    capsys.readouterr()
    assert main(["list"]) == 0
    assert written["incident_id"] in capsys.readouterr().out
    assert main(["search", "gpu-node-017"]) == 0
    assert written["incident_id"] in capsys.readouterr().out
    assert main(["show", written["incident_id"][:8], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["root_cause"] == written["root_cause"]
    assert main(["show", "cc-nope"]) == 2


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _info(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size, ti.type, ti.linkname = size, kind, link
    return ti


def _hostile(tmp: Path, case: str) -> Path:
    log = RANK_LOG.encode()
    if case == "traversal":
        return _tar(tmp / "t.tgz", [(_info("rank-0.log", len(log)), log), (_info("../escape.log", 3), b"x\n\n")])
    if case == "absolute":
        return _tar(tmp / "a.tgz", [(_info("/tmp/abs.log", 3), b"x\n\n")])
    if case == "zip-traversal":
        p = tmp / "z.zip"
        with zipfile.ZipFile(p, "w") as zf:
            zf.writestr("../../evil.log", "x\n")
        return p
    if case == "truncated":
        good = _tar(tmp / "g.tgz", [(_info("rank-0.log", len(log) * 200), log * 200)])
        data = good.read_bytes()
        (tmp / "cut.tgz").write_bytes(data[: len(data) // 2])
        return tmp / "cut.tgz"
    if case == "empty":
        return _tar(tmp / "e.tgz", [])
    if case == "no-logs":
        (tmp / "nologs").mkdir()
        (tmp / "nologs" / "blob.bin").write_bytes(b"\x00\x01" * 4096)
        return tmp / "nologs"
    if case == "zip-bomb":
        p = tmp / "bomb.gz"
        with gzip.open(p, "wb") as gz:
            block = b"\0" * (1 << 20)
            for _ in range(1100):
                gz.write(block)
        return p
    if case == "missing":
        return tmp / "does-not-exist"
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case", ["traversal", "absolute", "zip-traversal", "truncated", "empty", "no-logs", "zip-bomb", "missing"]
)
def test_unusable_input_is_exit_2_with_one_line(env: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    src = _hostile(env, case)
    code = main(["diagnose", str(src), "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    err = captured.err.strip()
    assert err.startswith("error:") and "\n" not in err and "Traceback" not in err
    assert not (env.parent / "escape.log").exists() and not Path("/tmp/abs.log").exists()
    work = env / "work"
    assert not work.exists() or not any(work.iterdir())  # nothing half-extracted left behind


def test_links_devices_binary_and_odd_encodings_are_skipped_not_fatal(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = RANK_LOG.encode()
    members = [
        (_info("rank-3.log", len(log)), log),
        (_info("nodes/gpu-node-017/dmesg.log", len(XID_LOG)), XID_LOG.encode()),
        (_info("link.log", kind=tarfile.SYMTYPE, link="/etc/passwd"), None),
        (_info("hard.log", kind=tarfile.LNKTYPE, link="rank-3.log"), None),
        (_info("dev.log", kind=tarfile.CHRTYPE), None),
        (_info("junk.bin", 4096), bytes(range(256)) * 16),
        (_info("latin1.log", 24), "caf\xe9 cr\xe8me br\xfbl\xe9e\n".encode("latin-1").ljust(24, b"\n")),
    ]
    src = _tar(env / "mixed.tgz", members)
    assert main(["diagnose", str(src), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    skipped = {s["path"]: s["reason"] for s in doc["stats"]["skipped_files"]}
    assert {"link.log", "hard.log", "dev.log", "junk.bin"} <= set(skipped)
    assert doc["root_cause"]["class"] == "gpu_fallen_off_bus"
    assert all(c["verified"] for c in doc["root_cause"]["citations"])


def test_a_huge_single_line_does_not_shift_line_numbers(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _bundle(env / "big")
    with (root / "nodes" / "gpu-node-017" / "dmesg.log").open("wb") as fh:
        fh.write(b"[Mon Nov 30 01:00:00 2026] ")
        chunk = b"z" * (1 << 20)
        for _ in range(200):  # a 200 MB line
            fh.write(chunk)
        fh.write(b"\n" + XID_LOG.encode())
    assert main(["diagnose", str(root), "--json", "--no-store"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cites = doc["root_cause"]["citations"]
    assert any(c["file"] == "nodes/gpu-node-017/dmesg.log" and c["line"] == 2 and c["verified"] for c in cites)


def test_no_store_writes_reports_without_creating_a_database(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = env / "out"
    assert main(["diagnose", str(_bundle(env / "b")), "--no-store", "--out", str(out)]) == 0
    assert (out / "diagnosis.json").is_file() and (out / "postmortem.md").is_file()
    assert not (env / "db.sqlite").exists()  # --no-store: not even opened


def test_out_writes_every_report_and_the_runbook_workflow(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = _bundle(env / "b")
    out = env / "out"
    assert main(["diagnose", str(bundle), "--out", str(out)]) == 0
    for name in ("diagnosis.json", "postmortem.md", "runbook.md", "runbook.json", "timeline.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    doc = json.loads((out / "diagnosis.json").read_text())
    plan = json.loads((out / "runbook.json").read_text())
    assert doc["runbook"]["steps"] and plan["steps"]
    incident = doc["incident_id"]
    capsys.readouterr()
    assert main(["approve", incident, "--as", "U1", "--plan", "0" * 64]) == 2  # not the plan that was shown
    assert "error:" in capsys.readouterr().err
    assert main(["runbook", incident, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert main(["approve", incident, "--as", "U1", "--plan", shown["plan_hash"]]) == 0
    assert main(["reject", incident, "--as", "U2", "--reason", "too late"]) == 2  # already decided
    capsys.readouterr()
    assert main(["runbook", incident, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "approved"


def test_list_never_cuts_an_incident_id(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["diagnose", str(_bundle(env / "b")), "--out", str(env / "out")]) == 0
    incident = json.loads((env / "out" / "diagnosis.json").read_text())["incident_id"]
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "40")  # a narrow terminal: other columns wrap, the id is what people type
    assert main(["list"]) == 0
    assert incident in capsys.readouterr().out


def _labelled(root: Path, name: str, split: str | None) -> None:
    case = root / name
    (case / "logs").mkdir(parents=True)
    (case / "logs" / "rank0.log").write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    labels: dict[str, object] = {"root_cause_class": "cuda_kernel_fault"}
    if split:
        labels["split"] = split
    (case / "expected.json").write_text(json.dumps(labels))


def test_eval_split_keeps_only_the_cases_of_that_split(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _labelled(env / "cases", "one-dev", "dev")
    _labelled(env / "cases", "two-held", "held-out")
    _labelled(env / "cases", "three-none", None)
    assert main(["eval", "--json", "--split", "dev", str(env / "cases")]) == 0
    cases = json.loads(capsys.readouterr().out)["cases"]
    assert [c["case"] for c in cases] == ["one-dev"]
    assert main(["eval", "--json", str(env / "cases")]) == 0
    assert len(json.loads(capsys.readouterr().out)["cases"]) == 3
    assert main(["eval", "--split", "held-out", str(env / "cases" / "one-dev")]) == 2
    assert "labelled split 'held-out'" in capsys.readouterr().err
