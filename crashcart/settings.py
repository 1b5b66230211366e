"""Configuration, read once from the environment (and an optional ``.env``) and passed down.

The variable names users set are the flat ``CRASHCART_*`` names of DESIGN.md §4.4. Stages take the
small groups they need (``BundleLimits``, ``ScanSettings``, ``StoreSettings``), never ``Settings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
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


class Settings(BaseSettings):
    """Every setting CrashCart reads. Instantiate exactly once, at an entry point."""

    model_config = SettingsConfigDict(env_prefix="CRASHCART_", env_file=".env", extra="ignore", frozen=True)

    db: Path = Field(default_factory=lambda: _default_home() / "crashcart.db")
    work_dir: Path = Field(default_factory=lambda: _default_home() / "work")
    engine: Literal["offline", "llm"] = "offline"
    approvers: str = ""  # comma-separated Slack user ids
    approver_group: str | None = None

    max_bundle_bytes: int = BundleLimits().max_total_bytes
    max_files: int = BundleLimits().max_files
    workers: int = 0

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
