"""Hostile content through every message the bot can post: file names, log lines, paths, job ids,
command arguments and rejection reasons carry ``<!channel>``, ``<@U…>``, ``<#C…>``, ``<http…|…>`` and
mrkdwn markers; afterwards no live token is found in any text or block the bot sent, except the
mentions, dates, channel links and permalinks the bot wrote itself."""

from __future__ import annotations

import io
import json
import re
import shutil
import tarfile
from pathlib import Path
from typing import Any

from fake_slack import (
    INCIDENTS,
    BotUnderTest,
    FakeSlack,
    block_action,
    bot_settings,
    event_callback,
    file_share_event,
    home_opened,
    message_shortcut,
    slash_command,
    view_submission,
)

from bot.blocks import diagnosis_message, runbook_message, status_message
from bot.mrkdwn import code, escape
from crashcart import DiagnosisDocument, RunbookRecord, get_runbook

CHANNEL = "C0INCIDENT"
HOSTILE = "<!channel> <!here> <!subteam^S0EVIL> *x* _y_ ~w~ `z` <@U0VICTIM1> <#C0EVIL> <http://evil.example|click here>"
ROOT = "<!here> <@U0VICTIM2> *b* `c`"  # the archive's top directory: every cited path starts with it
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
LIVE = re.compile(r"<(?:[!@#]|[a-z][a-z0-9+.-]*:)[^>]*>")
OURS = [
    re.compile(r"<@(UUPLOADER|UONCALL|UAPPROVER)>"),
    re.compile(r"<#C0INCIDENT>"),
    re.compile(r"<!date\^\d+\^\{date_short_pretty\} at \{time\}\|\d{4}-\d\d-\d\d \d\d:\d\d UTC>"),
    re.compile(r"<https://fake\.slack\.com/archives/C0INCIDENT/p\d+(\?thread_ts=[\d.]+&cid=C0INCIDENT)?\|[a-z ]+>"),
]


def hostile_bundle(tmp_path: Path) -> bytes:
    """gpu-fell-off-bus with HOSTILE in the cited Xid line and as the job id, under a hostile root directory."""
    src = tmp_path / "hostile"
    shutil.copytree(INCIDENTS / "gpu-fell-off-bus", src)
    (src / "expected.json").unlink()
    kern = src / "nodes" / "h100-b06-40" / "kern.log"
    kern.write_text(kern.read_text().replace("name=<unknown>", f"name={HOSTILE}"))
    manifest = json.loads((src / "manifest.json").read_text())
    (src / "manifest.json").write_text(json.dumps(manifest | {"job_id": HOSTILE}))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(src, arcname=ROOT)
    return buf.getvalue()


def live_tokens_not_ours(strings: list[str]) -> list[str]:
    return [t for s in strings for t in LIVE.findall(s) if not any(p.fullmatch(t) for p in OURS)]


