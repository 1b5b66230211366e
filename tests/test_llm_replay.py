"""CI runs the LLM path on every shipped incident from recorded answers: deterministic, no network.

The tape (tests/data/llm/incidents.jsonl) was recorded by ``scripts/record_llm_cassette.py`` from the
local stand-in model, so this guards the replay path and the engine's plumbing, not a model's accuracy.
When prompts, windows or redaction rules change, answers are no longer found: re-record the tape.
"""

from __future__ import annotations

from pathlib import Path

from crashcart import evaluate
from crashcart.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
TAPE = ROOT / "tests" / "data" / "llm" / "incidents.jsonl"


def test_replay_runs_the_llm_engine_on_every_incident_without_a_network(tmp_path: Path) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        work_dir=tmp_path / "w",
        engine="llm",
        llm_base_url="http://127.0.0.1:9/v1",  # nothing listens: any live call would fail
        llm_cassette=TAPE,
        llm_cassette_mode="replay",
    )
    results = evaluate.run_eval(evaluate.find_cases([ROOT / "incidents"]), settings)
    assert len(results) == 36
    assert [r.case for r in results if r.llm_status != "ok"] == [], "answers missing from the tape: re-record it"
    assert sum(r.llm_calls for r in results) == 0  # every answer came from the tape
    assert [r.case for r in results if not r.passed] == []
