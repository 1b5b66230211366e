"""Report stage: the words a person reads for the engine's ids and notes (class titles, severities, reasons).

Input: class ids, severities and the engine's short reasoning notes. Output: plain English. Ids stay in
``diagnosis.json``; only what people read is translated. Pure.
"""

from __future__ import annotations

import re

from crashcart.catalogue import load_catalogue

SEVERITY = {
    "P0": "P0: hardware fault; drain the node, do not just restart the job on it",
    "P1": "P1: infrastructure problem (fabric, storage, scheduler); often transient, may need ops",
    "P2": "P2: workload problem (code, config, data); restarting unchanged will fail again",
    "P3": "P3: expected or policy event (preemption, time limit)",
}
_OWN_TITLES = {"unknown": "Unclassified error", "no_failure": "No failure found"}
ROOT_UNKNOWN = "Root cause not established"
HIGH, MEDIUM = 0.8, 0.55  # one scale for every reader: terminal, postmortem, and the eval's "high-confidence"


def confidence_word(c: float) -> str:
    """ "high", "medium" or "low" for a root cause's confidence (0-1)."""
    return "high" if c >= HIGH else "medium" if c >= MEDIUM else "low"


_REASONS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^P\d[\w-]* class$"), ""),  # the severity has its own line
    (re.compile(r"^specific to (.+)$"), r"seen only on \1, not across the job"),
    (
        re.compile(r"^on the rank that is not like the others$"),
        "on the one rank that behaved differently from the rest (the others waited for it)",
    ),
    (re.compile(r"^before the first symptom$"), "it happened before the first symptom"),
    (
        re.compile(r"^when the timed-out collective started$"),
        "it happened when the NCCL operation that later timed out began",
    ),
    (re.compile(r"^earliest candidate$"), "the earliest possible cause in the logs"),
    (re.compile(r"^corroborated by (.+)$"), r"confirmed by more than one source: \1"),
    (re.compile(r"^usually confirms another cause$"), "this kind of line usually confirms another cause"),
    (re.compile(r"^against: (.+)$"), r"counts against it: \1"),
]


def class_title(class_id: str) -> str:
    """A class's title for people; an id the catalogue does not know reads as words, never as an id."""
    if class_id in _OWN_TITLES:
        return _OWN_TITLES[class_id]
    cat = load_catalogue()
    if class_id in cat.classes:
        return cat.class_title(class_id)
    words = class_id.replace("_", " ").replace("-", " ").strip()
    return words[:1].upper() + words[1:] if words else "Unclassified error"


def severity_words(severity: str | None) -> str | None:
    if not severity:
        return None
    return SEVERITY.get(severity[:2], severity)


def reason(text: str) -> str:
    """One of the engine's reasoning notes in plain words ("" for notes the report shows elsewhere)."""
    for pattern, words in _REASONS:
        if pattern.match(text):
            return pattern.sub(words, text)
    return text


_ID = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def titles_for_ids(text: str) -> str:
    """Class ids inside the engine's prose (``explained by gpu_fallen_off_bus``) replaced by their titles."""
    cat = load_catalogue()
    return _ID.sub(lambda m: cat.class_title(m.group(0)) if m.group(0) in cat.classes else m.group(0), text)


def reasons(notes: list[str]) -> list[str]:
    out = [titles_for_ids(reason(n)) for n in notes]
    return [r for r in out if r]


def clip(text: str, limit: int) -> str:
    """``text`` on one line, cut at a word boundary with an ellipsis when longer than ``limit``."""
    one = " ".join(text.split())
    if len(one) <= limit:
        return one
    cut = one[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.(") + "…"
