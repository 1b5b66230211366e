"""The Bolt app: listeners that ack first, then check who asks and where, then queue work or answer.

Input: Slack events, slash commands, the message shortcut and the App Home; output: acks, queued
``Job``s, replies. Long work never runs in a listener: it goes to ``bot.worker``; runbook buttons and
Re-run are in ``bot.decisions``. Every subscribed event type has a listener, so nothing is left
unacknowledged (Slack would retry it). Async, does network and database I/O (in threads).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from bot import messages as msg
from bot.access import REFUSALS, Access
from bot.approvers import Approvers
from bot.blocks import (
    APPROVE_ACTION,
    REJECT_ACTION,
    REJECT_MODAL,
    RERUN_ACTION,
    Message,
    plain_message,
    rerun_actions,
    title,
)
from bot.decisions import Decisions
from bot.home import home_entries, home_view, refused_view, user_channels
from bot.intake import JOB_ID, file_kind, find_job_bundle
from bot.lookups import incident_status, job_runs, recent
from bot.mrkdwn import code, link, permalink
from bot.queue import Job, JobQueue
from bot.settings import BotSettings
from bot.worker import SLACK_ERRORS, Worker, slack_error
from crashcart import IncidentNotFound, Store

log = logging.getLogger(__name__)
Mode = Literal["socket", "http"]
DIAGNOSE_VERBS = frozenset({"diagnose", "analyse", "analyze"})
CANNOT_POST = frozenset({"not_in_channel", "channel_not_found"})  # not invited; a DM between two people
SHORTCUT = "diagnose_message"
_MENTION = re.compile(r"<@[A-Z0-9]+(?:\|[^>]*)?>")
Reply = Callable[[Message], Awaitable[None]]


class Handlers(Decisions):
    """The listeners, with what they need injected. ``events`` lists the event types listened to."""

    def __init__(
        self,
        settings: BotSettings,
        client: AsyncWebClient,
        queue: JobQueue,
        worker: Worker,
        store: Store,
        approvers: Approvers,
        access: Access,
        workspace_url: str = "",
    ) -> None:
        super().__init__(client, queue, worker, store, approvers, access)
        self.settings = settings
        self.workspace_url = workspace_url
        self.events: set[str] = set()

    def register(self, app: AsyncApp) -> None:
        self._event(app, {"type": "message", "subtype": "file_share"}, self.on_file_share)
        self._event(app, "app_mention", self.on_mention)
        self._event(app, "app_home_opened", self.on_home_opened)
        self._event(app, "message", self.ignore_event)  # every other message subtype
        app.event(re.compile(".*"))(self.ignore_event)  # any other event type: acked, ignored
        app.command("/crashcart")(self.on_command)
        app.shortcut(SHORTCUT)(self.on_shortcut)
        app.action(APPROVE_ACTION)(self.on_approve)
        app.action(REJECT_ACTION)(self.on_reject)
        app.action(RERUN_ACTION)(self.on_rerun)
        app.view(REJECT_MODAL)(self.on_reject_submit)
        app.action(re.compile(".*"))(self.ack_only)

    def _event(self, app: AsyncApp, what: str | dict[str, Any], func: Callable[..., Awaitable[None]]) -> None:
        self.events.add(what if isinstance(what, str) else str(what["type"]))
        app.event(what)(func)

    # --- who asks, where --------------------------------------------------------------------------

    async def _refusal(self, channel: str, user: str | None) -> str | None:
        """Why this user may not use the bot in this channel, or None when they may."""
        if not self.access.channel_allowed(channel):
            return msg.NOT_ENABLED_HERE
        verdict = await self.access.check(user)
        return None if verdict == "member" else REFUSALS[verdict]

    def _ephemeral_reply(self, channel: str, user: str | None, thread: str | None) -> Reply:
        async def reply(message: Message) -> None:
            if user:
                await self._ephemeral(channel, user, thread, message.text, message.blocks)

        return reply

    # --- events (Bolt acks them before the listener runs) ------------------------------------------

    async def on_file_share(self, event: dict[str, Any], body: dict[str, Any], context: dict[str, Any]) -> None:
        bot_user, bot_id = context.get("bot_user_id"), event.get("bot_id")
        if event.get("user") == bot_user or (bot_id and not self.access.bot_allowed(str(bot_id))):
            return  # our own uploads come back as file_share; other bots' uploads are not ours to answer
        channel, user = str(event["channel"]), event.get("user")
        thread = str(event.get("thread_ts") or event["ts"])
        asked = bool(bot_user) and f"<@{bot_user}>" in str(event.get("text", ""))
        wanted = [f for f in event.get("files") or [] if f.get("id") and _wanted(f, asked)]
        if not wanted:
            return  # not a bundle, nobody asked: ignored quietly
        event_id = str(body.get("event_id") or f"share:{channel}:{event['ts']}")
        refusal = None if bot_id else await self._refusal(channel, user)
        if refusal is not None:
            if not await asyncio.to_thread(self.queue.seen, f"refused:{event_id}"):
                await self._ephemeral_reply(channel, user, thread)(plain_message(refusal))
            return
        reply = self._thread_reply(channel, thread)
        for f in wanted:
            await self._enqueue_file(f, channel, thread, user, reply, event_id=event_id, asked=asked, quiet_same=True)

    async def _enqueue_file(
        self,
        f: dict[str, Any],
        channel: str,
        thread: str,
        user: str | None,
        reply: Reply,
        *,
        event_id: str | None,
        asked: bool,
        quiet_same: bool,
    ) -> None:
        file_id = str(f["id"])
        stub = f.get("mode") == "file_access" or not f.get("name")  # Slack Connect: ask files.info
        name = None if stub else str(f["name"])
        if name is not None and file_kind(name) == "unsupported":
            if event_id is None or not await asyncio.to_thread(self.queue.seen, f"unsupported:{event_id}/{file_id}"):
                await reply(plain_message(msg.UNSUPPORTED_FILE.format(name=code(name, 120))))
            return
        key = f"file:{channel}:{file_id}"
        job = await asyncio.to_thread(
            self.queue.enqueue,
            dedupe_key=key,
            kind="upload",
            channel=channel,
            thread_ts=thread,
            user=user,
            source=file_id,
            name=name,
            size=None if stub else int(f.get("size") or 0),
            event_id=None if event_id is None else f"{event_id}/{file_id}",
            explicit=asked,
        )
        if job is not None:
            self.worker.submit(job)
            return
        earlier = await asyncio.to_thread(self.queue.find, key)
        if earlier is None or (quiet_same and earlier.thread_ts == thread):
            return  # a retry or a second event for the same message: it is being answered already
        if event_id is not None and await asyncio.to_thread(self.queue.seen, f"again:{event_id}/{file_id}"):
            return
        await reply(await self._analysed_before(earlier, name or earlier.name or file_id, thread))

    async def _analysed_before(self, earlier: Job, name: str, thread: str) -> Message:
        """A file analysed before in this channel: a link to that thread, and Re-run (not while it runs)."""
        where = msg.EARLIER_THREAD
        target = earlier.status_ts or earlier.thread_ts
        if self.workspace_url and target:
            where = link(permalink(self.workspace_url, earlier.channel, target, earlier.thread), where)
        rerun = rerun_actions(f"{earlier.id}|{thread}", msg.RERUN)
        if earlier.state in ("queued", "running"):
            return plain_message(msg.RUNNING_BEFORE.format(name=code(name, 120), link=where))
        if earlier.state == "done" and earlier.incident_id:
            try:
                root = (await asyncio.to_thread(self.store.get, earlier.incident_id)).summary.root_class
            except IncidentNotFound:
                root = "unknown"
            text = msg.ANALYSED_BEFORE.format(
                name=code(name, 120), link=where, incident=earlier.incident_id, title=title(root)
            )
            return plain_message(text, extra=rerun)
        return plain_message(msg.FAILED_BEFORE.format(name=code(name, 120), link=where), extra=rerun)

    def _thread_reply(self, channel: str, thread: str | None) -> Reply:
        async def reply(message: Message) -> None:
            await self._post(channel, thread, message)

        return reply

    async def on_mention(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        if event.get("files"):
            return  # an upload that mentions the bot: message/file_share answers it
        channel, user = str(event["channel"]), event.get("user")
        thread = str(event.get("thread_ts") or event["ts"])
        words = _MENTION.sub(" ", str(event.get("text", ""))).split()
        event_id = str(body.get("event_id") or f"mention:{channel}:{event['ts']}")
        diagnose = len(words) == 2 and words[0].lower() in DIAGNOSE_VERBS
        refusal = await self._refusal(channel, user) if diagnose else None
        if not self.access.channel_allowed(channel):
            refusal = msg.NOT_ENABLED_HERE
        if refusal is not None:
            if not await asyncio.to_thread(self.queue.seen, event_id):
                await self._ephemeral_reply(channel, user, thread)(plain_message(refusal))
            return
        if diagnose:
            problem = await self._job_problem(words[1])
            if problem is None:
                job = await asyncio.to_thread(
                    self.queue.enqueue,
                    dedupe_key=f"mention:{channel}:{event['ts']}",
                    kind="job",
                    channel=channel,
                    thread_ts=thread,
                    user=user,
                    source=words[1],
                    name=f"job {words[1]}",
                    event_id=event_id,
                    explicit=True,
                )
                if job is not None:
                    self.worker.submit(job)
                return
            reply = problem
        else:
            reply = msg.MENTION_USAGE
        if not await asyncio.to_thread(self.queue.seen, event_id):
            await self._post(channel, thread, plain_message(reply))

    async def on_home_opened(self, event: dict[str, Any]) -> None:
        if event.get("tab", "home") != "home" or not event.get("user"):
            return
        user = str(event["user"])
        verdict = await self.access.check(user)
        if verdict != "member":
            view = refused_view(REFUSALS[verdict])
        else:
            channels = await user_channels(self.client, user)
            if channels is None:
                view = refused_view(msg.WHO_UNKNOWN)
            else:
                allowed = frozenset(c for c in channels if self.access.channel_allowed(c))
                entries = await asyncio.to_thread(home_entries, self.store, self.queue, allowed)
                approver = await self.approvers.check(user) == "allowed"
                view = home_view(entries, approver=approver, workspace_url=self.workspace_url)
        try:
            await self.client.views_publish(user_id=user, view=view)
        except SLACK_ERRORS as exc:
            log.warning("views.publish for %s failed: %s", user, slack_error(exc))

    async def ignore_event(self) -> None:
        return None

    async def ack_only(self, ack: AsyncAck) -> None:
        await ack()

    # --- the message shortcut -----------------------------------------------------------------------

    async def on_shortcut(self, ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
        await ack()
        channel = str((body.get("channel") or {}).get("id", ""))
        user = str((body.get("user") or {}).get("id", ""))
        message = body.get("message") or {}

        async def reply(m: Message) -> None:
            await respond(text=m.text, blocks=m.blocks, response_type="ephemeral", replace_original=False)

        refusal = await self._refusal(channel, user)
        if refusal is not None:
            await reply(plain_message(refusal))
            return
        files = [f for f in message.get("files") or [] if f.get("id")]
        if not files:
            await reply(plain_message(msg.NO_BUNDLE_ATTACHED))
            return
        thread = str(message.get("thread_ts") or message.get("ts") or body.get("message_ts"))
        for f in files:
            await self._enqueue_file(f, channel, thread, user, reply, event_id=None, asked=True, quiet_same=False)

    # --- /crashcart ---------------------------------------------------------------------------------

    async def on_command(self, ack: AsyncAck, command: dict[str, Any], respond: AsyncRespond) -> None:
        words = str(command.get("text", "")).split()
        verb = words[0].lower() if words else "help"
        arity = {"help": 1, "list": 1, "status": 2, "lookup": 2, **dict.fromkeys(DIAGNOSE_VERBS, 2)}
        if verb == "help" or arity.get(verb) != len(words):
            await ack(text=msg.HELP if verb == "help" else msg.USAGE)
            return
        channel = str(command.get("channel_id", ""))
        if not self.access.channel_allowed(channel):
            await ack(text=msg.NOT_ENABLED_HERE)
            return
        await ack()
        refusal = await self._refusal(channel, command.get("user_id"))
        if refusal is not None:
            reply = plain_message(refusal)
        elif verb in DIAGNOSE_VERBS:
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
            explicit=True,
        )
        if job is None:
            return plain_message(msg.ALREADY_QUEUED.format(name=f"job {code(job_id, 80)}"))
        try:  # the status message starts the thread: posted now, so a refusal reaches the user
            job = await self.worker.post_status(job)
        except SLACK_ERRORS as exc:
            error = slack_error(exc)
            reason = msg.CANNOT_POST_HERE if error in CANNOT_POST else msg.SLACK_FAILED.format(error=error)
            log.info("/crashcart diagnose in %s: cannot post (%s)", channel, error)
            await asyncio.to_thread(self.queue.update, job.id, state="failed", error=reason)
            return plain_message(reason if error in CANNOT_POST else f"{reason}. Nothing was queued.")
        self.worker.submit(job)
        return plain_message(msg.JOB_QUEUED.format(job_id=code(job_id, 80)))

    async def _job_problem(self, job_id: str) -> str | None:
        """Why a job id cannot be analysed, or None when its bundle is in the jobs directory."""
        jobs_dir = self.settings.slack.jobs_dir
        if jobs_dir is None:
            log.info("a job-id lookup was asked for, but CRASHCART_JOBS_DIR is not set")
            return msg.NO_JOBS_DIR
        if not JOB_ID.fullmatch(job_id) or ".." in job_id:
            return msg.BAD_JOB_ID.format(job_id=code(job_id, 80))
        if await asyncio.to_thread(find_job_bundle, jobs_dir, job_id) is None:
            return msg.JOB_NOT_FOUND.format(job_id=code(job_id, 80))
        return None


def _wanted(f: dict[str, Any], asked: bool) -> bool:
    """Bundles always; single logs and files the bot cannot read only when the message asks the bot."""
    if f.get("mode") == "file_access" or not f.get("name"):
        return True  # a stub: files.info tells the worker what it is
    return asked or file_kind(str(f["name"])) == "bundle"


def build_app(
    settings: BotSettings,
    client: AsyncWebClient,
    queue: JobQueue,
    worker: Worker,
    store: Store,
    approvers: Approvers,
    *,
    mode: Mode,
    team_id: str | None = None,
    workspace_url: str = "",
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
    slack = settings.slack
    access = Access(client, team_id=team_id, channels=slack.channels, allowed_bots=slack.allowed_bots)
    handlers = Handlers(settings, client, queue, worker, store, approvers, access, workspace_url)
    handlers.register(app)
    return app, handlers
