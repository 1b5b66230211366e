"""Configuration, read once from the environment (and an optional ``.env``) and passed down.

The variable names users set are the flat ``CRASHCART_*`` names of DESIGN.md §4.4. Stages take the
small groups they need (``BundleLimits``, ``ScanSettings``, ``StoreSettings``), never ``Settings``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_RAY_URL = re.compile(r"ray://[^\s:/]+:\d{1,5}")


def ray_address(value: str | None) -> str | None:
    """``ray://HOST:PORT``, ``local`` or None (empty); anything else is a ValueError saying what is expected."""
    if value is None or value.strip() == "":
        return None
    value = value.strip()
    if value == "local" or _RAY_URL.fullmatch(value):
        return value
    raise ValueError(f"expected ray://HOST:PORT or local, got {value!r}")


def _default_home() -> Path:
    return Path.home() / ".local" / "share" / "crashcart"


class BundleLimits(BaseModel):
    """Caps applied while opening a bundle (DESIGN §6)."""

    model_config = ConfigDict(frozen=True)

    max_total_bytes: int = 32 * 1024**3  # everything extracted, in bytes
    max_files: int = 50_000
    max_file_bytes: int = 8 * 1024**3  # one member, uncompressed
    max_ratio: float = 1000.0  # uncompressed / compressed, checked once past ratio_floor_bytes
    ratio_floor_bytes: int = 64 * 1024**2
    max_line_bytes: int = 64 * 1024  # longer lines are cut in the canonical text (line numbers stay)


class ScanSettings(BaseModel):
    """How the scan stage runs."""

    model_config = ConfigDict(frozen=True)

    workers: int = 0  # 0 = one per core
    buffer_bytes: int = 1024 * 1024  # newline-aligned buffer handed to the matcher
    matcher: Literal["auto", "hyperscan", "re"] = "auto"
    traceback_max_lines: int = 200
    max_findings_per_signature_per_file: int = 200  # the first and last 100 lines of a signature in one file


class StoreSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    db_path: Path


class LlmSettings(BaseModel):
    """What the LLM engine needs (DESIGN §5)."""

    model_config = ConfigDict(frozen=True)

    base_url: str = "https://api.tokenfactory.nebius.com/v1/"  # Nebius Token Factory
    api_key: SecretStr | None = None
    # Nemotron ids as Nebius Token Factory lists them; `crashcart doctor` checks them against the live catalogue.
    swarm_model: str = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B"
    reduce_model: str = "nvidia/Nemotron-3-Super-120b-a12b"
    vision_model: str = "nvidia/Nemotron-Nano-V2-12b"
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    max_concurrency: int = Field(default=8, ge=1)
    token_budget: int = Field(default=400_000, ge=0)
    cost_budget_usd: float = Field(default=2.0, ge=0)
    max_output_tokens: int = 2048
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)  # model -> USD per 1M (in, out)
    cassette: Path | None = None
    cassette_mode: Literal["off", "record", "replay"] = "off"


_LIMITS, _LLM = BundleLimits(), LlmSettings()
NEBIUS_TOKEN_FACTORY = _LLM.base_url
DEFAULT_SWARM_MODEL, DEFAULT_REDUCE_MODEL, DEFAULT_VISION_MODEL = _LLM.swarm_model, _LLM.reduce_model, _LLM.vision_model
# USD per million tokens (input, output), from the provider's public price list; override with CRASHCART_LLM_PRICES.
DEFAULT_PRICES = f"{DEFAULT_SWARM_MODEL}=0.06/0.24,{DEFAULT_REDUCE_MODEL}=0.30/0.90,{DEFAULT_VISION_MODEL}=0.07/0.20"


def parse_prices(text: str) -> dict[str, tuple[float, float]]:
    """``model=in/out,model=in/out`` (USD per million tokens) -> {model: (in, out)}."""
    out: dict[str, tuple[float, float]] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        model, sep, pair = item.strip().rpartition("=")
        inp, slash, outp = pair.partition("/")
        if not sep or not slash:
            raise ValueError(f"CRASHCART_LLM_PRICES: expected model=IN/OUT, got {item.strip()!r}")
        out[model.strip()] = (float(inp), float(outp))
    return out


class Settings(BaseSettings):
    """Every setting the core reads. Instantiate exactly once, at an entry point. Each default is written
    once, in the group model that uses it; the groups (``llm``, ``scan``, …) are built once per instance."""

    model_config = SettingsConfigDict(
        env_prefix="CRASHCART_", env_file=".env", extra="ignore", frozen=True, populate_by_name=True
    )

    db: Path = Field(default_factory=lambda: _default_home() / "crashcart.db")
    work_dir: Path = Field(default_factory=lambda: _default_home() / "work")
    engine: Literal["offline", "llm"] = "offline"
    approvers: str = ""  # comma-separated Slack user ids
    approver_group: str | None = None

    max_bundle_bytes: int = _LIMITS.max_total_bytes
    max_files: int = _LIMITS.max_files
    workers: int = ScanSettings().workers

    llm_base_url: str = _LLM.base_url
    llm_api_key: SecretStr | None = None
    swarm_model: str = _LLM.swarm_model
    reduce_model: str = _LLM.reduce_model
    vision_model: str = _LLM.vision_model
    llm_timeout_s: float = Field(default=_LLM.timeout_s, gt=0)
    llm_max_retries: int = Field(default=_LLM.max_retries, ge=0)
    llm_max_concurrency: int = Field(default=_LLM.max_concurrency, ge=1)
    llm_token_budget: int = Field(default=_LLM.token_budget, ge=0)
    llm_cost_budget_usd: float = Field(default=_LLM.cost_budget_usd, ge=0)
    llm_prices: str = DEFAULT_PRICES
    llm_cassette: Path | None = None  # record/replay file of model answers
    llm_cassette_mode: Literal["off", "record", "replay"] = _LLM.cassette_mode
    ray_address: str | None = None  # ray://HOST:PORT or local: the scan runs on Ray (crashcart.scan.cluster)

    @field_validator("ray_address")
    @classmethod
    def _ray_address(cls, value: str | None) -> str | None:
        return ray_address(value)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied; its groups are built again from the new values."""
        copy = super().model_copy(update=update, deep=deep)
        for cls in type(self).__mro__:
            for name, value in vars(cls).items():
                if isinstance(value, cached_property):
                    copy.__dict__.pop(name, None)
        return copy

    @cached_property
    def bundle_limits(self) -> BundleLimits:
        return BundleLimits(max_total_bytes=self.max_bundle_bytes, max_files=self.max_files)

    @cached_property
    def scan(self) -> ScanSettings:
        return ScanSettings(workers=self.workers)

    @cached_property
    def store(self) -> StoreSettings:
        return StoreSettings(db_path=self.db)

    @cached_property
    def approver_ids(self) -> list[str]:
        return [a.strip() for a in self.approvers.split(",") if a.strip()]

    @cached_property
    def llm(self) -> LlmSettings:
        prices = parse_prices(DEFAULT_PRICES) | parse_prices(self.llm_prices)
        return LlmSettings(
            base_url=self.llm_base_url,
            api_key=self.llm_api_key,
            swarm_model=self.swarm_model,
            reduce_model=self.reduce_model,
            vision_model=self.vision_model,
            timeout_s=self.llm_timeout_s,
            max_retries=self.llm_max_retries,
            max_concurrency=self.llm_max_concurrency,
            token_budget=self.llm_token_budget,
            cost_budget_usd=self.llm_cost_budget_usd,
            prices=prices,
            cassette=self.llm_cassette,
            cassette_mode=self.llm_cassette_mode,
        )
