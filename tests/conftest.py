"""Shared fixtures: a clean environment, tiny bundles written from inline text, test settings."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from fake_slack import FakeSlack

from crashcart.settings import Settings
from tests.fake_openai import FakeOpenAI

_PREFIXES = ("CRASHCART_", "SLACK_", "OPENAI_")
_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in list(os.environ):
        if key.startswith(_PREFIXES) or key in _PROXIES:
            monkeypatch.delenv(key, raising=False)
    yield


MakeBundle = Callable[..., Path]


@pytest.fixture
def make_bundle(tmp_path: Path) -> MakeBundle:
    """Write ``{relative path: text or bytes}`` into a fresh directory and return it."""
    counter = iter(range(1_000_000))

    def make(files: dict[str, str | bytes], name: str | None = None) -> Path:
        root = tmp_path / (name or f"bundle{next(counter)}")
        for rel, content in files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, str):
                p.write_text(content, encoding="utf-8", newline="")
            else:
                p.write_bytes(content)
        return root

    return make


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(_env_file=None, db=tmp_path / "db" / "crashcart.db", work_dir=tmp_path / "work")  # type: ignore[call-arg]


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    """A fake Slack Web API + Socket Mode server on 127.0.0.1 (tests/fake_slack.py), stopped afterwards."""
    server = await FakeSlack().start()
    yield server
    await server.stop()


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    """A fake OpenAI-compatible server on 127.0.0.1 (tests/fake_openai.py) serving the three role models."""
    server = FakeOpenAI(models=["swarm-m", "reduce-m", "vision-m"])
    await server.start()
    yield server
    await server.close()
