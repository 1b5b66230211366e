"""Runs queued jobs: fetch the bundle, diagnose it, post the thread; resume unfinished jobs on start.

Input: ``Job`` rows of ``bot.queue``; output: Slack messages and files in the job's thread. Bounded
concurrency (``CRASHCART_BOT_MAX_JOBS``), a timeout per job, one task per job so a slow or failing
job never holds up another. The analysis runs in a child process (``bot.analysis``) that the timeout
kills; a job holds its slot until that process is gone. Every step records what it posted, so a
resumed job does not repeat a finished step.
This is one of the two places allowed to catch every exception: it logs the traceback and posts a
short reason and a reference instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot import messages as msg
from bot.analysis import Analysis, AnalysisDied, AnalysisFailed, analyse
from bot.blocks import Message, diagnosis_message, runbook_message, status_message
from bot.intake import (
    DownloadError,
    UploadTooLarge,
    count_files,
    download,
    file_from_info,
    find_job_bundle,
    is_bundle_name,
    plain_http_host,
    safe_name,
    token_hosts,
)
from bot.queue import Job, JobQueue
from bot.settings import BotSettings
from crashcart import (
    BundleNotFound,
    CrashCartError,
    Store,
    get_runbook,
)

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 3
# What a Web API call raises once the client's retry handlers gave up.
SLACK_ERRORS: tuple[type[Exception], ...] = (SlackApiError, SlackClientError, aiohttp.ClientError, TimeoutError)


class StatusUpdater:
    """Keeps one status message current as stages finish: ``chat.update`` at most every ``interval_s``."""

    def __init__(self, client: AsyncWebClient, channel: str, ts: str, headline: str, interval_s: float) -> None:
        self._client = client
        self._channel = channel
        self._ts = ts
        self.headline = headline
        self._interval = interval_s
        self.stages: list[str] = []
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def on_stage(self, name: str) -> None:
        """The pipeline's ``on_stage`` hook (called on the event loop)."""
        self.stages.append(name)
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self.push()
            await asyncio.sleep(self._interval)

    async def push(self, headline: str | None = None, *, done: bool = False) -> None:
        current = None if done or not self.stages else self.stages[-1]
        message = status_message(headline or self.headline, self.stages, current)
        try:
            await self._client.chat_update(channel=self._channel, ts=self._ts, text=message.text, blocks=message.blocks)
        except SLACK_ERRORS as exc:  # a stale status line must not fail the analysis
            log.warning("status update failed: %s", slack_error(exc))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class Worker:
    """One asyncio task per job, a semaphore for concurrency, strong references until each ends."""

    def __init__(
        self,
        settings: BotSettings,
        client: AsyncWebClient,
        queue: JobQueue,
        store: Store,
        *,
        status_interval_s: float = 1.0,
    ) -> None:
        self._settings = settings
        self._slack = settings.slack
        self._client = client
        self._queue = queue
        self._store = store
        self._interval = status_interval_s
        self._sem = asyncio.Semaphore(self._slack.max_jobs)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._work = settings.work_dir / "bot"
        self.analysis_pids: dict[str, int] = {}  # job id -> its analysis process, while it runs

    def submit(self, job: Job) -> None:
        """Start running ``job`` (once: a job already running here is left alone)."""
        if job.id in self._tasks or self._closed:
            return  # after close(), the row stays queued and resumes on the next start
        self._idle.clear()
        task = asyncio.get_running_loop().create_task(self._run(job.id), name=f"crashcart-job-{job.id}")
        self._tasks[job.id] = task
        task.add_done_callback(functools.partial(self._forget, job.id))

    def _forget(self, job_id: str, _task: object = None) -> None:
        self._tasks.pop(job_id, None)
        if not self._tasks:
            self._idle.set()

    async def resume(self) -> int:
        """Submit every job that was queued or running when the bot stopped; return how many."""
        pending = await asyncio.to_thread(self._queue.pending)
        for job in pending:
            log.info("resuming %s (%s %s, state %s)", job.id, job.kind, job.source, job.state)
            self.submit(job)
        return len(pending)

    async def drain(self) -> None:
        """Wait until no job is running (tests, and a graceful stop)."""
        await self._idle.wait()

    async def close(self) -> None:
        """Cancel running jobs; their rows stay queued/running and resume on the next start."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- one job ------------------------------------------------------------------------------------

    async def _run(self, job_id: str) -> None:
        job = await asyncio.to_thread(self._queue.get, job_id)
        timeout: asyncio.Timeout | None = None
        try:
            if job.attempts >= MAX_ATTEMPTS:
                await self._fail(job, msg.GAVE_UP.format(attempts=job.attempts))
                return
            intake = await self._intake(job)
            if intake is None:
                return
            job = intake
            async with self._sem:
                job = await asyncio.to_thread(self._queue.start, job.id)
                timeout = asyncio.timeout(self._slack.job_timeout_s)
                async with timeout:
                    await self._analyse(job)
        except asyncio.CancelledError:
            raise  # a restart: the row stays pending and resumes
        except TimeoutError as exc:
            if timeout is not None and timeout.expired():
                await self._fail(job, msg.TIMED_OUT.format(seconds=msg.human_seconds(self._slack.job_timeout_s)))
            else:  # a Web API call hit the client's timeout: slack_sdk raises a plain TimeoutError
                await self._fail(job, msg.SLACK_FAILED.format(error=slack_error(exc)))
        except UploadTooLarge as exc:
            reason = msg.TOO_BIG.format(size=msg.human_size(exc.size), cap=msg.human_size(exc.cap))
            await self._fail(job, reason)
        except DownloadError as exc:
            await self._fail(job, msg.DOWNLOAD_FAILED.format(detail=exc))
        except AnalysisFailed as exc:
            await self._fail(job, exc.reason, incident_id=exc.incident_id)
        except AnalysisDied as exc:
            log.warning("the analysis process of %s ended without an answer (%s)", job.id, exc)
            await self._fail(job, msg.ANALYSIS_DIED)
        except CrashCartError as exc:
            await self._fail(job, msg.error_reason(exc), incident_id=exc.incident_id)
        except (SlackApiError, SlackClientError, aiohttp.ClientError) as exc:
            await self._fail(job, msg.SLACK_FAILED.format(error=slack_error(exc)))
        except Exception:  # the bot's edge: log the traceback, post a short reason
            log.exception("job %s failed", job.id)
            await self._fail(job, msg.INTERNAL)
        finally:
            if (await asyncio.to_thread(self._queue.get, job.id)).state in ("done", "failed", "ignored"):
                await asyncio.to_thread(shutil.rmtree, self._work / job.id, True)

    async def _intake(self, job: Job) -> Job | None:
        """Learn what the upload is (files.info), refuse it early if too big, post the status message."""
        if job.kind == "upload" and (job.name is None or job.size is None or not is_bundle_name(job.name)):
            info = file_from_info((await self._client.files_info(file=job.source)).data)  # type: ignore[arg-type]
            if not is_bundle_name(info.name):
                log.info("ignoring upload %s (%s): not a bundle", job.source, info.name)
                return await asyncio.to_thread(self._queue.update, job.id, state="ignored", name=info.name)
            job = await asyncio.to_thread(self._queue.update, job.id, name=info.name, size=info.size)
        if job.kind == "upload" and job.size is not None and job.size > self._slack.max_upload_bytes:
            raise UploadTooLarge(job.size, self._slack.max_upload_bytes)
        if job.status_ts is None:
            job = await self.post_status(job)
        return job

    async def post_status(self, job: Job) -> Job:
        """Post the job's first status message ("waiting for a free worker") and record its ts.

        :raises SlackApiError: and the other ``SLACK_ERRORS``: the bot cannot post there
        """
        size = msg.human_size(job.size) if job.kind == "upload" else "from the jobs directory"
        message = status_message(msg.STATUS_QUEUED.format(name=self._name(job), size=size))
        resp = await self._post(job.channel, job.thread_ts, message)
        return await asyncio.to_thread(self._queue.update, job.id, status_ts=str(resp["ts"]))

    async def _analyse(self, job: Job) -> None:
        if job.status_ts is None:  # _intake posts it first; a job without one cannot report progress
            raise RuntimeError(f"job {job.id} has no status message")
        started = time.perf_counter()
        path, size = await self._fetch(job)
        files = await asyncio.to_thread(count_files, path)
        counted = f"{files} files, " if files is not None else ""
        headline = msg.STATUS_RUNNING.format(name=self._name(job), files=counted, size=msg.human_size(size))
        if job.attempts > 1:
            headline += f" {msg.STATUS_RESUMED}"
        status = StatusUpdater(self._client, job.channel, job.status_ts, headline, self._interval)
        status.stages.append("download" if job.kind == "upload" else "lookup")
        await status.push()  # "Analysing bundle X (N files, M MB)…" before the analysis starts
        try:
            result = await analyse(
                path,
                self._settings,
                self._work / job.id / "analysis",
                job_id=job.source if job.kind == "job" else None,
                on_stage=status.on_stage,
                on_start=functools.partial(self._analysis_started, job.id),
            )
        finally:
            self.analysis_pids.pop(job.id, None)
            await status.close()
        doc = result.document
        job = await asyncio.to_thread(self._queue.update, job.id, incident_id=doc.incident_id)
        if job.diagnosis_ts is None:
            resp = await self._post(job.channel, job.thread, diagnosis_message(doc))
            job = await asyncio.to_thread(self._queue.update, job.id, diagnosis_ts=str(resp["ts"]))
        if not job.files_done:
            await self._upload_reports(job, result)
            job = await asyncio.to_thread(self._queue.update, job.id, files_done=True)
        if job.runbook_ts is None:
            record = await asyncio.to_thread(get_runbook, self._store, doc.incident_id)
            resp = await self._post(job.channel, job.thread, runbook_message(record))
            job = await asyncio.to_thread(self._queue.update, job.id, runbook_ts=str(resp["ts"]))
        done = msg.STATUS_DONE.format(
            name=self._name(job),
            files=f"{doc.bundle.files} files, ",
            size=msg.human_size(size),
            seconds=time.perf_counter() - started,
            incident=doc.incident_id,
        )
        if job.attempts > 1:
            done += f" {msg.STATUS_RESUMED}"
        await status.push(done, done=True)
        await asyncio.to_thread(self._queue.update, job.id, state="done", error=None)

    def _analysis_started(self, job_id: str, process: BaseProcess) -> None:
        if process.pid is not None:
            self.analysis_pids[job_id] = process.pid

    async def _fetch(self, job: Job) -> tuple[Path, int | None]:
        if job.kind == "job":
            jobs_dir = self._slack.jobs_dir
            found = find_job_bundle(jobs_dir, job.source) if jobs_dir is not None else None
            if found is None:
                raise BundleNotFound(f"no bundle for job {job.source} in the jobs directory")
            size = found.stat().st_size if found.is_file() else None
            return found, size
        dest = self._work / job.id / safe_name(job.name or "bundle.tar.gz")
        if dest.is_file():  # downloaded before a restart
            return dest, dest.stat().st_size
        info = file_from_info((await self._client.files_info(file=job.source)).data)  # type: ignore[arg-type]
        if info.url is None:
            raise DownloadError("Slack gave no download URL for the file")
        token = self._client.token or ""
        size = await download(
            info.url,
            token,
            dest,
            max_bytes=self._slack.max_upload_bytes,
            allowed_hosts=token_hosts(self._slack.api_url),
            http_host=plain_http_host(self._slack.api_url),
        )
        return dest, size

    async def _upload_reports(self, job: Job, result: Analysis) -> None:
        doc = result.document
        postmortem = await asyncio.to_thread(result.postmortem.read_text, encoding="utf-8")
        data = await asyncio.to_thread(result.timeline.read_bytes)
        await self._client.files_upload_v2(
            file_uploads=[
                {"content": postmortem, "filename": f"postmortem-{doc.incident_id}.md", "title": "Postmortem draft"},
                {"file": data, "filename": f"timeline-{doc.incident_id}.png", "title": "Timeline"},
            ],
            channel=job.channel,
            thread_ts=job.thread,
            initial_comment=msg.FILES_COMMENT.format(incident=doc.incident_id),
        )

    async def _fail(self, job: Job, reason: str, *, incident_id: str | None = None) -> None:
        """Post the reason and a reference (incident id, else the job id); never a traceback."""
        current = await asyncio.to_thread(self._queue.get, job.id)
        incident = incident_id or current.incident_id
        reference = f"incident `{incident}`" if incident else f"job `{job.id}`"
        text = msg.STATUS_FAILED.format(name=self._name(current), reason=reason, reference=reference)
        log.info("job %s failed: %s", job.id, reason)
        try:
            if current.status_ts is not None:
                failed = status_message(text)
                await self._client.chat_update(
                    channel=job.channel, ts=current.status_ts, text=failed.text, blocks=failed.blocks
                )
            await self._post(job.channel, current.thread, status_message(text))
        except SLACK_ERRORS as exc:
            log.warning("could not post the failure of %s: %s", job.id, slack_error(exc))
        await asyncio.to_thread(self._queue.update, job.id, state="failed", error=reason, incident_id=incident)

    async def _post(self, channel: str, thread_ts: str | None, message: Message) -> dict[str, object]:
        resp = await self._client.chat_postMessage(
            channel=channel, thread_ts=thread_ts, text=message.text, blocks=message.blocks, unfurl_links=False
        )
        return dict(resp.data) if isinstance(resp.data, dict) else {}

    @staticmethod
    def _name(job: Job) -> str:
        return job.name or (f"job {job.source}" if job.kind == "job" else job.source)


def slack_error(exc: Exception) -> str:
    """Slack's error code, or the exception's class name: short, and never a token."""
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error", "unknown"))
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return type(exc).__name__
