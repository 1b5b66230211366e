"""Block Kit rendering of diagnoses, runbooks and status messages, within Slack's limits.

Input: ``DiagnosisDocument`` / ``RunbookRecord``; output: ``Message(text, blocks)``. Pure, no I/O.
Limits: 50 blocks, 3,000 characters a section, 150 a header, and about 13k characters in all
(Slack's undocumented ``msg_blocks_too_long``): long content goes to the uploaded files, and a cut
list says "and N more". Every outside string goes through ``bot.mrkdwn.escape`` (the fallback ``text``
too); only verified citations are shown; classes are shown by their catalogue titles, times with
``<!date^…>``. Every mrkdwn object is ``verbatim``, so Slack links nothing the bot did not write itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from bot.mrkdwn import clip, code, date, escape, iso_date, mention
from crashcart import DiagnosisDocument, RunbookRecord, llm_summary, load_catalogue

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
RERUN_ACTION = "job_rerun"
REASON_BLOCK = "reason"
REASON_INPUT = "reason_input"


class Message(NamedTuple):
    text: str  # the notification / fallback text (mrkdwn: escaped like the blocks)
    blocks: list[Block]


def title(class_id: str) -> str:
    """The class's plain-English catalogue title (the terminal shows the same)."""
    return load_catalogue().class_title(class_id)


# --- block helpers -----------------------------------------------------------------------------------


def mrkdwn(text: str) -> Block:
    return {"type": "mrkdwn", "text": text, "verbatim": True}


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
    block: Block = {"type": "section", "text": mrkdwn(clip(text, MAX_SECTION))}
    if block_id:
        block["block_id"] = block_id
    return block


def header(text: str) -> Block:
    """A plain-text header (Slack renders nothing in plain text, so outside text needs no escaping here)."""
    return {"type": "header", "text": {"type": "plain_text", "text": clip(text, MAX_HEADER), "emoji": True}}


def context(text: str) -> Block:
    return {"type": "context", "elements": [mrkdwn(clip(text, MAX_CONTEXT))]}


def button(action_id: str, label: str, value: str, style: str | None = None) -> Block:
    element: Block = {"type": "button", "action_id": action_id, "value": value}
    element["text"] = {"type": "plain_text", "text": label}
    if style:
        element["style"] = style
    return element


def rerun_actions(value: str, label: str) -> Block:
    return {"type": "actions", "block_id": "rerun", "elements": [button(RERUN_ACTION, label, value)]}


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
    return " · ".join(p for p in parts if p)


def verdict_line(doc: DiagnosisDocument) -> str:
    """One line for the channel: the cause's title, where, and the summary."""
    root = doc.root_cause
    where = culprit_text(doc)
    line = f"*{escape(title(root.class_))}*" + (f" on {where}" if where else "")
    return line + f" — {escape(clip(' '.join(root.summary.split()), 200))}"


def diagnosis_message(doc: DiagnosisDocument, *, requester: str | None = None) -> Message:
    """Root cause, culprit, confidence, verified evidence, symptoms with counts, and what was left out."""
    root = doc.root_cause
    blocks: list[Block] = [
        header(f"Root cause: {title(root.class_)}"),
        section(escape(root.summary), block_id="root_cause"),
        {
            "type": "section",
            "block_id": "facts",
            "fields": [
                mrkdwn(f"*Culprit*\n{culprit_text(doc) or 'not named by a verified citation'}"),
                mrkdwn(f"*Confidence*\n{confidence_label(root.confidence)}"),
                mrkdwn(f"*Time*\n{iso_date(root.time) or escape(root.time or 'unknown')}"),
                mrkdwn(f"*Incident*\n`{doc.incident_id}`" + (f" (job {code(doc.job_id, 60)})" if doc.job_id else "")),
            ],
        },
    ]
    evidence = [f"✅ verified {code(f'{c.file}:{c.line}')}\n> {code(c.text)}" for c in root.citations if c.verified]
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
            where = f" — first at {code(f'{first.file}:{first.line}')}" if first else ""
            rows.append(f"• *{s.count}×* {escape(title(s.class_))}: {escape(clip(s.summary, 200))}{where}")
        lines = cut_list(rows, max_items=MAX_SYMPTOMS, max_chars=MAX_SECTION - 40, more="symptoms in the postmortem")
        blocks.append(section("*Symptoms explained*\n" + "\n".join(lines), block_id="symptoms"))
    factors = [c for c in doc.contributing if c.kind == "contributing"]  # benign and teardown lines are no factor
    if factors:
        rows = [f"• {escape(title(c.class_))}: {escape(clip(c.summary, 200))}" for c in factors]
        lines = cut_list(rows, max_items=5, max_chars=1500, more="in the postmortem")
        blocks.append(section("*Contributing*\n" + "\n".join(lines), block_id="contributing"))
    if root.class_ == "unknown" and doc.hypotheses:
        rows = [f"• {escape(title(h.class_))} ({h.score:.2f}): {escape(clip(h.why_not, 200))}" for h in doc.hypotheses]
        lines = cut_list(rows, max_items=5, max_chars=1500, more="in the postmortem")
        blocks.append(section("*Hypotheses*\n" + "\n".join(lines), block_id="hypotheses"))
    stats = doc.stats
    note = f"{stats.files} files, {stats.lines:,} lines, {stats.findings} findings in {stats.seconds:.1f} s"
    note += f" · engine {escape(doc.engine)}"
    if doc.partial:
        note += " · partial answer"
    if requester:
        note += f" · for {mention(requester)}"
    blocks.append(context(note))
    models = llm_summary(stats.llm)
    if models:
        blocks.append(context(escape(models)))
    lead = f"{mention(requester)} " if requester else ""
    text = f"{lead}Root cause: {escape(title(root.class_))} — {escape(clip(' '.join(root.summary.split()), 200))}"
    return Message(clip(text, MAX_FALLBACK), fit(blocks))


