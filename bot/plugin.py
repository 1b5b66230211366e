"""The bot as a ``crashcart`` plugin: ``crashcart bot`` and the Slack row of ``crashcart doctor``.

Registered in ``pyproject.toml`` under the entry-point group ``crashcart.plugins``, so the core's CLI
finds it without importing the bot. The CLI reads ``BotSettings`` (``settings_class``) once for it.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable

from bot.settings import BotSettings, SlackSettings
from crashcart.plugins import Check
from crashcart.settings import Settings


class BotPlugin:
    commands = ("bot",)
    settings_class = BotSettings

    def add_commands(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        bt = sub.add_parser("bot", help="run the Slack bot (Socket Mode, or HTTP with /slack/events and /healthz)")
        mode = bt.add_mutually_exclusive_group()
        mode.add_argument("--socket", action="store_true", help="Socket Mode (SLACK_APP_TOKEN; the default)")
        mode.add_argument("--http", action="store_true", help="HTTP mode (SLACK_SIGNING_SECRET)")
        bt.add_argument("--port", type=int, default=3000, help="HTTP port (with --http)")

    def run(self, args: argparse.Namespace, settings: Settings) -> int:
        from bot.main import run

        assert isinstance(settings, BotSettings)  # the CLI reads settings_class
        return run(settings, "http" if args.http else "socket", args.port)

    def doctor_checks(self, settings: Settings) -> list[Callable[[], Awaitable[Check]]]:
        assert isinstance(settings, BotSettings)
        slack = settings.slack
        return [lambda: check_slack(slack)]


plugin = BotPlugin()


async def check_slack(slack: SlackSettings) -> Check:
    """``auth.test`` with the bot token (never shown)."""
    import aiohttp  # here, not at the top: every ``crashcart`` command loads this plugin, few need HTTP

    token = slack.bot_token
    if token is None:
        return Check("slack", "skip", "SLACK_BOT_TOKEN is not set")
    url = slack.api_url.rstrip("/") + "/auth.test"
    headers = {"Authorization": f"Bearer {token.get_secret_value()}"}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http,
            http.post(url, headers=headers) as resp,
        ):
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return Check("slack", "fail", f"auth.test: {type(exc).__name__}", "check CRASHCART_SLACK_API_URL")
    if not isinstance(body, dict) or not body.get("ok"):
        error = body.get("error") if isinstance(body, dict) else "no JSON"
        return Check("slack", "fail", f"auth.test: {error}", "check SLACK_BOT_TOKEN")
    return Check("slack", "ok", f"auth.test: team {body.get('team', '?')}, bot {body.get('user', '?')}")
