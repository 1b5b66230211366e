"""Configuration, read once from the environment (and an optional ``.env``) and passed down.

The variable names users set are the flat ``CRASHCART_*`` names of DESIGN.md §4.4. Stages take the
small groups they need (``BundleLimits``, ``ScanSettings``, ``StoreSettings``), never ``Settings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


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
    max_findings_per_signature_per_file: int = 5000


class StoreSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    db_path: Path


NEBIUS_TOKEN_FACTORY = "https://api.tokenfactory.nebius.com/v1/"
# Nemotron ids as Nebius Token Factory lists them; `crashcart doctor` checks them against the live catalogue.
DEFAULT_SWARM_MODEL = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B"
DEFAULT_REDUCE_MODEL = "nvidia/Nemotron-3-Super-120b-a12b"
DEFAULT_VISION_MODEL = "nvidia/Nemotron-Nano-V2-12b"
# USD per million tokens (input, output), from the provider's public price list; override with CRASHCART_LLM_PRICES.
DEFAULT_PRICES = f"{DEFAULT_SWARM_MODEL}=0.06/0.24,{DEFAULT_REDUCE_MODEL}=0.30/0.90,{DEFAULT_VISION_MODEL}=0.07/0.20"


class LlmSettings(BaseModel):
    """What the LLM engine needs (DESIGN §5)."""

    model_config = ConfigDict(frozen=True)

    base_url: str = NEBIUS_TOKEN_FACTORY
    api_key: SecretStr | None = None
    swarm_model: str = DEFAULT_SWARM_MODEL
    reduce_model: str = DEFAULT_REDUCE_MODEL
    vision_model: str = DEFAULT_VISION_MODEL
    timeout_s: float = 60.0
    max_retries: int = 4
    max_concurrency: int = 8
    token_budget: int = 400_000
    cost_budget_usd: float = 2.0
    max_output_tokens: int = 2048
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)  # model -> USD per 1M (in, out)
    cassette: Path | None = None
    cassette_mode: Literal["off", "record", "replay"] = "off"


class SlackSettings(BaseModel):
    """What the Slack bot needs (issue 5); secrets stay SecretStr so they never print."""

    model_config = ConfigDict(frozen=True)

    bot_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    app_token: SecretStr | None = None
    api_url: str = "https://slack.com/api/"
    jobs_dir: Path | None = None
    approvers: tuple[str, ...] = ()
    approver_group: str | None = None
    max_upload_bytes: int = 2 * 1024**3
    max_jobs: int = 2
    job_timeout_s: float = 900.0


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
    """Every setting CrashCart reads. Instantiate exactly once, at an entry point."""

    model_config = SettingsConfigDict(
        env_prefix="CRASHCART_", env_file=".env", extra="ignore", frozen=True, populate_by_name=True
    )

    db: Path = Field(default_factory=lambda: _default_home() / "crashcart.db")
    work_dir: Path = Field(default_factory=lambda: _default_home() / "work")
    engine: Literal["offline", "llm"] = "offline"
    approvers: str = ""  # comma-separated Slack user ids
    approver_group: str | None = None

    max_bundle_bytes: int = BundleLimits().max_total_bytes
    max_files: int = BundleLimits().max_files
    workers: int = 0

    llm_base_url: str = NEBIUS_TOKEN_FACTORY
    llm_api_key: SecretStr | None = None
    swarm_model: str = DEFAULT_SWARM_MODEL
    reduce_model: str = DEFAULT_REDUCE_MODEL
    vision_model: str = DEFAULT_VISION_MODEL
    llm_timeout_s: float = Field(default=60.0, gt=0)
    llm_max_retries: int = Field(default=4, ge=0)
    llm_max_concurrency: int = Field(default=8, ge=1)
    llm_token_budget: int = Field(default=400_000, ge=0)
    llm_cost_budget_usd: float = Field(default=2.0, ge=0)
    llm_prices: str = DEFAULT_PRICES
    llm_cassette: Path | None = None  # record/replay file of model answers
    llm_cassette_mode: Literal["off", "record", "replay"] = "off"

    slack_bot_token: SecretStr | None = Field(default=None, validation_alias=AliasChoices("SLACK_BOT_TOKEN"))
    slack_signing_secret: SecretStr | None = Field(default=None, validation_alias=AliasChoices("SLACK_SIGNING_SECRET"))
    slack_app_token: SecretStr | None = Field(default=None, validation_alias=AliasChoices("SLACK_APP_TOKEN"))
    slack_api_url: str = "https://slack.com/api/"
    jobs_dir: Path | None = None
    bot_max_upload_bytes: int = Field(default=2 * 1024**3, ge=1)
    bot_max_jobs: int = Field(default=2, ge=1)
    bot_job_timeout_s: float = Field(default=900.0, gt=0)

    @property
    def bundle_limits(self) -> BundleLimits:
        return BundleLimits(max_total_bytes=self.max_bundle_bytes, max_files=self.max_files)

    @property
    def scan(self) -> ScanSettings:
        return ScanSettings(workers=self.workers)

    @property
    def store(self) -> StoreSettings:
        return StoreSettings(db_path=self.db)

    @property
    def approver_ids(self) -> list[str]:
        return [a.strip() for a in self.approvers.split(",") if a.strip()]

    @property
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

    @property
    def slack(self) -> SlackSettings:
        return SlackSettings(
            bot_token=self.slack_bot_token,
            signing_secret=self.slack_signing_secret,
            app_token=self.slack_app_token,
            api_url=self.slack_api_url,
            jobs_dir=self.jobs_dir,
            approvers=tuple(self.approver_ids),
            approver_group=self.approver_group,
            max_upload_bytes=self.bot_max_upload_bytes,
            max_jobs=self.bot_max_jobs,
            job_timeout_s=self.bot_job_timeout_s,
        )
