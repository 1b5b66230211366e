"""The App Home tab (open incidents of the user's channels, runbooks awaiting their approval) and the
message shortcut "Diagnose with CrashCart" on a message with a bundle attached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fake_slack import (
    BotUnderTest,
    FakeSlack,
    block_action,
    bot_settings,
    bundle_bytes,
    file_share_event,
    home_opened,
    message_shortcut,
)

from crashcart import load_catalogue

CHANNEL = "C0INCIDENT"
ELSEWHERE = "C0ELSEWHERE"


def runbook_in(slack: FakeSlack, channel: str, ts: str) -> dict[str, Any] | None:
    return next((m for m in slack.thread(channel, ts) if m["text"].startswith("Dry-run runbook")), None)


def home_text(slack: FakeSlack, user: str) -> str:
    return json.dumps(slack.home[user]["blocks"], ensure_ascii=False)


async def open_home(bot: BotUnderTest, slack: FakeSlack, user: str, event_id: str) -> str:
    before = len(slack.calls_to("views.publish"))
    await bot.deliver("events_api", home_opened(user, event_id=event_id))
    await slack.wait_for(lambda: len(slack.calls_to("views.publish")) > before)
    assert slack.home[user]["type"] == "home"
    return home_text(slack, user)


async def test_shortcut_and_home_tab(slack: FakeSlack, tmp_path: Path) -> None:
    slack.memberships |= {"UONCALL": [CHANNEL], "UAPPROVER": [CHANNEL, ELSEWHERE], "UGUEST": [CHANNEL]}
    slack.set_user("UGUEST", is_restricted=True)
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "socket") as bot:
        # an upload the bot analyses by itself, in the incident channel
        entry = slack.add_file("driver-too-old.tgz", bundle_bytes("driver-too-old"))
        await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="EvU1", ts="1.000100"))
        here = await slack.wait_for(lambda: runbook_in(slack, CHANNEL, "1.000100"))
        # a bundle posted in another channel before the bot was there: the shortcut analyses it in its thread
        other = slack.add_file("ecc.tar.gz", bundle_bytes("ecc-uncorrectable"))
        posted = {"ts": "2.000100", "text": "from last night", "files": [other]}
        status, _ = await bot.deliver(
            "interactive", message_shortcut(posted, user="UAPPROVER", fake=slack, channel=ELSEWHERE)
        )
        assert status == 200
        await slack.wait_for(lambda: runbook_in(slack, ELSEWHERE, "2.000100"))
        await bot.drain()
        there = slack.thread(ELSEWHERE, "2.000100")
        assert there[0]["text"].startswith("✅ *") and "Requested by <@UAPPROVER>" in json.dumps(there[0]["blocks"])
        assert any(m["text"].startswith("<@UAPPROVER> Root cause:") for m in there)

        # the shortcut again on the same message: that thread, a Re-run, only to the asker
        before = len(slack.responses)
        await bot.deliver("interactive", message_shortcut(posted, user="UAPPROVER", fake=slack, channel=ELSEWHERE))
        [again] = await slack.wait_for(lambda: slack.responses[before:])
        assert again["response_type"] == "ephemeral" and "`ecc.tar.gz` was analysed before: <https://" in again["text"]
        assert "job_rerun" in json.dumps(again["blocks"])
        # on a message without a file, and on one with a file it cannot read
        nothing = {"ts": "3.000100", "text": "the job died"}
        await bot.deliver("interactive", message_shortcut(nothing, user="UONCALL", fake=slack))
        zst = {"ts": "4.000100", "files": [slack.add_file("logs.tar.zst", b"(\xb5/\xfd")]}
        await bot.deliver("interactive", message_shortcut(zst, user="UONCALL", fake=slack))
        answers = await slack.wait_for(
            lambda: slack.responses[before + 1 :] if len(slack.responses) >= before + 3 else None
        )
        assert answers[0]["text"].startswith("That message has no file attached.")
        assert answers[1]["text"].startswith("I cannot read `logs.tar.zst`.")
        assert len(bot.runtime.queue.jobs()) == 2  # type: ignore[union-attr]

        # Home: an on-call engineer sees the open incident of their channel only, and is no approver
        oncall = await open_home(bot, slack, "UONCALL", "EvH1")
        title = load_catalogue().class_title("software_version_mismatch")
        assert f"*{title}*" in oncall
        assert f"<#{CHANNEL}>" in oncall and f"<#{ELSEWHERE}>" not in oncall
        assert "|thread>" in oncall and "<!date^" in oncall
        assert "You are not a runbook approver." in oncall
        # an approver sees both channels' incidents, and both runbooks as awaiting their approval
        approver = await open_home(bot, slack, "UAPPROVER", "EvH2")
        assert f"<#{CHANNEL}>" in approver and f"<#{ELSEWHERE}>" in approver
        waiting = approver.split("Runbooks awaiting your approval")[1]
        assert waiting.count("<#C0") == 2
        # once approved, an incident is no longer open
        await bot.deliver("interactive", block_action(here, "runbook_approve", user="UAPPROVER", fake=slack))
        await slack.wait_for(lambda: here["updates"] >= 1)
        approver = await open_home(bot, slack, "UAPPROVER", "EvH3")
        assert f"<#{CHANNEL}>" not in approver and approver.count(f"<#{ELSEWHERE}>") == 2
        # a guest gets no list at all
        guest = await open_home(bot, slack, "UGUEST", "EvH4")
        assert "not guests" in guest and "<#" not in guest
        # Slack could not list someone's channels: nothing is shown rather than too much
        slack.fail_next("users.conversations", error="internal_error")
        failed = await open_home(bot, slack, "UONCALL", "EvH5")
        assert "<#" not in failed and "could not check" in failed
