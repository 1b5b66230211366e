"""End to end, through HTTP (signed requests to the bot's port) and through Socket Mode (a websocket):
upload -> status message -> thread with diagnosis, files and runbook buttons -> a non-approver's
click refused -> an approver's click updates the message and the audit trail."""

from __future__ import annotations

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

from crashcart import Store, get_runbook

CHANNEL = "C0INCIDENT"
UPLOAD_TS = "1700000000.000100"


def runbook_of(slack: FakeSlack, thread_ts: str) -> dict[str, Any] | None:
    return next((m for m in slack.thread(CHANNEL, thread_ts) if m["text"].startswith("Dry-run runbook")), None)


def has_buttons(message: dict[str, Any]) -> bool:
    return any(b["type"] == "actions" for b in message["blocks"])


def state_of(bot: BotUnderTest, incident: str) -> str:
    assert bot.runtime.store is not None
    return get_runbook(bot.runtime.store, incident).state


async def upload_and_wait(
    bot: BotUnderTest, slack: FakeSlack, name: str, data: bytes, *, event_id: str, ts: str
) -> dict[str, Any]:
    entry = slack.add_file(name, data)
    status, _ = await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id=event_id, ts=ts))
    assert status == 200
    return await slack.wait_for(lambda: runbook_of(slack, ts))


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_upload_to_approval(slack: FakeSlack, tmp_path: Path, mode: str) -> None:
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), mode) as bot:
        entry = slack.add_file("gpu-fell-off-bus.tar.gz", bundle_bytes())
        body = file_share_event(CHANNEL, [entry], event_id="Ev0001", ts=UPLOAD_TS)
        status, _ = await bot.deliver("events_api", body)
        assert status == 200
        # the same event again, as Slack's retry: acknowledged, no second analysis
        status, _ = await bot.deliver("events_api", body, retry=1)
        assert status == 200

        runbook = await slack.wait_for(lambda: runbook_of(slack, UPLOAD_TS))
        await bot.drain()
        thread = slack.thread(CHANNEL, UPLOAD_TS)

        # the status message came first, in the thread, and was updated in place to the result
        status_msg = thread[0]
        assert status_msg["thread_ts"] == UPLOAD_TS
        assert status_msg["updates"] >= 2
        # ... to the one-line root cause, which is also in the channel (a broadcast reply), without stage names
        assert status_msg["text"].startswith("✅ *GPU fell off the PCIe bus* on node `h100-b06-40` · rank 15")
        assert (
            "incident `cc-" in status_msg["text"]
            and "(analysed `gpu-fell-off-bus.tar.gz`, 45 files" in status_msg["text"]
        )
        assert status_msg["broadcast"] and "✓" not in json.dumps(status_msg["blocks"], ensure_ascii=False)
        first_post = slack.calls_to("chat.postMessage")[0].params
        assert first_post["text"].startswith("⏳ Analysing `gpu-fell-off-bus.tar.gz` (")
        assert "waiting for a free worker" not in first_post["text"]  # a slot was free
        size = f"{len(bundle_bytes()) / 1024:.1f} KB"
        assert f"⏳ Analysing `gpu-fell-off-bus.tar.gz` (45 files, {size})…" in status_msg["history"]

        # files.info, then the private download with the bot token
        assert slack.calls_to("files.info")[-1].params["file"] == entry["id"]
        assert slack.downloads == [{"file": entry["id"], "authorization": f"Bearer {slack.bot_token}"}]

        # the diagnosis: root cause, culprit, confidence, verified citation with its quoted text, symptoms
        # the diagnosis lands as a new message that mentions the uploader
        diagnosis = next(m for m in thread if "Root cause:" in m["text"])
        assert diagnosis["text"].startswith("<@UUPLOADER> Root cause: GPU fell off the PCIe bus")
        text = json.dumps(diagnosis["blocks"], ensure_ascii=False)
        assert "Root cause: GPU fell off the PCIe bus" in text
        assert "h100-b06-40" in text and "rank 15" in text and "high (95%)" in text
        assert "✅ verified `gpu-fell-off-bus/nodes/h100-b06-40/kern.log:26`" in text
        assert "GPU has fallen off the bus." in text
        assert "*168×* NCCL collective timed out (watchdog)" in text

        # postmortem and timeline in one upload, in the thread
        [complete] = slack.calls_to("files.completeUploadExternal")
        assert complete.params["channel_id"] == CHANNEL and complete.params["thread_ts"] == UPLOAD_TS
        titles = [f["title"] for f in json.loads(complete.params["files"])]
        assert titles == ["Postmortem draft", "Timeline"]
        uploaded = list(slack.uploads.values())
        assert any(d.startswith(b"\x89PNG") for d in uploaded)
        assert any(b"gpu-fell-off-bus/nodes/h100-b06-40/kern.log:26" in d for d in uploaded)

        # one analysis only, despite the retry
        assert sum(1 for m in thread if "Root cause:" in m["text"]) == 1
        assert len(slack.calls_to("files.completeUploadExternal")) == 1

        # the runbook, with Approve (behind a confirm dialog) and Reject
        assert has_buttons(runbook)
        buttons = {e["action_id"]: e for b in runbook["blocks"] if b["type"] == "actions" for e in b["elements"]}
        assert set(buttons) == {"runbook_approve", "runbook_reject"}
        assert "confirm" in buttons["runbook_approve"]
        incident = buttons["runbook_approve"]["value"].split(":")[0]
        assert state_of(bot, incident) == "proposed"

        # a non-approver's click: an ephemeral refusal, nothing changes
        await bot.deliver("interactive", block_action(runbook, "runbook_approve", user="UINTRUDER", fake=slack))
        refusal = await slack.wait_for(lambda: slack.calls_to("chat.postEphemeral"))
        assert refusal[0].params["user"] == "UINTRUDER"
        assert "Only runbook approvers" in refusal[0].params["text"]
        assert state_of(bot, incident) == "proposed"
        assert runbook["updates"] == 0 and has_buttons(runbook)

        # an approver's click: the message shows who approved, the audit trail has it
        await bot.deliver("interactive", block_action(runbook, "runbook_approve", user="UAPPROVER", fake=slack))
        await slack.wait_for(lambda: runbook["updates"] >= 1)
        assert "approved by <@UAPPROVER>" in runbook["text"]
        assert not has_buttons(runbook)
        assert any("Approved by <@UAPPROVER> <!date^" in json.dumps(b, ensure_ascii=False) for b in runbook["blocks"])
        # ... and says so in the thread, in a new message
        decided = await slack.wait_for(
            lambda: [m for m in slack.thread(CHANNEL, UPLOAD_TS) if "approved the runbook" in m["text"]]
        )
        assert decided[0]["text"].startswith("✅ <@UAPPROVER> approved the runbook of incident")
        assert bot.runtime.store is not None
        record = get_runbook(bot.runtime.store, incident)
        assert (record.state, record.decided_by) == ("approved", "UAPPROVER")
        # the non-approver's click is in the trail too, as refused
        assert [e.event for e in record.trail] == ["proposed", "refused", "approved"]
        assert record.trail[1].user == "UINTRUDER"

    # the audit trail is in the database for the CLI too
    with Store(bot.runtime.settings.store) as store:
        assert get_runbook(store, incident).state == "approved"


