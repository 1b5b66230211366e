"""Findings and evidence share their set of given field names (memory): every instance still answers as its own."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from crashcart.models import Evidence, Finding
from tests.kit import OPTIONAL_FIELDS, xid_finding

OPTIONAL = OPTIONAL_FIELDS


def _finding(i: int, given_names: frozenset[str], end: bool) -> Finding:
    return xid_finding(i, given_names, end=end)


names = st.frozensets(st.sampled_from(sorted(OPTIONAL)))
BASE = {"id", "class_id", "signature", "role", "severity", "summary", "evidence"}


@given(st.lists(st.tuples(names, st.booleans()), min_size=1, max_size=12), st.data())
def test_each_instance_answers_the_names_it_was_given(
    kinds: list[tuple[frozenset[str], bool]], data: st.DataObject
) -> None:
    made = [_finding(i + 1, n, end) for i, (n, end) in enumerate(kinds)]
    copies = []
    for f in made:  # copies with an update, as locate and numbering make them
        update = data.draw(st.dictionaries(st.sampled_from(["node", "rank", "summary"]), st.just("x")), label="update")
        if "rank" in update:
            update["rank"] = 7  # type: ignore[assignment]
        copies.append((f, update, f.model_copy(update=update)))
    for f, (n, end) in zip(made, kinds, strict=True):
        assert f.model_fields_set == BASE | n
        assert f.evidence[0].model_fields_set == {"id", "file", "line", "text"} | ({"end_line"} if end else set())
        assert set(f.model_dump(exclude_unset=True)) == BASE | n
    for f, update, c in copies:
        assert c.model_fields_set == f.model_fields_set | set(update)
        assert c.model_dump() == {**f.model_dump(), **update}
    for (n, _), f in zip(kinds, made, strict=True):  # no copy changed what an original says it was given
        assert f.model_fields_set == BASE | n


def test_instances_given_the_same_names_share_one_set() -> None:
    a, b = _finding(1, frozenset(OPTIONAL), False), _finding(2, frozenset(OPTIONAL), False)
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    assert a.evidence[0].__pydantic_fields_set__ is b.evidence[0].__pydantic_fields_set__
    c = a.model_copy(update={"node": "gpu-node-016"})
    d = b.model_copy(update={"node": "gpu-node-016"})
    assert c.__pydantic_fields_set__ is d.__pydantic_fields_set__ is a.__pydantic_fields_set__  # node was given already


def test_a_shared_set_cannot_be_added_to_through_an_instance() -> None:
    a = _finding(1, frozenset(), False)
    b = _finding(2, frozenset(), False)
    with pytest.raises(ValidationError):
        a.node = "gpu-node-017"  # type: ignore[misc]  # frozen: pydantic's only path that adds to the set
    assert (
        "node" not in b.model_fields_set and Finding.model_config.get("frozen") and Evidence.model_config.get("frozen")
    )