async def test_no_hostile_token_is_live_anywhere(slack: FakeSlack, tmp_path: Path) -> None:
    jobs_dir = tmp_path / "jobs"
    jobs_dir.mkdir()
    slack.memberships["UONCALL"] = [CHANNEL]
    settings = bot_settings(tmp_path, slack, jobs_dir=jobs_dir)
    async with BotUnderTest(slack, settings, "http") as bot:
        # an upload whose name, log lines, paths and job id are hostile: the whole thread
        entry = slack.add_file(f"{HOSTILE}.tar.gz", hostile_bundle(tmp_path))
        await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="EvH1", ts="10.000100"))
        runbook = await slack.wait_for(
            lambda: next((m for m in slack.thread(CHANNEL, "10.000100") if m["text"].startswith("Dry-run")), None)
        )
        await bot.drain()
        # the same file shared again; a broken archive; a file the bot cannot read, asked for by a mention
        again = file_share_event(CHANNEL, [entry], event_id="EvH2", ts="11.000100")
        await bot.deliver("events_api", again)
        broken = slack.add_file(f"{HOSTILE}-broken.tar.gz", b"\x1f\x8b\x08\x00 not gzip at all" * 20)
        await bot.deliver("events_api", file_share_event(CHANNEL, [broken], event_id="EvH3", ts="12.000100"))
        zst = slack.add_file(f"{HOSTILE}.tar.zst", b"(\xb5/\xfd zstd")
        asked = file_share_event(CHANNEL, [zst], event_id="EvH4", ts="13.000100", text="<@UBOT> look at this")
        await bot.deliver("events_api", asked)
        for n, words in enumerate(["diagnose <!channel>", "diagnose <@U0VICTIM1>", "hello <!here>"]):
            event = {"type": "app_mention", "user": "UONCALL", "text": f"<@UBOT> {words}", "channel": CHANNEL}
            event |= {"ts": f"{14 + n}.000100", "event_ts": f"{14 + n}.000100"}
            await bot.deliver("events_api", event_callback(event, event_id=f"EvHM{n}"))
        # slash commands with hostile arguments, and the status of the hostile incident
        assert bot.runtime.store is not None
        [incident] = bot.runtime.store.list()
        for text in ["diagnose <!channel>", "status <!here>", "lookup <@U0VICTIM1>", "frob <#C0EVIL>", "help"]:
            await bot.deliver("slash_commands", slash_command(text, fake=slack))
        for text in ["list", f"status {incident.id}", f"lookup {HOSTILE.split()[0]}"]:
            await bot.deliver("slash_commands", slash_command(text, fake=slack))
        # the shortcut on the hostile file's message, and on one without a file
        shared = {"ts": "10.000100", "text": HOSTILE, "files": [entry]}
        await bot.deliver("interactive", message_shortcut(shared, user="UONCALL", fake=slack))
        await bot.deliver("interactive", message_shortcut({"ts": "9.1", "text": HOSTILE}, user="UONCALL", fake=slack))
        # a click by someone who may not decide (an ephemeral), then a rejection with a hostile reason:
        # the runbook message and a post in the thread
        await bot.deliver("interactive", block_action(runbook, "runbook_approve", user="UONCALL", fake=slack))
        await slack.wait_for(lambda: slack.calls_to("chat.postEphemeral"))
        await bot.deliver("interactive", block_action(runbook, "runbook_reject", user="UAPPROVER", fake=slack))
        [opened] = await slack.wait_for(lambda: slack.calls_to("views.open"))
        await bot.deliver("interactive", view_submission(opened.params["view"], HOSTILE, user="UAPPROVER"))
        await slack.wait_for(
            lambda: [m for m in slack.thread(CHANNEL, "10.000100") if "rejected the runbook" in m["text"]]
        )
        # the Home tab; a Re-run of the broken upload
        await bot.deliver("events_api", home_opened("UONCALL", event_id="EvHome"))
        failed = await slack.wait_for(lambda: [m for m in slack.thread(CHANNEL, "12.000100") if "❌" in m["text"]])
        await bot.deliver("interactive", block_action(failed[0], "job_rerun", user="UONCALL", fake=slack))
        await slack.wait_for(lambda: len([m for m in slack.thread(CHANNEL, "12.000100") if "❌" in m["text"]]) >= 2)
        await slack.wait_for(lambda: "UONCALL" in slack.home and len(slack.responses) >= 8)
        await bot.drain()
        assert get_runbook(bot.runtime.store, incident.id).state == "rejected"

    sent = slack.outgoing()
    joined = "\n".join(sent)
    # the hostile strings did reach Slack: escaped, and with their markers unable to format
    assert "&lt;!channel&gt;" in joined and "&lt;@U0VICTIM1&gt;" in joined and "&lt;@U0VICTIM2&gt;" in joined
    assert "&lt;http://evil.example|click here&gt;" in joined
    outside_code = CODE.sub("", joined)  # in code, markers are shown as typed and cannot format
    for marker in ("*x*", "_y_", "~w~", "*b*"):
        assert marker not in outside_code, marker
    assert "`z`" not in joined and "`c`" not in joined  # nor can a backtick close a code span
    assert live_tokens_not_ours(sent) == []
    # every kind of message was exercised
    kinds = {c.method for c in slack.calls}
    assert {"chat.postMessage", "chat.update", "chat.postEphemeral", "views.open", "views.publish"} <= kinds
    texts = [m["text"] for m in slack.messages.values()]
    for expected in ("Root cause:", "Dry-run runbook", "analysed before", "Could not analyse", "I cannot read"):
        assert any(expected in t for t in texts), expected
    assert any("is not a job id" in t for t in texts)
    assert any("rejected the runbook" in t for t in texts)


def test_hostile_commands_culprits_and_stages_render_inert(tmp_path: Path) -> None:
    """What the shipped bundles cannot carry: hostile runbook commands, titles, culprits and stage names."""
    import asyncio

    from crashcart import Settings, Store, diagnose

    settings = Settings(_env_file=None, db=tmp_path / "db", work_dir=tmp_path / "work")  # type: ignore[call-arg]
    with Store(settings.store) as store:
        doc: DiagnosisDocument = asyncio.run(diagnose(INCIDENTS / "driver-too-old", settings, store=store)).document
        record: RunbookRecord = get_runbook(store, doc.incident_id)
    step = record.steps[0].model_copy(update={"command": f"echo {HOSTILE} > /tmp/x && ls *", "title": HOSTILE})
    hostile_record = record.model_copy(update={"steps": [step], "state": "rejected", "decided_by": "UAPPROVER"})
    hostile_record = hostile_record.model_copy(update={"reason": HOSTILE})
    culprit = doc.root_cause.culprit.model_copy(update={"node": HOSTILE, "gpu": HOSTILE})
    root = doc.root_cause.model_copy(update={"culprit": culprit, "summary": HOSTILE, "time": HOSTILE})
    hostile_doc = doc.model_copy(update={"root_cause": root, "engine": HOSTILE, "job_id": HOSTILE})
    messages = [
        runbook_message(hostile_record),
        diagnosis_message(hostile_doc, requester="UONCALL"),
        status_message(escape(HOSTILE), [HOSTILE, "scan"], HOSTILE, note=code(HOSTILE)),
    ]
    sent = [m.text for m in messages] + [json.dumps(m.blocks, ensure_ascii=False) for m in messages]
    assert live_tokens_not_ours(sent) == []
    # a command stays copyable: only its <, > and & are entities (Slack shows them as typed)
    steps = next(b for b in messages[0].blocks if b.get("block_id") == "steps")["text"]["text"]
    assert "echo &lt;!channel&gt;" in steps and "&gt; /tmp/x &amp;&amp; ls *" in steps


def _all(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
