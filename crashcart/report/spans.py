"""Short labels the report's renderers share: a clipped title, a human duration, and rank ranges ("0-2, 4-7")."""

from __future__ import annotations

from collections.abc import Iterable


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


def ranges(values: Iterable[int], limit: int | None = None) -> str:
    """``[0, 1, 2, 4]`` -> ``"0-2, 4"``; cut at a comma (with "…") past ``limit`` characters."""
    nums = sorted(set(values))
    parts: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    text = ", ".join(parts)
    return text if limit is None or len(text) <= limit else text[: limit - 1].rsplit(",", 1)[0] + ", …"
