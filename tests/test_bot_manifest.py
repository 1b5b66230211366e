"""manifest.yml matches the bot: every event it listens to is subscribed with its scope, every Web API
method it calls has its scope, and the slash command, interactivity and Socket Mode are declared."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fake_slack import bot_settings

from bot.app import build_app
from bot.approvers import Approvers
from bot.queue import JobQueue
from bot.worker import Worker
from crashcart import Store

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
# Slack's Events API: the event type a listener sees -> the bot events that deliver it, and their scopes.
EVENT_REQUIREMENTS: dict[str, dict[str, str]] = {
    "message": {"message.channels": "channels:history", "message.groups": "groups:history"},
    "app_mention": {"app_mention": "app_mentions:read"},
    "app_home_opened": {"app_home_opened": ""},  # no scope: a bot user is enough
}
# Web API methods (as AsyncWebClient method names) -> the bot scope they need (None: no scope).
METHOD_SCOPES: dict[str, str | None] = {
    "auth_test": None,
    "chat_postMessage": "chat:write",
    "chat_update": "chat:write",
    "chat_postEphemeral": "chat:write",
    "files_info": "files:read",
    "files_upload_v2": "files:write",
    "usergroups_users_list": "usergroups:read",
    "views_open": None,
    "views_publish": None,
    "users_info": "users:read",
    "users_conversations": "channels:read",
}


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "manifest.yml").read_text())
    assert isinstance(data, dict)
    return data


class _Fake:  # only for bot_settings(); nothing is called
    bot_token = "xoxb-unused"
    app_token = "xapp-unused"
    api_url = "http://127.0.0.1:9/api/"


def listened_events(tmp_path: Path) -> set[str]:
    from bot.main import make_client

    settings = bot_settings(tmp_path, _Fake())  # type: ignore[arg-type]
    client = make_client(settings.slack)
    store = Store(settings.store)
    queue = JobQueue(settings.db)
    try:
        worker = Worker(settings, client, queue, store)
        approvers = Approvers(settings.slack.approvers, None, client)
        _, handlers = build_app(settings, client, queue, worker, store, approvers, mode="socket")
        return handlers.events
    finally:
        queue.close()
        store.close()


def test_every_listened_event_is_subscribed_with_its_scope(manifest: dict[str, Any], tmp_path: Path) -> None:
    events = listened_events(tmp_path)
    assert events == {"message", "app_mention", "app_home_opened"}
    subscribed = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    for event in events:
        assert event in EVENT_REQUIREMENTS, f"add the bot events and scopes of {event!r} to this test and manifest.yml"
        for bot_event, scope in EVENT_REQUIREMENTS[event].items():
            assert bot_event in subscribed, bot_event
            assert not scope or scope in scopes, scope


def test_every_web_api_call_has_its_scope(manifest: dict[str, Any]) -> None:
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    source = "\n".join(p.read_text() for p in (ROOT / "bot").glob("*.py"))
    called = set(re.findall(r"client\.([a-z]+_[A-Za-z0-9_]+)\(", source))
    assert {"chat_postMessage", "files_info", "files_upload_v2", "usergroups_users_list", "views_open"} <= called
    for method in called:
        assert method in METHOD_SCOPES, f"add the scope of {method} to this test and manifest.yml"
        scope = METHOD_SCOPES[method]
        assert scope is None or scope in scopes, (method, scope)


def test_command_interactivity_and_socket_mode(manifest: dict[str, Any]) -> None:
    assert [c["command"] for c in manifest["features"]["slash_commands"]] == ["/crashcart"]
    assert "commands" in manifest["oauth_config"]["scopes"]["bot"]
    assert manifest["settings"]["interactivity"]["is_enabled"] is True
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert manifest["settings"]["token_rotation_enabled"] is False
    assert 175 <= len(manifest["display_information"]["long_description"]) <= 4000
    # a Messages tab without message.im would invite DMs the bot never hears
    dms = "message.im" in manifest["settings"]["event_subscriptions"]["bot_events"]
    assert manifest["features"]["app_home"]["messages_tab_enabled"] is dms


def test_home_tab_and_message_shortcut(manifest: dict[str, Any]) -> None:
    from bot.app import SHORTCUT

    assert manifest["features"]["app_home"]["home_tab_enabled"] is True
    [shortcut] = manifest["features"]["shortcuts"]
    assert (shortcut["type"], shortcut["callback_id"], shortcut["name"]) == (
        "message",
        SHORTCUT,
        "Diagnose with CrashCart",
    )
    assert len(shortcut["description"]) <= 80
    # the Home tab lists private channels too: users.conversations needs both read scopes
    assert {"channels:read", "groups:read", "users:read"} <= set(manifest["oauth_config"]["scopes"]["bot"])
