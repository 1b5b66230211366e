"""One way to call a model: structured answers, retries, budgets, a cache, a ledger of every call.

``ModelClient.structured(role, model, system, user, schema)`` returns a validated pydantic object or
raises ``ModelCallFailed`` (the caller records a scan failure or falls back) or ``BudgetExhausted``.
Structured output is asked for as a JSON-schema ``response_format``; an endpoint that rejects it gets
JSON mode with the schema in the prompt (remembered per model); an answer that does not validate gets
one repair retry quoting the error. 429 (honouring ``Retry-After``), 5xx, timeouts and connection
errors are retried with exponential backoff and jitter. Nothing here logs a key or a prompt.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import openai
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, ValidationError

from crashcart.errors import BudgetExhausted, ModelCallFailed
from crashcart.settings import LlmSettings

T = TypeVar("T", bound=BaseModel)
Role = Literal["swarm", "reduce", "vision", "doctor"]
Status = Literal["ok", "cached", "replayed", "repaired", "invalid", "error", "budget"]
Content = str | list[dict[str, Any]]

MAX_RETRY_AFTER_S = 30.0
RETRY_STATUSES = frozenset({408, 409, 429})
_THINK = re.compile(r"<think>.*?</think>", re.S)
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


class AnswerCache(Protocol):
    def cache_get(self, key: str) -> str | None: ...

    def cache_put(self, key: str, role: str, model: str, content: str) -> None: ...


@dataclass(frozen=True)
class CallRecord:
    role: str
    model: str
    prompt_hash: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cost_usd: float
    status: Status
    attempts: int = 1
    error: str | None = None


@dataclass
class Ledger:
    """Every call of one incident, and the budget they draw on."""

    token_budget: int
    cost_budget_usd: float
    calls: list[CallRecord] = field(default_factory=list)
    exhausted: bool = False
    pending_tokens: int = 0  # reserved by calls in flight
    pending_cost: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(c.prompt_tokens + c.completion_tokens for c in self.calls)

    @property
    def cost_usd(self) -> float:
        return sum(c.cost_usd for c in self.calls)

    def reserve(self, tokens: int, cost: float) -> None:
        """Hold the most a call may use; calls in flight count, so parallel calls cannot overshoot."""
        over_tokens = self.tokens + self.pending_tokens + tokens > self.token_budget
        if over_tokens or self.cost_usd + self.pending_cost + cost > self.cost_budget_usd:
            self.exhausted = True
            raise BudgetExhausted(
                f"budget reached: {self.tokens:,} of {self.token_budget:,} tokens, "
                f"${self.cost_usd:.4f} of ${self.cost_budget_usd:.2f}"
            )
        self.pending_tokens += tokens
        self.pending_cost += cost

    def release(self, tokens: int, cost: float) -> None:
        self.pending_tokens -= tokens
        self.pending_cost -= cost


def estimate_tokens(content: Content | str) -> int:
    """About four characters a token; images count a fixed 1,000."""
    if isinstance(content, str):
        return len(content) // 4 + 1
    total = 0
    for part in content:
        total += 1000 if part.get("type") == "image_url" else len(str(part.get("text", ""))) // 4 + 1
    return total


class Cassette:
    """Recorded answers (JSON lines: key, role, model, content) for deterministic replay without network."""

    def __init__(self, path: Path, mode: Literal["record", "replay"]) -> None:
        self.path, self.mode = path, mode
        self._answers: dict[str, str] = {}
        if path.is_file():
            for raw in path.read_text(encoding="utf-8").splitlines():
                if raw.strip():
                    row = json.loads(raw)
                    self._answers[row["key"]] = row["content"]

    def cache_get(self, key: str) -> str | None:
        return self._answers.get(key)

    def cache_put(self, key: str, role: str, model: str, content: str) -> None:
        if self._answers.get(key) == content:
            return
        self._answers[key] = content
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"key": key, "role": role, "model": model, "content": content}, sort_keys=True) + "\n")


def call_key(model: str, version: str, messages: list[dict[str, Any]], schema: type[BaseModel]) -> str:
    blob = json.dumps({"m": model, "v": version, "s": schema.__name__, "msg": messages}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def parse_answer(content: str, schema: type[T]) -> T:
    """JSON (a fenced block is accepted) validated against ``schema``; raises ValueError/ValidationError."""
    text = _THINK.sub("", content).strip()  # reasoning models may think aloud first
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    if not text.startswith("{"):  # some models write a sentence first
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end <= start:
            raise ValueError("the answer holds no JSON object")
        text = text[start : end + 1]
    return schema.model_validate_json(text)


class ModelClient:
    """Shared by the roles of one incident: one ``AsyncOpenAI``, one semaphore, one ledger."""

    def __init__(
        self,
        settings: LlmSettings,
        *,
        version: str,
        cache: AnswerCache | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.version = version  # prompt version + redaction policy: part of every cache key
        self.cache = cache
        self.ledger = Ledger(settings.token_budget, settings.cost_budget_usd)
        self.cassette = (
            Cassette(settings.cassette, settings.cassette_mode)
            if settings.cassette is not None and settings.cassette_mode != "off"
            else None
        )
        self._sleep = sleep
        self._sem = asyncio.Semaphore(settings.max_concurrency)
        self._no_schema: set[str] = set()  # models whose endpoint refused json_schema
        key = settings.api_key.get_secret_value() if settings.api_key else "not-set"
        self._client = openai.AsyncOpenAI(
            api_key=key, base_url=settings.base_url, timeout=settings.timeout_s, max_retries=0
        )
        self.unavailable = False

    async def close(self) -> None:
        await self._client.close()

    def price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        p_in, p_out = self.settings.prices.get(model, (0.0, 0.0))
        return (prompt_tokens * p_in + completion_tokens * p_out) / 1_000_000

    async def structured(
        self, role: Role, model: str, system: str, user: Content, schema: type[T], *, max_tokens: int | None = None
    ) -> T:
        limit = min(max_tokens or self.settings.max_output_tokens, self.settings.max_output_tokens)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        key = call_key(model, self.version, messages, schema)
        phash = key[:16]
        for source, status in ((self.cache, "cached"), (self.cassette, "replayed")):
            stored = await asyncio.to_thread(source.cache_get, key) if source is not None else None
            if stored is not None:
                try:
                    parsed = parse_answer(stored, schema)
                except (ValueError, ValidationError):
                    continue
                self.ledger.calls.append(CallRecord(role, model, phash, 0, 0, 0.0, 0.0, status))  # type: ignore[arg-type]
                return parsed
        if self.cassette is not None and self.cassette.mode == "replay":
            self.ledger.calls.append(CallRecord(role, model, phash, 0, 0, 0.0, 0.0, "error", error="not recorded"))
            raise ModelCallFailed(f"{role}: no recorded answer in {self.cassette.path.name} (record it first)")
        est_in = estimate_tokens(system) + estimate_tokens(user)
        hold = (2 * (est_in + limit), 2 * self.price(model, est_in, limit))  # a repair retry may double it
        async with self._sem:  # only calls in flight hold budget, not those waiting for a slot
            self.ledger.reserve(*hold)
            try:
                parsed, content = await self._ask(role, model, messages, schema, limit, phash)
            finally:
                self.ledger.release(*hold)
        for sink in (self.cache, self.cassette):
            if sink is not None:
                await asyncio.to_thread(sink.cache_put, key, role, model, content)
        return parsed

    async def _ask(
        self, role: Role, model: str, messages: list[dict[str, Any]], schema: type[T], limit: int, phash: str
    ) -> tuple[T, str]:
        content = await self._send(role, model, messages, schema, limit, phash)
        try:
            return parse_answer(content, schema), content
        except (ValueError, ValidationError) as exc:
            problem = _one_line(exc)
        repair = [
            *messages,
            {"role": "assistant", "content": content[:4000]},
            {
                "role": "user",
                "content": f"That answer was rejected: {problem}. Answer again with one JSON object that "
                "matches the schema exactly, and nothing else.",
            },
        ]
        content = await self._send(role, model, repair, schema, limit, phash, repair=True)
        try:
            return parse_answer(content, schema), content
        except (ValueError, ValidationError) as exc:
            self._mark_last("invalid", _one_line(exc))
            raise ModelCallFailed(f"{role}: the answer did not validate after one repair ({_one_line(exc)})") from exc

    def _mark_last(self, status: Status, error: str) -> None:
        last = self.ledger.calls[-1]
        self.ledger.calls[-1] = CallRecord(
            last.role,
            last.model,
            last.prompt_hash,
            last.prompt_tokens,
            last.completion_tokens,
            last.latency_s,
            last.cost_usd,
            status,
            last.attempts,
            error,
        )

    def _format(self, model: str, schema: type[BaseModel]) -> dict[str, Any]:
        if model in self._no_schema:
            return {"type": "json_object"}
        return {
            "type": "json_schema",
            "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema(), "strict": False},
        }

    async def _send(
        self,
        role: Role,
        model: str,
        messages: list[dict[str, Any]],
        schema: type[BaseModel],
        limit: int,
        phash: str,
        *,
        repair: bool = False,
    ) -> str:
        attempts, start = 0, time.perf_counter()
        while True:
            attempts += 1
            fmt = self._format(model, schema)
            msgs = messages if fmt["type"] == "json_schema" else _with_schema(messages, schema)
            try:
                params: dict[str, Any] = {
                    "model": model,
                    "messages": msgs,
                    "response_format": fmt,
                    "max_tokens": limit,
                    "temperature": 0.0,
                }
                resp = await self._client.chat.completions.create(**params)
            except openai.BadRequestError as exc:
                if fmt["type"] == "json_schema" and _about_format(exc):
                    self._no_schema.add(model)
                    attempts -= 1
                    continue
                return self._fail(role, model, phash, attempts, start, f"rejected: {_status_line(exc)}")
            except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
                self.unavailable = True
                return self._fail(role, model, phash, attempts, start, _status_line(exc), unavailable=True)
            except (openai.APIStatusError, openai.APIError, ValueError) as exc:
                # 429, 408, 5xx, timeouts, connection errors, and bodies that are not a completion (a proxy's
                # HTML page, broken JSON) are retried; other statuses fail this call
                if isinstance(exc, openai.APIStatusError) and not _retryable(exc.status_code):
                    return self._fail(role, model, phash, attempts, start, _status_line(exc))
                if attempts > self.settings.max_retries:
                    self.unavailable = True
                    return self._fail(role, model, phash, attempts, start, _status_line(exc), unavailable=True)
                await self._sleep(_backoff(exc, attempts))
                continue
            if not isinstance(resp, ChatCompletion) or not resp.choices:
                if attempts > self.settings.max_retries:
                    self.unavailable = True
                    return self._fail(
                        role, model, phash, attempts, start, "no completion in the answer", unavailable=True
                    )
                await self._sleep(_backoff(None, attempts))
                continue
            break
        usage = resp.usage
        p_tok = usage.prompt_tokens if usage else estimate_tokens(json.dumps(msgs))
        c_tok = usage.completion_tokens if usage else 0
        content = resp.choices[0].message.content
        self.ledger.calls.append(
            CallRecord(
                role,
                model,
                phash,
                p_tok,
                c_tok,
                round(time.perf_counter() - start, 3),
                self.price(model, p_tok, c_tok),
                "repaired" if repair else "ok",
                attempts,
            )
        )
        return content or ""

    def _fail(
        self, role: Role, model: str, phash: str, attempts: int, start: float, why: str, *, unavailable: bool = False
    ) -> str:
        latency = round(time.perf_counter() - start, 3)
        self.ledger.calls.append(CallRecord(role, model, phash, 0, 0, latency, 0.0, "error", attempts, why))
        raise ModelCallFailed(f"{role}: {why}", unavailable=unavailable)


def _with_schema(messages: list[dict[str, Any]], schema: type[BaseModel]) -> list[dict[str, Any]]:
    """JSON mode: the schema goes into the system prompt instead of ``response_format``."""
    first, *rest = messages
    text = f"{first['content']}\n\nAnswer with one JSON object matching this JSON schema:\n"
    return [{"role": "system", "content": text + json.dumps(schema.model_json_schema())}, *rest]


def _retryable(status: int) -> bool:
    return status in RETRY_STATUSES or status >= 500


def _about_format(exc: openai.BadRequestError) -> bool:
    return bool(re.search(r"response_format|json_schema|structured output", str(exc), re.I))


def _backoff(exc: Exception | None, attempt: int) -> float:
    """``Retry-After`` / ``retry-after-ms`` when the server says (capped), else exponential with jitter."""
    response = getattr(exc, "response", None)
    headers = response.headers if response is not None else {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = str(headers.get(name) or "")
        try:
            if value:
                return min(max(float(value) * scale, 0.0), MAX_RETRY_AFTER_S)
        except ValueError:
            continue
    base: float = min(0.5 * 2.0 ** (attempt - 1), 8.0)
    return base * (0.5 + random.random() / 2)


def _status_line(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    kind = type(exc).__name__
    if isinstance(exc, openai.APITimeoutError):
        return "timed out"
    if isinstance(exc, openai.APIConnectionError):
        return "connection failed"
    return f"HTTP {status} ({kind})" if status else kind


def _one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        errs = exc.errors()
        if not errs:
            return "validation failed"
        where = ".".join(str(p) for p in errs[0]["loc"])
        return f"{len(errs)} validation error(s), first at {where or 'top'}: {errs[0]['msg']}"[:300]
    return " ".join(str(exc).split())[:300]
