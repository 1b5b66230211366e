"""Who may approve or reject runbooks: ``CRASHCART_APPROVERS`` user ids and ``CRASHCART_APPROVER_GROUP`` members.

Input: a Slack user id (from a verified payload, never a name); output: ``allowed``, ``denied``,
``unknown`` (Slack could not answer: callers deny) or ``unconfigured``. Group members come from
``usergroups.users.list``, cached for ``ttl_s``; failures are not cached. Async, does network I/O.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Literal

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.mrkdwn import group_mention, mention

Verdict = Literal["allowed", "denied", "unknown", "unconfigured"]
log = logging.getLogger(__name__)
# What a Web API lookup raises once the client's retry handlers gave up: the caller denies.
SLACK_LOOKUP_ERRORS: tuple[type[Exception], ...] = (SlackApiError, SlackClientError, aiohttp.ClientError, TimeoutError)


class Approvers:
    def __init__(
        self,
        user_ids: tuple[str, ...],
        group: str | None,
        client: AsyncWebClient,
        *,
        ttl_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.user_ids = frozenset(u.strip() for u in user_ids if u.strip())
        self.group = group.strip() if group and group.strip() else None
        self._client = client
        self._ttl = ttl_s
        self._clock = clock
        self._members: frozenset[str] | None = None
        self._fetched_at = 0.0
        self._lock = asyncio.Lock()

    def mention(self) -> str | None:
        """Whom a proposed runbook waits for: the approver group, else the listed approvers."""
        if self.group is not None:
            return group_mention(self.group)
        return ", ".join(mention(u) for u in sorted(self.user_ids)) or None

    def known(self, user_id: str) -> Verdict | None:
        """The verdict from the static list and a fresh cached group only; None when Slack must be asked.

        For the Reject button: its ``trigger_id`` expires in about 3 s, too soon to wait for Slack.
        """
        if not self.user_ids and self.group is None:
            return "unconfigured"
        if user_id in self.user_ids:
            return "allowed"
        if self.group is None:
            return "denied"
        if self._members is not None and self._clock() - self._fetched_at < self._ttl:
            return "allowed" if user_id in self._members else "denied"
        return None

    async def check(self, user_id: str) -> Verdict:
        quick = self.known(user_id)
        if quick is not None:
            return quick
        members = await self._group_members()
        if members is None:
            return "unknown"
        return "allowed" if user_id in members else "denied"

    async def _group_members(self) -> frozenset[str] | None:
        async with self._lock:
            if self._members is not None and self._clock() - self._fetched_at < self._ttl:
                return self._members
            try:
                resp = await self._client.usergroups_users_list(usergroup=str(self.group))
            except SLACK_LOOKUP_ERRORS as exc:
                log.warning("usergroups.users.list failed for %s: %s", self.group, type(exc).__name__)
                return None
            users = resp.get("users")
            if not isinstance(users, list):
                return None
            self._members = frozenset(str(u) for u in users)
            self._fetched_at = self._clock()
            return self._members
