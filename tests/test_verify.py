"""Verification: every citation re-checked against the bundle; culprits must be named by evidence."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crashcart.ingest.bundle import open_bundle
from crashcart.models import Claim, Culprit, Diagnosis, Evidence
from crashcart.settings import BundleLimits
from crashcart.verify import check, gpu_named, rank_named, verify

LOG = "boot\n[rank27]:RuntimeError: CUDA error: an illegal memory access was encountered\r\nend \x1b[1mbold\x1b[0m\n"


def _diag(root: list[str], culprit: Culprit, symptoms: list[Claim] | None = None) -> Diagnosis:
    return Diagnosis(
        root_class="cuda_kernel_fault",
        summary="s",
        culprit=culprit,
        time=None,
        confidence=0.9,
        root_evidence=root,
        contributing=[],
        symptoms=symptoms or [],
        hypotheses=[],
        timeline=[],
        reasoning=[],
    )


@pytest.fixture
def bundle(make_bundle, tmp_path: Path):  # type: ignore[no-untyped-def]
    root = make_bundle({"logs/gpu-node-017/rank-27.log": LOG})
    with open_bundle(root, tmp_path / "w", BundleLimits()) as b:
        yield b


def test_statuses(bundle) -> None:  # type: ignore[no-untyped-def]
    f = "logs/gpu-node-017/rank-27.log"
    reg = {
        "ok": Evidence(
            id="ok",
            file=f,
            line=2,
            text="[rank27]:RuntimeError: CUDA error: an illegal memory access was encountered",
        ),
        "ansi": Evidence(id="ansi", file=f, line=3, text="end bold"),
        "multi": Evidence(id="multi", file=f, line=1, end_line=2, text="boot\n" + LOG.split("\n")[1].rstrip("\r")),
        "mismatch": Evidence(id="mismatch", file=f, line=1, text="boot!"),
        "range": Evidence(id="range", file=f, line=99, text="x"),
        "missing": Evidence(id="missing", file="nope.log", line=1, text="x"),
    }
    got = {i: check(i, reg, bundle).status for i in [*reg, "ghost"]}
    assert got == {
        "ok": "ok",
        "ansi": "ok",
        "multi": "ok",
        "mismatch": "text_mismatch",
        "range": "line_out_of_range",
        "missing": "missing_file",
        "ghost": "unknown_id",
    }


def test_unverified_root_becomes_unknown_and_bad_claims_drop(bundle) -> None:  # type: ignore[no-untyped-def]
    reg = {"bad": Evidence(id="bad", file="logs/gpu-node-017/rank-27.log", line=1, text="invented")}
    v = verify(_diag(["bad"], Culprit(node="gpu-node-017")), reg, bundle)
    assert v.diagnosis.root_class == "unknown"
    assert v.diagnosis.culprit == Culprit()
    assert not v.citations["bad"].verified
    sym = Claim(class_id="nccl_watchdog_timeout", summary="x", evidence_ids=["bad"])
    good = Evidence(id="g", file="logs/gpu-node-017/rank-27.log", line=1, text="boot")
    v = verify(_diag(["g"], Culprit(), [sym]), {**reg, "g": good}, bundle)
    assert v.diagnosis.symptoms == [] and v.dropped == [sym]


def test_culprit_fields_must_be_named_by_verified_evidence(bundle) -> None:  # type: ignore[no-untyped-def]
    f = "logs/gpu-node-017/rank-27.log"
    reg = {"e": Evidence(id="e", file=f, line=2, text=LOG.split("\n")[1].rstrip("\r"))}
    v = verify(_diag(["e"], Culprit(node="gpu-node-017", rank=27, gpu="0000:3b:00")), reg, bundle)
    assert v.diagnosis.culprit == Culprit(node="gpu-node-017", rank=27, gpu=None)
    v = verify(_diag(["e"], Culprit(node="gpu-node-01", rank=2)), reg, bundle)
    assert v.diagnosis.culprit == Culprit()


@pytest.mark.parametrize(
    ("rank", "file", "text", "named"),
    [
        (27, "rank-27.log", "x", True),
        (27, "logs/rank_27.out", "x", True),
        (3, "slurm.out", "3: boom", True),
        (3, "a.log", "[rank3]:boom", True),
        (3, "a.log", "[Rank 3] Watchdog", True),
        (3, "a.log", "local_rank: 3", False),
        (3, "a.log", "rank 33 failed", False),
        (3, "a.log", "[1,3]<stderr>:boom", True),
    ],
)
def test_rank_named(rank: int, file: str, text: str, named: bool) -> None:
    assert rank_named(rank, file, text) is named


def test_gpu_named_in_any_spelling() -> None:
    assert gpu_named("0000:3b:00", "NVRM: Xid (PCI:0000:3b:00): 79")
    assert gpu_named("0000:3b:00", "pci_bus_id 00000000:3B:00.0")
    assert gpu_named("0000:3b:00", "cudaDev 3 nvmlDev 3 busId 3b000 commId")
    assert not gpu_named("0000:3b:00", "NVRM: Xid (PCI:0000:3c:00): 79")


@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=30),
        min_size=1,
        max_size=20,
    ),
    st.data(),
)
def test_every_evidence_verifies_and_one_char_change_fails(tmp_path_factory, lines: list[str], data) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("v")
    (root / "rank-0.log").write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    with open_bundle(root, tmp_path_factory.mktemp("w"), BundleLimits()) as b:
        n = data.draw(st.integers(min_value=1, max_value=len(lines)))
        text = b.read_lines("rank-0.log", n)[0]
        ev = Evidence(id="e", file="rank-0.log", line=n, text=text)
        assert check("e", {"e": ev}, b).verified
        pos = data.draw(st.integers(min_value=0, max_value=len(text)))
        changed = text[:pos] + ("#" if text[pos : pos + 1] != "#" else "%") + text[pos + 1 :]
        assert not check("e", {"e": ev.model_copy(update={"text": changed})}, b).verified
