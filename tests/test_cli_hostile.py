"""Every subcommand with hostile arguments: no traceback, and a refusal is exit 2 with one line that says what
to fix (unknown classes, bad ids, negative and zero numbers, existing files, unwritable places, non-UTF-8)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crashcart.cli import main

NON_UTF8 = "bundle-\udcff\udcfe"  # how Python hands a non-UTF-8 argv byte to the program (surrogateescape)
words = st.one_of(
    st.sampled_from(
        ["nonsense", "gpu-fell-off-bus", "GPU_FALLEN_OFF_BUS", "", " ", "-", "--", "cc-", NON_UTF8, "\x00"]
    ),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
)
numbers = st.one_of(
    st.sampled_from(["0", "-1", "-999", "1e3", "x", "", "99999999999999999999"]), st.integers(-5, 0).map(str)
)


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("hostile")
    a_file = root / "a-file.txt"
    a_file.write_text("not a directory\n")
    full = root / "full"
    full.mkdir()
    (full / "x").write_text("x")
    return {
        "file": str(a_file),
        "under-file": str(a_file / "sub"),  # a directory cannot be made inside a file, even by root
        "proc": "/proc/crashcart-cannot-write-here",
        "missing": str(root / "missing" / "bundle"),
        "nonempty": str(full),
        "non-utf8": str(root / NON_UTF8),
        "empty-dir": str(tmp_path_factory.mktemp("empty")),
    }


def commands(p: dict[str, str]) -> st.SearchStrategy[list[str]]:
    place = st.sampled_from(sorted(p.values()))
    return st.one_of(
        st.tuples(st.just("synth"), words, st.just("--out"), place).map(list),
        st.tuples(st.just("synth"), st.just("cuda_oom"), st.just("--out"), place).map(list),
        st.tuples(
            st.just("synth"),
            st.just("cuda_oom"),
            st.just("--out"),
            st.just(p["missing"] + "-s"),
            st.sampled_from(["--ranks", "--nodes", "--seed"]),
            numbers,
        ).map(list),
        st.tuples(
            st.just("synth"),
            st.just("cuda_oom"),
            st.just("--out"),
            st.just(p["missing"] + "-l"),
            st.just("--layout"),
            words,
        ).map(list),
        st.tuples(st.just("diagnose"), place).map(list),
        st.tuples(st.just("diagnose"), st.just(p["empty-dir"]), st.just("--out"), place).map(list),
        st.tuples(st.just("diagnose"), place, st.just("--engine"), words).map(list),
        st.tuples(st.just("list"), st.just("--limit"), numbers).map(list),
        st.tuples(st.sampled_from(["show", "runbook"]), words).map(list),
        st.tuples(st.just("approve"), words, st.just("--as"), words, st.just("--plan"), words).map(list),
        st.tuples(st.just("reject"), words, st.just("--as"), words, st.just("--reason"), words).map(list),
        st.tuples(st.just("search"), words).map(list),
        st.tuples(st.just("eval"), place).map(list),
        st.tuples(st.just("doctor"), words).map(list),
        st.tuples(words).map(list),
    )


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRASHCART_DB", str(tmp_path / "db.sqlite"))
    monkeypatch.setenv("CRASHCART_WORK_DIR", str(tmp_path / "work"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_arguments_never_show_a_traceback(
    data: st.DataObject, places: dict[str, str], env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = data.draw(commands(places))
    code = main(argv)
    _, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, (argv, err)  # stdout may quote a log's traceback
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].strip(), (argv, err)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["synth", "nonsense", "--out", "X"], "unknown class 'nonsense'; valid classes: nccl_watchdog_timeout"),
        (["synth", "gpu-fell-off-bus", "--out", "X"], "did you mean gpu_fallen_off_bus?"),
        (["list", "--limit", "0"], "--limit: must be 1 or more, not 0"),
        (["synth", "cuda_oom", "--out", "X", "--ranks", "-3"], "--ranks: must be 1 or more, not -3"),
        (["diagnose", "FILE", "--out", "FILE"], "is a file; give a directory"),
        (["show", "cc-nope"], "cc-nope"),
        (["search", "a\x00b"], "TEXT holds a NUL character"),
    ],
)
def test_each_refusal_says_what_to_fix(
    argv: list[str], says: str, tmp_path: Path, env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x\n")
    argv = [str(a_file) if a == "FILE" else str(tmp_path / "new") if a == "X" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_help_lists_classes_and_layouts_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synth", "--help"]) == 0
    out = capsys.readouterr().out
    assert "gpu_fallen_off_bus" in out and "slurm_combined" in out and "(default: 8)" in out
    assert main(["list", "--help"]) == 0
    assert "(default: 20)" in capsys.readouterr().out


def test_eval_prints_a_case_named_in_bytes_or_markup(
    tmp_path: Path, env: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A labelled bundle whose folder name is not UTF-8, or reads as rich markup, is printed as it is."""
    import os
    import shutil

    monkeypatch.setenv("COLUMNS", "250")
    root = Path(__file__).resolve().parents[1] / "incidents" / "gpu-fell-off-bus"
    for name in (os.fsdecode(b"case-\xff\xfe"), "[red]case"):
        shutil.copytree(root, tmp_path / "cases" / name)
    code = main(["eval", str(tmp_path / "cases")])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err and "internal error" not in err
    assert "case-\\udcff\\udcfe" in out
    assert "[red]case" in out
