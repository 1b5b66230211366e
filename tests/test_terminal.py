"""The terminal view: titles not ids, a headline cut at a word, plain reasons, a message when nothing was found,
a width that follows the terminal or COLUMNS, and where ``--out`` wrote the files."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from crashcart.cli import PIPED_WIDTH, _stdout, main
from crashcart.models import DiagnosisDocument
from crashcart.report.terminal import headline, render
from tests.test_postmortem import incident

LONG = (
    "Python exception: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 11.72 GiB (GPU 2; "
    "79.15 GiB total capacity; 71.63 GiB already allocated; 523.13 MiB free; 72.83 GiB reserved in total by "
    "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation. "
    "See documentation for Memory Manage"
)


def shown(data: dict[str, Any], width: int = 120) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    render(DiagnosisDocument.model_validate(data), console)
    return console.export_text()


def test_the_header_names_the_class_in_words_and_ids_stay_out() -> None:
    out = shown(incident())
    assert "Root cause: GPU fell off the PCIe bus" in out
    assert not re.search(r"\b(gpu_fallen_off_bus|nccl_watchdog_timeout|cuda_kernel_fault|pcie_aer_error)\b", out)
    assert "Other possible causes, and why not" in out and "CUDA kernel fault" in out


def test_the_headline_is_cut_at_a_word_and_reasons_are_plain() -> None:
    data = incident()
    data["root_cause"] |= {
        "class": "cuda_oom",
        "summary": f"GPU out of memory (CUDA OOM) on node gpu-node-017 (rank 5) at 02:13:07 UTC: {LONG}",
        "severity": "P2",
    }
    data["reasoning"] = ["P1 class", "on the rank that is not like the others", "earliest candidate"]
    head, detail = headline(DiagnosisDocument.model_validate(data))
    assert head == "GPU out of memory (CUDA OOM) on node gpu-node-017 (rank 5) at 02:13:07 UTC"
    kept = detail[:-1]
    assert detail.endswith("…") and LONG.startswith(kept) and LONG[len(kept)] in " ;,.:"  # ends on a whole word
    out = shown(data)
    assert "P1 class" not in out and "not like the others" not in out
    assert "severity    P2: workload problem" in out and "the earliest possible cause in the logs" in out


def test_nothing_found_says_so_instead_of_only_symptoms() -> None:
    data = incident()
    data |= {"contributing": [], "symptoms": [], "hypotheses": [], "timeline": []}
    data["root_cause"] |= {
        "class": "unknown",
        "summary": "Root cause not established: only symptoms were found",
        "citations": [],
        "culprit": {"node": None, "rank": None, "gpu": None},
    }
    out = shown(data)
    assert "No failure found" in out and "found no error, crash, timeout or hardware fault line" in out
    assert "only symptoms were found" not in out


def test_a_class_id_the_catalogue_does_not_know_reads_as_words() -> None:
    data = incident()
    data["root_cause"] |= {"class": "no_failure", "summary": "The job did not fail", "severity": None}
    data["symptoms"][0] |= {"class": "some_new_class"}
    out = shown(data)
    assert "No failure found" in out or "No failure" in out
    assert "Some new class" in out and "some_new_class" not in out


def test_each_group_is_named_in_words() -> None:
    out = shown(incident())
    assert "Symptoms: failures the root cause explains" in out
    assert "Teardown: the job shutting down after the failure (expected, not causes)" in out
    assert "Benign: lines that look like errors and are not" in out


def test_the_width_follows_columns_and_is_sensible_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert _stdout().width == PIPED_WIDTH  # pytest's stdout is not a terminal
    monkeypatch.setenv("COLUMNS", "73")
    assert _stdout().width == 73
    lines = shown(incident(), width=73).splitlines()
    assert max(len(line) for line in lines) <= 73


def test_out_says_where_the_files_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CRASHCART_DB", str(tmp_path / "db.sqlite"))
    monkeypatch.setenv("CRASHCART_WORK_DIR", str(tmp_path / "work"))
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "dmesg.log").write_text(
        "[Mon Nov 30 02:13:07 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=4003, name=python, GPU has fallen off the bus.\n"
    )
    assert main(["diagnose", str(bundle), "--no-store", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert f"wrote diagnosis.json, postmortem.md, runbook.md, runbook.json, timeline.png to {tmp_path / 'out'}" in err


def test_random_bytes_and_a_zero_filled_gz_are_skipped_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import gzip
    import json
    import random

    monkeypatch.setenv("CRASHCART_WORK_DIR", str(tmp_path / "work"))
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "rank-0.log").write_bytes(random.Random(300_000).randbytes(300_000))  # ~10 % control bytes
    (bundle / "rank-1.log.gz").write_bytes(gzip.compress(b"\0" * 2_000_000))
    (bundle / "dmesg.log").write_text(
        "[Mon Nov 30 02:13:07 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=4003, name=python, GPU has fallen off the bus.\n"
    )
    assert main(["diagnose", str(bundle), "--no-store", "--json"]) == 0
    skipped = {s["path"]: s["reason"] for s in json.loads(capsys.readouterr().out)["stats"]["skipped_files"]}
    assert skipped["rank-0.log"].startswith("binary data, not text: ") and "control bytes" in skipped["rank-0.log"]
    assert skipped["rank-1.log.gz"] == "binary data, not text: all its first 65,536 bytes are NUL once decompressed"
    assert main(["diagnose", str(bundle), "--no-store"]) == 0
    out = capsys.readouterr().out
    assert "not read: rank-0.log: binary data, not text" in " ".join(out.split())
