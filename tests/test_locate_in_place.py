"""Attributing findings in place (``locate.owned.in_place``) gives what copying them gave."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crashcart.locate.owned import copied, in_place
from crashcart.locate.topology import attribute
from crashcart.models import Finding, RankInfo, Topology
from tests.kit import OPTIONAL_FIELDS, xid_finding

OPTIONAL = OPTIONAL_FIELDS


def _finding(i: int, given_names: frozenset[str], text: str = "") -> Finding:
    return xid_finding(i, given_names, text)


updates = st.fixed_dictionaries(
    {}, optional={"node": st.sampled_from(["gpu-node-002", "gpu-node-017"]), "rank": st.integers(0, 15)}
)


@given(st.frozensets(st.sampled_from(sorted(OPTIONAL))), st.lists(updates, max_size=3))
def test_in_place_answers_as_the_copies_did(given_names: frozenset[str], steps: list[dict[str, object]]) -> None:
    a, b = _finding(1, given_names), _finding(1, given_names)
    for update in steps:
        a, b = copied(a, update), in_place(b, update)
    assert b.model_dump() == a.model_dump()
    assert b.model_fields_set == a.model_fields_set
    assert b.model_dump(exclude_unset=True) == a.model_dump(exclude_unset=True)
    assert _finding(1, given_names).model_fields_set == _finding(2, given_names).model_fields_set  # others unchanged


def test_owned_attribution_equals_copied_attribution() -> None:
    topo = Topology(
        world_size=16,
        nodes=["gpu-node-000", "gpu-node-001"],
        ranks={
            r: RankInfo(rank=r, node=f"gpu-node-00{r // 8}", local_rank=r % 8, gpu=f"0000:{r}b:00") for r in range(16)
        },
    )
    texts = ["[rank3]: RuntimeError: boom", "gpu-node-001:77:78 [2] NCCL INFO x", "plain line", "[default5]: oops"]

    def made() -> list[Finding]:
        return [_finding(i + 1, frozenset({"node"} if i % 2 else set()), t) for i, t in enumerate(texts * 3)]

    copies, originals = attribute(made(), topo), made()
    owned = attribute(originals, topo, owned=True)
    assert [f.model_dump() for f in owned] == [f.model_dump() for f in copies]
    assert [f.model_fields_set for f in owned] == [f.model_fields_set for f in copies]
    assert any((c.rank, c.node) != (f.rank, f.node) for c, f in zip(copies, made(), strict=True))  # some changed
