"""HTTP mode: real signed requests to the bot's port; refusals, acks for everything else, dedupe,
a 429 on chat.postMessage retried, failures reported in the thread with a reason and a reference."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fake_slack import (
    SIGNING_SECRET,
    BotUnderTest,
    FakeSlack,
    block_action,
    bot_settings,
    bundle_bytes,
    encode,
    event_callback,
    file_share_event,
    signed_headers,
)

CHANNEL = "C0INCIDENT"


@pytest.fixture
async def bot(slack: FakeSlack, tmp_path: Path) -> AsyncIterator[BotUnderTest]:
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "http") as running:
        yield running


async def post_raw(bot: BotUnderTest, body: str, headers: dict[str, str]) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession(trust_env=False) as session,
        session.post(f"{bot.base}/slack/events", data=body.encode(), headers=headers) as resp,
    ):
        return resp.status, await resp.text()


def jobs(bot: BotUnderTest) -> list[Any]:
    assert bot.runtime.queue is not None
    return bot.runtime.queue.jobs()


def worked(slack: FakeSlack) -> list[str]:
    return [c.method for c in slack.calls if c.method != "auth.test"]


async def test_signatures_are_checked(bot: BotUnderTest, slack: FakeSlack) -> None:
    entry = slack.add_file("gpu-fell-off-bus.tar.gz", bundle_bytes())
    body, content_type = encode(
        "events_api", file_share_event(CHANNEL, [entry], event_id="EvSig", ts="1700000000.000100")
    )
    json_type = {"Content-Type": content_type}

    wrong_secret = signed_headers(body, secret="not-" + SIGNING_SECRET)
    assert await post_raw(bot, body, {**wrong_secret, **json_type}) == (401, '{"error": "invalid request"}')
    stale = signed_headers(body, timestamp=int(time.time()) - 301)
    assert (await post_raw(bot, body, {**stale, **json_type}))[0] == 401
    tampered = body.replace("bundle from the failed run", "bundle from another run")
    assert (await post_raw(bot, tampered, {**signed_headers(body), **json_type}))[0] == 401
    assert (await post_raw(bot, body, json_type))[0] == 401  # no signature at all
    assert jobs(bot) == [] and worked(slack) == []  # no listener ran

    assert (await post_raw(bot, body, {**signed_headers(body), **json_type}))[0] == 200
    await slack.wait_for(lambda: slack.calls_to("files.completeUploadExternal"))
    await bot.drain()
    assert [j.state for j in jobs(bot)] == ["done"]


async def test_everything_else_is_acknowledged_and_ignored(bot: BotUnderTest, slack: FakeSlack) -> None:
    reaction = {
        "type": "reaction_added",
        "user": "U1",
        "reaction": "eyes",
        "item": {"type": "message", "channel": CHANNEL, "ts": "1.2"},
        "event_ts": "1.3",
    }
    join = {
        "type": "message",
        "subtype": "channel_join",
        "user": "U1",
        "channel": CHANNEL,
        "ts": "1.4",
        "text": "joined",
    }
    chatter = {"type": "message", "user": "U1", "channel": CHANNEL, "ts": "1.5", "text": "anyone seen this?"}
    for n, event in enumerate([reaction, join, chatter]):
        assert (await bot.deliver("events_api", event_callback(event, event_id=f"EvX{n}")))[0] == 200
    notes = slack.add_file("notes.txt", b"not a bundle")
    assert (await bot.deliver("events_api", file_share_event(CHANNEL, [notes], event_id="EvTxt", ts="1.6")))[0] == 200
    own = file_share_event(CHANNEL, [slack.add_file("postmortem.tar", b"x")], event_id="EvOwn", ts="1.7")
    own["event"] |= {"user": "UBOT", "bot_id": "BBOT"}  # our own upload coming back
    assert (await bot.deliver("events_api", own))[0] == 200
    message = {
        "ts": "1.8",
        "channel": CHANNEL,
        "blocks": [
            {
                "type": "actions",
                "elements": [
                    {"action_id": "something_else", "value": "v", "text": {"type": "plain_text", "text": "x"}}
                ],
            }
        ],
    }
    assert (await bot.deliver("interactive", block_action(message, "something_else", user="U1", fake=slack)))[0] == 200
    await bot.drain()
    assert jobs(bot) == [] and worked(slack) == []


async def test_one_analysis_per_file_in_a_channel(bot: BotUnderTest, slack: FakeSlack) -> None:
    entry = slack.add_file("gpu-fell-off-bus.tar.gz", bundle_bytes())
    first = file_share_event(CHANNEL, [entry], event_id="EvA", ts="1700000000.000100")
    again = file_share_event(CHANNEL, [entry], event_id="EvB", ts="1700000000.000100")  # same file, another event
    for body, retry in ((first, 0), (first, 2), (again, 0)):
        assert (await bot.deliver("events_api", body, retry=retry))[0] == 200
    await slack.wait_for(lambda: slack.calls_to("files.completeUploadExternal"))
    await bot.drain()
    assert len(jobs(bot)) == 1
    assert len(slack.calls_to("files.completeUploadExternal")) == 1
    assert len(slack.downloads) == 1


async def test_rate_limited_post_is_retried(bot: BotUnderTest, slack: FakeSlack) -> None:
    slack.fail_next("chat.postMessage", status=429, retry_after=0)
    entry = slack.add_file("gpu-fell-off-bus.tar.gz", bundle_bytes())
    await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="Ev429", ts="1700000000.000100"))
    await slack.wait_for(lambda: any(m["text"].startswith("Dry-run runbook") for m in slack.messages.values()))
    await bot.drain()
    posts = slack.calls_to("chat.postMessage")
    assert posts[0].params["text"] == posts[1].params["text"]  # the rate-limited status message, sent again
    assert posts[1].params["text"].startswith("⏳ Analysing `gpu-fell-off-bus.tar.gz`")
    assert len(posts) == len(slack.messages) + 1
    assert [j.state for j in jobs(bot)] == ["done"]


async def test_a_broken_bundle_gets_a_short_reason(bot: BotUnderTest, slack: FakeSlack) -> None:
    entry = slack.add_file("broken.tar.gz", b"\x1f\x8b\x08\x00garbage, not a gzip stream at all" * 10)
    await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="EvBad", ts="1700000000.000200"))
    await slack.wait_for(lambda: [j for j in jobs(bot) if j.state == "failed"])
    await bot.drain()
    [job] = jobs(bot)
    texts = [m["text"] for m in slack.messages.values()]
    reply = texts[-1]
    assert reply.startswith("❌ Could not analyse `broken.tar.gz`: the archive is truncated or malformed")
    assert reply.endswith(
        "Check that the bundle holds the job's logs (rank, kernel and scheduler logs), then upload it again."
    )
    shown = [b["text"]["text"] for m in slack.messages.values() for b in m["blocks"] if b["type"] == "section"]
    assert all(job.id not in t for t in [*texts, *shown])  # the internal queue id is shown nowhere
    assert len(texts) == 1  # one message: the status message became the failure
    assert all("Traceback" not in t for t in texts)
    assert slack.calls_to("files.completeUploadExternal") == []


async def test_a_slack_failure_names_the_incident(bot: BotUnderTest, slack: FakeSlack) -> None:
    slack.fail_next("files.completeUploadExternal", error="not_in_channel")
    entry = slack.add_file("gpu-fell-off-bus.tar.gz", bundle_bytes())
    await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="EvNic", ts="1700000000.000300"))
    await slack.wait_for(lambda: [j for j in jobs(bot) if j.state == "failed"])
    await bot.drain()
    [job] = jobs(bot)
    assert job.incident_id is not None
    status = slack.messages[str(job.status_ts)]
    assert status["text"] == (
        f"❌ Could not analyse `gpu-fell-off-bus.tar.gz`: Slack refused a request (not_in_channel). "
        f"Incident `{job.incident_id}`. Click *Re-run* to try again."
    )
    assert json.dumps(status["blocks"]).count("Traceback") == 0
