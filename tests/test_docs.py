"""Docs are checked: every setting is in the README's table, and the README's commands name real things."""

from __future__ import annotations

from pathlib import Path

from crashcart.errors import CrashCartError
from crashcart.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_every_setting_is_documented() -> None:
    from bot.settings import BotSettings

    for name, field in {**Settings.model_fields, **BotSettings.model_fields}.items():
        alias = field.validation_alias
        env = alias.choices[0] if alias is not None else f"CRASHCART_{name.upper()}"  # type: ignore[union-attr]
        assert f"`{env}`" in README, name


def test_readme_default_incident_exists() -> None:
    assert "crashcart diagnose incidents/gpu-fell-off-bus" in README
    assert (ROOT / "incidents" / "gpu-fell-off-bus" / "expected.json").is_file()


def test_every_error_is_documented_in_the_tree() -> None:
    import crashcart.errors as errors

    def leaves(cls: type) -> list[type]:
        subs = cls.__subclasses__()
        return [cls] if not subs else [x for s in subs for x in leaves(s)]

    for leaf in leaves(CrashCartError):
        assert leaf.__name__ in (errors.__doc__ or ""), leaf.__name__


def test_every_package_the_readme_tour_names_exists() -> None:
    import re

    tour = README[README.index("## How it works") : README.index("## The LLM engine")]
    named = set(re.findall(r"`((?:crashcart|bot)/[\w/]*?(?:\.py)?)`", tour))
    assert len(named) >= 10
    assert [n for n in sorted(named) if not (ROOT / n).exists()] == []
    packages = {p.parent.name for p in (ROOT / "crashcart").glob("*/__init__.py")} - {"data", "synth"}
    assert [p for p in sorted(packages) if f"crashcart/{p}/" not in tour] == []
