"""Answers of ``/crashcart status|lookup|list``, limited to the incidents of the asking channel.

Input: the store, the job queue and a channel id; output: a ``Message`` (ephemeral). An incident
belongs to a channel when one of the bot's jobs in that channel produced it (``bot_jobs``), so a
channel never sees another channel's incidents, nor incidents diagnosed only from the CLI.
Sync, reads SQLite: callers run these in a thread.
"""

from __future__ import annotations

from bot import messages as msg
from bot.blocks import Message, diagnosis_message, plain_message, runbook_message, title
from bot.mrkdwn import code, date, escape
from bot.queue import JobQueue
from crashcart import IncidentNotFound, IncidentSummary, RunbookError, Store, get_runbook

MAX_LISTED = 10


def incident_status(store: Store, queue: JobQueue, channel: str, incident: str) -> Message:
    """The diagnosis and runbook state of an incident of this channel (``incident`` may be a prefix)."""
    unknown = plain_message(msg.UNKNOWN_INCIDENT.format(incident=code(incident, 80)))
    try:
        stored = store.get(incident)
    except IncidentNotFound:
        return unknown
    if stored.summary.id not in queue.incidents_in(channel):
        return unknown  # another channel's: not even its existence is shown
    message = diagnosis_message(stored.document)
    try:
        record = get_runbook(store, stored.summary.id)
    except RunbookError:
        return message
    state = [b for b in runbook_message(record).blocks if b["type"] == "context"][-1:]
    return Message(message.text, [*message.blocks, *state][:50])


def job_runs(store: Store, queue: JobQueue, channel: str, job_id: str) -> Message:
    """Past diagnoses of a job, in this channel."""
    mine = set(queue.incidents_in(channel))
    runs = [s for s in store.search(job_id, 50) if s.job_id == job_id and s.id in mine]
    return summaries(runs, msg.NO_RUNS_FOR_JOB.format(job_id=code(job_id, 80)))


def recent(store: Store, queue: JobQueue, channel: str) -> Message:
    """This channel's most recently diagnosed incidents."""
    rows: list[IncidentSummary] = []
    for incident in queue.incidents_in(channel)[:MAX_LISTED]:
        try:
            rows.append(store.get(incident).summary)
        except IncidentNotFound:
            continue  # removed from the store since
    rows.sort(key=lambda r: r.updated_at, reverse=True)
    return summaries(rows, msg.NO_INCIDENTS)


def summaries(rows: list[IncidentSummary], empty: str) -> Message:
    if not rows:
        return plain_message(empty)
    lines = [
        f"• `{r.id}` {date(r.updated_at)} · job {code(r.job_id or '-', 60)} · *{escape(title(r.root_class))}*"
        f" ({r.confidence:.0%}) · {r.runs} run{'s' if r.runs != 1 else ''}"
        for r in rows
    ]
    return plain_message("\n".join(lines))
