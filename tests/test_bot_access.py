"""Who may use the bot, and where: CRASHCART_BOT_CHANNELS, guests and other workspaces refused for
uploads, job-id lookups, commands and the shortcut (users.info, cached briefly; refused when Slack
cannot answer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_slack import (
    TEAM,
    BotUnderTest,
    FakeSlack,
    bot_settings,
    bundle_bytes,
    event_callback,
    file_share_event,
    message_shortcut,
    slash_command,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.access import Access

CHANNEL = "C0INCIDENT"
JOB = "1329667"


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    root = tmp_path / "jobs"
    root.mkdir()
    (root / f"{JOB}.tar.gz").write_bytes(bundle_bytes())
    return root


async def answer(bot: BotUnderTest, slack: FakeSlack, text: str, *, user: str, channel: str = CHANNEL) -> str:
    """What the user sees for a slash command: the ack's text, else the response_url post."""
    before = len(slack.responses)
    _, body = await bot.deliver("slash_commands", slash_command(text, fake=slack, channel=channel, user=user))
    acked = json.loads(body) if bot.mode == "socket" else ({"text": body} if body else {})
    if acked.get("text"):
        return str(acked["text"])
    return str((await slack.wait_for(lambda: slack.responses[before:]))[0]["text"])


def mention(text: str, ts: str, event_id: str, *, user: str, channel: str = CHANNEL) -> dict[str, Any]:
    event = {"type": "app_mention", "user": user, "text": f"<@UBOT> {text}", "ts": ts, "channel": channel}
    return event_callback(event | {"event_ts": ts}, event_id=event_id)


def ephemerals(slack: FakeSlack, user: str) -> list[str]:
    return [c.params["text"] for c in slack.calls_to("chat.postEphemeral") if c.params["user"] == user]


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_the_bot_acts_only_in_its_channels(slack: FakeSlack, tmp_path: Path, jobs_dir: Path, mode: str) -> None:
    settings = bot_settings(tmp_path, slack, jobs_dir=jobs_dir, bot_channels=f" {CHANNEL} , C0SECOND")
    assert settings.slack.channels == (CHANNEL, "C0SECOND")
    other = "C0RANDOM"
    async with BotUnderTest(slack, settings, mode) as bot:
        not_here = "CrashCart is not enabled in this channel. Ask in one of the incident channels it serves."
        assert await answer(bot, slack, f"diagnose {JOB}", user="UONCALL", channel=other) == not_here
        assert await answer(bot, slack, "list", user="UONCALL", channel=other) == not_here
        assert "finds and proves" in await answer(bot, slack, "help", user="UONCALL", channel=other)
        await bot.deliver("events_api", mention(f"diagnose {JOB}", "1.000100", "EvC1", user="UONCALL", channel=other))
        await bot.deliver("events_api", mention(f"diagnose {JOB}", "1.000100", "EvC1", user="UONCALL", channel=other))
        entry = slack.add_file("gpu-fell-off-bus.tar.gz", bundle_bytes())
        await bot.deliver("events_api", file_share_event(other, [entry], event_id="EvC2", ts="2.000100"))
        await slack.wait_for(lambda: len(ephemerals(slack, "UONCALL")) == 1 and ephemerals(slack, "UUPLOADER"))
        assert ephemerals(slack, "UONCALL") == [not_here]  # once, though Slack delivered the mention twice
        assert ephemerals(slack, "UUPLOADER") == [not_here]
        # nothing was queued, downloaded or posted there; the enabled channel works
        assert bot.runtime.queue is not None and bot.runtime.queue.jobs() == []
        assert slack.downloads == [] and slack.messages == {}
        assert await answer(bot, slack, "list", user="UONCALL") == "No incidents diagnosed in this channel yet."


