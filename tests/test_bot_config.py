"""Start-up: configuration problems give one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from fake_slack import FakeSlack, bot_settings

from bot.main import BotConfigError, BotRuntime, run
from bot.settings import BotSettings
from crashcart.cli import main


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_cli_bot_without_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bot", "--socket"]) == 2
    assert "SLACK_BOT_TOKEN is not set" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("values", "mode", "expected"),
    [
        ({"slack_bot_token": "xoxp-user-token"}, "socket", "must be the bot token"),
        ({"slack_bot_token": "xoxb-1"}, "socket", "SLACK_APP_TOKEN is not set"),
        (
            {"slack_bot_token": "xoxb-1", "slack_app_token": "xoxb-2"},
            "socket",
            "app-level token (it starts with xapp-)",
        ),
        ({"slack_bot_token": "xoxb-1"}, "http", "SLACK_SIGNING_SECRET is not set"),
        ({"slack_bot_token": "xoxb-1", "slack_signing_secret": "  "}, "http", "SLACK_SIGNING_SECRET is not set"),
    ],
    ids=["user-token", "no-app-token", "app-token-wrong-kind", "no-secret", "blank-secret"],
)
def test_missing_settings_for_the_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], values: dict[str, str], mode: str, expected: str
) -> None:
    settings = BotSettings(_env_file=None, db=tmp_path / "db", **values)  # type: ignore[call-arg]
    assert run(settings, mode, 3000) == 2  # type: ignore[arg-type]
    line = one_line(capsys.readouterr().err)
    assert expected in line
    for secret in values.values():
        assert secret.strip() == "" or secret not in line  # never echo a token


@pytest.mark.parametrize("port", [0, 65536, None])
def test_http_port_must_be_a_real_port(tmp_path: Path, capsys: pytest.CaptureFixture[str], port: int | None) -> None:
    settings = BotSettings(_env_file=None, slack_bot_token="xoxb-1", slack_signing_secret="s")  # type: ignore[call-arg]
    assert run(settings, "http", port) == 2
    assert "--http needs --port between 1 and 65535" in one_line(capsys.readouterr().err)


def test_jobs_dir_must_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = BotSettings(
        _env_file=None, slack_bot_token="xoxb-1", slack_app_token="xapp-1", jobs_dir=tmp_path / "nope"
    )  # type: ignore[call-arg]
    assert run(settings, "socket") == 2
    assert "CRASHCART_JOBS_DIR is not a directory" in one_line(capsys.readouterr().err)


async def test_slack_refuses_the_token(slack: FakeSlack, tmp_path: Path) -> None:
    settings = bot_settings(tmp_path, slack, slack_bot_token="xoxb-revoked")
    runtime = BotRuntime(settings, "http", port=0, host="127.0.0.1")
    with pytest.raises(BotConfigError, match=r"Slack refused SLACK_BOT_TOKEN \(invalid_auth\)"):
        await runtime.start()
    await runtime.stop()


async def test_healthz(slack: FakeSlack, tmp_path: Path) -> None:
    runtime = BotRuntime(bot_settings(tmp_path, slack), "http", port=0, host="127.0.0.1")
    await runtime.start()
    try:
        async with (
            aiohttp.ClientSession(trust_env=False) as session,
            session.get(f"http://127.0.0.1:{runtime.port}/healthz") as resp,
        ):
            assert resp.status == 200
            assert await resp.json() == {"ok": True, "mode": "http"}
    finally:
        await runtime.stop()
    # the bot's one client carries the configured base URL and retry handlers for 429s and connection errors
    kinds = {type(h).__name__ for h in runtime.client.retry_handlers}
    assert {"AsyncRateLimitErrorRetryHandler", "AsyncConnectionErrorRetryHandler"} <= kinds
    assert runtime.client.base_url == slack.api_url
