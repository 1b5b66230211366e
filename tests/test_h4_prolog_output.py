"""A failed Slurm prolog/epilog's own shell error, from the lines around slurmd's failure line (issue 14, capabilities
2, 3 and 10; crashcart/scan/script_output.py, crashcart/reduce/prolog.py).

Layouts follow SchedMD/slurm's sources: 22.05-25.11 plugins/prep/script/prep_script_slurmd.c logs
"%s failed: rc:%u output:%s" with run_command's captured output (src/common/run_command.c dup2s the script's
stdout and stderr into one pipe), newlines and all, so the log file holds the output's later lines at column 0
(src/common/log.c writes the message as is); journalctl indents a multi-line entry; journald keeps a daemon's
stderr one entry per line; 17.02-21.08 slurmd/common/run_script.c let the script inherit slurmd's stderr and
logged "%s: exited with status 0x%04x" after it. Shell errors are bash 5.2's (error.c report_error's
"<name>: line <n>: ", execute_cmd.c "%s: command not found", "%s: %s: bad interpreter") and dash's
("<script>: <n>: <cmd>: not found").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.models import Finding, RankInfo, Topology
from crashcart.reduce import hangs
from crashcart.scan.script_output import shell_error
from crashcart.settings import Settings
from crashcart.verify import rank_named, single_node
from tests.kit import finding, run_files, winner

# slurm 23.02 SlurmdLogFile: the output's first line on the error line, its next lines on their own
LOG_FILE = """\
[2023-06-01T10:00:00.001] Launching batch job 4242 for UID 1000
[2023-06-01T10:00:00.120] error: prolog failed: rc:127 output:Running site checks
/etc/slurm/scripts/gpu_check.sh: line 3: nvidia-smi: command not found

[2023-06-01T10:00:00.121] error: JobId=4242 prolog failed status=127:0
[2023-06-01T10:00:00.122] Could not launch JobId=4242 and not able to requeue it, cancelling job
"""

# slurm 20.11 under systemd (slurmd -D): the script's stderr is slurmd's, one journal entry a line, before
# run_script.c's "exited with status" and req.c's "[job %u] prolog failed status=%d:%d"
JOURNAL = """\
Jun 01 10:00:00 gpu07 slurmd[2211]: Launching batch job 4242 for UID 1000
Jun 01 10:00:00 gpu07 slurmd[2211]: /bin/sh: 1: /opt/site/bin/gpucheck: not found
Jun 01 10:00:00 gpu07 slurmd[2211]: error: /etc/slurm/prolog.sh: exited with status 0x7f00
Jun 01 10:00:00 gpu07 slurmd[2211]: error: [job 4242] prolog failed status=127:0
"""

# journalctl's short format of one syslog() entry that holds newlines: continuation lines indented to the message
JOURNALCTL = """\
Jun 01 10:00:00 gpu07 slurmd[2211]: error: epilog failed: rc:126 output:cleaning up
                                    /opt/site/cleanup: /bin/bahs: bad interpreter: No such file or directory
