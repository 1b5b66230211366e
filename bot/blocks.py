"""Block Kit rendering of diagnoses, runbooks and status messages, within Slack's limits.

Input: ``DiagnosisDocument`` / ``RunbookRecord``; output: ``Message(text, blocks)``. Pure, no I/O.
Limits: 50 blocks, 3,000 characters a section, 150 a header, and about 13k characters in all
(Slack's undocumented ``msg_blocks_too_long``): long content goes to the uploaded files, and a cut
list says "and N more". Log text is redacted before it is quoted; only verified citations are shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from crashcart import DiagnosisDocument, RunbookRecord, llm_summary, redact_text

Block = dict[str, Any]

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_HEADER = 150
MAX_CONTEXT = 2000
MAX_TOTAL = 11_000  # stay well under Slack's ~13k aggregate limit
MAX_QUOTE = 280
MAX_FALLBACK = 300
MAX_CITATIONS = 5
MAX_SYMPTOMS = 8
MAX_STEPS = 12

APPROVE_ACTION = "runbook_approve"
REJECT_ACTION = "runbook_reject"
REJECT_MODAL = "runbook_reject_modal"
REASON_BLOCK = "reason"
REASON_INPUT = "reason_input"


class Message(NamedTuple):
    text: str  # the notification / fallback text
    blocks: list[Block]


# --- redaction ---------------------------------------------------------------------------------------


def redact_for_slack(text: str) -> str:
    """Every piece of log or model text passes through here before it is posted (DESIGN §6)."""
    return redact_text(text)


# --- text helpers ------------------------------------------------------------------------------------


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def escape(text: str) -> str:
    """mrkdwn control characters (&, <, >) as entities, so log text cannot ping or link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def code(text: str, limit: int = MAX_QUOTE) -> str:
    """Inline code of untrusted text: one line, redacted, escaped, clipped; backticks cannot close it."""
    one_line = " ".join(redact_for_slack(text).split()).replace("`", "'")
    return f"`{escape(clip(one_line, limit)) or ' '}`"


def cut_list(lines: Sequence[str], *, max_items: int, max_chars: int, more: str) -> list[str]:
    """The first lines that fit both limits, then "… and N more <more>" when some were left out."""
    out: list[str] = []
    used = 0
    for line in lines:
        if len(out) >= max_items or used + len(line) + 1 > max_chars:
            break
        out.append(line)
        used += len(line) + 1
    if len(out) < len(lines):
        out.append(f"… and {len(lines) - len(out)} more {more}")
    return out


def section(text: str, block_id: str | None = None) -> Block:
    block: Block = {"type": "section", "text": {"type": "mrkdwn", "text": clip(text, MAX_SECTION)}}
    if block_id:
        block["block_id"] = block_id
    return block


def header(text: str) -> Block:
    return {"type": "header", "text": {"type": "plain_text", "text": clip(text, MAX_HEADER), "emoji": True}}


def context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(text, MAX_CONTEXT)}]}


