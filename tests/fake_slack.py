"""A fake Slack for the bot's tests: the Web API, file download and upload, Socket Mode, on 127.0.0.1 port 0.

The real ``AsyncWebClient(base_url=fake.api_url)``, the real Bolt ``AsyncApp`` and the real Socket
Mode client talk to it. It records every call (``fake.calls``), keeps posted messages by ts
(``fake.messages``), answers ``users.info`` per user (``fake.users``: a full member of the workspace
unless set otherwise), ``users.conversations`` from ``fake.memberships``, keeps the App Home views
``views.publish`` set (``fake.home``), collects every text and block the bot sent anywhere
(``fake.outgoing()``), and fails on demand (``fake.fail_next("chat.postMessage", status=429)``).
It also builds realistic payloads (events, slash commands, block actions, view submissions) and
signs them the way Slack does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import itertools
import json
import tarfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web
from slack_sdk.signature import SignatureVerifier

BOT_TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-test-token"
SIGNING_SECRET = "test-signing-secret"
BOT_USER = "UBOT"
TEAM = "T0001"
APP_ID = "A0001"


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    headers: dict[str, str]


@dataclass
class Failure:
    status: int = 200
    error: str | None = None
    retry_after: int | None = None


@dataclass
class FakeFile:
    id: str
    name: str
    data: bytes
    size: int


@dataclass
class FakeSlack:
    bot_token: str = BOT_TOKEN
    app_token: str = APP_TOKEN
    calls: list[Call] = field(default_factory=list)
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, FakeFile] = field(default_factory=dict)
    uploads: dict[str, bytes] = field(default_factory=dict)
    upload_names: dict[str, str] = field(default_factory=dict)
    responses: list[dict[str, Any]] = field(default_factory=list)
    usergroups: dict[str, list[str]] = field(default_factory=dict)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)  # users.info answers; absent: a member
    memberships: dict[str, list[str]] = field(default_factory=dict)  # user -> channels (users.conversations)
    home: dict[str, dict[str, Any]] = field(default_factory=dict)  # user -> the view views.publish set
    acks: list[str] = field(default_factory=list)  # bodies the bot answered requests with (BotUnderTest)
    downloads: list[dict[str, str]] = field(default_factory=list)
    ws_acks: list[dict[str, Any]] = field(default_factory=list)
    sent_envelopes: list[str] = field(default_factory=list)  # envelope ids pushed over the websocket
    ws_connections: int = 0
    holds: dict[str, asyncio.Event] = field(default_factory=dict)  # file id -> downloads wait until it is set
    api_holds: dict[str, asyncio.Event] = field(default_factory=dict)  # Web API method -> answers wait until set
    _failures: dict[str, list[Failure]] = field(default_factory=dict)
    _ts: Any = field(default_factory=lambda: itertools.count(1))
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _runner: web.AppRunner | None = None
    _ws: web.WebSocketResponse | None = None
    _changed: asyncio.Condition | None = None
    port: int = 0

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> FakeSlack:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/files-pri/{fid}/download/{name}", self._download)
        app.router.add_post("/upload/{fid}", self._upload)
        app.router.add_post("/response/{rid}", self._response)
        app.router.add_get("/link", self._socket)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        self._changed = asyncio.Condition()
        return self

    async def stop(self) -> None:
        for hold in [*self.holds.values(), *self.api_holds.values()]:  # release them, or shutdown waits
            hold.set()
        if self._ws is not None:
            await self._ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/"

    # --- what tests set up and read -------------------------------------------------------------

    def add_file(self, name: str, data: bytes, *, size: int | None = None) -> dict[str, Any]:
        """Register an uploaded file; return its entry as it appears in a ``file_share`` event."""
        fid = f"F{next(self._ids):06d}"
        self.files[fid] = FakeFile(fid, name, data, len(data) if size is None else size)
        return self._file_json(self.files[fid])

    def fail_next(
        self,
        method: str,
        *,
        status: int = 200,
        error: str | None = None,
        retry_after: int | None = None,
        times: int = 1,
    ) -> None:
        """The next ``times`` calls of ``method`` fail: HTTP ``status`` (429 gets Retry-After) and/or ``error``."""
        if status == 429 and retry_after is None:
            retry_after = 0
        self._failures.setdefault(method, []).extend(Failure(status, error, retry_after) for _ in range(times))

    def set_user(self, user: str, **fields: Any) -> None:
        """What ``users.info`` says about ``user`` (e.g. ``is_restricted=True``, ``team_id="T0OTHER"``)."""
        self.users[user] = {"id": user, "team_id": TEAM, "is_restricted": False, "is_ultra_restricted": False} | fields

    def outgoing(self) -> list[str]:
        """Every string the bot sent for people to read: message texts and blocks, ephemerals, views,
        response_url posts, command acks and upload comments (JSON-encoded where structured)."""
        out: list[str] = []
        for call in self.calls:
            p = call.params
            if call.method.startswith(("chat.", "views.")):
                out += [str(p.get("text") or ""), json.dumps(p.get("blocks") or [], ensure_ascii=False)]
                out.append(json.dumps(p.get("view") or {}, ensure_ascii=False))
            if call.method == "files.completeUploadExternal":
                out.append(str(p.get("initial_comment") or ""))
        for response in self.responses:
            out.append(json.dumps(response, ensure_ascii=False))
        return out + self.acks

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def thread(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        """Messages posted in a thread (its parent included), in order."""
        return [
            m for ts, m in self.messages.items() if m["channel"] == channel and thread_ts in (ts, m.get("thread_ts"))
        ]

    async def wait_for(self, predicate: Callable[[], Any], within: float = 30.0) -> Any:
        """Poll until ``predicate()`` is truthy (re-checked whenever the fake records something)."""
        assert self._changed is not None
        deadline = asyncio.get_running_loop().time() + within
        async with self._changed:
            while not (value := predicate()):
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    raise AssertionError(f"timed out waiting; calls: {[c.method for c in self.calls]}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), min(remaining, 0.2))
        return value

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    # --- Socket Mode ----------------------------------------------------------------------------

    async def send_envelope(self, kind: str, payload: dict[str, Any], *, retry_attempt: int = 0) -> dict[str, Any]:
        """Push an envelope to the connected bot and return its ack (``{"envelope_id": ..., ["payload"]}``)."""
        await self.wait_for(lambda: self._ws is not None and not self._ws.closed)
        assert self._ws is not None
        envelope_id = f"env-{next(self._ids)}"
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "accepts_response_payload": kind == "slash_commands",
            "payload": payload,
        }
        if kind == "events_api":
            envelope |= {"retry_attempt": retry_attempt, "retry_reason": "timeout" if retry_attempt else ""}
        await self._ws.send_json(envelope)
        self.sent_envelopes.append(envelope_id)
        return await self.wait_for(lambda: next((a for a in self.ws_acks if a.get("envelope_id") == envelope_id), None))

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()  # autoping answers the SDK's "sdk-ping-pong" pings
        await ws.prepare(request)
        self._ws = ws
        self.ws_connections += 1
        await ws.send_json({"type": "hello", "num_connections": 1, "connection_info": {"app_id": APP_ID}})
        await self._notify()
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                self.ws_acks.append(json.loads(message.data))
                await self._notify()
        return ws

    # --- HTTP routes ----------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                params.update(body)
        elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
        return params

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        headers = dict(request.headers)
        self.calls.append(Call(method, params, headers))
        await self._notify()
        if method in self.api_holds:
            await self.api_holds[method].wait()
        failures = self._failures.get(method)
        if failures:
            failure = failures.pop(0)
            extra = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
            error = failure.error or ("ratelimited" if failure.status == 429 else "fatal_error")
            return web.json_response({"ok": False, "error": error}, status=failure.status, headers=extra)
        want = self.app_token if method == "apps.connections.open" else self.bot_token
        if headers.get("Authorization") != f"Bearer {want}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"})
        result = handler(params)
        if method == "auth.test":
            scopes = "chat:write,files:read,files:write,commands,app_mentions:read,usergroups:read"
            return web.json_response(result, headers={"x-oauth-scopes": scopes})
        return web.json_response(result)

    def _next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def _m_auth_test(self, _: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake.slack.com/",
            "team": "Fake",
            "user": "crashcart",
            "team_id": TEAM,
            "user_id": BOT_USER,
            "bot_id": "BBOT",
        }

    def _m_apps_connections_open(self, _: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link?ticket=t"}

    def _m_chat_postMessage(self, p: dict[str, Any]) -> dict[str, Any]:
        ts = self._next_ts()
        self.messages[ts] = {
            "channel": p["channel"],
            "ts": ts,
            "thread_ts": p.get("thread_ts"),
            "text": p.get("text", ""),
            "blocks": p.get("blocks") or [],
            "updates": 0,
            "history": [],  # earlier texts, oldest first
            "broadcast": bool(p.get("reply_broadcast")),
        }
        return {"ok": True, "channel": p["channel"], "ts": ts, "message": {"text": p.get("text", ""), "ts": ts}}

    def _m_chat_update(self, p: dict[str, Any]) -> dict[str, Any]:
        message = self.messages.get(p["ts"])
        if message is None or message["channel"] != p["channel"]:
            return {"ok": False, "error": "message_not_found"}
        message["history"].append(message["text"])
        message.update(text=p.get("text", ""), blocks=p.get("blocks") or [], updates=message["updates"] + 1)
        return {"ok": True, "channel": p["channel"], "ts": p["ts"]}

    def _m_users_info(self, p: dict[str, Any]) -> dict[str, Any]:
        user = str(p.get("user", ""))
        if not user:
            return {"ok": False, "error": "user_not_found"}
        info = self.users.get(user) or {"id": user, "team_id": TEAM, "is_restricted": False}
        return {"ok": True, "user": {"name": user.lower(), "is_bot": False, "is_stranger": False, **info}}

    def _m_users_conversations(self, p: dict[str, Any]) -> dict[str, Any]:
        channels = self.memberships.get(str(p.get("user", "")), [])
        return {"ok": True, "channels": [{"id": c} for c in channels], "response_metadata": {"next_cursor": ""}}

    def _m_views_publish(self, p: dict[str, Any]) -> dict[str, Any]:
        view = p["view"] if isinstance(p["view"], dict) else json.loads(p["view"])
        self.home[str(p["user_id"])] = view
        return {"ok": True, "view": {"id": f"V{next(self._ids)}", **view}}

    def _m_chat_postEphemeral(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "message_ts": self._next_ts()}

    def _m_views_open(self, p: dict[str, Any]) -> dict[str, Any]:
        view = p["view"] if isinstance(p["view"], dict) else json.loads(p["view"])
        return {"ok": True, "view": {"id": f"V{next(self._ids)}", **view}}

    def _m_usergroups_users_list(self, p: dict[str, Any]) -> dict[str, Any]:
        users = self.usergroups.get(p.get("usergroup", ""))
        return {"ok": True, "users": users} if users is not None else {"ok": False, "error": "no_such_subteam"}

    def _m_files_info(self, p: dict[str, Any]) -> dict[str, Any]:
        f = self.files.get(p.get("file", ""))
        return {"ok": True, "file": self._file_json(f)} if f else {"ok": False, "error": "file_not_found"}

    def _m_files_getUploadURLExternal(self, p: dict[str, Any]) -> dict[str, Any]:
        fid = f"FUP{next(self._ids):05d}"
        self.upload_names[fid] = p.get("filename", "")
        return {"ok": True, "upload_url": f"{self.url}/upload/{fid}", "file_id": fid}

    def _m_files_completeUploadExternal(self, p: dict[str, Any]) -> dict[str, Any]:
        files = json.loads(p["files"])
        return {"ok": True, "files": [{"id": f["id"], "title": f.get("title"), "shares": {}} for f in files]}

    def _file_json(self, f: FakeFile) -> dict[str, Any]:
        quoted = urllib.parse.quote(f.name, safe="")
        return {
            "id": f.id,
            "name": f.name,
            "title": f.name,
            "mimetype": "application/gzip",
            "filetype": "gzip",
            "size": f.size,
            "user": "UUPLOADER",
            "mode": "hosted",
            "is_external": False,
            "url_private": f"{self.url}/files-pri/{f.id}/{quoted}",
            "url_private_download": f"{self.url}/files-pri/{f.id}/download/{quoted}",
        }

    async def _download(self, request: web.Request) -> web.StreamResponse:
        fid = request.match_info["fid"]
        self.downloads.append({"file": fid, "authorization": request.headers.get("Authorization", "")})
        await self._notify()
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            return web.Response(text="<html>Sign in to Slack</html>", content_type="text/html")
        if fid in self.holds:
            await self.holds[fid].wait()
        f = self.files.get(fid)
        if f is None:
            return web.Response(status=404)
        return web.Response(body=f.data, content_type="application/octet-stream")

    async def _upload(self, request: web.Request) -> web.Response:
        data = await request.read()
        self.uploads[request.match_info["fid"]] = data
        await self._notify()
        return web.Response(text=f"OK - {len(data)}")

    async def _response(self, request: web.Request) -> web.Response:
        self.responses.append(await request.json())
        await self._notify()
        return web.Response(text="ok")


# --- payloads, as Slack sends them ----------------------------------------------------------------


def file_share_event(
    channel: str,
    files: list[dict[str, Any]],
    *,
    event_id: str,
    ts: str,
    user: str = "UUPLOADER",
    text: str = "bundle from the failed run",
) -> dict[str, Any]:
    event = {
        "type": "message",
        "subtype": "file_share",
        "text": text,
        "user": user,
        "channel": channel,
        "channel_type": "channel",
        "ts": ts,
        "event_ts": ts,
        "upload": True,
        "files": files,
    }
    return event_callback(event, event_id=event_id)


def event_callback(event: dict[str, Any], *, event_id: str) -> dict[str, Any]:
    return {
        "token": "legacy",
        "team_id": TEAM,
        "api_app_id": APP_ID,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()),
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": True}],
        "event": event,
    }


def slash_command(text: str, *, fake: FakeSlack, channel: str = "C0INCIDENT", user: str = "UONCALL") -> dict[str, str]:
    return {
        "token": "legacy",
        "team_id": TEAM,
        "team_domain": "fake",
        "channel_id": channel,
        "channel_name": "incidents",
        "user_id": user,
        "user_name": "oncall",
        "command": "/crashcart",
        "text": text,
        "api_app_id": APP_ID,
        "is_enterprise_install": "false",
        "response_url": f"{fake.url}/response/{next(fake._ids)}",
        "trigger_id": f"trigger-{next(fake._ids)}",
    }


def block_action(message: dict[str, Any], action_id: str, *, user: str, fake: FakeSlack) -> dict[str, Any]:
    """A click on ``action_id`` in a message the fake recorded (``fake.messages[ts]``)."""
    element = next(
        e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"] if e["action_id"] == action_id
    )
    return {
        "type": "block_actions",
        "api_app_id": APP_ID,
        "token": "legacy",
        "trigger_id": f"trigger-{next(fake._ids)}",
        "team": {"id": TEAM, "domain": "fake"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM},
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": message["channel"],
            "is_ephemeral": False,
            "thread_ts": message.get("thread_ts"),
        },
        "channel": {"id": message["channel"], "name": "incidents"},
        "message": {
            "type": "message",
            "ts": message["ts"],
            "thread_ts": message.get("thread_ts"),
            "bot_id": "BBOT",
            "text": message.get("text", ""),
            "blocks": message["blocks"],
        },
        "state": {"values": {}},
        "response_url": f"{fake.url}/response/{next(fake._ids)}",
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "runbook_actions",
                "value": element["value"],
                "text": element["text"],
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


def message_shortcut(
    message: dict[str, Any], *, user: str, fake: FakeSlack, channel: str = "C0INCIDENT", team: str = TEAM
) -> dict[str, Any]:
    """*Diagnose with CrashCart* from a message's menu (``message`` as Slack shows it: ts, files, …)."""
    return {
        "type": "message_action",
        "callback_id": "diagnose_message",
        "trigger_id": f"trigger-{next(fake._ids)}",
        "action_ts": f"{time.time():.6f}",
        "message_ts": message["ts"],
        "response_url": f"{fake.url}/response/{next(fake._ids)}",
        "team": {"id": TEAM, "domain": "fake"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": team},
        "channel": {"id": channel, "name": "incidents"},
        "message": {"type": "message", "user": "UUPLOADER", **message},
        "api_app_id": APP_ID,
        "token": "legacy",
    }


def home_opened(user: str, *, event_id: str) -> dict[str, Any]:
    event = {"type": "app_home_opened", "user": user, "channel": "D0HOME", "tab": "home", "event_ts": "1.1"}
    return event_callback(event, event_id=event_id)


def view_submission(view: dict[str, Any], reason: str | None, *, user: str) -> dict[str, Any]:
    """The submission of a modal the bot opened (``view`` as sent to ``views.open``)."""
    return {
        "type": "view_submission",
        "team": {"id": TEAM, "domain": "fake"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM},
        "api_app_id": APP_ID,
        "token": "legacy",
        "trigger_id": "trigger-view",
        "view": {
            "id": "V1",
            "type": "modal",
            "callback_id": view["callback_id"],
            "private_metadata": view["private_metadata"],
            "state": {"values": {"reason": {"reason_input": {"type": "plain_text_input", "value": reason}}}},
            "hash": "h1",
            "root_view_id": "V1",
        },
        "response_urls": [],
    }


def button_value(message: dict[str, Any], action_id: str = "runbook_approve") -> str:
    """The value of a button in a recorded message (the runbook's is ``incident:plan``)."""
    return str(
        next(
            e["value"]
            for b in message["blocks"]
            if b["type"] == "actions"
            for e in b["elements"]
            if e["action_id"] == action_id
        )
    )


def signed_headers(body: str, *, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature}


def encode(kind: str, payload: dict[str, Any]) -> tuple[str, str]:
    """The raw HTTP body Slack sends for a payload, and its content type."""
    if kind == "events_api":
        return json.dumps(payload), "application/json"
    if kind == "slash_commands":
        return urllib.parse.urlencode(payload), "application/x-www-form-urlencoded"
    return "payload=" + urllib.parse.quote(json.dumps(payload)), "application/x-www-form-urlencoded"


# --- driving a bot against the fake -----------------------------------------------------------------


class BotUnderTest:
    """A real ``BotRuntime`` (HTTP on port 0, or Socket Mode) wired to a ``FakeSlack``.

    ``deliver`` sends a payload the way Slack would in that mode: a signed HTTP request, or an
    envelope over the websocket. It returns ``(status, body)`` (Socket Mode: 200 and the ack's payload).
    """

    def __init__(self, fake: FakeSlack, settings: Any, mode: str, *, client: Any = None) -> None:
        from bot.main import BotRuntime

        self.fake = fake
        self.mode = mode
        self.runtime = BotRuntime(
            settings,
            mode,  # type: ignore[arg-type]
            port=0,
            host="127.0.0.1",
            client=client,
            ping_interval=5,
            status_interval_s=0.05,
        )

    async def __aenter__(self) -> BotUnderTest:
        await self.runtime.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runtime.stop()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.runtime.port}"

    async def deliver(
        self, kind: str, payload: dict[str, Any], *, retry: int = 0, headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        if self.mode == "socket":
            ack = await self.fake.send_envelope(kind, payload, retry_attempt=retry)
            self.fake.acks.append(json.dumps(ack.get("payload", {}), ensure_ascii=False))
            return 200, json.dumps(ack.get("payload", {}))
        import aiohttp

        body, content_type = encode(kind, payload)
        sent = {**signed_headers(body), "Content-Type": content_type, **(headers or {})}
        if retry:
            sent |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
        async with (
            aiohttp.ClientSession(trust_env=False) as session,
            session.post(f"{self.base}/slack/events", data=body.encode(), headers=sent) as resp,
        ):
            text = await resp.text()
            self.fake.acks.append(text)
            return resp.status, text

    async def drain(self) -> None:
        assert self.runtime.worker is not None
        await self.runtime.worker.drain()


INCIDENTS = Path(__file__).resolve().parent.parent / "incidents"


@functools.lru_cache(maxsize=8)
def bundle_bytes(incident: str = "gpu-fell-off-bus") -> bytes:
    """A shipped incident as the ``.tar.gz`` an on-call engineer would upload."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(INCIDENTS / incident, arcname=incident, filter=lambda m: None if m.name.endswith("expected.json") else m)
    return buf.getvalue()


def bot_settings(tmp_path: Path, fake: FakeSlack, **extra: Any) -> Any:
    from bot.settings import BotSettings

    values: dict[str, Any] = {
        "db": tmp_path / "db" / "crashcart.db",
        "work_dir": tmp_path / "work",
        "slack_bot_token": fake.bot_token,
        "slack_app_token": fake.app_token,
        "slack_signing_secret": SIGNING_SECRET,
        "slack_api_url": fake.api_url,
        "approvers": "UAPPROVER",
    }
    return BotSettings(_env_file=None, **(values | extra))
