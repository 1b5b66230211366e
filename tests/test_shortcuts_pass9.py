"""Shortcuts taken for speed answer as the slower code they stand for (issue 16, pass 9)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from crashcart.ingest.bundle import canonical_line, open_bundle
from crashcart.scan import scan
from crashcart.scan.tails import canonical_tail
from crashcart.settings import Settings
from crashcart.text import clock, template

texts = st.text(alphabet="0123456789:: .a(),;\t\n٣", max_size=40)


@given(texts)
def test_hms_start_is_where_the_hh_mm_ss_regex_matches(text: str) -> None:
    m = clock._HMS.search(text)
    assert clock.hms_start(text) == (m.start() if m else None)


@given(texts)
def test_text_the_untidy_check_passes_is_left_as_it_is_by_every_tidy_pattern(text: str) -> None:
    if template._UNTIDY.search(text) is None:
        for pattern, repl in template._TIDY:
            assert pattern.sub(repl, text) == text


@given(st.text(alphabet="{}ab :()", max_size=30))
def test_parsed_template_pieces_are_the_formatters(tpl: str) -> None:
    import string

    try:
        want = [(lit, name) for lit, name, _, _ in string.Formatter().parse(tpl)]
    except ValueError:
        return
    assert list(template._parsed(tpl)) == want


def _same_as_validated(model: BaseModel) -> None:
    again = type(model)(**{k: v for k, v in model.__dict__.items() if k in model.model_fields_set})
    assert again == model
    assert again.model_fields_set == model.model_fields_set
    assert again.model_dump_json() == model.model_dump_json()
    assert [type(v) for v in again.__dict__.values()] == [type(v) for v in model.__dict__.values()]
    assert list(again.__dict__) == list(model.__dict__)


@pytest.mark.parametrize("incident", ["gpu-fell-off-bus", "hung-rank", "cuda-oom", "fp16-min-scale", "dataloader-shm"])
def test_findings_made_without_validation_are_the_validated_ones(incident: str, settings: Settings) -> None:
    root = Path(__file__).resolve().parent.parent / "incidents" / incident
    if not root.is_dir():
        pytest.skip(f"no incident {incident}")
    with open_bundle(root, settings.work_dir, settings.bundle_limits) as bundle:
        found = scan(bundle, settings.scan).findings
    assert found
    for f in found:
        _same_as_validated(f)
        for ev in f.evidence:
            _same_as_validated(ev)


lines_bytes = st.lists(st.binary(max_size=12) | st.sampled_from([b"caf\xc3\xa9", b"\x1b[31mred", b"x\r", b"\xff"]))


@given(lines_bytes, st.integers(4, 16))
def test_a_tail_decoded_at_once_is_each_line_canonical(raws: list[bytes], max_bytes: int) -> None:
    raw = [(i + 1, r.replace(b"\n", b"")) for i, r in enumerate(raws)]
    assert canonical_tail(raw, max_bytes) == [(n, canonical_line(r, max_bytes)) for n, r in raw]
