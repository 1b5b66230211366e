"""Prompts are versioned files beside this module; their hash is part of every cache key."""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources

from crashcart.catalogue import load_catalogue

ROLES = ("swarm", "reduce", "vision")


@cache
def load_prompt(role: str) -> str:
    return resources.files(__package__).joinpath(f"{role}.md").read_text(encoding="utf-8")


@cache
def classes_block() -> str:
    """The class vocabulary, one id and title a line: the only class ids a model may answer."""
    classes = load_catalogue().classes
    rows = [f"- {cid}: {info.title}" for cid, info in sorted(classes.items()) if info.default_role != "verdict"]
    return "CLASSES:\n" + "\n".join(rows) + "\n- unknown: none of these"


@cache
def prompt_version() -> str:
    digest = hashlib.sha256("".join(load_prompt(r) for r in ROLES).encode()).hexdigest()[:12]
    return f"prompts-{digest}"
