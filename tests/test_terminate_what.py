"""A C++ terminate is the carrier of the error its ``what()`` line names (libstdc++'s
``__verbose_terminate_handler``, vterminate.cc: "terminate called after throwing an instance of 'T'" and then
"  what():  <e.what()>"): that error is the root, on the process that aborted."""

from __future__ import annotations

import shutil
from pathlib import Path

from crashcart.reduce.causal import teardown_aborts
from crashcart.settings import Settings
from tests.kit import run_files

RUN = Path(__file__).parent / "data" / "torch-runs" / "gloo-size-abort.log"


def test_gloo_size_mismatch_under_terminate_is_the_root_on_the_aborting_rank(
    tmp_path: Path, settings: Settings
) -> None:
    shutil.copy(RUN, tmp_path / "console.log")
    out = run_files(tmp_path, {}, settings)
    root = out.document.root_cause
    assert root.class_ == "collective_mismatch_desync"
    assert root.culprit.rank == 1  # torchrun: local_rank 1 exited -6 (SIGABRT); rank 0 was sent SIGTERM
    assert any("op.preamble.length <= op.nbytes" in c.text for c in root.citations)


def test_a_terminate_whose_what_names_nothing_specific_stays_the_native_crash(
    tmp_path: Path, settings: Settings
) -> None:
    log = "\n".join(
        [
            "step 10 loss 2.31",
            "terminate called after throwing an instance of 'std::length_error'",
            "  what():  vector::_M_default_append",
            "Aborted (core dumped)",
            "",
        ]
    )
    out = run_files(tmp_path, {"rank-0.log": log}, settings)
    assert out.document.root_cause.class_ == "native_crash_segfault_abort"


def test_an_error_printed_far_below_a_terminate_is_not_its_what(tmp_path: Path, settings: Settings) -> None:
    lines = ["terminate called after throwing an instance of 'std::runtime_error'", "  what():  boom"]
    lines += [f"shutting down {i}" for i in range(10)]
    lines += ["RuntimeError: [enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 16 vs 8", ""]
    out = run_files(tmp_path, {"rank-0.log": "\n".join(lines)}, settings)
    terminate = [f for f in out.findings if f.signature == "native.terminate_called"]
    assert len(terminate) == 1
    why = teardown_aborts(out.findings).get(terminate[0].id, "")
    assert "what()" not in why


def test_the_what_line_right_below_makes_the_terminate_a_carrier(tmp_path: Path, settings: Settings) -> None:
    lines = [
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
        "  what():  [enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 16 vs 8",
        "",
    ]
    out = run_files(tmp_path, {"rank-0.log": "\n".join(lines)}, settings)
    (terminate,) = [f for f in out.findings if f.signature == "native.terminate_called"]
    assert "what()" in teardown_aborts(out.findings)[terminate.id]
    assert out.document.root_cause.class_ == "collective_mismatch_desync"
