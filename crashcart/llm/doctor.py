"""``crashcart doctor``: is the model endpoint usable, and do the configured model ids exist (plugins add rows:
the bot checks Slack auth).

Each check is a row (name, ok/fail/skip, detail, what to fix). Nothing here prints a key or a token.
"""

from __future__ import annotations

import base64
import struct
import zlib
from urllib.parse import urlsplit, urlunsplit

import openai

from crashcart.errors import ModelCallFailed
from crashcart.llm.client import ModelClient, Role
from crashcart.llm.prompts import prompt_version
from crashcart.llm.schemas import Ping
from crashcart.plugins import Check
from crashcart.settings import Settings

PING_SYSTEM = 'ROLE: doctor\nAnswer with the JSON object {"ok": true} and nothing else.'


def tiny_png() -> bytes:
    """A 2x2 grey PNG, written by hand so the check needs no image library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + b"\x80\x80\x80" * 2 for _ in range(2))
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


async def run_checks(settings: Settings) -> list[Check]:
    llm = settings.llm.model_copy(update={"max_retries": 1, "cassette": None, "cassette_mode": "off"})
    checks: list[Check] = []
    roles: tuple[tuple[Role, str], ...] = (
        ("swarm", llm.swarm_model),
        ("reduce", llm.reduce_model),
        ("vision", llm.vision_model),
    )
    if llm.api_key is None:  # nothing to check without a key, and the default engine needs none
        checks.append(
            Check(
                "api key",
                "skip",
                "CRASHCART_LLM_API_KEY is not set: fine for the default offline engine, which needs no key, "
                "endpoint or model",
                "set CRASHCART_LLM_API_KEY only to use --engine llm",
            )
        )
        checks.append(Check("endpoint", "skip", "not contacted without a key"))
        checks += [Check(f"{role} model", "skip", model) for role, model in roles]
        return checks
    checks.append(Check("api key", "ok", "set (not shown)"))
    client = ModelClient(llm, version=prompt_version())
    try:
        served = await _models(client, llm.base_url, checks)
        if served is None:  # the endpoint failed: a model call cannot tell anything more
            checks += [
                Check(f"{role} model", "skip", f"{model}: not checked, the endpoint failed") for role, model in roles
            ]
            return checks
        for role, model in roles:
            env = f"CRASHCART_{role.upper()}_MODEL"
            if model in served:
                checks.append(Check(f"{role} model", "ok", model))
            else:
                near = ", ".join(m for m in sorted(served) if "nemotron" in m.lower())[:300] or "none"
                checks.append(
                    Check(f"{role} model", "fail", f"{model} is not served", f"set {env}; Nemotron served: {near}")
                )
            checks.append(await _ping(client, role, model, env))
    finally:
        await client.close()
    return checks


def _shown(url: str) -> str:
    """The URL without any user:password@ part."""
    parts = urlsplit(url)
    if not parts.hostname:
        return url
    return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))


async def _models(client: ModelClient, base_url: str, checks: list[Check]) -> set[str] | None:
    base_url = _shown(base_url)
    try:
        page = await client._client.models.list()
    except openai.AuthenticationError:
        checks.append(Check("endpoint", "fail", f"{base_url} refused the key (401)", "check CRASHCART_LLM_API_KEY"))
        return None
    except (openai.APIConnectionError, openai.APIStatusError) as exc:
        detail = f"{base_url}: {type(exc).__name__}"
        checks.append(Check("endpoint", "fail", detail, "check CRASHCART_LLM_BASE_URL and the network"))
        return None
    ids = {m.id for m in page.data}
    checks.append(Check("endpoint", "ok", f"{base_url} serves {len(ids)} models"))
    return ids


async def _ping(client: ModelClient, role: Role, model: str, env: str) -> Check:
    if role == "vision":
        url = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()
        user: str | list[dict[str, object]] = [
            {"type": "text", "text": "A test image."},
            {"type": "image_url", "image_url": {"url": url}},
        ]
    else:
        user = "ping"
    try:
        await client.structured(role, model, PING_SYSTEM, user, Ping, max_tokens=32)
    except ModelCallFailed as exc:
        if exc.unavailable:  # the endpoint, not the model: no model fix to suggest
            return Check(f"{role} call", "fail", exc.reason, "check CRASHCART_LLM_BASE_URL and the network")
        needs = "JSON answers and images" if role == "vision" else "JSON answers"
        return Check(f"{role} call", "fail", exc.reason, f"check that {env} is a model with {needs}")
    return Check(f"{role} call", "ok", "structured answer validated")
