"""Short labels for the timeline: a clipped text and a human duration."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


def _short(title: str, limit: int = 30) -> str:
    text = title.split(" (")[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dur(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
