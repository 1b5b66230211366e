"""A paste hard-wrapped at a fixed column (an issue tracker's or a terminal's copy): the cut falls anywhere,
also just before a space, so a continuation may start with one; the message is the lines joined as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.models import Finding
from crashcart.scan.wrapped import wrap_width
from crashcart.settings import Settings
from tests.kit import scan_texts

# Ray's raylet (src/ray/raylet/node_manager.cc, 2.x): "%d Workers (tasks / actors) killed due to memory pressure
# (OOM), %d Workers crashed due to other reasons at node (ID: %s, IP: %s) over the last time period." and the
# advice printed after it.
SUMMARY = (
    "(raylet) [2023-04-09 07:23:59,445 E 395 395] (raylet) node_manager.cc:3049: 10 Workers (tasks / actors) killed "
    "due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: e5d953ef03e55e26f13973ea1b5a0fd0"
    "ecc729cd820bc89e4aa50451, IP: 10.0.62.231) over the last time period. To see more information about the Workers "
    "killed on this node, use `ray logs raylet.out -ip 10.0.62.231`"
)
ADVICE = (
    "(raylet) Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/"
    "ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory on this node or reducing task "
    "parallelism by requesting more CPUs per task."
)
WORKER = "INFO worker.py:1553 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265 " * 3


def _cut(text: str, width: int) -> list[str]:
    return [text[i : i + width] for i in range(0, len(text), width)]


def _scan(tmp_path: Path, settings: Settings, text: str) -> list[Finding]:
    return scan_texts(tmp_path / "bundle", {"driver.log": text}, settings)


def _paste(width: int) -> str:
    return "\n".join(_cut(WORKER, width) + _cut(SUMMARY, width) + _cut(ADVICE, width)) + "\n"


@pytest.mark.parametrize("width", [104, 107, 113, 116, 120])
def test_the_summary_is_read_whole_wherever_the_column_cuts_it(tmp_path: Path, settings: Settings, width: int) -> None:
    found = _scan(tmp_path, settings, _paste(width))
    kill = [f for f in found if f.signature == "ray.memory_monitor_kill" and f.fields.get("killed") == "10"]
    assert len(kill) == 1, [(f.signature, f.fields) for f in found]
    assert kill[0].fields["node_ip"] == "10.0.62.231"
    head = len(_cut(WORKER, width)) + 1
    assert kill[0].evidence[0].line == head
    assert kill[0].evidence[0].end_line is not None and kill[0].evidence[0].end_line > head


def test_a_cut_just_before_a_space_is_joined(tmp_path: Path, settings: Settings) -> None:
    width = SUMMARY.index(" actors)")  # the second line starts with the space
    width = next(w for w in range(width // 2, width + 1) if width % w == 0 and w >= 60)
    lines = _cut(SUMMARY, width)
    assert any(line.startswith(" ") for line in lines[1:4])
    found = _scan(tmp_path, settings, _paste(width))
    assert any(f.fields.get("node_ip") == "10.0.62.231" for f in found if f.signature == "ray.memory_monitor_kill")


def test_the_width_is_a_length_many_lines_share() -> None:
    lines = _cut(WORKER + SUMMARY, 100)
    assert wrap_width(lines) == 100
    assert wrap_width(["short", "a" * 100, "b" * 100, "tail"]) is None  # two lines are not a column
    assert wrap_width(["x" * 30] * 10) is None  # short lines of one length are a table, not a wrap


HEAD, TAIL = SUMMARY[: SUMMARY.index(" actors)")], SUMMARY[SUMMARY.index(" actors)") :]


def test_in_a_hard_wrapped_paste_a_line_edited_shorter_still_goes_on(tmp_path: Path, settings: Settings) -> None:
    # a paste cut at 100 columns whose head line was shortened afterwards (a clock redacted): the cut is no
    # longer at the column, and the next line starts with the space the cut fell before
    head = HEAD.replace("[2023-04-09 07:23:59,445 E 395 395] ", "")
    text = "\n".join([*_cut(WORKER, 100), head, *_cut(TAIL, 100)])
    found = _scan(tmp_path, settings, text + "\n")
    assert any(f.fields.get("node_ip") == "10.0.62.231" for f in found if f.signature == "ray.memory_monitor_kill")


def test_without_a_column_a_line_starting_with_a_space_stays_apart(tmp_path: Path, settings: Settings) -> None:
    text = "starting the job on 4 nodes\n" + HEAD + "\n" + TAIL + "\n" + "done\n"
    found = _scan(tmp_path, settings, text)
    assert not any("_wrapped" in f.fields for f in found)


def test_an_indented_frame_is_not_a_continuation(tmp_path: Path, settings: Settings) -> None:
    text = (
        "\n".join(_cut(WORKER, 100))
        + "\nRuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled\n  system error, NCCL version 2.18.1\n"
    )
    found = _scan(tmp_path, settings, text)
    assert not any("_wrapped" in f.fields for f in found)
