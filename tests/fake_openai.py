"""A fake OpenAI-compatible server: aiohttp on 127.0.0.1, port 0.

The real ``AsyncOpenAI`` client is pointed at ``server.base_url``. Every request body is recorded.
Answers come from a script (``queue``) first, then from ``default`` — by default a small
deterministic stand-in model (``stand_in``) that reads the prompt the way a model would be asked to:
it points at lines of the data block that look like errors, and in a reduce prompt it agrees with the
first hint. Failures on demand: any status, ``Retry-After``, delays, malformed bodies.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    status: int = 200
    content: str | None = None  # the assistant message text (for status 200)
    body: str | None = None  # a raw body instead of a chat completion (malformed answers, errors)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    content_type: str = "application/json"


def answer(obj: Any, **kw: Any) -> Reply:
    return Reply(content=obj if isinstance(obj, str) else json.dumps(obj), **kw)


def error(status: int, message: str = "error", *, retry_after: float | None = None) -> Reply:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return Reply(status=status, body=json.dumps({"error": {"message": message, "type": "x"}}), headers=headers)


Responder = Callable[[dict[str, Any]], Reply]

_LINE = re.compile(r"^(?P<file>[^\s|]+):(?P<line>\d+)\| (?P<text>.*)$")
_ERRORISH = re.compile(r"error|fatal|xid|fallen off|timed out|timeout|killed|exception|oom|nan|fail", re.I)


def request_text(req: dict[str, Any]) -> str:
    parts: list[str] = []
    for m in req.get("messages", []):
        c = m.get("content")
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            parts.extend(p.get("text", "") for p in c if isinstance(p, dict))
    return "\n".join(parts)


def role_of(req: dict[str, Any]) -> str:
    system = next((m.get("content") for m in req.get("messages", []) if m.get("role") == "system"), "") or ""
    m = re.search(r"ROLE: (\w+)", system if isinstance(system, str) else "")
    return m.group(1) if m else "?"


def stand_in(req: dict[str, Any]) -> Reply:
    """A deterministic stand-in model: good enough to exercise every path, no judgement of its own."""
    role, text = role_of(req), request_text(req)
    if role == "swarm":
        found = []
        for raw in text.splitlines():
            m = _LINE.match(raw)
            if m and _ERRORISH.search(m["text"]):
                found.append(
                    {
                        "file": m["file"],
                        "line": int(m["line"]),
                        "quote": m["text"][:120],
                        "class_id": "unknown",
                        "role": "root_candidate",
                        "severity": "P2",
                        "summary": "error line",
                    }
                )
        return answer({"findings": found[:20]})
    if role == "reduce":
        hint = re.search(r"HINT 1: class=(\S+) evidence=(\S+)", text)
        if hint is None:
            return answer(
                {"root_class": "unknown", "summary": "not decisive", "root_evidence_ids": [], "confidence": 0.2}
            )
        ids = [i for i in hint.group(2).split(",") if i]
        return answer(
            {
                "root_class": hint.group(1),
                "summary": f"{hint.group(1).replace('_', ' ')} (agrees with the deterministic analysis)",
                "root_evidence_ids": ids,
                "confidence": 0.8,
                "reasoning": ["the earliest specific fault precedes the collective timeouts"],
            }
        )
    if role == "vision":
        return answer({"observations": []})
    return answer({"ok": True})


class FakeOpenAI:
    def __init__(self, models: list[str] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.raw: list[str] = []  # every request body as received, for "no secret was sent" checks
        self.script: deque[Reply] = deque()
        self.default: Responder = stand_in
        self.models = models if models is not None else []
        self.reject_json_schema = False  # answer 400 to response_format json_schema, like some endpoints
        self.auth: list[str | None] = []
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def queue(self, *replies: Reply) -> None:
        self.script.extend(replies)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        self.auth.append(request.headers.get("Authorization"))
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.text()
        self.raw.append(body)
        self.auth.append(request.headers.get("Authorization"))
        req = json.loads(body)
        self.requests.append(req)
        fmt = (req.get("response_format") or {}).get("type")
        if self.reject_json_schema and fmt == "json_schema":
            r = error(400, "response_format json_schema is not supported by this model")
        elif self.script:
            r = self.script.popleft()
        else:
            r = self.default(req)
        if r.delay:
            await asyncio.sleep(r.delay)
        if r.body is not None or r.status != 200:
            return web.Response(status=r.status, text=r.body or "", headers=r.headers, content_type=r.content_type)
        prompt_tokens = r.prompt_tokens if r.prompt_tokens is not None else len(request_text(req)) // 4
        content = r.content or ""
        completion_tokens = r.completion_tokens if r.completion_tokens is not None else len(content) // 4
        payload = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": req.get("model", "?"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return web.json_response(payload, headers=r.headers)
