"""Every sentence the bot shows to people, and the mapping from error classes to a short reason.

Pure text; no I/O. Exceptions carry context (``str(exc)`` is a one-line detail); this module turns
them into what is posted. A failed job shows a reason and a reference, never a traceback.
"""

from __future__ import annotations

from crashcart import (
    BundleError,
    BundleNotFound,
    BundleTooLarge,
    ConfigError,
    CorruptBundle,
    CrashCartError,
    EmptyBundle,
    IncidentNotFound,
    NoLogsFound,
    RunbookError,
    StoreError,
    UnsafeBundlePath,
    VerificationFailed,
)

HELP = (
    "*CrashCart* finds and proves why a GPU training job died.\n"
    "• Upload a bundle (`.tar.gz`, `.tgz`, `.tar`, `.zip`) in a channel I am in: I answer in its thread.\n"
    "• `@crashcart diagnose <job-id>` or `/crashcart diagnose <job-id>`: analyse the job's bundle"
    " from the jobs directory.\n"
    "• `/crashcart status <incident>`: the diagnosis and runbook state of an incident of this channel.\n"
    "• `/crashcart lookup <job-id>`: past diagnoses of a job in this channel.\n"
    "• `/crashcart list`: recent incidents of this channel.\n"
    "• `/crashcart help`: this text.\n"
    "Runbooks are dry-run plans: CrashCart never executes them. Only approvers may approve or reject."
)
USAGE = "Usage: `/crashcart diagnose <job-id> | status <incident> | lookup <job-id> | list | help`"
MENTION_USAGE = "Mention me with `diagnose <job-id>`, or upload a bundle here. `/crashcart help` has the rest."

NOT_APPROVER = "Only runbook approvers may approve or reject runbooks. Nothing was changed."
APPROVERS_UNKNOWN = "I could not check whether you are a runbook approver (Slack did not answer). Nothing was changed."
NO_APPROVERS = (
    "No runbook approvers are configured (CRASHCART_APPROVERS / CRASHCART_APPROVER_GROUP). Nothing was changed."
)
MODAL_FAILED = "Slack did not open the rejection form ({error}). Click Reject again. Nothing was changed."
REASON_REQUIRED = "Please give a reason for the rejection."
NO_JOBS_DIR = "Job-id lookups are off: CRASHCART_JOBS_DIR is not set."
BAD_JOB_ID = "`{job_id}` is not a job id (letters, digits, `.`, `_` and `-` only)."
JOB_NOT_FOUND = (
    "No bundle for job `{job_id}` in the jobs directory (`<job-id>/` or `<job-id>.tar.gz`, `.tgz`, `.tar`, `.zip`)."
)
CANNOT_POST_HERE = (
    "I cannot post in this conversation: invite @crashcart to this channel first"
    " (in a direct message between people, run the command in an incident channel instead)."
)
JOB_QUEUED = "Queued the analysis of job `{job_id}`; I will answer in a thread here."
ALREADY_QUEUED = "The analysis of `{name}` is already queued or done in this channel."
NO_INCIDENTS = "No incidents diagnosed in this channel yet."
NO_RUNS_FOR_JOB = "No diagnoses of job `{job_id}` in this channel yet."
UNKNOWN_INCIDENT = "No incident `{incident}` in this channel."

STATUS_QUEUED = "⏳ Analysing bundle `{name}` ({size})… waiting for a free worker."
STATUS_RUNNING = "⏳ Analysing bundle `{name}` ({files}{size})…"
STATUS_DONE = "✅ Analysed bundle `{name}` ({files}{size}) in {seconds:.1f} s: incident `{incident}`."
STATUS_FAILED = "❌ Could not analyse bundle `{name}`: {reason} ({reference})."
STATUS_RESUMED = "(resumed after a restart)"
TOO_BIG = "the bundle is {size}, over the bot's upload cap of {cap} (CRASHCART_BOT_MAX_UPLOAD_BYTES)"
TIMED_OUT = "the analysis took longer than {seconds} s (CRASHCART_BOT_JOB_TIMEOUT_S) and was stopped"
GAVE_UP = "the analysis was interrupted {attempts} times; giving up"
ANALYSIS_DIED = "the analysis process stopped without an answer (details are in the bot's log)"
INTERNAL = "an internal error stopped the analysis (details are in the bot's log)"
SLACK_FAILED = "Slack refused a request ({error})"
DOWNLOAD_FAILED = "the file could not be downloaded from Slack ({detail})"
FILES_COMMENT = "Postmortem draft and timeline for incident `{incident}` (review before publishing)."

# Exception class -> what went wrong, in words; the exception's one-line detail follows it.
ERROR_MESSAGES: dict[type[CrashCartError], str] = {
    BundleNotFound: "the bundle was not found",
    BundleTooLarge: "the bundle is over a size cap",
    UnsafeBundlePath: "the archive holds an unsafe path (absolute, `..`, a link or a device)",
    CorruptBundle: "the archive is truncated or malformed",
    EmptyBundle: "the bundle is empty",
    NoLogsFound: "the bundle holds no logs CrashCart can read",
    BundleError: "the bundle cannot be used",
    VerificationFailed: "no claim of the diagnosis survived the citation checks",
    IncidentNotFound: "no such incident",
    StoreError: "the incident database failed",
    RunbookError: "the runbook decision was refused",
    ConfigError: "CrashCart is not configured correctly",
    CrashCartError: "CrashCart could not finish the analysis",
}
MAX_DETAIL = 300


def error_reason(exc: CrashCartError) -> str:
    """A one-line reason for a CrashCart error: the class's words, then its detail (clipped)."""
    words = next(ERROR_MESSAGES[c] for c in type(exc).__mro__ if c in ERROR_MESSAGES)
    detail = " ".join(str(exc).split())
    if len(detail) > MAX_DETAIL:
        detail = detail[: MAX_DETAIL - 1] + "…"
    return f"{words}: {detail}" if detail else words


def human_seconds(s: float) -> str:
    """``0.5``, ``3``, ``90``: whole seconds from 10 on, else up to two decimals without trailing zeros."""
    if s >= 10:
        return f"{s:.0f}"
    return f"{s:.2f}".rstrip("0").rstrip(".") or "0"


def human_size(n: int | None) -> str:
    if n is None:
        return "size unknown"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    if n < 1024**3:
        return f"{n / 1024**2:.1f} MB"
    return f"{n / 1024**3:.2f} GB"
