"""Entry point: ``run(settings, mode, port)`` for ``crashcart bot --socket | --http --port P``.

Input: ``BotSettings``; output: a running bot until interrupted (exit status 0), or one line on stderr
and exit status 2 for a configuration problem. ``BotRuntime`` wires one ``AsyncWebClient`` (base URL
from settings, retry handlers) into the app, the worker, Socket Mode and the approver lookups.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Literal

from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.app import Handlers, Mode, build_app
from bot.approvers import Approvers
from bot.queue import JobQueue
from bot.settings import BotSettings, SlackSettings
from bot.worker import Worker
from crashcart import Store, StoreError

log = logging.getLogger(__name__)
EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"


class BotConfigError(Exception):
    """The bot cannot start as configured; ``str(exc)`` is the one line to show."""


def check_config(slack: SlackSettings, mode: Mode, port: int | None) -> None:
    """Refuse to start without what the chosen mode needs. Never echoes a secret."""
    bot = slack.bot_token.get_secret_value().strip() if slack.bot_token else ""
    if not bot:
        raise BotConfigError("SLACK_BOT_TOKEN is not set: install the app (manifest.yml) and copy its xoxb- token")
    if not bot.startswith("xoxb-"):
        raise BotConfigError("SLACK_BOT_TOKEN must be the bot token (it starts with xoxb-)")
    if mode == "socket":
        app = slack.app_token.get_secret_value().strip() if slack.app_token else ""
        if not app:
            raise BotConfigError(
                "SLACK_APP_TOKEN is not set: Socket Mode needs an app-level token (xapp-) with connections:write"
            )
        if not app.startswith("xapp-"):
            raise BotConfigError("SLACK_APP_TOKEN must be an app-level token (it starts with xapp-)")
    else:
        secret = slack.signing_secret.get_secret_value().strip() if slack.signing_secret else ""
        if not secret:
            raise BotConfigError("SLACK_SIGNING_SECRET is not set: HTTP mode needs it to verify Slack's requests")
        if port is None or not 1 <= port <= 65535:
            raise BotConfigError("--http needs --port between 1 and 65535")
    if slack.jobs_dir is not None and not slack.jobs_dir.is_dir():
        raise BotConfigError(f"CRASHCART_JOBS_DIR is not a directory: {slack.jobs_dir}")


def make_client(slack: SlackSettings) -> AsyncWebClient:
    """The process's one Web API client: base URL from settings, retries on rate limits and connection errors."""
    return AsyncWebClient(
        token=slack.bot_token.get_secret_value() if slack.bot_token else None,
        base_url=slack.api_url,
        timeout=30,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=3),
            AsyncServerErrorRetryHandler(max_retry_count=2),
        ],
    )


class BotRuntime:
    """Everything a running bot holds; ``start()`` then ``stop()``. Tests run it on port 0 against a fake Slack."""

    def __init__(
        self,
        settings: BotSettings,
        mode: Mode,
        *,
        port: int = 3000,
        host: str = "0.0.0.0",
        client: AsyncWebClient | None = None,
        ping_interval: float = 10.0,
        status_interval_s: float = 1.0,
    ) -> None:
        self.settings = settings
        self.mode = mode
        self.port = port
        self.host = host
        self.client = client or make_client(settings.slack)
        self._ping_interval = ping_interval
        self._status_interval = status_interval_s
        self._runner: web.AppRunner | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self.store: Store | None = None
        self.queue: JobQueue | None = None
        self.worker: Worker | None = None
        self.handlers: Handlers | None = None

    async def start(self) -> None:
        """Open the store and queue, check the token, connect or listen, then resume unfinished jobs.

        :raises BotConfigError: the database cannot be opened, or Slack refuses a token
        """
        slack = self.settings.slack
        try:
            self.store = await asyncio.to_thread(Store, self.settings.store)
            self.queue = await asyncio.to_thread(JobQueue, Path(self.settings.db))
        except StoreError as exc:
            raise BotConfigError(f"CRASHCART_DB: {exc}") from exc
        try:
            auth = await self.client.auth_test()
        except SlackApiError as exc:
            raise BotConfigError(f"Slack refused SLACK_BOT_TOKEN ({exc.response.get('error')})") from exc
        except (SlackClientError, OSError) as exc:
            raise BotConfigError(f"cannot reach Slack at {slack.api_url} ({type(exc).__name__})") from exc
        log.info("connected to Slack as %s (team %s)", auth.get("user_id"), auth.get("team_id"))
        approvers = Approvers(slack.approvers, slack.approver_group, self.client)
        self.worker = Worker(
            self.settings,
            self.client,
            self.queue,
            self.store,
            status_interval_s=self._status_interval,
            awaiting=approvers.mention(),
        )
        app, self.handlers = build_app(
            self.settings,
            self.client,
            self.queue,
            self.worker,
            self.store,
            approvers,
            mode=self.mode,
            team_id=str(auth.get("team_id") or "") or None,
            workspace_url=str(auth.get("url") or ""),
        )
        if self.mode == "http":
            web_app = app.web_app(path=EVENTS_PATH)
            web_app.router.add_get(HEALTH_PATH, self._health)
            self._runner = web.AppRunner(web_app, access_log=None)
            await self._runner.setup()
            await web.TCPSite(self._runner, self.host, self.port).start()
            self.port = int(self._runner.addresses[0][1])
            log.info("listening on %s:%d (%s, %s)", self.host, self.port, EVENTS_PATH, HEALTH_PATH)
        else:
            app_token = slack.app_token.get_secret_value() if slack.app_token else None
            self._socket = AsyncSocketModeHandler(
                app, app_token=app_token, web_client=self.client, ping_interval=self._ping_interval
            )
            try:
                await self._socket.connect_async()  # type: ignore[no-untyped-call]
            except SlackApiError as exc:
                raise BotConfigError(f"Slack refused SLACK_APP_TOKEN ({exc.response.get('error')})") from exc
            log.info("connected over Socket Mode")
        resumed = await self.worker.resume()
        if resumed:
            log.info("resumed %d unfinished job(s)", resumed)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "mode": self.mode})

    async def stop(self) -> None:
        """Disconnect, stop serving, cancel running jobs (they resume on the next start), close the files."""
        if self._socket is not None:
            await self._socket.close_async()  # type: ignore[no-untyped-call]
            self._socket = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.worker is not None:
            await self.worker.close()
        if self.queue is not None:
            self.queue.close()
        if self.store is not None:
            self.store.close()


def run(settings: BotSettings, mode: Literal["socket", "http"], port: int | None = None) -> int:
    """Run the bot until interrupted. Exit status 0, or 2 with one line on stderr for a configuration problem."""
    try:
        check_config(settings.slack, mode, port)
    except BotConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("slack_sdk").setLevel(logging.WARNING)
    logging.getLogger("slack_bolt").setLevel(logging.WARNING)

    async def serve() -> None:
        runtime = BotRuntime(settings, mode, port=port if port is not None else 3000)
        stopping = asyncio.Event()
        with contextlib.suppress(NotImplementedError):  # SIGTERM (systemd, Kubernetes): stop cleanly
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
        try:
            await runtime.start()
            await stopping.wait()
        finally:
            await runtime.stop()

    try:
        asyncio.run(serve())
    except BotConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 0
    return 0
