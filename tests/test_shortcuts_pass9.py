"""Shortcuts taken for speed answer as the slower code they stand for (issue 16, pass 9)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

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
