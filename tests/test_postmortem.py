"""Postmortem draft: a golden file for one incident, plus the rules (unknown stays unknown, no secrets).

Regenerate the golden file deliberately, after reading the diff: ``python tests/test_postmortem.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from crashcart.models import DiagnosisDocument
from crashcart.report.postmortem import render_postmortem
from crashcart.runbook.plan import build_runbook

GOLDEN = Path(__file__).parent / "golden" / "postmortem_gpu_fallen_off_bus.md"
PLUGIN = "gpu-node-016:4003:4003 [0] net.cc:63 NCCL WARN NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file"
XID = "[1443044.058593] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."


def cite(file: str, line: int, text: str, verified: bool = True) -> dict[str, Any]:
    return {
        "file": file,
        "line": line,
        "text": text,
        "verified": verified,
        "status": "ok" if verified else "text_mismatch",
    }


def incident() -> dict[str, Any]:
    """One fixed 8-rank, 2-node incident: Xid 79 on rank 5's GPU, the other ranks time out 10 min later."""
    topo = {
        str(r): {"node": f"gpu-node-0{16 + r // 4}", "gpu": f"0000:{0x18 + 0x23 * (r % 4):02x}:00", "local_rank": r % 4}
        for r in range(8)
    }
    topo["5"]["gpu"] = "0000:3b:00"
    watchdog = "[rank0]:[E1130 02:23:07.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600060 milliseconds before timing out."
    return {
        "incident_id": "cc-5e1f2a9b0c3d",
        "job_id": "4471920",
        "engine": "offline",
        "bundle": {"sha256": "5e1f2a9b0c3d" + "7" * 52, "files": 14, "bytes": 912_004},
        "root_cause": {
            "class": "gpu_fallen_off_bus",
            "summary": "GPU fell off the PCIe bus on node gpu-node-017 (rank 5, GPU 0000:3b:00) at 02:13:07 UTC: Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS).",
            "culprit": {"node": "gpu-node-017", "rank": 5, "gpu": "0000:3b:00"},
            "time": "2026-11-30T02:13:07.058Z",
            "confidence": 0.92,
            "severity": "P0",
            "citations": [
                cite("nodes/gpu-node-017/dmesg.log", 1842, XID),
                cite("logs/gpu-node-017/rank_5.out", 3310, "RuntimeError: CUDA error: unspecified launch failure"),
                cite("logs/gpu-node-017/rank_5.out", 3311, "a line the model misquoted", verified=False),
            ],
        },
        "contributing": [
            {
                "class": "pcie_aer_error",
                "summary": "PCIe AER corrected errors on 0000:3a:00.0 in the hour before",
                "citations": [
                    cite(
                        "nodes/gpu-node-017/dmesg.log",
                        1790,
                        "pcieport 0000:3a:00.0: AER: Corrected error received: 0000:3a:00.0",
                    )
                ],
            },
        ],
        "symptoms": [
            {
                "class": "nccl_watchdog_timeout",
                "summary": "7 ranks: NCCL collective timed out (watchdog)",
                "count": 14,
                "ranks": [0, 1, 2, 3, 4, 6, 7],
                "nodes": ["gpu-node-016", "gpu-node-017"],
                "first_time": "2026-11-30T02:23:07.408Z",
                "last_time": "2026-11-30T02:23:08.120Z",
                "citations": [cite("logs/gpu-node-016/rank_0.out", 2977, watchdog)],
            },
            {
                "class": "torchelastic_childfailed_summary",
                "summary": "2 nodes: torchrun failure summary (ChildFailedError)",
                "count": 6,
                "ranks": [0, 4],
                "nodes": ["gpu-node-016", "gpu-node-017"],
                "first_time": "2026-11-30T02:23:12.000Z",
                "last_time": "2026-11-30T02:23:12.500Z",
                "kind": "teardown",
                "citations": [
                    cite(
                        "logs/gpu-node-016/launcher.log",
                        88,
                        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                    )
                ],
            },
            {
                "class": "python_exception_rank_crash",
                "summary": "1 rank: Python exception",
                "count": 1,
                "ranks": [2],
                "nodes": ["gpu-node-016"],
                "first_time": None,
                "last_time": None,
                "citations": [
                    cite("logs/gpu-node-016/rank_2.out", 12, "WANDB_API_KEY=0123456789abcdef0123 | `echo` failed")
                ],
            },
            {
                "class": "unknown",
                "summary": "8 ranks: NCCL warning: NET/Plugin : Plugin load returned 2 : libnccl-net.so",
                "count": 8,
                "ranks": [0, 1, 2, 3, 4, 5, 6, 7],
                "kind": "benign",
                "citations": [cite("logs/gpu-node-016/rank_0.out", 4, PLUGIN)],
            },
        ],
        "hypotheses": [
            {
                "class": "cuda_kernel_fault",
                "score": 41.0,
                "why_not": "explained by gpu_fallen_off_bus on the same node",
            },
            {"class": "ib_completion_error", "score": 12.5, "why_not": "no IB error on any node"},
        ],
        "timeline": [
            {
                "time": "2026-11-30T02:13:07.058Z",
                "file": "nodes/gpu-node-017/dmesg.log",
                "line": 1842,
                "text": XID,
                "role": "root_candidate",
                "class": "gpu_fallen_off_bus",
            },
            {
                "time": "2026-11-30T02:13:07.310Z",
                "file": "logs/gpu-node-017/rank_5.out",
                "line": 3310,
                "text": "RuntimeError: CUDA error: unspecified launch failure",
                "role": "root_candidate",
                "class": "cuda_kernel_fault",
            },
            {
                "time": "2026-11-30T02:23:07.408Z",
                "file": "logs/gpu-node-016/rank_0.out",
                "line": 2977,
                "text": watchdog,
                "role": "cascade",
                "class": "nccl_watchdog_timeout",
            },
            {
                "time": "2026-11-30T02:23:12.000Z",
                "file": "logs/gpu-node-016/launcher.log",
                "line": 88,
                "text": "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                "role": "teardown",
                "class": "torchelastic_childfailed_summary",
            },
            {
                "time": None,
                "file": "logs/gpu-node-016/rank_2.out",
                "line": 12,
                "text": "Authorization: Bearer abcdefghijklmnop | x",
                "role": "cascade",
                "class": "python_exception_rank_crash",
            },
        ],
        "runbook": {"steps": []},
        "stats": {
            "files": 14,
            "lines": 48_211,
            "bytes": 912_004,
            "findings": 1_483,
            "groups": 22,
            "seconds": 0.41,
            "citations_dropped": 1,
            "skipped_files": [{"path": "dashboards/gpu.png", "reason": "image (not analysed by the offline engine)"}],
            "unaligned_clocks": ["logs/gpu-node-016/launcher.log (no timestamps)"],
            "matcher": "hyperscan",
        },
        "topology": topo,
        "impact": {
            "incident_start": "2026-11-30T02:13:07.058Z",
            "fault": "2026-11-30T02:13:07.058Z",
            "detected": "2026-11-30T02:13:07.310Z",
            "end": "2026-11-30T02:23:12.500Z",
            "gpus": 8,
            "gpu_hours_lost": 1.35,
            "last_progress": "2026-11-30T02:12:58.000Z",
            "last_step": 41200,
        },
        "reasoning": ["P0 class", "specific to gpu-node-017", "10 min before the first symptom (the NCCL timeout)"],
    }


