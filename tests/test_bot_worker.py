"""The job queue and worker: a restart mid-job resumes it, a slow job does not hold up another,
the per-job timeout and the upload cap, and the download's token rules."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from fake_slack import BotUnderTest, FakeSlack, bot_settings, bundle_bytes, file_share_event
from slack_sdk.web.async_client import AsyncWebClient

from bot.intake import DownloadError, download, find_job_bundle, plain_http_host, token_hosts
from bot.queue import JobQueue

CHANNEL = "C0INCIDENT"


def in_thread(slack: FakeSlack, ts: str, prefix: str) -> list[dict[str, Any]]:
    return [m for m in slack.thread(CHANNEL, ts) if m["text"].startswith(prefix)]


def jobs(bot: BotUnderTest) -> list[Any]:
    assert bot.runtime.queue is not None
    return bot.runtime.queue.jobs()


async def test_restart_mid_job_resumes_it(slack: FakeSlack, tmp_path: Path) -> None:
    settings = bot_settings(tmp_path, slack)
    entry = slack.add_file("gpu-fell-off-bus.tar.gz", bundle_bytes())
    slack.holds[entry["id"]] = asyncio.Event()  # the download hangs: the bot is stopped mid-job
    ts = "1700000000.000100"
    async with BotUnderTest(slack, settings, "http") as first:
        await first.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="EvR", ts=ts))
        await slack.wait_for(lambda: slack.downloads)
        assert [j.state for j in jobs(first)] == ["running"]
        assert len(in_thread(slack, ts, "⏳ Analysing")) == 1
    slack.holds[entry["id"]].set()

    async with BotUnderTest(slack, settings, "http") as second:  # same database: the job resumes on start
        await slack.wait_for(lambda: in_thread(slack, ts, "Dry-run runbook"))
        await second.drain()
        [job] = jobs(second)
        assert (job.state, job.attempts) == ("done", 2)
    statuses = [m for m in slack.thread(CHANNEL, ts) if m["ts"] == job.status_ts]
    assert len(statuses) == 1 and "(resumed after a restart)" in statuses[0]["text"]
    assert statuses[0]["text"].startswith("✅ *GPU fell off the PCIe bus*")
    assert len([c for c in slack.calls_to("chat.postMessage") if c.params["text"].startswith("⏳")]) == 1
    assert len(in_thread(slack, ts, "<@UUPLOADER> Root cause:")) == 1
    assert len(in_thread(slack, ts, "Dry-run runbook")) == 1
    assert len(slack.calls_to("files.completeUploadExternal")) == 1


async def test_a_slow_job_does_not_block_another(slack: FakeSlack, tmp_path: Path) -> None:
    slow = slack.add_file("slow.tar.gz", bundle_bytes())
    quick = slack.add_file("quick.tgz", bundle_bytes("driver-too-old"))
    slack.holds[slow["id"]] = asyncio.Event()
    async with BotUnderTest(slack, bot_settings(tmp_path, slack, bot_max_jobs=2), "http") as bot:
        await bot.deliver("events_api", file_share_event(CHANNEL, [slow], event_id="EvS", ts="1.000100"))
        await slack.wait_for(lambda: slack.downloads)
        await bot.deliver("events_api", file_share_event(CHANNEL, [quick], event_id="EvQ", ts="2.000100"))
        await slack.wait_for(lambda: {j.source: j.state for j in jobs(bot)}.get(quick["id"]) == "done")
        assert {j.source: j.state for j in jobs(bot)} == {slow["id"]: "running", quick["id"]: "done"}
        slack.holds[slow["id"]].set()
        await slack.wait_for(lambda: in_thread(slack, "1.000100", "Dry-run runbook"))
        await bot.drain()
        assert {j.state for j in jobs(bot)} == {"done"}


async def test_a_job_over_its_time_fails_with_a_reason(slack: FakeSlack, tmp_path: Path) -> None:
    entry = slack.add_file("hangs.tar.gz", bundle_bytes())
    slack.holds[entry["id"]] = asyncio.Event()
    async with BotUnderTest(slack, bot_settings(tmp_path, slack, bot_job_timeout_s=0.5), "http") as bot:
        await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="EvT", ts="3.000100"))
        [reply] = await slack.wait_for(lambda: in_thread(slack, "3.000100", "❌"))
        await bot.drain()
        assert "the analysis took longer than this bot's limit of 0.5 s and was stopped" in reply["text"]
        assert "CRASHCART_" not in reply["text"] and "Run `crashcart diagnose BUNDLE`" in reply["text"]
        assert [j.state for j in jobs(bot)] == ["failed"]
    slack.holds[entry["id"]].set()


async def test_a_slack_call_timing_out_fails_the_job(slack: FakeSlack, tmp_path: Path) -> None:
    # slack_sdk raises a plain TimeoutError when a Web API call outlives the client's timeout;
    # the job must fail with a short Slack reason, not stay "running" without a reply
    slack.api_holds["files.info"] = asyncio.Event()  # files.info never answers
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url, timeout=0.2)
    entry = slack.add_file("slow-info.tar.gz", bundle_bytes())
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "http", client=client) as bot:
        await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="EvSlow", ts="5.000100"))
        [reply] = await slack.wait_for(lambda: in_thread(slack, "5.000100", "❌"))
        await bot.drain()
        assert "Slack refused a request (no answer in time)" in reply["text"]
        assert "Traceback" not in reply["text"] and "took longer than" not in reply["text"]
        [job] = jobs(bot)
        assert (job.state, job.error) == ("failed", "Slack refused a request (no answer in time)")


async def test_an_upload_over_the_cap_is_refused_before_download(slack: FakeSlack, tmp_path: Path) -> None:
    entry = slack.add_file("huge.tar.gz", b"x" * 10, size=5 * 1024**3)
    async with BotUnderTest(slack, bot_settings(tmp_path, slack), "http") as bot:
        await bot.deliver("events_api", file_share_event(CHANNEL, [entry], event_id="EvH", ts="4.000100"))
        [reply] = await slack.wait_for(lambda: in_thread(slack, "4.000100", "❌"))
        await bot.drain()
    assert "the bundle is 5.00 GB, over this bot's upload limit of 2.00 GB" in reply["text"]
    assert "CRASHCART_" not in reply["text"]
    assert slack.downloads == []


async def test_download_sends_the_token_only_where_it_belongs(slack: FakeSlack, tmp_path: Path) -> None:
    entry = slack.add_file("b.tar.gz", b"bundle bytes")
    url = entry["url_private_download"]
    hosts = token_hosts(slack.api_url)
    http_host = plain_http_host(slack.api_url)
    assert http_host == f"127.0.0.1:{slack.port}" and plain_http_host("https://slack.com/api/") is None
    with pytest.raises(DownloadError, match="refusing to send the bot token"):
        await download(
            url.replace("127.0.0.1", "localhost"), slack.bot_token, tmp_path / "a", max_bytes=100, allowed_hosts=hosts
        )
    with pytest.raises(DownloadError, match="over plain http"):  # http only to the configured API host
        await download(url, slack.bot_token, tmp_path / "h", max_bytes=100, allowed_hosts=hosts, http_host=None)
    plain = "http://files.slack.com/files-pri/T1-F1/download/b.tar.gz"
    with pytest.raises(DownloadError, match=r"refusing to send the bot token to files\.slack\.com over plain http"):
        await download(plain, slack.bot_token, tmp_path / "h", max_bytes=100, allowed_hosts=hosts, http_host=http_host)
    with pytest.raises(DownloadError, match="web page"):  # Slack's login page for a bad token
        await download(url, "xoxb-wrong", tmp_path / "b", max_bytes=100, allowed_hosts=hosts, http_host=http_host)
    assert slack.downloads == [{"file": entry["id"], "authorization": "Bearer xoxb-wrong"}]
    ok = await download(url, slack.bot_token, tmp_path / "c", max_bytes=100, allowed_hosts=hosts, http_host=http_host)
    assert ok == 12
    assert (tmp_path / "c").read_bytes() == b"bundle bytes"
    assert not (tmp_path / "b").exists() and not (tmp_path / "b.part").exists()


def test_queue_dedupes_and_survives_reopening(tmp_path: Path) -> None:
    db = tmp_path / "crashcart.db"
    queue = JobQueue(db)
    spec: dict[str, Any] = {"kind": "upload", "channel": "C1", "thread_ts": "1.1", "user": "U1", "source": "F1"}
    job = queue.enqueue(dedupe_key="file:C1:F1", event_id="Ev1/F1", **spec)
    assert job is not None and job.state == "queued"
    assert queue.enqueue(dedupe_key="file:C1:F1", event_id="Ev2/F1", **spec) is None  # same file
    assert queue.enqueue(dedupe_key="file:C1:F9", event_id="Ev1/F1", **spec) is None  # same event
    queue.start(job.id)
    queue.close()
    reopened = JobQueue(db)  # idempotent schema, same rows
    assert [(j.id, j.state, j.attempts) for j in reopened.pending()] == [(job.id, "running", 1)]
    with pytest.raises(ValueError, match="not updatable"):
        reopened.update(job.id, channel="C2")
    reopened.close()


def test_job_bundles_are_found_by_id_only(tmp_path: Path) -> None:
    (tmp_path / "1329667.tar.gz").write_bytes(b"x")
    (tmp_path / "j-2").mkdir()
    assert find_job_bundle(tmp_path, "1329667") == tmp_path / "1329667.tar.gz"
    assert find_job_bundle(tmp_path, "j-2") == tmp_path / "j-2"
    for bad in ("../etc", "..", "a/b", "", "nope"):
        assert find_job_bundle(tmp_path, bad) is None


async def test_a_job_that_keeps_crashing_the_bot_is_given_up(slack: FakeSlack, tmp_path: Path) -> None:
    settings = bot_settings(tmp_path, slack)
    entry = slack.add_file("poison.tar.gz", bundle_bytes())
    settings.db.parent.mkdir(parents=True)
    queue = JobQueue(settings.db)
    job = queue.enqueue(
        dedupe_key="file:C0INCIDENT:poison",
        kind="upload",
        channel=CHANNEL,
        thread_ts="8.000100",
        user="U1",
        source=entry["id"],
        name="poison.tar.gz",
        size=10,
    )
    assert job is not None
    for _ in range(3):  # three starts, each ended by a crash of the whole bot
        queue.start(job.id)
    queue.close()
    async with BotUnderTest(slack, settings, "http") as bot:
        [reply] = await slack.wait_for(lambda: in_thread(slack, "8.000100", "❌"))
        await bot.drain()
        assert "the analysis was interrupted 3 times." in reply["text"]
        assert [j.state for j in jobs(bot)] == ["failed"]
    assert slack.downloads == []


class HangingModel:
    """An OpenAI-compatible endpoint whose first chat completion never answers; later ones fail fast (500)."""

    def __init__(self) -> None:
        self.requests = 0
        self.first = asyncio.Event()
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def start(self) -> HangingModel:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.Response:
        await request.read()
        self.requests += 1
        if self.requests == 1:
            self.first.set()
            await self._release.wait()
        return web.json_response({"error": {"message": "overloaded", "type": "server_error"}}, status=500)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_timed_out_analysis_is_killed_and_frees_its_slot(slack: FakeSlack, tmp_path: Path) -> None:
    # the first job's analysis waits forever on a model call inside its own process; the timeout
    # kills that process, and only then does the single slot go to the second job
    model = await HangingModel().start()
    settings = bot_settings(
        tmp_path,
        slack,
        bot_max_jobs=1,
        bot_job_timeout_s=20,  # a busy machine: the model call must have started by then (1-3 s idle, >12 s at load 6)
        engine="llm",
        llm_base_url=model.base_url,
        llm_api_key="sk-test-not-a-real-key-0000000000",
        swarm_model="swarm-m",
        reduce_model="reduce-m",
        vision_model="vision-m",
        llm_max_retries=0,
        llm_timeout_s=600,
    )
    hung = slack.add_file("hangs.tar.gz", bundle_bytes())
    second = slack.add_file("second.tgz", bundle_bytes("driver-too-old"))
    try:
        async with BotUnderTest(slack, settings, "http") as bot:
            assert bot.runtime.worker is not None
            worker = bot.runtime.worker
            await bot.deliver("events_api", file_share_event(CHANNEL, [hung], event_id="EvK1", ts="6.000100"))
            [pid] = await slack.wait_for(lambda: list(worker.analysis_pids.values()))
            await bot.deliver("events_api", file_share_event(CHANNEL, [second], event_id="EvK2", ts="7.000100"))
            [reply] = await slack.wait_for(lambda: in_thread(slack, "6.000100", "❌"), within=60)
            assert "took longer than this bot's limit of 20 s and was stopped" in reply["text"]
            assert model.first.is_set()  # it was stuck in the model call, not before
            assert not alive(pid)
            assert multiprocessing.active_children() == []
            await slack.wait_for(lambda: in_thread(slack, "7.000100", "Dry-run runbook"), within=60)
            await bot.drain()
            assert {j.source: j.state for j in jobs(bot)} == {hung["id"]: "failed", second["id"]: "done"}
            assert worker.analysis_pids == {} and multiprocessing.active_children() == []
            assert not (settings.work_dir / "bot").exists() or not any((settings.work_dir / "bot").iterdir())
    finally:
        await model.stop()
