"""What people see: the one-line root cause in the channel, the requester and the approvers mentioned
in new messages, decisions posted (not only edited) in every thread that shows the runbook, times as
<!date^…>, catalogue titles, and a status line that tells the truth about the queue and the size."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

from fake_slack import (
    INCIDENTS,
    BotUnderTest,
    FakeSlack,
    block_action,
    bot_settings,
    bundle_bytes,
    event_callback,
    file_share_event,
)

from crashcart import get_runbook

CHANNEL = "C0INCIDENT"
GROUP = "SAPPROVERS"
DATE = re.compile(r"<!date\^\d+\^\{date_short_pretty\} at \{time\}\|\d{4}-\d\d-\d\d \d\d:\d\d UTC>")


def runbook_in(slack: FakeSlack, ts: str) -> dict[str, Any] | None:
    return next((m for m in slack.thread(CHANNEL, ts) if m["text"].startswith("Dry-run runbook")), None)


def has_buttons(message: dict[str, Any]) -> bool:
    return any(b["type"] == "actions" for b in message["blocks"])


async def test_one_incident_in_two_threads(slack: FakeSlack, tmp_path: Path) -> None:
    slack.usergroups[GROUP] = ["UAPPROVER"]
    settings = bot_settings(tmp_path, slack, approvers="", approver_group=GROUP, bot_max_jobs=1)
    first = slack.add_file("gpu-fell-off-bus.tar.gz", bundle_bytes())
    second = slack.add_file("same-bundle-again.tar.gz", bundle_bytes())  # another file, the same bytes
    slack.holds[first["id"]] = asyncio.Event()
    async with BotUnderTest(slack, settings, "http") as bot:
        await bot.deliver("events_api", file_share_event(CHANNEL, [first], event_id="EvV1", ts="1.000100"))
        await slack.wait_for(lambda: slack.downloads)  # the only slot is busy now
        event = file_share_event(CHANNEL, [second], event_id="EvV2", ts="2.000100", user="UOTHERUP")
        await bot.deliver("events_api", event)
        waiting = await slack.wait_for(lambda: slack.thread(CHANNEL, "2.000100"))
        posts = [c.params["text"] for c in slack.calls_to("chat.postMessage")]
        assert posts[0].startswith("⏳ Analysing `gpu-fell-off-bus.tar.gz` (") and "waiting" not in posts[0]
        assert waiting[0]["text"].endswith("… waiting for a free worker (1 ahead).")
        slack.holds[first["id"]].set()
        one = await slack.wait_for(lambda: runbook_in(slack, "1.000100"))
        two = await slack.wait_for(lambda: runbook_in(slack, "2.000100"))
        await bot.drain()

        for ts, uploader in (("1.000100", "UUPLOADER"), ("2.000100", "UOTHERUP")):
            thread = slack.thread(CHANNEL, ts)
            status = thread[0]
            # the status message is in the channel too, and ends as the one-line root cause, no stage names
            assert status["broadcast"] and status["thread_ts"] == ts
            assert status["text"].startswith("✅ *GPU fell off the PCIe bus* on node `h100-b06-40`")
            assert "confidence high (95%)" in status["text"]
            assert [b["type"] for b in status["blocks"]] == ["section", "context"]  # "Requested by", no ✓ stages
            assert status["blocks"][1]["elements"][0]["text"] == f"Requested by <@{uploader}>"
            # the diagnosis lands as a new message mentioning the uploader; titles, not class ids
            diagnosis = next(m for m in thread if "Root cause:" in m["text"])
            assert diagnosis["text"].startswith(f"<@{uploader}> Root cause: GPU fell off the PCIe bus")
            text = json.dumps(diagnosis["blocks"], ensure_ascii=False)
            assert "NCCL collective timed out (watchdog)" in text and "`nccl_watchdog_timeout`" not in text
            assert DATE.search(text)  # the root cause's time, in each reader's zone
        # both threads show the same incident's runbook, waiting for the approver group (mentioned)
        for runbook in (one, two):
            assert runbook["text"].endswith(f"awaiting approval by <!subteam^{GROUP}>")
            assert f"Awaiting approval by <!subteam^{GROUP}>." in json.dumps(runbook["blocks"])
        incident = one["blocks"][1]["elements"][0]["text"].split("`")[1]
        assert incident in json.dumps(two["blocks"])
        stale = copy.deepcopy(two)

        # approved in the first thread: both messages lose their buttons, both threads get a new post
        await bot.deliver("interactive", block_action(one, "runbook_approve", user="UAPPROVER", fake=slack))
        await slack.wait_for(lambda: not has_buttons(one) and not has_buttons(two))
        for runbook in (one, two):
            assert "approved by <@UAPPROVER>" in runbook["text"]
            [state] = [b for b in runbook["blocks"] if b["type"] == "context" and "Approved" in json.dumps(b)]
            assert DATE.search(state["elements"][0]["text"])
        for ts in ("1.000100", "2.000100"):
            [posted] = await slack.wait_for(
                lambda ts=ts: [m for m in slack.thread(CHANNEL, ts) if "approved the runbook" in m["text"]]
            )
            assert posted["text"].startswith(f"✅ <@UAPPROVER> approved the runbook of incident `{incident}` <!date^")

        # a click on a copy that still had buttons: who decided, as a mention, and when
        await bot.deliver("interactive", block_action(stale, "runbook_approve", user="UAPPROVER", fake=slack))
        [late] = await slack.wait_for(lambda: slack.calls_to("chat.postEphemeral"))
        assert re.fullmatch(
            r"This runbook was already approved by <@UAPPROVER> <!date\^[^>]+>\. Nothing was changed\.",
            late.params["text"],
        )
        assert bot.runtime.store is not None
        record = get_runbook(bot.runtime.store, incident)
        assert (record.state, record.decided_by) == ("approved", "UAPPROVER")
        assert [e.event for e in record.trail] == ["proposed", "approved", "refused"]


async def test_a_job_id_run_says_its_size_and_who_asked(slack: FakeSlack, tmp_path: Path) -> None:
    jobs_dir = tmp_path / "jobs"
    shutil.copytree(INCIDENTS / "driver-too-old", jobs_dir / "77001")  # a directory, not an archive
    (jobs_dir / "77001" / "expected.json").unlink()
    async with BotUnderTest(slack, bot_settings(tmp_path, slack, jobs_dir=jobs_dir), "socket") as bot:
        event = {"type": "app_mention", "user": "UONCALL", "text": "<@UBOT> diagnose 77001", "channel": CHANNEL}
        await bot.deliver(
            "events_api", event_callback(event | {"ts": "5.000100", "event_ts": "5.0001"}, event_id="Ev5")
        )
        await slack.wait_for(lambda: runbook_in(slack, "5.000100"))
        await bot.drain()
        status = slack.thread(CHANNEL, "5.000100")[0]
        assert status["history"][0] == "⏳ Analysing job `77001` from the jobs directory…"
        running = status["history"][1]
        assert re.fullmatch(r"⏳ Analysing job `77001` \(\d+ files, [\d.]+ KB\)…", running), running
        assert "size unknown" not in json.dumps([status["history"], status["text"]])
        assert status["text"].startswith("✅ *") and "(analysed job `77001`, " in status["text"]
        assert status["broadcast"]  # the mention's thread: the verdict is in the channel too
        diagnosis = next(m for m in slack.thread(CHANNEL, "5.000100") if "Root cause:" in m["text"])
        assert diagnosis["text"].startswith("<@UONCALL> Root cause: ")