def render(data: dict[str, Any]) -> str:
    doc = DiagnosisDocument.model_validate(data)
    return render_postmortem(doc, build_runbook(doc))


def test_the_postmortem_matches_the_golden_file() -> None:
    assert render(incident()) == GOLDEN.read_text(encoding="utf-8")


def test_sections_an_sre_expects() -> None:
    md = render(incident())
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    assert headings == [
        "Summary",
        "Impact",
        "Timeline (UTC)",
        "Root cause: GPU fell off the PCIe bus",
        "Symptoms: failures the root cause explains",
        "Teardown: the job shutting down",
        "Benign: lines that look like errors and are not",
        "Contributing factors",
        "Hypotheses considered",
        "Action items",
        "Coverage",
        "What went well",
        "What we will change",
    ]
    assert md.count("*To be filled in by the team.*") >= 3
    assert "| GPU time lost in the incident | 1.35 GPU-hours (all 8 GPUs × 10 min 05 s, fault to end) |" in md
    assert "| Last training progress seen | step 41,200 at 2026-11-30 02:12:58 UTC |" in md
    assert "How these figures are defined:" in md and "Detected: the first symptom" in md
    assert "`nodes/gpu-node-017/dmesg.log:1842` ✅ verified" in md
    assert "`logs/gpu-node-017/rank_5.out:3311` ⚠️ **unverified** (text_mismatch)" in md
    assert "- [ ] Drain gpu-node-017 so the scheduler places no new work on it — risk medium, `drain-node`." in md
    assert "dashboards/gpu.png`: image (not analysed by the offline engine)" in md