# --- runbook -----------------------------------------------------------------------------------------


def action_value(record: RunbookRecord) -> str:
    """What the buttons carry: the incident and the hash of the plan shown (a changed plan is refused)."""
    return f"{record.incident_id}:{record.plan_hash}"


def parse_action_value(value: str) -> tuple[str, str | None]:
    incident, _, plan = value.partition(":")
    return incident, plan or None


def runbook_message(record: RunbookRecord, *, awaiting: str | None = None) -> Message:
    """The dry-run plan; Approve (with a confirm dialog) / Reject buttons while it is proposed (and, in
    ``awaiting``, whom it waits for), and who decided, when and why once it is not."""
    fence = "`" * 3
    steps = [
        f"*{n}. {escape(s.title)}* — risk {escape(s.risk)}\n{fence}{escape(s.command, code=True)}{fence}"
        for n, s in enumerate(record.steps, 1)
    ]
    lines = cut_list(steps, max_items=MAX_STEPS, max_chars=MAX_SECTION - 60, more="steps in the postmortem")
    body = "\n".join(lines) if steps else "No catalogue step applies: nothing to run."
    blocks: list[Block] = [
        header(f"Dry-run runbook: {title(record.class_id)}"),
        context(
            f"Incident `{record.incident_id}` · CrashCart never executes a runbook."
            f" Plan `sha256:{record.plan_hash[:16]}` (v{record.version})."
        ),
        section(body, block_id="steps"),
    ]
    if record.state == "proposed":
        value = action_value(record)
        approve = button(APPROVE_ACTION, "Approve", value, "primary")
        approve["confirm"] = {
            "title": {"type": "plain_text", "text": "Approve this runbook?"},
            "text": mrkdwn("This records your approval of this exact plan. CrashCart will not run it."),
            "confirm": {"type": "plain_text", "text": "Approve"},
            "deny": {"type": "plain_text", "text": "Cancel"},
        }
        blocks.append(
            {
                "type": "actions",
                "block_id": "runbook_actions",
                "elements": [approve, button(REJECT_ACTION, "Reject", value, "danger")],
            }
        )
        if awaiting:
            blocks.append(context(f"Awaiting approval by {awaiting}."))
        state = f"awaiting approval by {awaiting}" if awaiting else "proposed"
    elif record.state == "approved" and record.decided_by:
        when = date(record.decided_at) if record.decided_at else ""
        state = f"approved by {mention(record.decided_by)}"
        blocks.append(context(f"✅ Approved by {mention(record.decided_by)} {when}."))
    elif record.decided_by:
        when = date(record.decided_at) if record.decided_at else ""
        reason = escape(clip(record.reason or "", 500))
        state = f"rejected by {mention(record.decided_by)}"
        blocks.append(context(f"❌ Rejected by {mention(record.decided_by)} {when}: {reason}"))
    else:
        state = escape(record.state)
    text = f"Dry-run runbook for {record.incident_id} ({len(record.steps)} steps): {state}"
    return Message(clip(text, MAX_FALLBACK), fit(blocks, more="in the runbook"))


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


def status_message(
    headline: str, stages: Sequence[str] = (), current: str | None = None, *, note: str = "", extra: Block | None = None
) -> Message:
    """A job's status message, updated in place: a headline (mrkdwn, already escaped), the stages done so
    far while it runs (none once it ended), a note, and an optional block (a Re-run button)."""
    blocks = [section(headline, block_id="status")]
    marks = [f"✓ {escape(s)}" for s in stages if s != current]
    if current:
        marks.append(f"⏳ {escape(current)}")
    line = " · ".join(marks)
    if note:
        line = f"{line} · {note}" if line else note
    if line:
        blocks.append(context(line))
    if extra is not None:
        blocks.append(extra)
    return Message(clip(headline, MAX_FALLBACK), blocks)


def plain_message(text: str, *, extra: Block | None = None) -> Message:
    """A one-section message of our own words (outside parts already escaped by the caller)."""
    return Message(clip(text, MAX_FALLBACK), [section(text), *([extra] if extra else [])])
