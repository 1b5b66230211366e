"""A job's status message kept current while it runs: ``chat.update`` at most every ``interval_s``.

Input: stage names from the analysis (``on_stage``); output: edits of one Slack message. Async, does
network I/O; a failed edit is logged and never fails the analysis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from slack_sdk.web.async_client import AsyncWebClient

from bot.approvers import SLACK_LOOKUP_ERRORS
from bot.blocks import Block, status_message

log = logging.getLogger(__name__)


class StatusUpdater:
    def __init__(
        self, client: AsyncWebClient, channel: str, ts: str, headline: str, interval_s: float, note: str = ""
    ) -> None:
        self._client = client
        self._channel = channel
        self._ts = ts
        self.headline = headline
        self.note = note
        self._interval = interval_s
        self.stages: list[str] = []
        self.scanned: tuple[int, int] | None = None  # (bytes, of total) while the scan runs
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def on_stage(self, name: str) -> None:
        """The pipeline's ``on_stage`` hook (called on the event loop)."""
        self.stages.append(name)
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    def on_progress(self, done: int, total: int) -> None:
        """The pipeline's ``progress`` hook, relayed from the analysis (called on the event loop)."""
        self.scanned = (done, total)
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self.push()
            await asyncio.sleep(self._interval)

    async def push(self, headline: str | None = None, *, done: bool = False, extra: Block | None = None) -> None:
        """Show the headline; while running, the stages so far; once ``done``, no stage names at all."""
        stages: list[str] = [] if done else list(self.stages)
        current = None if done or not self.stages else self.stages[-1]
        if current == "scan" and self.scanned is not None and self.scanned[1] > 0:  # "scan 42 %"
            current = f"scan {self.scanned[0] * 100 // self.scanned[1]} %"
            stages = [*[s for s in stages if s != "scan"], current]
        message = status_message(headline or self.headline, stages, current, note=self.note, extra=extra)
        try:
            await self._client.chat_update(channel=self._channel, ts=self._ts, text=message.text, blocks=message.blocks)
        except SLACK_LOOKUP_ERRORS as exc:  # a stale status line must not fail the analysis
            log.warning("status update failed: %s", type(exc).__name__)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