def text_length(value: Any) -> int:
    """All characters of every ``text`` string in a block tree (what Slack's aggregate limit counts)."""
    if isinstance(value, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else text_length(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(text_length(v) for v in value)
    return 0


def fit(blocks: list[Block], *, more: str = "in the postmortem file") -> list[Block]:
    """At most ``MAX_BLOCKS`` blocks and ``MAX_TOTAL`` characters; cut blocks are counted in a last line."""
    kept: list[Block] = []
    total = 0
    for block in blocks:
        size = text_length(block)
        if len(kept) >= MAX_BLOCKS - 1 or total + size > MAX_TOTAL - 200:
            break
        kept.append(block)
        total += size
    if len(kept) < len(blocks):
        kept.append(context(f"… and {len(blocks) - len(kept)} more sections {more}"))
    return kept


# --- diagnosis ---------------------------------------------------------------------------------------


def confidence_label(value: float) -> str:
    word = "high" if value >= 0.8 else "medium" if value >= 0.5 else "low"
    return f"{word} ({value:.0%})"


def unverified_count(doc: DiagnosisDocument) -> int:
    """Citations that failed verification: shown nowhere as evidence, only counted."""
    cited = [*doc.root_cause.citations]
    for contributing in doc.contributing:
        cited += contributing.citations
    for symptom in doc.symptoms:
        cited += symptom.citations
    # stats.citations_dropped counts every cited id that failed, including those still listed as unverified
    return max(sum(1 for c in cited if not c.verified), doc.stats.citations_dropped)


def culprit_text(doc: DiagnosisDocument) -> str:
    c = doc.root_cause.culprit
    parts = [
        f"node {code(c.node, 80)}" if c.node else "",
        f"rank {c.rank}" if c.rank is not None else "",
        f"GPU {code(c.gpu, 80)}" if c.gpu else "",
    ]
    return " · ".join(p for p in parts if p) or "not named by a verified citation"


def diagnosis_message(doc: DiagnosisDocument) -> Message:
    """Root cause, culprit, confidence, verified evidence, symptoms with counts, and what was left out."""
    root = doc.root_cause
    summary = escape(redact_for_slack(root.summary))
    blocks: list[Block] = [
        header(f"Root cause: {root.class_}"),
        section(summary, block_id="root_cause"),
        {
            "type": "section",
            "block_id": "facts",
            "fields": [
                {"type": "mrkdwn", "text": f"*Culprit*\n{culprit_text(doc)}"},
                {"type": "mrkdwn", "text": f"*Confidence*\n{confidence_label(root.confidence)}"},
                {"type": "mrkdwn", "text": f"*Time*\n{root.time or 'unknown'}"},
                {
                    "type": "mrkdwn",
                    "text": f"*Incident*\n`{doc.incident_id}`"
                    + (f" (job {code(doc.job_id, 60)})" if doc.job_id else ""),
                },
            ],
        },
    ]
    evidence = [f"✅ verified `{escape(c.file)}:{c.line}`\n> {code(c.text)}" for c in root.citations if c.verified]
    if evidence:
        lines = cut_list(evidence, max_items=MAX_CITATIONS, max_chars=MAX_SECTION - 40, more="in the postmortem")
        blocks.append(section("*Evidence*\n" + "\n".join(lines), block_id="evidence"))
    else:
        blocks.append(section("*Evidence*\nNo citation of the root cause could be verified.", block_id="evidence"))
    bad = unverified_count(doc)
    if bad:
        blocks.append(context(f"⚠️ {bad} citation{'s' if bad != 1 else ''} could not be verified (not shown)."))
    if doc.symptoms:
        rows = []
        for s in doc.symptoms:
            first = next((c for c in s.citations if c.verified), None)
            where = f" — first at `{escape(first.file)}:{first.line}`" if first else ""
            rows.append(f"• *{s.count}×* `{s.class_}`: {escape(redact_for_slack(clip(s.summary, 200)))}{where}")
        lines = cut_list(rows, max_items=MAX_SYMPTOMS, max_chars=MAX_SECTION - 40, more="symptoms in the postmortem")
        blocks.append(section("*Symptoms explained*\n" + "\n".join(lines), block_id="symptoms"))
    if doc.contributing:
        rows = [f"• `{c.class_}`: {escape(redact_for_slack(clip(c.summary, 200)))}" for c in doc.contributing]
        lines = cut_list(rows, max_items=5, max_chars=1500, more="in the postmortem")
        blocks.append(section("*Contributing*\n" + "\n".join(lines), block_id="contributing"))
    if root.class_ == "unknown" and doc.hypotheses:
        rows = [f"• `{h.class_}` ({h.score:.2f}): {escape(clip(h.why_not, 200))}" for h in doc.hypotheses]
        lines = cut_list(rows, max_items=5, max_chars=1500, more="in the postmortem")
        blocks.append(section("*Hypotheses*\n" + "\n".join(lines), block_id="hypotheses"))
    stats = doc.stats
    note = f"{stats.files} files, {stats.lines:,} lines, {stats.findings} findings in {stats.seconds:.1f} s"
    note += f" · engine {doc.engine}"
    if doc.partial:
        note += " · partial answer"
    blocks.append(context(note))
    models = llm_summary(stats.llm)
    if models:
        blocks.append(context(escape(models)))
    text = clip(f"Root cause: {root.class_} — {redact_for_slack(root.summary)}", MAX_FALLBACK)
    return Message(text, fit(blocks))


# --- runbook -----------------------------------------------------------------------------------------


def action_value(record: RunbookRecord) -> str:
    """What the buttons carry: the incident and the hash of the plan shown (a changed plan is refused)."""
    return f"{record.incident_id}:{record.plan_hash}"


def parse_action_value(value: str) -> tuple[str, str | None]:
    incident, _, plan = value.partition(":")
    return incident, plan or None


def _when(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M} UTC" if at else "unknown time"


def runbook_message(record: RunbookRecord) -> Message:
    """The dry-run plan; Approve (with a confirm dialog) / Reject buttons while it is proposed,
    and who decided, when and why once it is not."""
    fence, quotes = "`" * 3, "'" * 3
    steps = [
        f"*{n}. {escape(s.title)}* — risk {s.risk}\n{fence}{s.command.replace(fence, quotes)}{fence}"
        for n, s in enumerate(record.steps, 1)
    ]
    lines = cut_list(steps, max_items=MAX_STEPS, max_chars=MAX_SECTION - 60, more="steps in the postmortem")
    body = "\n".join(lines) if steps else "No catalogue step applies: nothing to run."
    blocks: list[Block] = [
        header(f"Dry-run runbook: {record.incident_id}"),
        context(f"CrashCart never executes a runbook. Plan `sha256:{record.plan_hash[:16]}` (v{record.version})."),
        section(body, block_id="steps"),
    ]
    if record.state == "proposed":
        value = action_value(record)
        blocks.append(
            {
                "type": "actions",
                "block_id": "runbook_actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": APPROVE_ACTION,
                        "style": "primary",
                        "value": value,
                        "text": {"type": "plain_text", "text": "Approve"},
                        "confirm": {
                            "title": {"type": "plain_text", "text": "Approve this runbook?"},
                            "text": {
                                "type": "mrkdwn",
                                "text": "This records your approval of this exact plan. CrashCart will not run it.",
                            },
                            "confirm": {"type": "plain_text", "text": "Approve"},
                            "deny": {"type": "plain_text", "text": "Cancel"},
                        },
                    },
                    {
                        "type": "button",
                        "action_id": REJECT_ACTION,
                        "style": "danger",
                        "value": value,
                        "text": {"type": "plain_text", "text": "Reject"},
                    },
                ],
            }
        )
        state = "proposed"
    elif record.state == "approved":
        state = f"approved by <@{record.decided_by}>"
        blocks.append(context(f"✅ Approved by <@{record.decided_by}> at {_when(record.decided_at)}."))
    else:
        reason = escape(redact_for_slack(clip(record.reason or "", 500)))
        state = f"rejected by <@{record.decided_by}>"
        blocks.append(context(f"❌ Rejected by <@{record.decided_by}> at {_when(record.decided_at)}: {reason}"))
    text = f"Dry-run runbook for {record.incident_id} ({len(record.steps)} steps): {state}"
    return Message(text, fit(blocks, more="in the runbook"))


