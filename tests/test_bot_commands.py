"""/crashcart diagnose|status|lookup|list|help and @crashcart diagnose JOB, in Socket Mode
(the envelope's ack carries the immediate answer) and over HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_slack import (
    BotUnderTest,
    FakeSlack,
    bot_settings,
    bundle_bytes,
    event_callback,
    file_share_event,
    slash_command,
)

CHANNEL = "C0INCIDENT"
JOB = "1329667"


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    root = tmp_path / "jobs"
    root.mkdir()
    (root / f"{JOB}.tar.gz").write_bytes(bundle_bytes())
    return root


async def command(bot: BotUnderTest, slack: FakeSlack, text: str, *, channel: str = CHANNEL) -> dict[str, Any]:
    """Run a slash command; return what the user sees (the ack's text, else the response_url post)."""
    before = len(slack.responses)
    status, body = await bot.deliver("slash_commands", slash_command(text, fake=slack, channel=channel))
    assert status == 200
    if bot.mode == "socket":
        acked = json.loads(body)
    else:
        acked = {"text": body} if body else {}
    if acked.get("text"):
        return acked
    return (await slack.wait_for(lambda: slack.responses[before:]))[0]


def mention(text: str, ts: str, event_id: str) -> dict[str, Any]:
    event = {"type": "app_mention", "user": "UONCALL", "text": text, "ts": ts, "channel": CHANNEL, "event_ts": ts}
    return event_callback(event, event_id=event_id)


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_slash_commands(slack: FakeSlack, tmp_path: Path, jobs_dir: Path, mode: str) -> None:
    async with BotUnderTest(slack, bot_settings(tmp_path, slack, jobs_dir=jobs_dir), mode) as bot:
        assert "finds and proves why a GPU training job died" in (await command(bot, slack, "help"))["text"]
        assert (await command(bot, slack, "frobnicate"))["text"].startswith("Usage: `/crashcart")
        assert (await command(bot, slack, "list"))["text"] == "No incidents diagnosed in this channel yet."
        missing = await command(bot, slack, "diagnose 999")
        assert missing["text"].startswith("No bundle for job `999`")
        assert "is not a job id" in (await command(bot, slack, "diagnose ../etc"))["text"]

        queued = await command(bot, slack, f"diagnose {JOB}")
        assert queued["text"] == f"Queued the analysis of job `{JOB}`; I will answer in a thread here."
        assert queued["response_type"] == "ephemeral"
        # the status message starts the thread; the diagnosis and the runbook follow in it
        parent = await slack.wait_for(
            lambda: next(
                (m for m in slack.messages.values() if m["text"].startswith("✅ *GPU fell off the PCIe bus*")), None
            )
        )
        assert parent["thread_ts"] is None and "(analysed job `1329667`, 45 files, " in parent["text"]
        # the top message says who asked (and the job-id run knows its size)
        first = slack.calls_to("chat.postMessage")[0].params
        assert first["text"] == "⏳ Analysing job `1329667` from the jobs directory…"
        assert "Requested by <@UONCALL>" in json.dumps(first["blocks"])
        assert "size unknown" not in json.dumps(parent["history"])
        replies = [m["text"] for m in slack.messages.values() if m["thread_ts"] == parent["ts"]]
        assert replies[0].startswith("<@UONCALL> Root cause: GPU fell off the PCIe bus")
        assert replies[-1].startswith("Dry-run runbook")
        await bot.drain()
        assert bot.runtime.store is not None
        [incident] = bot.runtime.store.list()
        assert incident.job_id == JOB

        looked_up = await command(bot, slack, f"lookup {JOB}")
        assert f"`{incident.id}`" in looked_up["text"] and "*GPU fell off the PCIe bus*" in looked_up["text"]
        assert "<!date^" in looked_up["text"]
        assert f"`{incident.id}`" in (await command(bot, slack, "list"))["text"]
        assert "No diagnoses of job `42`" in (await command(bot, slack, "lookup 42"))["text"]
        status = await command(bot, slack, f"status {incident.id[:8]}")
        assert status["text"].startswith("Root cause: GPU fell off the PCIe bus")
        assert "Approve" not in json.dumps(status["blocks"])  # the state only, no buttons in an ephemeral
        unknown = await command(bot, slack, "status cc-000000000000")
        assert unknown["text"] == "No incident `cc-000000000000` in this channel."

        # another channel sees none of this channel's incidents
        elsewhere = "C0ELSEWHERE"
        listed = await command(bot, slack, "list", channel=elsewhere)
        assert listed["text"] == "No incidents diagnosed in this channel yet."
        status_elsewhere = await command(bot, slack, f"status {incident.id}", channel=elsewhere)
        assert status_elsewhere["text"] == f"No incident `{incident.id}` in this channel."
        lookup_elsewhere = await command(bot, slack, f"lookup {JOB}", channel=elsewhere)
        assert lookup_elsewhere["text"] == f"No diagnoses of job `{JOB}` in this channel yet."


async def test_mentions(slack: FakeSlack, tmp_path: Path, jobs_dir: Path) -> None:
    async with BotUnderTest(slack, bot_settings(tmp_path, slack, jobs_dir=jobs_dir), "socket") as bot:
        await bot.deliver("events_api", mention("<@UBOT> hello there", "5.000100", "EvM1"))
        await bot.deliver("events_api", mention("<@UBOT> hello there", "5.000100", "EvM1"), retry=1)
        await bot.deliver("events_api", mention("<@UBOT> diagnose nope", "6.000100", "EvM2"))
        await bot.deliver("events_api", mention(f"<@UBOT> diagnose {JOB}", "7.000100", "EvM3"))
        await slack.wait_for(
            lambda: any(m["text"].startswith("Dry-run runbook") for m in slack.thread(CHANNEL, "7.000100"))
        )
        await bot.drain()
        usage = slack.thread(CHANNEL, "5.000100")
        assert [m["text"] for m in usage] == [
            "Mention me with `diagnose ‹job-id›`, or upload a bundle here. `/crashcart help` has the rest."
        ]
        assert slack.thread(CHANNEL, "6.000100")[0]["text"].startswith("No bundle for job `nope`")
        texts = [m["text"] for m in slack.thread(CHANNEL, "7.000100")]
        assert texts[0].startswith("✅ *GPU fell off the PCIe bus*")
        assert texts[1].startswith("<@UONCALL> Root cause: GPU fell off the PCIe bus")
        # every envelope pushed was acknowledged, once
        assert len(slack.sent_envelopes) == 4
        assert sorted(a["envelope_id"] for a in slack.ws_acks) == sorted(slack.sent_envelopes)


async def test_job_lookups_need_a_jobs_dir(slack: FakeSlack, tmp_path: Path) -> None:
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "http") as bot:
        assert (await command(bot, slack, f"diagnose {JOB}"))["text"].startswith("Job-id lookups are not set up")


