"""Where each rank stopped (hang evidence), as ``diagnosis.json`` carries it: ``rank_stops``.

One record per rank and process group: the last collective the rank entered (``op``, ``seq``, ``state``), how many
collectives it is behind the furthest rank of its group, its entry's time, and the citation into the Flight Recorder
dump. The timeline picture draws one lane per rank ending at that collective. Pure.
"""

from __future__ import annotations

from crashcart.models import DocCitation, DocRankStop, RankStop
from crashcart.text.clock import to_iso


def doc_rank_stop(s: RankStop, citation: DocCitation) -> DocRankStop:
    return DocRankStop(
        rank=s.rank,
        node=s.node,
        pg=s.pg,
        pg_desc=s.pg_desc,
        seq=s.seq,
        op=s.op,
        state=s.state,
        behind=s.behind,
        time=to_iso(s.time) if s.time is not None else None,
        citation=citation,
    )