def test_each_group_says_what_it_is_and_benign_lines_are_never_factors() -> None:
    md = render(incident())
    factors = md[md.index("## Contributing factors") : md.index("## Hypotheses considered")]
    assert "libnccl-net.so" not in factors and "ChildFailedError" not in factors
    benign = md[md.index("## Benign") : md.index("## Contributing factors")]
    assert "libnccl-net.so" in benign and "Ignore them." in benign
    teardown = md[md.index("## Teardown") : md.index("## Benign")]
    assert "torchrun failure summary" in teardown and "not causes" in teardown
    assert "explained by the root cause)" not in md  # the engine's tail is not repeated under a group that says so
    assert "- P0 class" not in md and "severity P0: hardware fault" in md


def test_a_line_without_its_own_clock_is_not_given_a_time() -> None:
    data = incident()
    data["timeline"][2] |= {"time_source": "inherited", "time_trusted": False}
    md = render(data)
    row = next(line for line in md.splitlines() if "rank_0.out:2977" in line and line.startswith("| "))
    assert row.startswith("| (no clock on the line) |")
    rows = [line for line in md.splitlines() if line.startswith(("| 2026-", "| (no clock"))]
    assert rows.index(row) > max(i for i, r in enumerate(rows) if r.startswith("| 2026-"))  # listed after the timed


def test_secrets_are_not_echoed() -> None:
    md = render(incident())
    assert "0123456789abcdef0123" not in md and "abcdefghijklmnop" not in md
    assert "WANDB_API_KEY=[REDACTED]" in md and "Bearer [REDACTED]" in md


def test_log_text_cannot_break_the_markdown() -> None:
    md = render(incident())
    rows = [line for line in md.splitlines() if line.startswith("| ") and "UTC" in line and "rank_2" in line]
    assert not rows or all(line.count(" | ") == 4 for line in rows)
    assert "``WANDB_API_KEY=[REDACTED] | `echo` failed``" in md  # a code span wider than the backticks inside
    timeline_row = next(line for line in md.splitlines() if "rank_2.out:12` |" in line)
    assert "Bearer [REDACTED] \\| x" in timeline_row  # a pipe inside a table cell is escaped


def test_what_is_not_in_the_document_is_unknown() -> None:
    data = incident()
    data |= {"job_id": None, "topology": {}, "timeline": [], "impact": {}}
    data["root_cause"] |= {"time": None, "culprit": {"node": None, "rank": None, "gpu": None}}
    for s in data["symptoms"]:
        s |= {"first_time": None, "last_time": None}
    md = render(data)
    for field in ("Job", "Ranks", "GPUs", "Fault (root cause)", "Duration (detected to end)", "Incident start"):
        assert f"| {field} | unknown |" in md
    assert "| GPU time lost in the incident | unknown" in md
    assert "None" not in md and "Culprit: not identified" in md
    assert "No timestamped event could be cited." in md


def test_an_undecided_incident_says_so() -> None:
    data = incident()
    data["root_cause"] |= {"class": "unknown", "confidence": 0.3, "severity": None}
    md = render(data)
    assert md.startswith("# Postmortem (draft): Root cause not established")
    assert "could **not** decide a root cause" in md and "Confidence: **low** (30%)" in md


if __name__ == "__main__":  # regenerate the golden file on purpose
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(render(incident()), encoding="utf-8")
    print(f"wrote {GOLDEN}")


def test_nothing_found_is_said_plainly() -> None:
    data = incident()
    data |= {"contributing": [], "symptoms": [], "hypotheses": [], "timeline": []}
    data["root_cause"] |= {"class": "unknown", "summary": "Root cause not established: only symptoms were found"}
    md = render(data)
    assert md.startswith("# Postmortem (draft): No failure found")
    assert "**No failure found.** CrashCart read 14 files, 48,211 lines" in md and "only symptoms" not in md


def test_a_summary_the_engine_cut_mid_word_is_cut_at_a_word() -> None:
    data = incident()
    long = "GPU fell off the PCIe bus on gpu-node-017: " + "word " * 70 + "Memory Manage"
    data["root_cause"] |= {"summary": long}
    line = render(data).split("## Summary\n\n", 1)[1].split("\n", 1)[0]
    assert line.endswith("word…") and "Manage" not in line
