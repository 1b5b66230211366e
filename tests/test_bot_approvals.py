"""Runbook buttons beyond the happy path: the Reject modal opens before any Slack lookup (its trigger
expires in ~3 s), a failed views.open gets a reply, and refused clicks are in the audit trail."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from fake_slack import (
    BotUnderTest,
    FakeSlack,
    block_action,
    bot_settings,
    bundle_bytes,
    button_value,
    file_share_event,
    view_submission,
)

from crashcart import get_runbook

CHANNEL = "C0INCIDENT"
GROUP = "SAPPROVERS"


async def runbook_message(bot: BotUnderTest, slack: FakeSlack, ts: str = "1700000001.000100") -> dict[str, Any]:
    entry = slack.add_file("driver-too-old.tgz", bundle_bytes("driver-too-old"))
    await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id=f"Ev{ts}", ts=ts))
    message = await slack.wait_for(
        lambda: next((m for m in slack.thread(CHANNEL, ts) if m["text"].startswith("Dry-run runbook")), None)
    )
    await bot.drain()
    return message


def incident_of(message: dict[str, Any]) -> str:
    return button_value(message).split(":")[0]


async def test_reject_opens_the_modal_before_asking_slack_about_the_group(slack: FakeSlack, tmp_path: Path) -> None:
    slack.usergroups[GROUP] = ["UMEMBER"]
    settings = bot_settings(tmp_path, slack, approvers="", approver_group=GROUP)
    async with BotUnderTest(slack, settings, "http") as bot:
        runbook = await runbook_message(bot, slack)
        as_posted, incident = copy.deepcopy(runbook), incident_of(runbook)
        slack.api_holds["usergroups.users.list"] = asyncio.Event()  # the group lookup is slow
        await bot.deliver("interactive", block_action(runbook, "runbook_reject", user="UMEMBER", fake=slack))
        [opened] = await slack.wait_for(lambda: slack.calls_to("views.open"))
        assert slack.calls_to("usergroups.users.list") == []  # the modal did not wait for it
        slack.api_holds.pop("usergroups.users.list").set()

        # the submission checks the group (and caches it)
        view = opened.params["view"]
        await bot.deliver("interactive", view_submission(view, "not during the release freeze", user="UMEMBER"))
        await slack.wait_for(lambda: runbook["updates"] >= 1)
        assert len(slack.calls_to("usergroups.users.list")) == 1
        assert bot.runtime.store is not None
        assert get_runbook(bot.runtime.store, incident).state == "rejected"

        # known from the fresh cache: a non-member is refused at once, without a modal or a lookup
        await bot.deliver("interactive", block_action(as_posted, "runbook_reject", user="UOTHER", fake=slack))
        [refusal] = await slack.wait_for(lambda: slack.calls_to("chat.postEphemeral"))
        assert refusal.params["user"] == "UOTHER" and "Only runbook approvers" in refusal.params["text"]
        assert len(slack.calls_to("views.open")) == 1 and len(slack.calls_to("usergroups.users.list")) == 1
        trail = get_runbook(bot.runtime.store, incident).trail
        assert [(e.event, e.user, e.detail) for e in trail][-1] == (
            "refused",
            "UOTHER",
            "rejection refused: UOTHER is not an approver of runbooks",
        )


async def test_a_failed_views_open_gets_a_reply(slack: FakeSlack, tmp_path: Path) -> None:
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "socket") as bot:
        runbook = await runbook_message(bot, slack)
        slack.fail_next("views.open", error="expired_trigger_id")
        await bot.deliver("interactive", block_action(runbook, "runbook_reject", user="UAPPROVER", fake=slack))
        [reply] = await slack.wait_for(lambda: slack.calls_to("chat.postEphemeral"))
        assert reply.params["user"] == "UAPPROVER"
        assert reply.params["text"] == (
            "Slack did not open the rejection form (expired_trigger_id). Click Reject again. Nothing was changed."
        )
        assert bot.runtime.store is not None
        assert get_runbook(bot.runtime.store, incident_of(runbook)).state == "proposed"
        assert json.dumps(runbook["blocks"]).count("runbook_reject") == 1  # the buttons are still there


@pytest.mark.parametrize(
    ("settings_kw", "verdict"),
    [
        ({}, "UINTRUDER is not an approver of runbooks"),
        (
            {"approvers": "", "approver_group": "SGONE"},
            "membership of UINTRUDER in the approver group could not be checked",
        ),
        ({"approvers": ""}, "no runbook approvers are configured"),
    ],
    ids=["not-an-approver", "group-unknown", "unconfigured"],
)
async def test_refused_clicks_are_in_the_audit_trail(
    slack: FakeSlack, tmp_path: Path, settings_kw: dict[str, str], verdict: str
) -> None:
    async with BotUnderTest(slack, bot_settings(tmp_path, slack, **settings_kw), "http") as bot:
        runbook = await runbook_message(bot, slack)
        incident = incident_of(runbook)
        await bot.deliver("interactive", block_action(runbook, "runbook_approve", user="UINTRUDER", fake=slack))
        [refusal] = await slack.wait_for(lambda: slack.calls_to("chat.postEphemeral"))
        assert refusal.params["user"] == "UINTRUDER" and "Nothing was changed." in refusal.params["text"]
        assert bot.runtime.store is not None
        record = get_runbook(bot.runtime.store, incident)
        assert record.state == "proposed" and record.decided_by is None
        [entry] = [e for e in record.trail if e.event == "refused"]
        assert (entry.user, entry.detail) == ("UINTRUDER", f"approval refused: {verdict}")
        assert runbook["updates"] == 0