@pytest.mark.parametrize("error", ["not_in_channel", "channel_not_found"])
async def test_diagnose_where_the_bot_cannot_post(slack: FakeSlack, tmp_path: Path, jobs_dir: Path, error: str) -> None:
    # not invited to the channel, or a DM between two people: the user is told, instead of "Queued…" and silence
    async with BotUnderTest(slack, bot_settings(tmp_path, slack, jobs_dir=jobs_dir), "http") as bot:
        slack.fail_next("chat.postMessage", error=error)
        answer = await command(bot, slack, f"diagnose {JOB}")
        assert answer["text"].startswith("I cannot post in this conversation: invite @crashcart to this channel first")
        assert answer["response_type"] == "ephemeral"
        await bot.drain()
        assert bot.runtime.queue is not None
        [job] = bot.runtime.queue.jobs()
        assert job.state == "failed" and job.status_ts is None
        assert len(slack.calls_to("chat.postMessage")) == 1 and slack.messages == {}
        assert len(slack.responses) == 1  # no "Queued…" before it


async def test_an_upload_that_mentions_the_bot_is_analysed_once(slack: FakeSlack, tmp_path: Path) -> None:
    # one message, two events: app_mention (with the files) and message/file_share
    entry = slack.add_file("gpu-fell-off-bus.tar.gz", bundle_bytes())
    ts = "8.000100"
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "socket") as bot:
        event = {"type": "app_mention", "user": "UONCALL", "text": "<@UBOT> please look", "ts": ts}
        event |= {"channel": CHANNEL, "event_ts": ts, "files": [entry]}
        await bot.deliver("events_api", event_callback(event, event_id="EvMF1"))
        await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="EvMF2", ts=ts))
        await slack.wait_for(lambda: any(m["text"].startswith("Dry-run runbook") for m in slack.thread(CHANNEL, ts)))
        await bot.drain()
        texts = [m["text"] for m in slack.thread(CHANNEL, ts)]
        assert not any(t.startswith("Mention me with") for t in texts)
        assert sum("Root cause:" in t for t in texts) == 1
        assert bot.runtime.queue is not None and len(bot.runtime.queue.jobs()) == 1
