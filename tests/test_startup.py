"""What an offline ``crashcart diagnose --json`` loads: nothing that only draws (rich), since start-up is part of
every run's time (issue 16)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import MakeBundle

# PyTorch c10/cuda/CUDACachingAllocator.cpp (torch 2.x): the OutOfMemoryError message a rank log carries
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
    "of which 1.19 GiB is free. Including non-PyTorch memory, this process has 77.95 GiB memory in use.\n"
)

CODE = """
import contextlib, io, json, sys
from crashcart.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["diagnose", sys.argv[1], "--no-store", "--json"])
drawn = sorted(m for m in sys.modules if m.split(".")[0] == "rich")
print(json.dumps({"code": code, "doc": json.loads(out.getvalue()), "rich": drawn}))
"""


def test_diagnose_json_imports_no_rich(make_bundle: MakeBundle, tmp_path: Path) -> None:
    bundle = make_bundle({"rank-0.log": "[rank0]: step 1\n" + OOM})
    env = {"CRASHCART_WORK_DIR": str(tmp_path / "work"), "CRASHCART_DB": str(tmp_path / "db.sqlite")}
    run = subprocess.run(
        [sys.executable, "-c", CODE, str(bundle)],
        capture_output=True,
        text=True,
        env={**_inherited(), **env},
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["code"] == 0 and got["doc"]["root_cause"]["class"]
    assert got["rich"] == []


def _inherited() -> dict[str, str]:
    """The test process's environment without rich's terminal switches (stderr here is a pipe)."""
    import os

    return {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}  # noqa: TID251


FREEZE = """
import contextlib, gc, io, sys
from crashcart.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["--help"])  # an explicit command line: a caller in this process goes on, nothing is frozen
print(gc.get_freeze_count())
sys.argv = ["crashcart", "--help"]
with contextlib.redirect_stdout(io.StringIO()):
    main()  # the process's own command line: it ends next
print(gc.get_freeze_count())
"""


def test_only_the_process_command_line_freezes_its_objects_for_the_exit() -> None:
    run = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr
    explicit, own = map(int, run.stdout.split())
    assert explicit == 0 and own > 0


THRESHOLDS = """
import contextlib, gc, io, json, sys
from crashcart.cli import main
before = gc.get_threshold()
with contextlib.redirect_stdout(io.StringIO()):
    main(["diagnose", sys.argv[1], "--no-store", "--json"])  # a caller in this process: its collector untouched
explicit = gc.get_threshold()
sys.argv = ["crashcart", "diagnose", sys.argv[1], "--no-store", "--json"]
with contextlib.redirect_stdout(io.StringIO()):
    main()
print(json.dumps([before, explicit, gc.get_threshold()]))
"""


def test_only_a_diagnose_process_collects_less_often(make_bundle: MakeBundle, tmp_path: Path) -> None:
    from crashcart.cli import DIAGNOSE_GC_THRESHOLDS

    bundle = make_bundle({"rank-0.log": "[rank0]: step 1\n" + OOM})
    env = {"CRASHCART_WORK_DIR": str(tmp_path / "work"), "CRASHCART_DB": str(tmp_path / "db.sqlite")}
    run = subprocess.run(
        [sys.executable, "-c", THRESHOLDS, str(bundle)],
        capture_output=True,
        text=True,
        env={**_inherited(), **env},
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr
    before, explicit, own = json.loads(run.stdout)
    assert before == explicit and tuple(own) == DIAGNOSE_GC_THRESHOLDS != tuple(before)