GUEST_TEXT = "CrashCart answers members of this workspace only, not guests. Nothing was done."
EXTERNAL_TEXT = "CrashCart answers members of this workspace only, not users of other organisations. Nothing was done."


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        ({"is_restricted": True}, GUEST_TEXT),
        ({"is_restricted": True, "is_ultra_restricted": True}, GUEST_TEXT),
        ({"is_stranger": True, "team_id": "T0PARTNER"}, EXTERNAL_TEXT),
        ({"team_id": "T0PARTNER"}, EXTERNAL_TEXT),
    ],
    ids=["guest", "single-channel-guest", "slack-connect-stranger", "other-workspace"],
)
async def test_guests_and_other_workspaces_are_refused(
    slack: FakeSlack, tmp_path: Path, jobs_dir: Path, fields: dict[str, Any], refusal: str
) -> None:
    slack.set_user("UGUEST", **fields)
    async with BotUnderTest(slack, bot_settings(tmp_path, slack, jobs_dir=jobs_dir), "http") as bot:
        # commands (each of them), a job-id lookup by mention, an upload, the message shortcut
        for text in (f"diagnose {JOB}", "list", "status cc-000000000000", f"lookup {JOB}"):
            assert await answer(bot, slack, text, user="UGUEST") == refusal
        await bot.deliver("events_api", mention(f"diagnose {JOB}", "3.000100", "EvG1", user="UGUEST"))
        entry = slack.add_file("gpu-fell-off-bus.tar.gz", bundle_bytes())
        await bot.deliver(
            "events_api", file_share_event(CHANNEL, [entry], event_id="EvG2", ts="4.000100", user="UGUEST")
        )
        before = len(slack.responses)
        shared = {"ts": "4.000100", "files": [entry]}
        await bot.deliver("interactive", message_shortcut(shared, user="UGUEST", fake=slack))
        [shortcut] = await slack.wait_for(lambda: slack.responses[before:])
        assert shortcut["text"] == refusal and shortcut["response_type"] == "ephemeral"
        await slack.wait_for(lambda: len(ephemerals(slack, "UGUEST")) == 2)
        assert ephemerals(slack, "UGUEST") == [refusal, refusal]
        await bot.drain()
        assert bot.runtime.queue is not None and bot.runtime.queue.jobs() == []
        assert slack.downloads == [] and slack.messages == {}
        # users.info was asked once: the answer is cached briefly
        assert len(slack.calls_to("users.info")) == 1


async def test_when_slack_cannot_say_who_asks_the_bot_refuses(slack: FakeSlack, tmp_path: Path, jobs_dir: Path) -> None:
    async with BotUnderTest(slack, bot_settings(tmp_path, slack, jobs_dir=jobs_dir), "socket") as bot:
        slack.fail_next("users.info", error="ratelimited", status=429, times=4)  # beyond the client's retries
        unknown = "I could not check your account with Slack just now, so I did nothing. Try again in a minute."
        assert await answer(bot, slack, f"diagnose {JOB}", user="UONCALL") == unknown
        assert bot.runtime.queue is not None and bot.runtime.queue.jobs() == []
        # a failure is not cached: the next command asks again and goes through
        assert await answer(bot, slack, "list", user="UONCALL") == "No incidents diagnosed in this channel yet."


async def test_access_verdicts_and_cache(slack: FakeSlack) -> None:
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    now = [0.0]
    access = Access(client, team_id=TEAM, allowed_bots=("B0SLURM",), ttl_s=60, clock=lambda: now[0])
    slack.set_user("UGUEST", is_restricted=True)
    assert await access.check("UMEMBER") == "member"
    assert await access.check("UGUEST") == "guest"
    assert await access.check(None) == "unknown"
    assert await access.check("UMEMBER") == "member" and len(slack.calls_to("users.info")) == 2
    now[0] = 61  # past the cache: a member who became a guest is refused from then on
    slack.set_user("UMEMBER", is_restricted=True)
    assert await access.check("UMEMBER") == "guest"
    assert access.channel_allowed("C1") and access.bot_allowed("B0SLURM") and not access.bot_allowed("B0OTHER")
    assert not Access(client, team_id=TEAM, channels=("C2",)).channel_allowed("C1")
