"""LLM engine parts: what the swarm is shown, the dashboard reader, and ``crashcart doctor``."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest

from bot.plugin import check_slack
from bot.settings import SlackSettings
from crashcart.cli import main
from crashcart.llm.doctor import run_checks, tiny_png
from crashcart.llm.windows import build_windows, chunk_windows, occurrences
from crashcart.locate import locate
from crashcart.pipeline import diagnose
from crashcart.scan.run import scan
from crashcart.settings import Settings
from tests.conftest import MakeBundle
from tests.fake_openai import FakeOpenAI, Reply, answer, request_text, role_of, stand_in
from tests.fake_slack import BOT_TOKEN, FakeSlack
from tests.test_llm import llm_settings

ROOT = Path(__file__).resolve().parent.parent
THERMAL = ROOT / "incidents" / "thermal-throttle"


def rank_log(rank: int) -> str:
    return "".join(
        [f"2026-05-01T10:00:0{i}Z [rank{rank}]: step {100 + i} loss 2.{rank}{i}\n" for i in range(5)]
        + [
            f"2026-05-01T10:00:06Z [rank{rank}]: ERROR data loader worker {rank} exited\n",
            f"2026-05-01T10:00:06Z [rank{rank}]: detail: object store bucket quota exceeded for shard {rank * 7}\n",
            f"2026-05-01T10:00:07Z [rank{rank}]: shutting down\n",
        ]
    )


def test_identical_windows_on_many_ranks_are_shown_once(settings: Settings, make_bundle: MakeBundle) -> None:
    bundle_dir = make_bundle({f"logs/rank-{r}.log": rank_log(r) for r in range(16)})
    from crashcart.ingest.bundle import open_bundle

    with open_bundle(bundle_dir, settings.work_dir, settings.bundle_limits) as bundle:
        scanned = scan(bundle, settings.scan)
        _, findings, last = locate(bundle, scanned)
        windows = build_windows(bundle, findings, last)
        chunks = chunk_windows(windows)
        seen = occurrences(windows)
    text = "".join(c.text for c in chunks)
    assert text.count("quota exceeded") == 1
    assert "seen on 16 ranks" in text
    quota = next(k for k in seen if "quota" in k)
    assert sorted(r for _, _, _, r in seen[quota]) == list(range(16))
    assert len(chunks) == 1 and text.startswith("<<<DATA ")


async def test_one_answer_on_an_exemplar_becomes_evidence_on_every_rank(
    tmp_path: Path, fake: FakeOpenAI, make_bundle: MakeBundle
) -> None:
    bundle = make_bundle({f"logs/rank-{r}.log": rank_log(r) for r in range(16)})

    def quota(req: dict[str, Any]) -> Reply:
        if role_of(req) != "swarm":
            return stand_in(req)
        m = re.search(r"^([^\s|]+):(\d+)\| (.*quota exceeded.*)$", request_text(req), re.M)
        assert m is not None
        item = {"file": m[1], "line": int(m[2]), "quote": m[3][-40:], "class_id": "unknown", "role": "root_candidate"}
        return answer({"findings": [item]})

    fake.default = quota
    out = await diagnose(bundle, llm_settings(tmp_path, fake))
    mine = [f for f in out.findings if f.source == "llm"]
    assert sorted(f.rank for f in mine if f.rank is not None) == list(range(16))
    assert all("quota exceeded" in f.evidence[0].text for f in mine)
    assert len({f.evidence[0].file for f in mine}) == 16


async def test_the_dashboard_is_read_and_only_corroborated_observations_count(tmp_path: Path, fake: FakeOpenAI) -> None:
    def vision(req: dict[str, Any]) -> Reply:
        if role_of(req) != "vision":
            return stand_in(req)
        return answer(
            {
                "observations": [
                    {
                        "metric": "GPU temperature",
                        "node": "node0323",
                        "gpu": None,
                        "start": "02:10",
                        "summary": "one GPU runs 20 C hotter",
                        "class_id": "gpu_thermal_power_throttling",
                    },
                    {
                        "metric": "NVLink errors",
                        "node": "node0999",
                        "summary": "a spike",
                        "class_id": "gpu_nvlink_error",
                    },
                ]
            }
        )

    fake.default = vision
    out = await diagnose(THERMAL, llm_settings(tmp_path, fake))
    images = [r for r in fake.requests if role_of(r) == "vision"]
    assert len(images) == 1
    part = images[0]["messages"][1]["content"][1]
    assert part["type"] == "image_url" and part["image_url"]["url"].startswith("data:image/png;base64,")
    assert base64.b64decode(part["image_url"]["url"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    notes = " ".join(out.document.reasoning)
    assert re.search(r"dashboard: GPU temperature on node0323 .* backed by telemetry/dcgm\.csv:\d+", notes)
    assert "NVLink errors on node0999" in notes and "not corroborated" in notes
    assert out.document.root_cause.class_ == "gpu_thermal_power_throttling"


def test_tiny_png_is_a_png() -> None:
    data = tiny_png()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and b"IEND" in data


async def test_doctor_names_the_missing_model_and_checks_slack(tmp_path: Path) -> None:
    fake = FakeOpenAI(models=["swarm-m", "reduce-m"])
    await fake.start()
    slack = FakeSlack()
    await slack.start()
    try:
        settings = llm_settings(tmp_path, fake)
        slack_settings = SlackSettings(bot_token=BOT_TOKEN, api_url=slack.api_url)
        checks = {c.name: c for c in [*await run_checks(settings), await check_slack(slack_settings)]}
    finally:
        await fake.close()
        await slack.stop()
    assert checks["endpoint"].status == "ok" and checks["swarm model"].status == "ok"
    assert checks["vision model"].status == "fail" and "CRASHCART_VISION_MODEL" in checks["vision model"].fix
    assert checks["swarm call"].status == "ok" and checks["vision call"].status == "ok"
    assert checks["slack"].status == "ok"
    assert fake.auth and all(a == "Bearer sk-test-not-a-real-key-0000000000" for a in fake.auth)


def test_doctor_without_a_key_says_the_offline_engine_needs_none_and_stays_offline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("CRASHCART_LLM_BASE_URL", "http://10.255.255.1:9/v1")  # would hang if it were tried
    start = time.monotonic()
    main(["doctor"])
    assert time.monotonic() - start < 2.0
    out = capsys.readouterr().out
    assert "CRASHCART_LLM_API_KEY is not set" in out and "offline engine" in out and "needs no key" in out
    assert "not contacted without a key" in out and "is a model with" not in out
    assert "slack" in out and "SLACK_BOT_TOKEN is not set" in out


async def test_doctor_suggests_no_model_fix_when_the_endpoint_is_down(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {
            "db": tmp_path / "db.sqlite",
            "work_dir": tmp_path / "work",
            "llm_base_url": "http://127.0.0.1:9/v1",
            "llm_api_key": "sk-test-not-a-real-key-0000000000",
            "llm_max_retries": 0,
        }
    )
    checks = {c.name: c for c in await run_checks(settings)}
    assert checks["endpoint"].status == "fail" and "network" in checks["endpoint"].fix
    assert all("is a model with" not in c.fix for c in checks.values())
    assert checks["swarm model"].status == "skip"


def test_calls_in_flight_count_against_the_budget() -> None:
    from crashcart.errors import BudgetExhausted
    from crashcart.llm.client import Ledger

    ledger = Ledger(token_budget=10_000, cost_budget_usd=1.0)
    ledger.reserve(6_000, 0.1)
    with pytest.raises(BudgetExhausted):
        ledger.reserve(6_000, 0.1)  # the first call has not finished: together they would overshoot
    assert ledger.exhausted
    ledger.release(6_000, 0.1)
    ledger.reserve(6_000, 0.1)
    with pytest.raises(BudgetExhausted):
        Ledger(token_budget=10**9, cost_budget_usd=0.5).reserve(10, 0.6)  # the cost budget too