Jun 01 10:00:01 gpu07 slurmd[2211]: error: [job 4242] epilog failed status=126:0
"""


@pytest.mark.parametrize(
    ("files", "lines", "node"),
    [
        ({"slurmd.log": LOG_FILE}, (2, 3), None),  # SlurmdLogFile names no node, and nothing else does
        ({"journal.log": JOURNAL}, (2, 3), "gpu07"),  # the journal's header names the daemon's node
        ({"gpu07/journalctl.txt": JOURNALCTL}, (1, 2), "gpu07"),
        # slurmd req.c _rpc_batch_job -> slurm_notify_job "Prolog failure on node %s" in the job's output
        ({"slurmd.log": LOG_FILE, "slurm-4242.out": "Prolog failure on node gpu07\n"}, (2, 3), "gpu07"),
    ],
)
def test_the_scripts_shell_error_is_cited_with_slurmds_failure_line(
    tmp_path: Path, settings: Settings, files: dict[str, str], lines: tuple[int, int], node: str | None
) -> None:
    out = run_files(tmp_path / "b", files, settings)
    root = out.document.root_cause
    assert root.class_ == "slurm_node_failure"
    assert root.culprit.node == node
    first = root.citations[0]
    assert (first.line, first.end_line) == lines and first.verified  # one span: the failure and its shell error
    assert any(w in first.text for w in ("command not found", ": not found", "bad interpreter"))
    assert any(w in root.summary for w in ("command not found", ": not found", "bad interpreter"))
    if node == "gpu07" and "slurm-4242.out" in files:
        assert any(c.file == "slurm-4242.out" and c.verified for c in root.citations)  # the line naming the node


def test_a_shell_error_with_no_slurm_script_failure_around_it_is_left_alone(tmp_path: Path, settings: Settings) -> None:
    log = (
        "[2023-06-01T10:00:00.120] Starting training\n"
        "/home/u/run.sh: line 3: nvidia-smi: command not found\n"
        "/bin/sh: 1: /opt/site/bin/gpucheck: not found\n"
    )
    out = run_files(tmp_path / "b", {"train.log": log}, settings)
    assert out.document.root_cause.class_ != "slurm_node_failure"
    assert winner("/bin/sh: 1: /opt/site/bin/gpucheck: not found") is None  # as it is without Slurm around it


def test_output_after_the_next_record_or_another_daemon_is_not_the_scripts(tmp_path: Path, settings: Settings) -> None:
    log = (
        "[2023-06-01T10:00:00.120] error: prolog failed: rc:1 output:\n"
        "[2023-06-01T10:00:00.121] error: JobId=4242 prolog failed status=1:0\n"
        "[2023-06-01T10:00:05.000] launch task StepId=4243.0 request from UID:1000\n"
        "/home/u/run.sh: line 3: foo: command not found\n"
    )
    out = run_files(tmp_path / "b", {"slurmd.log": log}, settings)
    root = out.document.root_cause
    assert root.class_ == "slurm_node_failure"
    assert all(c.end_line is None and "command not found" not in c.text for c in root.citations)


@pytest.mark.parametrize(
    "line",
    [
        "/etc/slurm/scripts/gpu_check.sh: line 3: nvidia-smi: command not found",  # bash execute_cmd.c
        "/etc/slurm/scripts/gpu_check.sh: line 7: /usr/local/bin/x: No such file or directory",  # bash file_error
        "/etc/slurm/scripts/gpu_check.sh: line 7: /usr/local/bin/x: Permission denied",
        "/etc/slurm/scripts/gpu_check.sh: line 7: /usr/local/bin/x: cannot execute: required file not found",  # 5.2
        "/opt/site/cleanup: /bin/bahs: bad interpreter: No such file or directory",  # execute_cmd.c
        "bash: /opt/site/cleanup: No such file or directory",
        "/opt/site/check: 4: nhc: not found",  # dash "<script>: <n>: <cmd>: not found"
        "/bin/sh: 1: /opt/site/bin/gpucheck: not found",
        "sh: 0: cannot open /opt/site/check: No such file",  # dash on a missing script
        "/usr/bin/env: 'python3': No such file or directory",  # coreutils env.c
    ],
)
def test_shell_error_wordings(line: str) -> None:
    assert shell_error(line) == line


@pytest.mark.parametrize(
    "line",
    ["Running site checks", "checking GPU 0: ok", "ERROR:  nhc:  Health check failed:  check_fs_mount:  /scratch"],
)
def test_other_script_output_is_no_shell_error(line: str) -> None:
    assert shell_error(line) is None


@pytest.mark.parametrize(
    "line",
    [
        # slurm 22.05-25.11 prep_script_slurmd.c, the shell error as the output's first line
        "[2023-06-01T10:00:00.123] error: prolog failed: rc:127 output:/etc/slurm/scripts/gpu_check.sh: line 3: nvidia-smi: command not found",
        # the same through rsyslog, which writes the output's newlines as #012
        "Jun  1 10:00:00 gpu07 slurmd[2211]: error: prolog failed: rc:127 output:Running site checks#012/bin/sh: 1: /opt/site/bin/gpucheck: not found#012",
    ],
)  # fmt: skip
def test_a_one_line_failure_with_its_shell_error_is_the_script_error(line: str) -> None:
    assert winner(line) == ("slurm.prolog_script_error", "slurm_node_failure")


def test_slurmd_17_to_21_exited_with_status_is_a_script_failure() -> None:
    # slurm 20.11 src/slurmd/common/run_script.c run_script: error("%s: exited with status 0x%04x", s, rc)
    got = winner("[2020-05-01T00:00:01.000] error: /etc/slurm/scripts/gpu_check.sh: exited with status 0x7f00")
    assert got is not None and got[1] == "slurm_node_failure"


# --- a local rank in an argv (capability 3) -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "one_node", "named"),
    [
        # torch/distributed/launch.py (torch 1.x) appends "--local_rank=N" to each worker's argv; torch 2.x
        # "--local-rank=N"; DeepSpeed launcher/launch.py "--local_rank=N"
        ("/usr/bin/python -u train.py --local_rank=3 --deepspeed ds.json", True, True),
        ("/usr/bin/python -u train.py --local-rank=3", True, True),
        ("train.py: error: argument --local-rank 3 is invalid", True, True),
        # on several nodes a local rank is not the global rank
        ("/usr/bin/python -u train.py --local_rank=3 --deepspeed ds.json", False, False),
        ("/usr/bin/python -u train.py --local-rank 3", False, False),
        ("/usr/bin/python -u train.py --local_rank=33", True, False),
    ],
)
def test_a_local_rank_in_an_argv_names_the_rank_on_one_node_only(text: str, one_node: bool, named: bool) -> None:
    assert rank_named(3, "train.log", text, single_node=one_node) is named


def test_one_node_is_what_the_topology_says() -> None:
    one = Topology(ranks={0: RankInfo(rank=0, node="gpu7", local_rank=0), 1: RankInfo(rank=1, node="gpu7")})
    two = Topology(ranks={0: RankInfo(rank=0, node="gpu7"), 1: RankInfo(rank=1, node="gpu8")})
    shifted = Topology(ranks={8: RankInfo(rank=8, local_rank=0)})  # rank 8 is local rank 0: a second node
    assert single_node(one) and single_node(Topology())
    assert not single_node(two) and not single_node(shifted)


# --- HF Trainer's bars without a description (capability 6) ---------------------------------------------------

EVAL_BANNER = "[INFO|trainer.py:3819] 2024-06-01 10:00:00,000 >> ***** Running Evaluation *****"  # evaluation_loop
BARE_BAR = " 45%|████▌     | 450/1000 [20:00<12:13,  1.33s/it]"  # trainer_callback.py ProgressCallback: tqdm(total=)


def _waits() -> list[Finding]:
    return [
        finding(
            "nccl.communicator_aborted",
            f"RuntimeError: NCCL communicator was aborted on rank {r}.",
            rank=r,
            file=f"rank{r}.log",
            line=9,
        )
        for r in (1, 2, 3)
    ]


@pytest.mark.parametrize(
    ("before", "busy"),
    [
        ([("progress.step_announced", EVAL_BANNER)], True),  # the evaluation bar: work outside collectives
        ([], False),  # nothing says what the bar counts: the training loop's own bar, perhaps
        # transformers trainer.py log(): the training loop's loss dict after the banner; the bar is training again
        ([("progress.step_announced", EVAL_BANNER), ("training.hf_log", "{'loss': 1.2345, 'learning_rate': 4e-05, 'epoch': 0.5}")], False),
    ],
)  # fmt: skip
def test_a_trainer_bar_without_a_description_counts_the_step_announced_before_it(
    before: list[tuple[str, str]], busy: bool
) -> None:
    lines = [finding(sig, text, rank=0, file="rank0.log", line=10 + i) for i, (sig, text) in enumerate(before)]
    bar = finding("progress.tqdm", BARE_BAR, rank=0, file="rank0.log", line=30)
    topo = Topology(world_size=4, ranks={r: RankInfo(rank=r) for r in range(4)})
    c = hangs.hang_candidate([*lines, bar, *_waits()], topo, {})
    got = c is not None and c.first.evidence[0] == bar.evidence[0]
    assert got is busy
    if busy:
        assert c is not None and "Running Evaluation" in c.first.summary


# --- frame #0 after a stack header (capability 10) -------------------------------------------------------------

# CPython 3.10 Modules/faulthandler.c faulthandler_fatal_error + Python/traceback.c _Py_DumpTracebackThreads
FAULTHANDLER = """\
step 10 loss 2.31
Fatal Python error: Segmentation fault

