"""Every sentence the bot shows to people, and the mapping from error classes to a short reason.

Pure text; no I/O. Exceptions carry context (``str(exc)`` is a one-line detail); this module turns
them into what is posted, with the detail escaped (``bot.mrkdwn.escape``: it came from outside). A
failed job shows a reason, the incident id (or what to run) and the next step, never a traceback,
an internal queue id or an operator's variable name.
"""

from __future__ import annotations

from bot.mrkdwn import escape
from crashcart import (
    BundleError,
    BundleNotFound,
    BundleNotVisible,
    BundleTooLarge,
    ClusterError,
    ClusterUnavailable,
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

# Slack reads "<...>" as a link or mention: placeholders are written as ‹job-id›, never <job-id>.
HELP = (
    "*CrashCart* finds and proves why a GPU training job died.\n"
    "• Upload a bundle (`.tar.gz`, `.tgz`, `.tar`, `.tar.bz2`, `.tar.xz`, `.zip`) in a channel I am in: I answer in"
    " its thread. A single log (`.log`, `.txt`, `.out`, `.err`, or one of them `.gz`) is analysed when its message"
    " mentions me.\n"
    "• `@crashcart diagnose ‹job-id›` or `/crashcart diagnose ‹job-id›`: analyse the job's bundle"
    " from the jobs directory.\n"
    "• `/crashcart status ‹incident›`: the diagnosis and runbook state of an incident of this channel.\n"
    "• `/crashcart lookup ‹job-id›`: past diagnoses of a job in this channel.\n"
    "• `/crashcart list`: recent incidents of this channel.\n"
    "• *Diagnose with CrashCart* in a message's ⋮ menu: analyse the bundle attached to it.\n"
    "• My *Home* tab: open incidents of your channels and runbooks awaiting your approval.\n"
    "Runbooks are dry-run plans: CrashCart never executes them. Only approvers may approve or reject."
)
USAGE = "Usage: `/crashcart diagnose ‹job-id› | status ‹incident› | lookup ‹job-id› | list | help`"
MENTION_USAGE = "Mention me with `diagnose ‹job-id›`, or upload a bundle here. `/crashcart help` has the rest."

# who may use the bot
NOT_ENABLED_HERE = "CrashCart is not enabled in this channel. Ask in one of the incident channels it serves."
GUEST_REFUSED = "CrashCart answers members of this workspace only, not guests. Nothing was done."
EXTERNAL_REFUSED = (
    "CrashCart answers members of this workspace only, not users of other organisations. Nothing was done."
)
WHO_UNKNOWN = "I could not check your account with Slack just now, so I did nothing. Try again in a minute."

NOT_APPROVER = "Only runbook approvers may approve or reject runbooks. Nothing was changed."
APPROVERS_UNKNOWN = "I could not check whether you are a runbook approver (Slack did not answer). Nothing was changed."
NO_APPROVERS = "No runbook approvers are configured for CrashCart; ask its operator. Nothing was changed."
ALREADY_DECIDED = "This runbook was already {state} by {user} {when}. Nothing was changed."
MODAL_FAILED = "Slack did not open the rejection form ({error}). Click Reject again. Nothing was changed."
REASON_REQUIRED = "Please give a reason for the rejection."
DECIDED_APPROVED = "✅ {user} approved the runbook of incident `{incident}` {when}. CrashCart does not run it."
DECIDED_REJECTED = "❌ {user} rejected the runbook of incident `{incident}` {when}: {reason}"
NO_JOBS_DIR = "Job-id lookups are not set up for this bot; upload the job's bundle here instead."
BAD_JOB_ID = "{job_id} is not a job id (letters, digits, `.`, `_` and `-` only)."
JOB_NOT_FOUND = "No bundle for job {job_id} in the jobs directory; upload the job's bundle here instead."
CANNOT_POST_HERE = (
    "I cannot post in this conversation: invite @crashcart to this channel first"
    " (in a direct message between people, run the command in an incident channel instead)."
)
JOB_QUEUED = "Queued the analysis of job {job_id}; I will answer in a thread here."
ALREADY_QUEUED = "The analysis of {name} is already queued or done in this channel."
NO_INCIDENTS = "No incidents diagnosed in this channel yet."
NO_RUNS_FOR_JOB = "No diagnoses of job {job_id} in this channel yet."
UNKNOWN_INCIDENT = "No incident {incident} in this channel."

# inputs
UNSUPPORTED_FILE = (
    "I cannot read {name}. Upload a bundle (`.tar.gz`, `.tgz`, `.tar`, `.tar.bz2`, `.tar.xz`, `.zip`)"
    " or a single log (`.log`, `.txt`, `.out`, `.err`, or one of them `.gz`)."
)
NO_BUNDLE_ATTACHED = "That message has no file attached. Use *Diagnose with CrashCart* on a message with a bundle."
ANALYSED_BEFORE = "{name} was analysed before: {link} (incident `{incident}`: {title})."
FAILED_BEFORE = "{name} was analysed before and the analysis failed: {link}."
RUNNING_BEFORE = "{name} is being analysed already: {link}."
EARLIER_THREAD = "the earlier thread"
RERUN = "Re-run"
RERUN_BY = "🔁 Re-run asked for by {user}."

# the Home tab
HOME_OPEN = "*Open incidents in your channels*"
HOME_NONE_OPEN = "No open incidents in the channels you are in."
HOME_AWAITING = "*Runbooks awaiting your approval*"
HOME_NOT_APPROVER = "You are not a runbook approver."
HOME_NOTHING_AWAITS = "Nothing awaits your approval."
HOME_FOOTER = "Runbooks are dry-run plans: CrashCart never executes them. `/crashcart help` has the rest."

# status line
STATUS_WAITING = "⏳ Analysing {name}{size}… waiting for a free worker ({ahead} ahead)."
STATUS_STARTING = "⏳ Analysing {name}{size}…"
STATUS_RUNNING = "⏳ Analysing {name} ({details})…"
STATUS_DONE = "✅ *{title}*{culprit} — incident `{incident}` (analysed {name}, {details}, in {seconds} s)."
STATUS_RESUMED = "(resumed after a restart)"
REQUESTED_BY = "Requested by {user}"
FROM_JOBS_DIR = "from the jobs directory"

# failures: what went wrong, then what to do next
STATUS_FAILED = "❌ Could not analyse {name}: {reason}. {reference}{next}"
REFERENCE = "Incident `{incident}`. "
TOO_BIG = "the bundle is {size}, over this bot's upload limit of {cap}"
TIMED_OUT = "the analysis took longer than this bot's limit of {seconds} s and was stopped"
GAVE_UP = "the analysis was interrupted {attempts} times"
ANALYSIS_DIED = "the analysis process stopped without an answer"
INTERNAL = "an internal error stopped the analysis"
SLACK_FAILED = "Slack refused a request ({error})"
DOWNLOAD_FAILED = "the file could not be downloaded from Slack ({detail})"
NEXT_RERUN = "Click *Re-run* to try again."
NEXT_SMALLER = (
    "Upload only the job's logs (rank, kernel and scheduler logs), or run `crashcart diagnose BUNDLE` on a host."
)
NEXT_CLI = "Run `crashcart diagnose BUNDLE` on a host with the bundle, or click *Re-run*."
NEXT_BUNDLE = "Check that the bundle holds the job's logs (rank, kernel and scheduler logs), then upload it again."
NEXT_OPERATOR = "Click *Re-run*; if it fails again, the bot's operator can find the details in its log."
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
    ClusterUnavailable: "the Ray cluster for the scan cannot be used",
    BundleNotVisible: "a Ray worker cannot read the bundle",
    ClusterError: "the scan on the Ray cluster failed",
    CrashCartError: "CrashCart could not finish the analysis",
}
MAX_DETAIL = 300


