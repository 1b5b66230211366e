"""Runs queued jobs: fetch the bundle, diagnose it, post the thread; resume unfinished jobs on start.

Input: ``Job`` rows of ``bot.queue``; output: Slack messages and files in the job's thread. Bounded
concurrency (``CRASHCART_BOT_MAX_JOBS``), a timeout per job, one task per job so a slow or failing
job never holds up another. The analysis runs in a child process (``bot.analysis``) that the timeout
kills; a job holds its slot until that process is gone. Every step records what it posted, so a
resumed job does not repeat a finished step. The status message is the job's one line in the channel
(a thread reply is also broadcast): it ends as the root cause, or as one failure message with the next
step and a Re-run button.
This is one of the two places allowed to catch every exception: it logs the traceback and posts a
short reason instead.
"""

from __future__ import annotations

import asyncio
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
from bot.blocks import (
    Message,
    confidence_label,
    culprit_text,
    diagnosis_message,
    plain_message,
    rerun_actions,
    runbook_message,
    status_message,
    title,
)
from bot.intake import (
    DownloadError,
    UploadTooLarge,
    bundle_size,
    count_files,
    download,
    file_from_info,
    file_kind,
    find_job_bundle,
    plain_http_host,
    safe_name,
    token_hosts,
)
from bot.mrkdwn import code, escape, mention
from bot.queue import Job, JobQueue
from bot.settings import BotSettings
from bot.status import StatusUpdater
from crashcart import BundleNotFound, CrashCartError, DiagnosisDocument, Store, get_runbook

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 3
# What a Web API call raises once the client's retry handlers gave up.
SLACK_ERRORS: tuple[type[Exception], ...] = (SlackApiError, SlackClientError, aiohttp.ClientError, TimeoutError)


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
        awaiting: str | None = None,
    ) -> None:
        self._settings = settings
        self._slack = settings.slack
        self._client = client
        self._queue = queue
        self._store = store
        self._interval = status_interval_s
        self._awaiting = awaiting  # whom a proposed runbook waits for (a group or user mentions)
        self._sem = asyncio.Semaphore(self._slack.max_jobs)
        self._holding = 0  # jobs in a slot
        self._waiting = 0  # jobs waiting for one
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

    def ahead(self) -> int:
        """Jobs that must finish before one submitted now gets a slot (0: a slot is free)."""
        return max(0, self._holding + self._waiting - self._slack.max_jobs + 1)

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
                log.warning("giving up %s after %d interrupted attempts", job.id, job.attempts)
                await self._fail(job, msg.GAVE_UP.format(attempts=job.attempts), msg.NEXT_CLI)
                return
            intake = await self._intake(job)
            if intake is None:
                return
            job = intake
            self._waiting += 1
            waited = True
            try:
                async with self._sem:
                    self._waiting, self._holding, waited = self._waiting - 1, self._holding + 1, False
                    try:
                        job = await asyncio.to_thread(self._queue.start, job.id)
                        timeout = asyncio.timeout(self._slack.job_timeout_s)
                        async with timeout:
                            await self._analyse(job)
                    finally:
                        self._holding -= 1
            finally:
                self._waiting -= waited
        except asyncio.CancelledError:
            raise  # a restart: the row stays pending and resumes
        except TimeoutError as exc:
            if timeout is not None and timeout.expired():
                log.warning("%s ran over CRASHCART_BOT_JOB_TIMEOUT_S (%s s)", job.id, self._slack.job_timeout_s)
                seconds = msg.human_seconds(self._slack.job_timeout_s)
                await self._fail(job, msg.TIMED_OUT.format(seconds=seconds), msg.NEXT_CLI)
            else:  # a Web API call hit the client's timeout: slack_sdk raises a plain TimeoutError
                await self._fail(job, msg.SLACK_FAILED.format(error=slack_error(exc)), msg.NEXT_RERUN)
        except UploadTooLarge as exc:
            log.info("%s: %d bytes, over CRASHCART_BOT_MAX_UPLOAD_BYTES (%d)", job.id, exc.size, exc.cap)
            reason = msg.TOO_BIG.format(size=msg.human_size(exc.size), cap=msg.human_size(exc.cap))
            await self._fail(job, reason, msg.NEXT_SMALLER)
        except DownloadError as exc:
            await self._fail(job, msg.DOWNLOAD_FAILED.format(detail=escape(str(exc))), msg.NEXT_RERUN)
        except AnalysisFailed as exc:
            await self._fail(job, exc.reason, exc.next_step, incident_id=exc.incident_id)
        except AnalysisDied as exc:
            log.warning("the analysis process of %s ended without an answer (%s)", job.id, exc)
            await self._fail(job, msg.ANALYSIS_DIED, msg.NEXT_OPERATOR)
        except CrashCartError as exc:
            await self._fail(job, msg.error_reason(exc), msg.next_step(exc), incident_id=exc.incident_id)
        except (SlackApiError, SlackClientError, aiohttp.ClientError) as exc:
            await self._fail(job, msg.SLACK_FAILED.format(error=slack_error(exc)), msg.NEXT_RERUN)
        except Exception:  # the bot's edge: log the traceback, post a short reason
            log.exception("job %s failed", job.id)
            await self._fail(job, msg.INTERNAL, msg.NEXT_OPERATOR)
        finally:
            if (await asyncio.to_thread(self._queue.get, job.id)).state in ("done", "failed", "ignored"):
                await asyncio.to_thread(shutil.rmtree, self._work / job.id, True)

    async def _intake(self, job: Job) -> Job | None:
        """Learn what the upload is (files.info), refuse it early if too big, post the status message."""
        if job.kind == "upload" and (job.name is None or job.size is None):
            info = file_from_info((await self._client.files_info(file=job.source)).data)  # type: ignore[arg-type]
            kind = file_kind(info.name)
            if kind == "unsupported" or (kind == "log" and not job.explicit):
                log.info("ignoring upload %s (%s): %s", job.source, info.name, kind)
                if job.explicit:
                    reply = plain_message(msg.UNSUPPORTED_FILE.format(name=code(info.name, 120)))
                    await self._post(job.channel, job.thread_ts, reply)
                return await asyncio.to_thread(self._queue.update, job.id, state="ignored", name=info.name)
            job = await asyncio.to_thread(self._queue.update, job.id, name=info.name, size=info.size)
        if job.kind == "upload" and job.size is not None and job.size > self._slack.max_upload_bytes:
            raise UploadTooLarge(job.size, self._slack.max_upload_bytes)
        if job.status_ts is None:
            job = await self.post_status(job)
        return job

    async def post_status(self, job: Job) -> Job:
        """Post the job's first status message and record its ts: "Analysing…", or "waiting for a free
        worker" only when every slot is taken. A reply in a thread is broadcast to the channel too.

        :raises SlackApiError: and the other ``SLACK_ERRORS``: the bot cannot post there
        """
        ahead = self.ahead()
        size = f" {msg.FROM_JOBS_DIR}" if job.kind == "job" else f" ({msg.human_size(job.size)})" if job.size else ""
        headline = (msg.STATUS_WAITING if ahead else msg.STATUS_STARTING).format(
            name=_name(job), size=size, ahead=ahead
        )
        message = status_message(headline, note=_requested_by(job))
        resp = await self._post(job.channel, job.thread_ts, message, broadcast=job.thread_ts is not None)
        return await asyncio.to_thread(self._queue.update, job.id, status_ts=str(resp["ts"]))

    async def _analyse(self, job: Job) -> None:
        if job.status_ts is None:  # _intake posts it first; a job without one cannot report progress
            raise RuntimeError(f"job {job.id} has no status message")
        started = time.perf_counter()
        path, size = await self._fetch(job)
        files = await asyncio.to_thread(count_files, path)
        details = _details(files, size)
        headline = msg.STATUS_RUNNING.format(name=_name(job), details=details)
        if job.attempts > 1:
            headline += f" {msg.STATUS_RESUMED}"
        note = _requested_by(job)
        status = StatusUpdater(self._client, job.channel, job.status_ts, headline, self._interval, note)
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
                on_progress=status.on_progress,
            )
        finally:
            self.analysis_pids.pop(job.id, None)
            await status.close()
        doc = result.document
        job = await asyncio.to_thread(self._queue.update, job.id, incident_id=doc.incident_id)
        if job.diagnosis_ts is None:  # a new message: it mentions the requester
            resp = await self._post(job.channel, job.thread, diagnosis_message(doc, requester=job.user))
            job = await asyncio.to_thread(self._queue.update, job.id, diagnosis_ts=str(resp["ts"]))
        if not job.files_done:
            await self._upload_reports(job, result)
            job = await asyncio.to_thread(self._queue.update, job.id, files_done=True)
        if job.runbook_ts is None:  # a new message: it mentions the approvers while it waits for them
            record = await asyncio.to_thread(get_runbook, self._store, doc.incident_id)
            resp = await self._post(job.channel, job.thread, runbook_message(record, awaiting=self._awaiting))
            job = await asyncio.to_thread(self._queue.update, job.id, runbook_ts=str(resp["ts"]))
        seconds = f"{time.perf_counter() - started:.1f}"
        done = msg.STATUS_DONE.format(
            title=escape(title(doc.root_cause.class_)),
            culprit=_culprit(doc),
            incident=doc.incident_id,
            name=_name(job),
            details=_details(doc.bundle.files, size),
            seconds=seconds,
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
            return found, await asyncio.to_thread(bundle_size, found)
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

    async def _fail(self, job: Job, reason: str, next_step: str, *, incident_id: str | None = None) -> None:
        """One message: the status message becomes the failure (reason, incident, next step, Re-run)."""
        current = await asyncio.to_thread(self._queue.get, job.id)
        incident = incident_id or current.incident_id
        reference = msg.REFERENCE.format(incident=incident) if incident else ""
        text = msg.STATUS_FAILED.format(name=_name(current), reason=reason, reference=reference, next=next_step)
        log.info("job %s failed: %s", job.id, reason)
        failed = status_message(text, extra=rerun_actions(rerun_value(current), msg.RERUN))
        try:
            if current.status_ts is not None:
                await self._client.chat_update(
                    channel=job.channel, ts=current.status_ts, text=failed.text, blocks=failed.blocks
                )
            else:
                await self._post(job.channel, current.thread, failed)
        except SLACK_ERRORS as exc:
            log.warning("could not post the failure of %s: %s", job.id, slack_error(exc))
        await asyncio.to_thread(self._queue.update, job.id, state="failed", error=reason, incident_id=incident)

    async def _post(
        self, channel: str, thread_ts: str | None, message: Message, *, broadcast: bool = False
    ) -> dict[str, object]:
        resp = await self._client.chat_postMessage(
            channel=channel,
            thread_ts=thread_ts,
            text=message.text,
            blocks=message.blocks,
            unfurl_links=False,
            reply_broadcast=True if broadcast and thread_ts else None,
        )
        return dict(resp.data) if isinstance(resp.data, dict) else {}


def rerun_value(job: Job) -> str:
    """What a Re-run button carries: the job to repeat and the thread to answer in."""
    return f"{job.id}|{job.thread or ''}"


def _name(job: Job) -> str:
    """The job's input, for people (mrkdwn): the uploaded file's name, or the job id."""
    if job.kind == "job":
        return f"job {code(job.source, 80)}"
    return code(job.name or job.source, 120)


def _requested_by(job: Job) -> str:
    return msg.REQUESTED_BY.format(user=mention(job.user)) if job.user else ""


def _details(files: int | None, size: int | None) -> str:
    parts = [
        f"{files} file{'s' if files != 1 else ''}" if files is not None else "",
        msg.human_size(size) if size else "",
    ]
    return ", ".join(p for p in parts if p) or "a bundle"


def _culprit(doc: DiagnosisDocument) -> str:
    where = culprit_text(doc)
    return (f" on {where}" if where else "") + f", confidence {confidence_label(doc.root_cause.confidence)}"


def slack_error(exc: Exception) -> str:
    """Slack's error code, or the exception's class name: short, escaped, and never a token."""
    if isinstance(exc, SlackApiError):
        return escape(str(exc.response.get("error", "unknown")))
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return type(exc).__name__
