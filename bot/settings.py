"""The bot's settings: the core's, plus what only the Slack bot reads (DESIGN §4.4).

``BotSettings`` is read once, by ``crashcart bot``; ``.slack`` is the group the bot's parts take. Secrets
stay ``SecretStr`` so they never print. The core (``crashcart.settings``) knows nothing of these names.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr

from crashcart.settings import Settings


class SlackSettings(BaseModel):
    """What the Slack bot's parts need."""

    model_config = ConfigDict(frozen=True)

    bot_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    app_token: SecretStr | None = None
    api_url: str = "https://slack.com/api/"
    jobs_dir: Path | None = None
    approvers: tuple[str, ...] = ()
    approver_group: str | None = None
    max_upload_bytes: int = Field(default=2 * 1024**3, ge=1)
    max_jobs: int = Field(default=2, ge=1)
    job_timeout_s: float = Field(default=900.0, gt=0)
    channels: tuple[str, ...] = ()  # empty: every channel the bot is in
    allowed_bots: tuple[str, ...] = ()


_DEFAULT = SlackSettings()


def _slack_name(name: str) -> AliasChoices:
    """Slack's own variable names carry no CRASHCART_ prefix (the field name still works as a keyword)."""
    return AliasChoices(name)


class BotSettings(Settings):
    """Every setting ``crashcart bot`` reads: the core's and the bot's own."""

    slack_bot_token: SecretStr | None = Field(default=None, validation_alias=_slack_name("SLACK_BOT_TOKEN"))
    slack_signing_secret: SecretStr | None = Field(default=None, validation_alias=_slack_name("SLACK_SIGNING_SECRET"))
    slack_app_token: SecretStr | None = Field(default=None, validation_alias=_slack_name("SLACK_APP_TOKEN"))
    slack_api_url: str = _DEFAULT.api_url
    jobs_dir: Path | None = None
    bot_max_upload_bytes: int = Field(default=_DEFAULT.max_upload_bytes, ge=1)
    bot_max_jobs: int = Field(default=_DEFAULT.max_jobs, ge=1)
    bot_job_timeout_s: float = Field(default=_DEFAULT.job_timeout_s, gt=0)
    bot_channels: str = ""  # comma-separated channel ids (CRASHCART_BOT_CHANNELS)
    bot_allowed_bots: str = ""  # comma-separated bot ids, B… (CRASHCART_BOT_ALLOWED_BOTS)

    @cached_property
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
            channels=_ids(self.bot_channels),
            allowed_bots=_ids(self.bot_allowed_bots),
        )


def _ids(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())
