"""Runbook buttons and Re-run: approve, reject (with its modal), and running a job again.

Input: block actions and the reject modal's submission; output: decisions written through the core
(``approve_runbook`` / ``reject_runbook``), every message that shows the incident's runbook updated
(one bundle uploaded twice has two threads), a post in each thread saying who decided, or a new job.
Authorization is checked at every state-changing step; refused attempts go into the audit trail.
Async, does network and database I/O (in threads).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from typing import Any, Literal

from slack_bolt.context.ack.async_ack import AsyncAck
from slack_sdk.web.async_client import AsyncWebClient

from bot import messages as msg
from bot.access import REFUSALS, Access
from bot.approvers import Approvers, Verdict
from bot.blocks import (
    REASON_BLOCK,
    REASON_INPUT,
    Block,
    Message,
    context,
    parse_action_value,
    reject_modal,
    runbook_message,
)
from bot.mrkdwn import date, escape, mention
from bot.queue import JobQueue
from bot.worker import SLACK_ERRORS, Worker, slack_error
from crashcart import (
    CrashCartError,
    RunbookRecord,
    Store,
    approve_runbook,
    get_runbook,
    record_runbook_refusal,
    reject_runbook,
)

log = logging.getLogger(__name__)
Decision = Literal["approval", "rejection"]


class Decisions:
    def __init__(
        self,
        client: AsyncWebClient,
        queue: JobQueue,
        worker: Worker,
        store: Store,
        approvers: Approvers,
        access: Access,
    ) -> None:
        self.client = client
        self.queue = queue
        self.worker = worker
        self.store = store
        self.approvers = approvers
        self.access = access

    async def on_approve(self, ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        user, channel, ts, thread = who_where(body)
        incident, plan = parse_action_value(str(action.get("value", "")))
        if not await self._may_decide(user, channel, thread, incident, "approval"):
            return
        log.info("approve by %s of %s plan %s (action_ts %s)", user, incident, plan, action.get("action_ts"))
        decide = functools.partial(approve_runbook, self.store, incident, user, plan_hash=plan)
        await self._decide(decide, incident, user, channel, ts, thread)

    async def on_reject(self, ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        user, channel, ts, thread = who_where(body)
        # trigger_id expires about 3 s after the click: decide now only from what is known without
        # asking Slack; otherwise open the modal and let the submission's check decide
        incident, plan = parse_action_value(str(action.get("value", "")))
        verdict = self.approvers.known(user)
        if verdict is not None and verdict != "allowed":
            await self._refuse(verdict, user, channel, thread, incident, "rejection")
            return
        meta = json.dumps({"incident": incident, "plan": plan, "channel": channel, "ts": ts, "thread": thread})
        try:
            await self.client.views_open(trigger_id=str(body["trigger_id"]), view=reject_modal(meta))
        except SLACK_ERRORS as exc:
            log.warning("views.open for %s failed: %s", user, slack_error(exc))
            await self._ephemeral(channel, user, thread, msg.MODAL_FAILED.format(error=slack_error(exc)))

    async def on_reject_submit(self, ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        values = view.get("state", {}).get("values", {})
        reason = str((values.get(REASON_BLOCK, {}).get(REASON_INPUT, {}) or {}).get("value") or "").strip()
        if not reason:
            await ack(response_action="errors", errors={REASON_BLOCK: msg.REASON_REQUIRED})
            return
        await ack()
        meta = json.loads(view.get("private_metadata") or "{}")
        user = str(body["user"]["id"])
        channel, ts, thread = str(meta.get("channel", "")), str(meta.get("ts", "")), meta.get("thread")
        incident, plan = str(meta.get("incident", "")), meta.get("plan")
        if not await self._may_decide(user, channel, thread, incident, "rejection"):  # the modal is not proof
            return
        log.info("reject by %s of %s plan %s", user, incident, plan)
        decide = functools.partial(reject_runbook, self.store, incident, user, reason, plan_hash=plan)
        await self._decide(decide, incident, user, channel, ts, thread)

    async def _decide(
        self, decide: Callable[[], RunbookRecord], incident: str, user: str, channel: str, ts: str, thread: str | None
    ) -> None:
        """Record an allowed approval or rejection, then show the runbook's new state (or why it was refused)."""
        try:
            record = await asyncio.to_thread(decide)
        except CrashCartError as exc:
            await self._refused(exc, incident, user, channel, ts, thread)
            return
        await self._show_runbook(record, channel, ts, thread, announce=True)

    async def _may_decide(self, user: str, channel: str, thread: str | None, incident: str, what: Decision) -> bool:
        verdict = await self.approvers.check(user)
        if verdict == "allowed":
            return True
        await self._refuse(verdict, user, channel, thread, incident, what)
        return False

    async def _refuse(
        self, verdict: Verdict, user: str, channel: str, thread: str | None, incident: str, what: Decision
    ) -> None:
        """An ephemeral refusal; the attempt goes into the audit trail (the runbook's state is unchanged)."""
        log.info("runbook %s by %s refused: %s", what, user, verdict)
        why = {
            "unknown": f"membership of {user} in the approver group could not be checked",
            "unconfigured": "no runbook approvers are configured",
        }.get(verdict, f"{user} is not an approver of runbooks")
        try:
            await asyncio.to_thread(record_runbook_refusal, self.store, incident, user, f"{what} refused: {why}")
        except CrashCartError as exc:  # no such incident or runbook: nothing to record against
            log.warning("refusal of %s not recorded: %s", user, exc)
        text = {"unknown": msg.APPROVERS_UNKNOWN, "unconfigured": msg.NO_APPROVERS}.get(verdict, msg.NOT_APPROVER)
        await self._ephemeral(channel, user, thread, text)

    async def _refused(
        self, exc: CrashCartError, incident: str, user: str, channel: str, ts: str, thread: str | None
    ) -> None:
        try:  # show the current state (e.g. someone else decided first, maybe in another thread)
            record = await asyncio.to_thread(get_runbook, self.store, incident)
        except CrashCartError:
            await self._ephemeral(channel, user, thread, msg.error_reason(exc))
            return
        if record.state != "proposed" and record.decided_by:
            when = date(record.decided_at) if record.decided_at else ""
            text = msg.ALREADY_DECIDED.format(state=record.state, user=mention(record.decided_by), when=when)
        else:
            text = msg.error_reason(exc)
        await self._ephemeral(channel, user, thread, text)
        await self._show_runbook(record, channel, ts, thread, announce=False)

    async def _show_runbook(
        self, record: RunbookRecord, channel: str, ts: str, thread: str | None, *, announce: bool
    ) -> None:
        """Update every message that shows this runbook; with ``announce``, post the decision in each thread."""
        message = runbook_message(record, awaiting=self.approvers.mention())
        posts = await asyncio.to_thread(self.queue.runbook_posts, record.incident_id)
        shown = {(channel, ts): thread} | {(j.channel, str(j.runbook_ts)): j.thread for j in posts}
        for (where, at), _ in shown.items():
            try:
                await self.client.chat_update(channel=where, ts=at, text=message.text, blocks=message.blocks)
            except SLACK_ERRORS as exc:
                log.warning("updating the runbook message %s in %s failed: %s", at, where, slack_error(exc))
        if not announce or record.decided_by is None:
            return
        when = date(record.decided_at) if record.decided_at else ""
        who = mention(record.decided_by)
        if record.state == "approved":
            text = msg.DECIDED_APPROVED.format(user=who, incident=record.incident_id, when=when)
        else:
            reason = escape(record.reason or "")
            text = msg.DECIDED_REJECTED.format(user=who, incident=record.incident_id, when=when, reason=reason)
        for where, in_thread in {(c, t or at) for (c, at), t in shown.items()}:
            await self._post(where, in_thread, Message(text, [context(text)]))

    # --- Re-run -------------------------------------------------------------------------------------

    async def on_rerun(self, ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        user, channel, ts, thread = who_where(body)
        refusal = None if self.access.channel_allowed(channel) else msg.NOT_ENABLED_HERE
        if refusal is None:
            verdict = await self.access.check(user)
            refusal = None if verdict == "member" else REFUSALS[verdict]
        if refusal is not None:
            await self._ephemeral(channel, user, thread, refusal)
            return
        job_id, _, target = str(action.get("value", "")).partition("|")
        try:
            earlier = await asyncio.to_thread(self.queue.get, job_id)
        except KeyError:
            return
        if earlier.channel != channel:  # a button never acts in another channel
            log.warning("re-run of %s from %s refused: the job is in %s", job_id, channel, earlier.channel)
            return
        job = await asyncio.to_thread(
            self.queue.enqueue,
            dedupe_key=f"rerun:{job_id}:{channel}:{ts}",
            kind=earlier.kind,
            channel=channel,
            thread_ts=target or thread or ts,
            user=user,
            source=earlier.source,
            name=earlier.name,
            size=earlier.size,
            explicit=True,
        )
        if job is None:
            return  # this button was clicked before
        self.worker.submit(job)
        message = body.get("message")
        if message and not (body.get("container") or {}).get("is_ephemeral"):
            blocks: list[Block] = [b for b in message.get("blocks") or [] if b.get("type") != "actions"]
            blocks.append(context(msg.RERUN_BY.format(user=mention(user))))
            try:
                await self.client.chat_update(
                    channel=channel, ts=ts, text=str(message.get("text") or msg.RERUN), blocks=blocks
                )
            except SLACK_ERRORS as exc:
                log.warning("updating the re-run message failed: %s", slack_error(exc))

    # --- posting ------------------------------------------------------------------------------------

    async def _ephemeral(
        self, channel: str, user: str, thread: str | None, text: str, blocks: list[Block] | None = None
    ) -> None:
        try:
            await self.client.chat_postEphemeral(channel=channel, user=user, text=text, thread_ts=thread, blocks=blocks)
        except SLACK_ERRORS as exc:
            log.warning("ephemeral reply failed: %s", slack_error(exc))

    async def _post(self, channel: str, thread: str | None, message: Message) -> None:
        try:
            await self.client.chat_postMessage(
                channel=channel, thread_ts=thread, text=message.text, blocks=message.blocks, unfurl_links=False
            )
        except SLACK_ERRORS as exc:
            log.warning("posting in %s failed: %s", channel, slack_error(exc))


def who_where(body: dict[str, Any]) -> tuple[str, str, str, str | None]:
    """The clicking user (from the verified payload) and the message clicked: channel, ts, thread."""
    container = body.get("container") or {}
    message = body.get("message") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id", "")
    ts = container.get("message_ts") or message.get("ts", "")
    thread = container.get("thread_ts") or message.get("thread_ts")
    return str(body["user"]["id"]), str(channel), str(ts), thread
