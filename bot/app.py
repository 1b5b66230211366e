"""The Bolt app: listeners that ack first, then queue work or answer from the store.

Input: Slack events, slash commands and interactions; output: acks, queued ``Job``s, runbook
decisions written through the core (``approve_runbook`` / ``reject_runbook``). Long work never runs
in a listener: it goes to ``bot.worker``. Every subscribed event type has a listener, so nothing is
left unacknowledged (Slack would retry it). Async, does network and database I/O (in threads).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from bot import messages as msg
from bot.approvers import Approvers, Verdict
from bot.blocks import (
    APPROVE_ACTION,
    REASON_BLOCK,
    REASON_INPUT,
    REJECT_ACTION,
    REJECT_MODAL,
    Message,
    parse_action_value,
    plain_message,
    reject_modal,
    runbook_message,
)
from bot.intake import JOB_ID, find_job_bundle, is_bundle_name
from bot.lookups import incident_status, job_runs, recent
from bot.queue import JobQueue
from bot.settings import BotSettings
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
Mode = Literal["socket", "http"]
Decision = Literal["approval", "rejection"]
DIAGNOSE_VERBS = frozenset({"diagnose", "analyse", "analyze"})
CANNOT_POST = frozenset({"not_in_channel", "channel_not_found"})  # not invited; a DM between two people
_MENTION = re.compile(r"<@[A-Z0-9]+(?:\|[^>]*)?>")


class Handlers:
    """The listeners, with what they need injected. ``events`` lists the event types listened to."""

    def __init__(
        self,
        settings: BotSettings,
        client: AsyncWebClient,
        queue: JobQueue,
        worker: Worker,
        store: Store,
        approvers: Approvers,
    ) -> None:
        self.settings = settings
        self.client = client
        self.queue = queue
        self.worker = worker
        self.store = store
        self.approvers = approvers
        self.events: set[str] = set()

    def register(self, app: AsyncApp) -> None:
        self._event(app, {"type": "message", "subtype": "file_share"}, self.on_file_share)
        self._event(app, "app_mention", self.on_mention)
        self._event(app, "message", self.ignore_event)  # every other message subtype
        app.event(re.compile(".*"))(self.ignore_event)  # any other event type: acked, ignored
        app.command("/crashcart")(self.on_command)
        app.action(APPROVE_ACTION)(self.on_approve)
        app.action(REJECT_ACTION)(self.on_reject)
        app.view(REJECT_MODAL)(self.on_reject_submit)
        app.action(re.compile(".*"))(self.ack_only)

    def _event(self, app: AsyncApp, what: str | dict[str, Any], func: Callable[..., Awaitable[None]]) -> None:
        self.events.add(what if isinstance(what, str) else str(what["type"]))
        app.event(what)(func)

    # --- events (Bolt acks them before the listener runs) ------------------------------------------

    async def on_file_share(
        self, event: dict[str, Any], body: dict[str, Any], context: dict[str, Any], req: AsyncBoltRequest
    ) -> None:
        if event.get("bot_id") or event.get("user") == context.get("bot_user_id"):
            return  # our own uploads (postmortem, timeline) come back as file_share
        channel = str(event["channel"])
        thread = str(event.get("thread_ts") or event["ts"])
        retry = req.headers.get("x-slack-retry-num")
        for f in event.get("files") or []:
            file_id = str(f.get("id", ""))
            stub = f.get("mode") == "file_access" or not f.get("name")  # Slack Connect: ask files.info
            if not file_id or (not stub and not is_bundle_name(f.get("name"))):
                continue  # not a bundle: ignored quietly
            job = await asyncio.to_thread(
                self.queue.enqueue,
                dedupe_key=f"file:{channel}:{file_id}",
                kind="upload",
                channel=channel,
                thread_ts=thread,
                user=event.get("user"),
                source=file_id,
                name=None if stub else str(f["name"]),
                size=None if stub else int(f.get("size") or 0),
                event_id=f"{body.get('event_id')}/{file_id}",
            )
            if job is None:
                log.info("duplicate upload event %s for %s (retry %s)", body.get("event_id"), file_id, retry)
                continue
            self.worker.submit(job)

    async def on_mention(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        if event.get("files"):
            return  # an upload that mentions the bot: message/file_share analyses it, no usage reply
        channel = str(event["channel"])
        thread = str(event.get("thread_ts") or event["ts"])
        words = _MENTION.sub(" ", str(event.get("text", ""))).split()
        event_id = str(body.get("event_id") or f"mention:{channel}:{event['ts']}")
        if len(words) == 2 and words[0].lower() in DIAGNOSE_VERBS:
            problem = await self._job_problem(words[1])
            if problem is None:
                job = await asyncio.to_thread(
                    self.queue.enqueue,
                    dedupe_key=f"mention:{channel}:{event['ts']}",
                    kind="job",
                    channel=channel,
                    thread_ts=thread,
                    user=event.get("user"),
                    source=words[1],
                    name=f"job {words[1]}",
                    event_id=event_id,
                )
                if job is not None:
                    self.worker.submit(job)
                return
            reply = problem
        else:
            reply = msg.MENTION_USAGE
        if not await asyncio.to_thread(self.queue.seen, event_id):
            await self._post(channel, thread, plain_message(reply))

    async def ignore_event(self) -> None:
        return None

    async def ack_only(self, ack: AsyncAck) -> None:
        await ack()

    # --- /crashcart ---------------------------------------------------------------------------------

    async def on_command(self, ack: AsyncAck, command: dict[str, Any], respond: AsyncRespond) -> None:
        words = str(command.get("text", "")).split()
        verb = words[0].lower() if words else "help"
        arity = {"help": 1, "list": 1, "status": 2, "lookup": 2, **dict.fromkeys(DIAGNOSE_VERBS, 2)}
        if verb == "help" or arity.get(verb) != len(words):
            await ack(text=msg.HELP if verb == "help" else msg.USAGE)
            return
        await ack()
        channel = str(command.get("channel_id", ""))
        if verb in DIAGNOSE_VERBS:
            reply = await self._command_diagnose(command, words[1])
        elif verb == "status":
            reply = await asyncio.to_thread(incident_status, self.store, self.queue, channel, words[1])
        elif verb == "lookup":
            reply = await asyncio.to_thread(job_runs, self.store, self.queue, channel, words[1])
        else:
            reply = await asyncio.to_thread(recent, self.store, self.queue, channel)
        await respond(text=reply.text, blocks=reply.blocks, response_type="ephemeral")

    async def _command_diagnose(self, command: dict[str, Any], job_id: str) -> Message:
        problem = await self._job_problem(job_id)
        if problem is not None:
            return plain_message(problem)
        channel = str(command["channel_id"])
        job = await asyncio.to_thread(
            self.queue.enqueue,
            dedupe_key=f"command:{channel}:{command.get('trigger_id') or command.get('user_id')}:{job_id}",
            kind="job",
            channel=channel,
            thread_ts=None,
            user=command.get("user_id"),
            source=job_id,
            name=f"job {job_id}",
        )
        if job is None:
            return plain_message(msg.ALREADY_QUEUED.format(name=f"job {job_id}"))
        try:  # the status message starts the thread: posted now, so a refusal reaches the user
            job = await self.worker.post_status(job)
        except SLACK_ERRORS as exc:
            error = slack_error(exc)
            reason = msg.CANNOT_POST_HERE if error in CANNOT_POST else msg.SLACK_FAILED.format(error=error)
            log.info("/crashcart diagnose in %s: cannot post (%s)", channel, error)
            await asyncio.to_thread(self.queue.update, job.id, state="failed", error=reason)
            return plain_message(reason if error in CANNOT_POST else f"{reason}. Nothing was queued.")
        self.worker.submit(job)
        return plain_message(msg.JOB_QUEUED.format(job_id=job_id))

    async def _job_problem(self, job_id: str) -> str | None:
        """Why a job id cannot be analysed, or None when its bundle is in the jobs directory."""
        jobs_dir = self.settings.slack.jobs_dir
        if jobs_dir is None:
            return msg.NO_JOBS_DIR
        if not JOB_ID.fullmatch(job_id) or ".." in job_id:
            return msg.BAD_JOB_ID.format(job_id=job_id[:80].replace("`", "'"))
        if await asyncio.to_thread(find_job_bundle, jobs_dir, job_id) is None:
            return msg.JOB_NOT_FOUND.format(job_id=job_id)
        return None

    # --- runbook buttons and the reject modal ------------------------------------------------------

    async def on_approve(self, ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        user, channel, ts, thread = _who_where(body)
        incident, plan = parse_action_value(str(action.get("value", "")))
        if not await self._may_decide(user, channel, thread, incident, "approval"):
            return
        log.info("approve by %s of %s plan %s (action_ts %s)", user, incident, plan, action.get("action_ts"))
        decide = functools.partial(approve_runbook, self.store, incident, user, plan_hash=plan)
        await self._decide(decide, incident, user, channel, ts, thread)

    async def on_reject(self, ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        user, channel, ts, thread = _who_where(body)
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
        await self._show_runbook(record, channel, ts)

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
        await self._ephemeral(channel, user, thread, msg.error_reason(exc))
        try:  # show the current state (e.g. someone else decided first)
            record = await asyncio.to_thread(get_runbook, self.store, incident)
        except CrashCartError:
            return
        await self._show_runbook(record, channel, ts)

    async def _show_runbook(self, record: RunbookRecord, channel: str, ts: str) -> None:
        message = runbook_message(record)
        await self.client.chat_update(channel=channel, ts=ts, text=message.text, blocks=message.blocks)

    async def _ephemeral(self, channel: str, user: str, thread: str | None, text: str) -> None:
        try:
            await self.client.chat_postEphemeral(channel=channel, user=user, text=text, thread_ts=thread)
        except SLACK_ERRORS as exc:
            log.warning("ephemeral reply failed: %s", slack_error(exc))

    async def _post(self, channel: str, thread: str | None, message: Message) -> None:
        await self.client.chat_postMessage(
            channel=channel, thread_ts=thread, text=message.text, blocks=message.blocks, unfurl_links=False
        )


def _who_where(body: dict[str, Any]) -> tuple[str, str, str, str | None]:
    """The clicking user (from the verified payload) and the message clicked: channel, ts, thread."""
    container = body.get("container") or {}
    message = body.get("message") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id", "")
    ts = container.get("message_ts") or message.get("ts", "")
    thread = container.get("thread_ts") or message.get("thread_ts")
    return str(body["user"]["id"]), str(channel), str(ts), thread


def build_app(
    settings: BotSettings,
    client: AsyncWebClient,
    queue: JobQueue,
    worker: Worker,
    store: Store,
    approvers: Approvers,
    *,
    mode: Mode,
) -> tuple[AsyncApp, Handlers]:
    """The AsyncApp using ``client`` (the process's one Web API client) and our listeners."""
    secret = settings.slack.signing_secret
    if mode == "http" and (secret is None or not secret.get_secret_value().strip()):
        raise ValueError("HTTP mode needs SLACK_SIGNING_SECRET")
    app = AsyncApp(
        client=client,
        signing_secret=secret.get_secret_value() if secret is not None else "",
        request_verification_enabled=mode == "http",
        process_before_response=False,
        raise_error_for_unhandled_request=False,
        logger=logging.getLogger("bot.bolt"),
    )
    handlers = Handlers(settings, client, queue, worker, store, approvers)
    handlers.register(app)
    return app, handlers
