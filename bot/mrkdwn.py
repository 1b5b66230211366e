"""Slack mrkdwn for text that came from outside, and the few live tokens the bot writes itself.

``escape`` is the one function every outside string (file names, log lines, job ids, paths, reasons,
model text, Slack error codes) passes through before it reaches a message's ``text`` or any block:
secrets are redacted, ``&``, ``<`` and ``>`` become entities (so no ``<!channel>``, ``<@U…>``,
``<#C…>`` or ``<http…|…>`` can start), and mrkdwn markers cannot format. The live tokens
(``mention``, ``group_mention``, ``channel_link``, ``date``, ``link``) are built only from ids Slack
gave us and from our own words. Pure, no I/O.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from crashcart import redact_text

# * ~ ` always format; _ only at a word's edge (rank_27.out and nccl_watchdog_timeout stay as they are)
_MARKERS = re.compile(r"[*~`]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_LOOKALIKE = {"*": "∗", "~": "∼", "`": "ʹ", "_": "＿"}
_ID = re.compile(r"[A-Z0-9]{2,40}")


def escape(text: str, *, code: bool = False) -> str:
    """Outside text made inert in mrkdwn (see the module docstring).

    :param code: the text goes inside a code span or block (the caller adds the backticks): formatting
        cannot happen there, so only backticks (which would close it) are replaced, and commands and
        paths stay copyable
    """
    text = redact_text(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if code:
        return text.replace("`", "ʹ")
    return _MARKERS.sub(lambda m: _LOOKALIKE[m.group()], text)


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def code(text: str, limit: int = 280) -> str:
    """Inline code of outside text: one line, escaped, clipped."""
    one_line = " ".join(text.split())
    return f"`{escape(clip(one_line, limit), code=True) or ' '}`"


def _checked(value: str) -> str:
    if not _ID.fullmatch(value):
        raise ValueError(f"not a Slack id: {value[:40]!r}")
    return value


def mention(user: str) -> str:
    """``<@U…>`` for a user id from a verified payload (anything else is refused)."""
    return f"<@{_checked(user)}>"


def group_mention(group: str) -> str:
    return f"<!subteam^{_checked(group)}>"


def channel_link(channel: str) -> str:
    return f"<#{_checked(channel)}>"


def date(at: datetime) -> str:
    """``<!date^…>``: each reader sees the time in their own zone; the fallback is UTC."""
    at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    fallback = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(at.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


def iso_date(value: str | None) -> str | None:
    """A document time (ISO-8601) as ``date``, or None when absent, unparseable or without a zone."""
    if not value:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return date(at) if at.tzinfo is not None else None


def permalink(workspace_url: str, channel: str, ts: str, thread_ts: str | None = None) -> str:
    """A message's web link (``https://x.slack.com/archives/C…/p…``), built from auth.test's ``url``."""
    url = f"{workspace_url.rstrip('/')}/archives/{_checked(channel)}/p{ts.replace('.', '')}"
    if thread_ts and thread_ts != ts:
        url += f"?thread_ts={thread_ts}&cid={channel}"
    return url


def link(url: str, label: str) -> str:
    """``<url|label>`` for a URL the bot built; the label is escaped like outside text."""
    if not url.startswith(("https://", "http://")) or any(c in url for c in "<>| "):
        raise ValueError("not a URL the bot built")
    return f"<{url}|{escape(label)}>"
