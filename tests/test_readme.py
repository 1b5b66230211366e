"""The README shows what CrashCart really prints: the example output is the terminal view of its first
command, and the test count is the suite's (to within 10 %, as people add tests in parallel).

Regenerate the example deliberately, after reading the diff: ``python tests/test_readme.py``.
"""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from crashcart.pipeline import diagnose
from crashcart.report.terminal import render
from crashcart.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BEGIN, END = "<!-- example output: begin (tests/test_readme.py) -->", "<!-- example output: end -->"
WIDTH = 110
_SECONDS = re.compile(r"scanned in \d+\.\d+ s")
_COUNTS = re.compile(r"[\d,]+ findings in \d+ groups")  # moves with every new signature; not what a reader checks


def example(tmp: Path) -> str:
    """``crashcart diagnose incidents/gpu-fell-off-bus`` as a pipe shows it, ``WIDTH`` columns wide."""
    settings = Settings(_env_file=None, db=tmp / "db.sqlite", work_dir=tmp / "work")  # type: ignore[call-arg]
    doc = asyncio.run(diagnose(ROOT / "incidents" / "gpu-fell-off-bus", settings)).document
    console = Console(width=WIDTH, record=True, file=io.StringIO(), color_system=None)
    render(doc, console)
    text = "\n".join(line.rstrip() for line in console.export_text().splitlines())
    return _SECONDS.sub("scanned in 0.40 s", text)


def block(text: str) -> str:
    return f"{BEGIN}\n\n```text\n{text}\n```\n\n{END}"


def shown() -> str:
    readme = README.read_text(encoding="utf-8")
    start, end = readme.index(BEGIN), readme.index(END) + len(END)
    return readme[start:end]


def _steady(text: str) -> str:
    return _COUNTS.sub("N findings in M groups", _SECONDS.sub("scanned in 0.40 s", text))


def test_the_example_output_is_what_the_command_prints(tmp_path: Path) -> None:
    assert _steady(shown()) == _steady(block(example(tmp_path))), "regenerate it: python tests/test_readme.py"


def test_the_test_count_is_the_suites(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    files = {Path(str(i.fspath)).name for i in items}
    every = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    if files != every:
        pytest.skip("only part of the suite was collected")
    m = re.search(r"`pytest` \(([\d,]+) tests", README.read_text(encoding="utf-8"))
    assert m is not None
    claimed = int(m.group(1).replace(",", ""))
    assert abs(claimed - len(items)) <= len(items) * 0.1, (claimed, len(items))


if __name__ == "__main__":  # regenerate the README's example on purpose
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        text = README.read_text(encoding="utf-8")
        README.write_text(text.replace(shown(), block(example(Path(tmp)))), encoding="utf-8")
    print(f"updated the example in {README}")