async def test_reject_asks_for_a_reason(slack: FakeSlack, tmp_path: Path) -> None:
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "http") as bot:
        data = bundle_bytes("driver-too-old")
        runbook = await upload_and_wait(
            bot, slack, "driver-too-old.tgz", data, event_id="Ev0100", ts="1700000001.000100"
        )
        incident = button_value(runbook).split(":")[0]

        # a non-approver gets no modal
        await bot.deliver("interactive", block_action(runbook, "runbook_reject", user="UINTRUDER", fake=slack))
        await slack.wait_for(lambda: slack.calls_to("chat.postEphemeral"))
        assert slack.calls_to("views.open") == []

        await bot.deliver("interactive", block_action(runbook, "runbook_reject", user="UAPPROVER", fake=slack))
        [opened] = await slack.wait_for(lambda: slack.calls_to("views.open"))
        view = opened.params["view"]
        assert view["callback_id"] == "runbook_reject_modal"

        status, body = await bot.deliver("interactive", view_submission(view, "   ", user="UAPPROVER"))
        assert status == 200 and json.loads(body)["response_action"] == "errors"
        assert state_of(bot, incident) == "proposed"

        status, _ = await bot.deliver(
            "interactive", view_submission(view, "drain needs a maintenance window", user="UAPPROVER")
        )
        assert status == 200
        await slack.wait_for(lambda: runbook["updates"] >= 1)
        assert "rejected by <@UAPPROVER>" in runbook["text"]
        assert "maintenance window" in json.dumps(runbook["blocks"])
        assert bot.runtime.store is not None
        record = get_runbook(bot.runtime.store, incident)
        assert (record.state, record.reason) == ("rejected", "drain needs a maintenance window")

        # a second decision is refused and reported to the clicker only
        before = len(slack.calls_to("chat.postEphemeral"))
        await bot.deliver(
            "interactive",
            block_action(
                runbook
                | {
                    "blocks": [
                        *runbook["blocks"],
                        {
                            "type": "actions",
                            "elements": [
                                {
                                    "action_id": "runbook_approve",
                                    "value": f"{incident}:{record.plan_hash}",
                                    "text": {"type": "plain_text", "text": "Approve"},
                                }
                            ],
                        },
                    ]
                },
                "runbook_approve",
                user="UAPPROVER",
                fake=slack,
            ),
        )
        late = await slack.wait_for(lambda: slack.calls_to("chat.postEphemeral")[before:])
        assert late[0].params["text"].startswith("This runbook was already rejected by <@UAPPROVER> <!date^")
        assert get_runbook(bot.runtime.store, incident).state == "rejected"
