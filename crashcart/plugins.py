"""Commands and checks that other installed packages add to ``crashcart``, found by entry point.

A plugin is an object registered under the entry-point group ``crashcart.plugins``; it adds subcommands
to the CLI, runs them, and may add rows to ``crashcart doctor``. This is how the Slack bot gives the CLI
``crashcart bot`` while the core never imports it (``bot.plugin`` is registered in ``pyproject.toml``).
A plugin that fails to load is reported, never fatal to the other commands.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Protocol

from crashcart.settings import Settings

GROUP = "crashcart.plugins"


@dataclass(frozen=True)
class Check:
    """One row of ``crashcart doctor``."""

    name: str
    status: str  # "ok", "fail", "skip"
    detail: str
    fix: str = ""


class Plugin(Protocol):
    commands: tuple[str, ...]  # the subcommands it adds
    settings_class: type[Settings]  # what the CLI reads from the environment for it (a Settings subclass)

    def add_commands(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None: ...

    def run(self, args: argparse.Namespace, settings: Settings) -> int:
        """Run one of ``commands`` with settings of ``settings_class``."""
        ...

    def doctor_checks(self, settings: Settings) -> list[Callable[[], Awaitable[Check]]]: ...


def load_plugins() -> list[Plugin]:
    """The installed plugins, in entry-point name order."""
    found: list[Plugin] = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        found.append(ep.load())
    return found
