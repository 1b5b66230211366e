"""Ingest: canonical line text, reading lines back, classification, encodings, manifest."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crashcart.errors import EmptyBundle, NoLogsFound
from crashcart.ingest.bundle import (
    HEAD_BYTES,
    Bundle,
    LineIndex,
    _head_lines,
    canonical_line,
    open_bundle,
)
from crashcart.ingest.heads import _KERNEL_CONTENT
from crashcart.ingest.heads import kernel_line as _kernel_line
from crashcart.settings import BundleLimits

LIMITS = BundleLimits()


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"plain\n", "plain"),
        (b"windows\r\n", "windows"),
        (b"\x1b[31mred\x1b[0m text\n", "red text"),
        (b"bad \xff\xfe bytes\n", "bad \ufffd\ufffd bytes"),
        (b"no newline", "no newline"),
        (b"inner\rcarriage\n", "inner\rcarriage"),
    ],
    ids=["plain", "crlf", "ansi", "invalid-utf8", "no-eol", "inner-cr"],
)
def test_canonical_line(raw: bytes, text: str) -> None:
    assert canonical_line(raw, 1000) == text


def test_canonical_line_cuts_long_lines() -> None:
    text = canonical_line(b"x" * 5000 + b"\n", 100)
    assert text.startswith("x" * 100) and text.endswith("…[line truncated]")


def _bundle_for(path: Path, tmp_path: Path) -> Bundle:
    return open_bundle(path, tmp_path / "work", LIMITS)


def test_read_lines_matches_naive_split(make_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    content = "".join(f"line {i}\r\n" if i % 7 == 0 else f"line {i}\n" for i in range(1, 501))
    root = make_bundle({"rank-0.log": content})
    with _bundle_for(root, tmp_path) as b:
        assert b.read_lines("rank-0.log", 1) == ["line 1"]
        assert b.read_lines("rank-0.log", 499, 501) == ["line 499", "line 500"]
        b.set_index(
            "rank-0.log",
            LineIndex(checkpoints=[(1, 0), (101, len("".join(content.splitlines(True)[:100])))], lines=500),
        )
        assert b.read_lines("rank-0.log", 250, 251) == ["line 250", "line 251"]
        assert b.read_lines("rank-0.log", 0) == []


@hsettings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"").replace(b"\x00", b"")),
        min_size=1,
        max_size=30,
    )
)
def test_read_lines_property(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]) -> None:
    root = tmp_path_factory.mktemp("b")
    data = b"\n".join(lines) + b"\n"
    (root / "rank-1.log").write_bytes(b"s" * 9000 + b"\n" + data)  # text first: not binary
    with open_bundle(root, tmp_path_factory.mktemp("w"), LIMITS) as b:
        got = b.read_lines("rank-1.log", 2, len(lines) + 1)
        assert got == [canonical_line(x, LIMITS.max_line_bytes) for x in lines]


@pytest.mark.parametrize(
    ("path", "content", "kind"),
    [
        ("rank-3.log", "hello\n", "rank_log"),
        ("logs/node-017/rank_27.out", "step 1\n", "rank_log"),
        ("nodes/gpu-node-017/dmesg.log", "[    1.000000] Linux version\n", "kernel_log"),
        ("kern.log", "Nov 30 02:13:07 gpu-node-017 kernel: hello\n", "kernel_log"),
        ("slurm-123456.out", "0: hello\n1: hello\n0: more\n", "combined_log"),
        ("node1.log", "[rank0]:hello\n[rank1]:hello\n", "combined_log"),
        ("sacct.txt", "JobID State\n", "scheduler"),
        ("config/job.yaml", "lr: 0.1\n", "config"),
        ("dashboard.png", b"\x89PNG\r\n\x1a\n....", "dashboard"),
        ("manifest.json", '{"job_id": "42"}', "manifest"),
        ("telemetry/dcgm.csv", "timestamp,hostname,gpu,DCGM_FI_DEV_GPU_TEMP\n", "telemetry"),
        ("notes.txt", "some text\n", "log"),
    ],
    ids=lambda v: v if isinstance(v, str) and "/" not in v and len(v) < 30 else None,
)
def test_classification(make_bundle, tmp_path: Path, path: str, content: str | bytes, kind: str) -> None:  # type: ignore[no-untyped-def]
    root = make_bundle({path: content, "rank-0.log": "x\n"})
    with _bundle_for(root, tmp_path) as b:
        f = b.file(path)
        assert f is not None and f.kind == kind


def test_binary_and_empty_files_are_skipped_with_reason(make_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = make_bundle({"rank-0.log": "ok\n", "core.bin": b"\x00\x01\x02" * 1000, "empty.log": ""})
    with _bundle_for(root, tmp_path) as b:
        reasons = {s.path: s.reason for s in b.skipped}
        assert "binary" in reasons["core.bin"]
        assert "empty" in reasons["empty.log"]


def test_control_bytes_make_a_file_binary_but_colours_tabs_and_crs_do_not(make_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    coloured = "\x1b[1m\x1b[31mE\x1b[0m\t\r\n" * 400  # ESC, tab and CR (29% of the bytes) are what logs hold
    root = make_bundle(
        {
            "rank-0.log": coloured,
            "rank-1.log": b"\x01\x02\x03\x7fabcd\n" * 500,  # 3 of 9 bytes control (0x7f is not one)
            "rank-2.log": b"\x0e" * 80 + b"a" * 920 + b"\n",  # 8%: still text
            "rank-3.log": b"\x1f" * 120 + b"a" * 880 + b"\n",  # 12%: binary
        }
    )
    with _bundle_for(root, tmp_path) as b:
        reasons = {s.path: s.reason for s in b.skipped}
        assert set(reasons) == {"rank-1.log", "rank-3.log"}
        assert all("binary" in r for r in reasons.values())


def _head_lines_line_by_line(head: bytes, max_bytes: int) -> list[str]:
    parts = head.split(b"\n")
    if len(parts) > 1 and len(head) == HEAD_BYTES:
        parts = parts[:-1]
    return [canonical_line(p, max_bytes) for p in parts if p or len(parts) == 1]


_PIECES = [
    b"a",
    b"\n",
    b"\r",
    b"\r\n",
    b"\x1b[31m",
    b"\xc3\xa9",
    b"\xc3",
    b"\xe2\x82",
    b"\xff",
    b" ",
    b"2026-11-30T02:13:07Z",
]


@given(st.lists(st.sampled_from(_PIECES), max_size=80), st.sampled_from([4, 16, 65536]))
def test_head_lines_decoded_at_once_match_line_by_line(pieces: list[bytes], max_bytes: int) -> None:
    head = b"".join(pieces)
    assert _head_lines(head, max_bytes) == _head_lines_line_by_line(head, max_bytes)


def test_head_lines_of_a_full_head_drop_the_partial_last_line() -> None:
    head = ((b"x" * 99 + b"\n") * 700)[:HEAD_BYTES]  # ends in the middle of a line
    assert len(head) == HEAD_BYTES
    assert _head_lines(head, 65536) == _head_lines_line_by_line(head, 65536)
    assert all(line == "x" * 99 for line in _head_lines(head, 65536))


_KERNEL_BITS = [
    "kernel: ",
    "kernel:",
    "xkernel: ",
    "NVRM: ",
    "[",
    "[  12.345678] ",
    "[Mon ",
    "[Mon Nov",
    "a",
    " ",
    "1",
    ".",
    "]",
]


@given(st.lists(st.sampled_from(_KERNEL_BITS), max_size=12))
def test_kernel_line_prefilter_agrees_with_the_pattern(bits: list[str]) -> None:
    line = "".join(bits)
    assert _kernel_line(line) == bool(_KERNEL_CONTENT.search(line))


def test_utf16_is_transcoded_keeping_line_numbers(make_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = "first\r\nsecond ü\r\nthird\r\n"
    root = make_bundle({"rank-2.log": codecs.BOM_UTF16_LE + text.encode("utf-16-le")})
    with _bundle_for(root, tmp_path) as b:
        assert b.read_lines("rank-2.log", 1, 3) == ["first", "second ü", "third"]


def test_no_logs_found(make_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = make_bundle({"picture.png": b"\x89PNG\r\n\x1a\n", "blob.bin": b"\x00" * 100})
    with pytest.raises(NoLogsFound):
        _bundle_for(root, tmp_path)


def test_empty_dir(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmptyBundle):
        open_bundle(tmp_path / "empty", tmp_path / "work", LIMITS)


def test_manifest_is_parsed_and_malformed_one_ignored(make_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manifest = (
        '{"job_id": 991, "scheduler": "slurm", "collected_at": "2026-11-30T03:00:00Z",'
        ' "nodes": [{"host": "n1", "boot_time": "2026-11-29T00:00:00Z", "kernel_log": "k/dmesg"}],'
        ' "rank_map": {"0": "n1", "x": "bad"}, "extra": true}'
    )
    root = make_bundle({"manifest.json": manifest, "rank-0.log": "x\n", "k/dmesg": "[    1.000000] boot\n"})
    with _bundle_for(root, tmp_path) as b:
        assert b.manifest is not None
        assert b.manifest.job_id == "991" and b.manifest.rank_map == {0: "n1"}
        assert b.manifest.nodes[0].boot_time is not None
        assert b.year == 2026
        kf = b.file("k/dmesg")
        assert kf is not None and kf.host == "n1"
    bad = make_bundle({"manifest.json": "{not json", "rank-0.log": "x\n"})
    with _bundle_for(bad, tmp_path) as b:
        assert b.manifest is None


def test_extracted_work_dir_removed_on_close(tmp_path: Path) -> None:
    import tarfile

    src = tmp_path / "src"
    src.mkdir()
    (src / "rank-0.log").write_text("hello\n")
    tar = tmp_path / "b.tar.gz"
    with tarfile.open(tar, "w:gz") as tf:
        tf.add(src / "rank-0.log", arcname="rank-0.log")
    b = open_bundle(tar, tmp_path / "work", LIMITS)
    phys = b.physical("rank-0.log")
    assert phys is not None and phys.exists()
    b.close()
    assert not phys.exists()
