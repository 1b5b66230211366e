"""Inputs that used to get no reply: a file shared again (linked to its earlier thread, with Re-run),
single logs and unreadable files when the bot is asked, bundles posted by allowed bots; and a
compression bomb refused quickly."""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
import time
from pathlib import Path
from typing import Any

from fake_slack import (
    INCIDENTS,
    BotUnderTest,
    FakeSlack,
    block_action,
    bot_settings,
    bundle_bytes,
    file_share_event,
)

CHANNEL = "C0INCIDENT"
LINK = re.compile(
    r"<https://fake\.slack\.com/archives/C0INCIDENT/p\d+(\?thread_ts=[\d.]+&cid=C0INCIDENT)?\|the earlier thread>"
)


def in_thread(slack: FakeSlack, ts: str, needle: str) -> list[dict[str, Any]]:
    return [m for m in slack.thread(CHANNEL, ts) if needle in m["text"]]


def jobs(bot: BotUnderTest) -> list[Any]:
    assert bot.runtime.queue is not None
    return bot.runtime.queue.jobs()


async def test_a_file_shared_again_links_the_earlier_thread_and_offers_rerun(slack: FakeSlack, tmp_path: Path) -> None:
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "http") as bot:
        entry = slack.add_file("driver-too-old.tgz", bundle_bytes("driver-too-old"))
        await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="EvA1", ts="1.000100"))
        await slack.wait_for(lambda: in_thread(slack, "1.000100", "Dry-run runbook"))
        await bot.drain()
        [first] = jobs(bot)
        # shared again in another message (delivered twice): one reply, linking the first thread
        again = file_share_event(CHANNEL, [entry], event_id="EvA2", ts="2.000100")
        await bot.deliver("events_api", again)
        await bot.deliver("events_api", again, retry=1)
        [reply] = await slack.wait_for(lambda: in_thread(slack, "2.000100", "was analysed before"))
        assert reply["text"].startswith(
            f"`driver-too-old.tgz` was analysed before: <https://fake.slack.com/archives/{CHANNEL}/p"
        )
        assert LINK.search(reply["text"]) and f"(incident `{first.incident_id}`: " in reply["text"]
        assert len(slack.thread(CHANNEL, "2.000100")) == 1 and len(jobs(bot)) == 1
        # Re-run answers in the new thread; the button is replaced by who asked
        clicks = [block_action(reply, "job_rerun", user="UONCALL", fake=slack) for _ in range(2)]  # a double click
        for click in clicks:
            await bot.deliver("interactive", click)
        await slack.wait_for(lambda: in_thread(slack, "2.000100", "Dry-run runbook"))
        await bot.drain()
        assert len(jobs(bot)) == 2 and jobs(bot)[1].user == "UONCALL"
        assert not any(b["type"] == "actions" for b in reply["blocks"])
        assert "🔁 Re-run asked for by <@UONCALL>." in json.dumps(reply["blocks"], ensure_ascii=False)
        assert in_thread(slack, "2.000100", "<@UONCALL> Root cause:")


async def test_a_failed_file_shared_again_offers_rerun(slack: FakeSlack, tmp_path: Path) -> None:
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "socket") as bot:
        broken = slack.add_file("broken.tar.gz", b"\x1f\x8b\x08\x00 garbage" * 30)
        await bot.deliver("events_api", file_share_event(CHANNEL, [broken], event_id="EvB1", ts="3.000100"))
        [failed] = await slack.wait_for(lambda: in_thread(slack, "3.000100", "❌"))
        await bot.drain()
        assert len(slack.thread(CHANNEL, "3.000100")) == 1  # one message: the status became the failure
        assert "job_rerun" in json.dumps(failed["blocks"])
        await bot.deliver("events_api", file_share_event(CHANNEL, [broken], event_id="EvB2", ts="4.000100"))
        [reply] = await slack.wait_for(lambda: in_thread(slack, "4.000100", "analysed before"))
        assert re.fullmatch(r"`broken.tar.gz` was analysed before and the analysis failed: <[^>]+>\.", reply["text"])
        await bot.deliver("interactive", block_action(reply, "job_rerun", user="UONCALL", fake=slack))
        await slack.wait_for(lambda: in_thread(slack, "4.000100", "❌ Could not analyse `broken.tar.gz`"))
        await bot.drain()
        assert [j.state for j in jobs(bot)] == ["failed", "failed"]


