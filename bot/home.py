"""The App Home tab: open incidents of the user's channels, and the runbooks awaiting their approval.

Input: the store, the job queue and the channels the user is in; output: a ``home`` view (≤ 100
blocks). An incident is open while its runbook is undecided. ``user_channels`` asks Slack
(``users.conversations``); ``home_entries`` reads SQLite (callers run it in a thread); the rest is pure.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot import messages as msg
from bot.approvers import SLACK_LOOKUP_ERRORS
from bot.blocks import context, header, section, title
from bot.mrkdwn import channel_link, date, escape, link, permalink
from bot.queue import JobQueue
from crashcart import IncidentNotFound, RunbookError, Store, get_runbook

MAX_LISTED = 20
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HomeEntry:
    incident: str
    channel: str
    thread: str | None
    runbook_ts: str | None
    class_id: str
    updated_at: datetime
    steps: int


async def user_channels(client: AsyncWebClient, user: str) -> set[str] | None:
    """Public and private channels the user is in (private ones only where the bot is too)."""
    channels: set[str] = set()
    cursor: str | None = None
    try:
        for _ in range(50):
            resp = await client.users_conversations(
                user=user, types="public_channel,private_channel", exclude_archived=True, limit=200, cursor=cursor
            )
            channels |= {str(c["id"]) for c in resp.get("channels") or [] if c.get("id")}
            cursor = (resp.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
    except SLACK_LOOKUP_ERRORS as exc:
        log.warning("users.conversations for %s failed: %s", user, type(exc).__name__)
        return None
    return channels


def home_entries(store: Store, queue: JobQueue, channels: frozenset[str]) -> list[HomeEntry]:
    """Open incidents of ``channels``, newest first, each with the latest thread that shows it."""
    seen: set[str] = set()
    out: list[HomeEntry] = []
    for job in queue.with_incidents(channels):
        incident = str(job.incident_id)
        if incident in seen:
            continue
        seen.add(incident)
        try:
            summary = store.get(incident).summary
            record = get_runbook(store, incident)
        except (IncidentNotFound, RunbookError):
            continue
        if record.state != "proposed":
            continue
        thread = job.thread
        out.append(
            HomeEntry(
                incident, job.channel, thread, job.runbook_ts, summary.root_class, summary.updated_at, len(record.steps)
            )
        )
        if len(out) >= MAX_LISTED:
            break
    return out


def _line(entry: HomeEntry, workspace_url: str) -> str:
    where = channel_link(entry.channel)
    if workspace_url and entry.thread:
        target = entry.runbook_ts or entry.thread
        where += " · " + link(permalink(workspace_url, entry.channel, target, entry.thread), "thread")
    return f"*{escape(title(entry.class_id))}* · `{entry.incident}` · {where} · {date(entry.updated_at)}"


def home_view(entries: list[HomeEntry], *, approver: bool, workspace_url: str) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [header("CrashCart"), section(msg.HOME_OPEN)]
    if entries:
        blocks += [section(_line(e, workspace_url)) for e in entries]
    else:
        blocks.append(context(msg.HOME_NONE_OPEN))
    blocks.append(section(msg.HOME_AWAITING))
    if not approver:
        blocks.append(context(msg.HOME_NOT_APPROVER))
    else:
        waiting = [e for e in entries if e.steps]
        blocks += [section(_line(e, workspace_url)) for e in waiting] or [context(msg.HOME_NOTHING_AWAITS)]
    blocks.append(context(msg.HOME_FOOTER))
    return {"type": "home", "blocks": blocks[:100]}


def refused_view(text: str) -> dict[str, Any]:
    return {"type": "home", "blocks": [header("CrashCart"), section(text)]}