def error_reason(exc: CrashCartError) -> str:
    """A one-line reason for a CrashCart error (mrkdwn): the class's words, then its detail, escaped and clipped."""
    words = next(ERROR_MESSAGES[c] for c in type(exc).__mro__ if c in ERROR_MESSAGES)
    detail = " ".join(str(exc).split())
    if len(detail) > MAX_DETAIL:
        detail = detail[: MAX_DETAIL - 1] + "…"
    return f"{words}: {escape(detail)}" if detail else words


def next_step(exc: BaseException) -> str:
    """What the person should do after a failed analysis, by what failed."""
    if isinstance(exc, BundleTooLarge):
        return NEXT_SMALLER
    if isinstance(exc, BundleError):
        return NEXT_BUNDLE
    if isinstance(exc, CrashCartError):
        return NEXT_CLI
    return NEXT_RERUN


def human_seconds(s: float) -> str:
    """``0.5``, ``3``, ``90``: whole seconds from 10 on, else up to two decimals without trailing zeros."""
    if s >= 10:
        return f"{s:.0f}"
    return f"{s:.2f}".rstrip("0").rstrip(".") or "0"


def human_size(n: int) -> str:
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    if n < 1024**3:
        return f"{n / 1024**2:.1f} MB"
    return f"{n / 1024**3:.2f} GB"
