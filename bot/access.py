"""Who may use the bot, and where: ``CRASHCART_BOT_CHANNELS``, workspace members only, allowed bots.

Input: a channel id, a user id from a verified payload, or a bot id; output: a verdict. Guests
(``is_restricted``, ``is_ultra_restricted``) and users of other workspaces (``is_stranger``, or a
``team_id`` other than the install's) are refused, and so is anyone when Slack cannot answer
``users.info``. Answers are cached for ``ttl_s``; failures are not. Async, does network I/O.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Literal

from slack_sdk.web.async_client import AsyncWebClient

from bot import messages as msg
from bot.approvers import SLACK_LOOKUP_ERRORS

log = logging.getLogger(__name__)
UserVerdict = Literal["member", "guest", "external", "unknown"]
REFUSALS: dict[UserVerdict, str] = {
    "guest": msg.GUEST_REFUSED,
    "external": msg.EXTERNAL_REFUSED,
    "unknown": msg.WHO_UNKNOWN,
}


class Access:
    def __init__(
        self,
        client: AsyncWebClient,
        *,
        team_id: str | None,
        channels: tuple[str, ...] = (),
        allowed_bots: tuple[str, ...] = (),
        ttl_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self.team_id = team_id
        self.channels = frozenset(channels)
        self.allowed_bots = frozenset(allowed_bots)
        self._ttl = ttl_s
        self._clock = clock
        self._users: dict[str, tuple[float, UserVerdict]] = {}
        self._lock = asyncio.Lock()

    def channel_allowed(self, channel: str) -> bool:
        """True everywhere when ``CRASHCART_BOT_CHANNELS`` is unset, else only in the channels it lists."""
        return not self.channels or channel in self.channels

    def bot_allowed(self, bot_id: str | None) -> bool:
        return bot_id is not None and bot_id in self.allowed_bots

    async def check(self, user: str | None) -> UserVerdict:
        """``member`` for a full member of the install's workspace; otherwise why not."""
        if not user:
            return "unknown"
        cached = self._users.get(user)
        if cached is not None and self._clock() - cached[0] < self._ttl:
            return cached[1]
        try:
            resp = await self._client.users_info(user=user)
        except SLACK_LOOKUP_ERRORS as exc:
            log.warning("users.info for %s failed: %s", user, type(exc).__name__)
            return "unknown"
        info = resp.get("user")
        if not isinstance(info, dict):
            return "unknown"
        verdict = self._verdict(info)
        self._users[user] = (self._clock(), verdict)
        return verdict

    def _verdict(self, info: dict[str, object]) -> UserVerdict:
        if info.get("is_restricted") or info.get("is_ultra_restricted"):
            return "guest"
        if info.get("is_stranger") or (self.team_id is not None and info.get("team_id") != self.team_id):
            return "external"
        return "member"