async def test_single_logs_and_unreadable_files(slack: FakeSlack, tmp_path: Path) -> None:
    log_bytes = (INCIDENTS / "driver-too-old" / "slurm-8845845.out").read_bytes()
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "http") as bot:
        # not asked: a single log and an unreadable file stay quiet (people share logs to talk about them)
        quiet = [slack.add_file("slurm-8845845.out", log_bytes), slack.add_file("b.tar.zst", b"(\xb5/\xfd")]
        await bot.deliver("events_api", file_share_event(CHANNEL, quiet, event_id="EvL1", ts="5.000100"))
        # asked: the log is analysed (gzipped too), the .tar.zst gets what is supported
        asked = [
            slack.add_file("slurm-8845845.out.gz", gzip.compress(log_bytes)),
            slack.add_file("bundle.tar.zst", b"(\xb5/\xfd"),
        ]
        event = file_share_event(CHANNEL, asked, event_id="EvL2", ts="6.000100", text="<@UBOT> what killed this?")
        await bot.deliver("events_api", event)
        await slack.wait_for(lambda: in_thread(slack, "6.000100", "Dry-run runbook"))
        await bot.drain()
        assert slack.thread(CHANNEL, "5.000100") == [] and len(jobs(bot)) == 1
        [cannot] = in_thread(slack, "6.000100", "I cannot read")
        assert cannot["text"].startswith("I cannot read `bundle.tar.zst`. Upload a bundle (`.tar.gz`, `.tgz`")
        assert in_thread(slack, "6.000100", "<@UUPLOADER> Root cause:")
        assert in_thread(slack, "6.000100", "✅ *")[0]["text"].endswith(
            "in " + in_thread(slack, "6.000100", "✅ *")[0]["text"].split(" in ")[-1]
        )


async def test_bundles_posted_by_allowed_bots(slack: FakeSlack, tmp_path: Path) -> None:
    settings = bot_settings(tmp_path, slack, bot_allowed_bots="B0SLURM")
    async with BotUnderTest(slack, settings, "http") as bot:
        for n, bot_id in enumerate(["B0OTHER", "B0SLURM"]):
            entry = slack.add_file(f"epilog-{n}.tgz", bundle_bytes("driver-too-old"))
            event = file_share_event(CHANNEL, [entry], event_id=f"EvBot{n}", ts=f"{7 + n}.000100", user="UEPILOG")
            event["event"] |= {"bot_id": bot_id}
            await bot.deliver("events_api", event)
        await slack.wait_for(lambda: in_thread(slack, "8.000100", "Dry-run runbook"))
        await bot.drain()
        assert slack.thread(CHANNEL, "7.000100") == []  # a bot not listed: ignored
        assert [j.source for j in jobs(bot)] == [slack.calls_to("files.info")[0].params["file"]]
        assert slack.calls_to("users.info") == []  # an allowed bot is not a person to look up


def bomb(expanded: int) -> bytes:
    """A .tar.gz whose one member is ``expanded`` zero bytes (about 1,000x smaller compressed)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        info = tarfile.TarInfo("bomb/rank-0.log")
        info.size = expanded
        tf.addfile(info, io.BytesIO(bytes(expanded)))
    return gzip.compress(raw.getvalue(), compresslevel=9)


async def test_a_compression_bomb_is_refused_quickly(slack: FakeSlack, tmp_path: Path) -> None:
    data = bomb(256 * 1024**2)
    assert len(data) < 300 * 1024
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "http") as bot:
        entry = slack.add_file("innocent.tar.gz", data)
        started = time.perf_counter()
        await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="EvBomb", ts="9.000100"))
        [reply] = await slack.wait_for(lambda: in_thread(slack, "9.000100", "❌"))
        seconds = time.perf_counter() - started
        await bot.drain()
    assert "expands more than 1000x its compressed size" in reply["text"]
    assert seconds < 20, seconds  # measured: see the report; the cap stops extraction after 64 MiB
    print(f"compression bomb refused in {seconds:.2f} s")