def reject_modal(meta: str) -> dict[str, Any]:
    """The modal asking for a reason; ``meta`` (≤ 3,000 chars) carries incident, plan, channel and ts."""
    return {
        "type": "modal",
        "callback_id": REJECT_MODAL,
        "private_metadata": meta,
        "title": {"type": "plain_text", "text": "Reject runbook"},
        "submit": {"type": "plain_text", "text": "Reject"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": REASON_BLOCK,
                "label": {"type": "plain_text", "text": "Why is this plan rejected?"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON_INPUT,
                    "multiline": True,
                    "max_length": 2000,
                },
            }
        ],
    }


# --- status ------------------------------------------------------------------------------------------


def status_message(headline: str, stages: Sequence[str] = (), current: str | None = None, note: str = "") -> Message:
    """The status message of a job, updated in place: a headline and the stages done so far."""
    blocks = [section(headline, block_id="status")]
    marks = [f"✓ {s}" for s in stages if s != current]
    if current:
        marks.append(f"⏳ {current}")
    line = " · ".join(marks)
    if note:
        line = f"{line} {note}".strip()
    if line:
        blocks.append(context(line))
    return Message(clip(headline, MAX_FALLBACK), blocks)


def plain_message(text: str) -> Message:
    return Message(clip(text, MAX_FALLBACK), [section(text)])
