"""One analysis in a child process, so a job timeout (or a bot stop) can really stop it.

Input: a bundle path, ``Settings`` and the job's work directory; output: ``Analysis`` (the document,
and the postmortem and timeline files the child wrote into that directory). Stage names come back
over a pipe as they start. The child opens its own ``Store`` and calls ``crashcart.diagnose``; the
parent kills it on cancellation and returns only once it is gone, so a freed slot means a stopped scan.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path

from bot import messages as msg
from crashcart import (
    CrashCartError,
    DiagnosisDocument,
    Settings,
    Store,
    diagnose,
    redact_text,
    render_postmortem,
    render_timeline,
)

log = logging.getLogger(__name__)
DOCUMENT = "diagnosis.json"
MAX_MESSAGE = 3500  # each message fits one atomic pipe write (PIPE_BUF is 4096 on Linux)
_context: BaseContext | None = None


@dataclass(frozen=True)
class Analysis:
    document: DiagnosisDocument
    postmortem: Path  # Markdown, already redacted for Slack
    timeline: Path  # PNG


class AnalysisFailed(Exception):
    """The pipeline refused the bundle (a ``CrashCartError`` in the child): a short reason to post."""

    def __init__(self, reason: str, incident_id: str | None, next_step: str) -> None:
        super().__init__(reason)
        self.reason = reason  # mrkdwn, outside parts escaped
        self.incident_id = incident_id
        self.next_step = next_step


class AnalysisDied(Exception):
    """The child ended without an answer (killed from outside, out of memory, an internal error)."""

    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"exit status {exitcode}")
        self.exitcode = exitcode


def context() -> BaseContext:
    """``forkserver`` (a warm server forks each child: no fork of the bot's threads and loop), else ``spawn``."""
    global _context
    if _context is None:
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        _context = multiprocessing.get_context(method)
        if method == "forkserver":
            _context.set_forkserver_preload(["bot.analysis"])
    return _context


async def analyse(
    source: Path,
    settings: Settings,
    out_dir: Path,
    *,
    job_id: str | None,
    on_stage: Callable[[str], None],
    on_start: Callable[[BaseProcess], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> Analysis:
    """Run ``diagnose`` in a child process; kill it if this coroutine is cancelled (a timeout).

    The bundle is extracted under ``out_dir`` (the child's ``work_dir``), so removing that directory
    also removes what a killed child left behind.

    :raises AnalysisFailed: the pipeline raised a ``CrashCartError``
    :raises AnalysisDied: the child ended without an answer
    """
    await asyncio.to_thread(out_dir.mkdir, parents=True, exist_ok=True)
    child_settings = settings.model_copy(update={"work_dir": out_dir / "work"})
    ctx = context()
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(  # type: ignore[attr-defined]
        target=_child,
        args=(sender, str(source), child_settings, job_id, str(out_dir)),
        name=f"crashcart-analysis-{out_dir.name}",
    )
    answer: tuple[object, ...] = ("ended",)
    exitcode: int | None = None
    # in a thread: the first start also starts the fork server; shielded: a timeout meanwhile still
    # finds a process to kill
    starting = asyncio.ensure_future(asyncio.to_thread(process.start))
    try:
        await asyncio.shield(starting)
        sender.close()  # only the child writes: end of file once it is gone
        if on_start is not None:
            on_start(process)
        while True:
            await _readable(receiver.fileno())
            try:
                answer = receiver.recv()
            except EOFError:
                break
            if answer[0] == "progress":  # the pipeline's progress hook (bytes scanned, of total), 1 % steps
                if on_progress is not None:
                    on_progress(int(str(answer[1])), int(str(answer[2])))
                continue
            if answer[0] != "stage":
                break
            on_stage(str(answer[1]))
    finally:
        sender.close()
        await asyncio.wait([starting])
        exitcode = await _stop(process) if starting.exception() is None else None
        receiver.close()
    if answer[0] == "failed":
        raise AnalysisFailed(str(answer[1]), None if answer[2] is None else str(answer[2]), str(answer[3]))
    if answer[0] == "crashed":
        log.error("the analysis of %s failed in its process:\n%s", source.name, answer[1])
    if answer[0] != "done":
        raise AnalysisDied(exitcode)
    text = await asyncio.to_thread((out_dir / DOCUMENT).read_text, encoding="utf-8")
    document = DiagnosisDocument.model_validate_json(text)
    return Analysis(document, *_report_paths(out_dir, document.incident_id))


async def _readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def _stop(process: BaseProcess) -> int | None:
    """Kill the child if it still runs, wait until it is gone (even if cancelled meanwhile); its exit status."""
    if process.pid is None:
        return None  # never started
    try:
        if process.exitcode is None:
            process.kill()  # SIGKILL: a scan stuck in a thread cannot ignore it
            await _readable(process.sentinel)
    finally:
        process.join()  # returns at once: it has exited (or was just killed)
        exitcode = process.exitcode
        process.close()
    return exitcode


def _report_paths(out_dir: Path, incident_id: str) -> tuple[Path, Path]:
    return out_dir / f"postmortem-{incident_id}.md", out_dir / f"timeline-{incident_id}.png"


def _child(sender: Connection, source: str, settings: Settings, job_id: str | None, out: str) -> None:
    """The child process: diagnose, write the document and the reports, send one final message.

    This is the other edge where every exception is caught: the parent logs the traceback and posts
    a short reason.
    """

    def send(*message: object) -> None:
        sender.send(message)

    shown = -1

    def progress(done: int, total: int) -> None:  # on the scan's thread; at most one message per percent
        nonlocal shown
        percent = done * 100 // total if total else 100
        if percent != shown:
            shown = percent
            send("progress", done, total)

    try:
        out_dir = Path(out)
        with Store(settings.store) as store:
            outcome = asyncio.run(
                diagnose(
                    Path(source),
                    settings,
                    job_id=job_id,
                    store=store,
                    progress=progress,
                    on_stage=lambda n: send("stage", n[:200]),
                )
            )
        doc = outcome.document
        postmortem, timeline = _report_paths(out_dir, doc.incident_id)
        postmortem.write_text(redact_text(render_postmortem(doc, doc.runbook)), encoding="utf-8")
        render_timeline(doc, timeline, series=outcome.series)
        (out_dir / DOCUMENT).write_text(doc.model_dump_json(), encoding="utf-8")
        send("done")
    except CrashCartError as exc:
        send("failed", msg.error_reason(exc)[:MAX_MESSAGE], exc.incident_id, msg.next_step(exc))
    except BaseException:
        send("crashed", traceback.format_exc()[-MAX_MESSAGE:])
    finally:
        sender.close()