Current thread 0x00007f1e2d6f3740 (most recent call first):
  File "/usr/lib/python3.10/site-packages/torch/nn/functional.py", line 2210 in embedding
  File "/home/u/train.py", line 33 in forward
"""
# glog 0.4 src/signalhandler.cc: DumpTimeInfo, DumpStackFrameInfo("PC: ", pc), DumpSignalInfo, then the frames
GLOG = """\
step 10 loss 2.31
*** Aborted at 1701310387 (unix time) try "date -d @1701310387" if you are using GNU date ***
*** SIGSEGV (@0x0) received by PID 7500 (TID 0x7f8b2b0c4740) from PID 0; stack trace: ***
    @     0x7f8b2a45a890 (unknown)
    @     0x7f8b2a0b3e97 c10d::ProcessGroupNCCL::WorkNCCL::isCompleted()
"""


@pytest.mark.parametrize(("log", "frame"), [(FAULTHANDLER, 5), (GLOG, 4)])
def test_a_native_crash_cites_the_first_frame_after_its_stack_header(
    tmp_path: Path, settings: Settings, log: str, frame: int
) -> None:
    out = run_files(tmp_path / "b", {"rank0.log": log}, settings)
    root = out.document.root_cause
    assert root.class_ == "native_crash_segfault_abort"
    assert any(c.line == frame and c.verified for c in root.citations), [(c.line, c.text) for c in root.citations]


def test_a_frame_header_with_no_frame_after_it_cites_nothing(tmp_path: Path, settings: Settings) -> None:
    log = "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f1e2d6f3740 (most recent call first):\n"
    out = run_files(tmp_path / "b", {"rank0.log": log}, settings)
    assert all("Current thread" not in c.text for c in out.document.root_cause.citations)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("PC: @     0x7f8b2a0b3e97 gsignal", "gsignal"),  # glog's faulting PC is frame #0 on its own line
        ("[rank1]: frame #0: <unknown function> + 0x4a2c3 (0x7f11 in /opt/lib/libcudart.so.12)", "<unknown function>"),
    ],
)
def test_frame_zero_lines(line: str, named: str) -> None:
    from crashcart.catalogue import load_catalogue

    cat = load_catalogue()
    i = cat.index["native.frame0"]
    fields = cat.extract(i, line)
    assert fields is not None and named in cat.summarize(i, fields)


# --- scontrol show node: a record's reason names its node on the record's first line (capability 3) ------------

# slurm 23.02 src/scontrol/info_node.c (slurm_sprint_node_table): "NodeName=%s Arch=%s ..." then indented lines
SCONTROL = """\
NodeName=gpu06 Arch=x86_64 CoresPerSocket=32
   CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.01
   State=IDLE ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A

NodeName=gpu07 Arch=x86_64 CoresPerSocket=32
   CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.01
   State=IDLE+DRAIN ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu
   Reason=Prolog error [slurm@2023-06-01T10:00:01]
"""


def test_a_drained_nodes_record_names_the_node_of_the_prolog_failure(tmp_path: Path, settings: Settings) -> None:
    out = run_files(tmp_path / "b", {"slurmd.log": LOG_FILE, "scontrol_show_node.txt": SCONTROL}, settings)
    root = out.document.root_cause
    assert root.class_ == "slurm_node_failure" and root.culprit.node == "gpu07"
    record = next(c for c in root.citations if c.file == "scontrol_show_node.txt")
    assert (record.line, record.end_line) == (5, 9) and record.verified  # gpu07's record, not gpu06's
