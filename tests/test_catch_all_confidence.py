"""NCCL's "Cuda failure '%s'" with a CUDA error string no specific signature knows: a guessed class, never high."""

from __future__ import annotations

from pathlib import Path

from crashcart.settings import Settings
from tests.kit import run_files


def test_an_unrecognised_cuda_failure_is_not_high_confidence(tmp_path: Path, settings: Settings) -> None:
    # cudaErrorExternalDevice (911): a string no CUDA signature names (peer access, once the example here, now has one)
    line = "gcn01:2336636:2336906 [0] enqueue.cc:58 NCCL WARN Cuda failure 911 'an async error has occured in external entity outside of CUDA'"
    rc = run_files(tmp_path / "b", {"nccl.log": line + "\n"}, settings).document.root_cause
    assert rc.class_ == "cuda_kernel_fault"
    assert rc.confidence <= 0.6


def test_a_known_cuda_string_keeps_its_own_class_and_confidence(tmp_path: Path, settings: Settings) -> None:
    # cudaErrorSymbolNotFound: the module holds no kernel for this GPU's architecture (a build problem)
    line = "gcn01:2336636:2336906 [0] enqueue.cc:58 NCCL WARN Cuda failure 'named symbol not found'"
    rc = run_files(tmp_path / "b", {"nccl.log": line + "\n"}, settings).document.root_cause
    assert rc.class_ == "software_version_mismatch"
    assert rc.confidence >= 0.8


def test_a_cuda_call_nccl_made_and_cuda_rejected_is_software_but_not_high(tmp_path: Path, settings: Settings) -> None:
    # cudaErrorInvalidResourceHandle inside NCCL's own enqueue (src/enqueue.cc CUDACHECK): which software is at
    # fault the line does not say; the same string from the user's own CUDA call stays confident.
    inside = "node3:4410:4510 [2] enqueue.cc:1600 NCCL WARN Cuda failure 400 'invalid resource handle'"
    rc = run_files(tmp_path / "a", {"nccl.log": inside + "\n"}, settings).document.root_cause
    assert rc.class_ == "python_exception_rank_crash"
    assert rc.confidence <= 0.6
    own = "RuntimeError: CUDA error: invalid resource handle"
    rc = run_files(tmp_path / "b", {"rank0.log": own + "\n"}, settings).document.root_cause
    assert rc.class_ == "python_exception_rank_crash"
    assert rc.confidence > 0.6
