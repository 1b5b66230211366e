"""Shortcuts taken for speed answer as the slower code they stand for (issue 16, pass 10)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crashcart.catalogue import load_catalogue
from crashcart.text import template

_TEMPLATES = sorted({s.summary for s in load_catalogue().signatures})
values = st.one_of(st.none(), st.text(alphabet="ab0 :(),;%#", max_size=8))


@given(st.sampled_from(_TEMPLATES), st.data())
def test_a_remembered_summary_is_the_one_filled_from_these_fields(tpl: str, data: st.DataObject) -> None:
    names = template._names(tpl)
    first = {n: v for n in names if (v := data.draw(values)) is not None}
    first["_extra"] = data.draw(st.text(max_size=4))  # not named by the template: not part of the key
    assert template.fill(tpl, first) == template._fill(tpl, first)
    again = {**first, "_extra": "other", "_more": "x"}
    assert template.fill(tpl, again) == template._fill(tpl, again)
    changed = dict(first)
    if names:  # one named field changed: the remembered answer must not be reused
        changed[names[-1]] = data.draw(st.text(alphabet="xyz9", min_size=1, max_size=5))
    assert template.fill(tpl, changed) == template._fill(tpl, changed)


def test_the_names_are_the_fields_the_template_names_in_order() -> None:
    assert template._names("{a} at {b}{a} ({c})") == ("a", "b", "a", "c")
    assert template._names("no fields") == ()
