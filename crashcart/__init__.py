"""CrashCart: finds and proves the root cause of failed multi-node GPU training jobs.

The public surface is ``__all__``; everything else is internal. ``diagnose`` runs the whole
pipeline (ingest, scan, group, reduce, verify, report) on a bundle path.
"""

from crashcart.bundle import Bundle, open_bundle
from crashcart.errors import (
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
from crashcart.models import DiagnosisDocument, Evidence, Finding, Group
from crashcart.pipeline import Outcome, diagnose
from crashcart.redact import redact_text
from crashcart.report.document import llm_summary
from crashcart.report.postmortem import render_postmortem
from crashcart.report.runbook import render_runbook_md
from crashcart.report.timeline import render_timeline
from crashcart.runbooks import RunbookRecord
from crashcart.runbooks import approve as approve_runbook
from crashcart.runbooks import get as get_runbook
from crashcart.runbooks import record_refusal as record_runbook_refusal
from crashcart.runbooks import reject as reject_runbook
from crashcart.settings import Settings, SlackSettings
from crashcart.store import IncidentSummary, Store, StoredIncident

__all__ = [
    "Bundle",
    "BundleError",
    "BundleNotFound",
    "BundleTooLarge",
    "ConfigError",
    "CorruptBundle",
    "CrashCartError",
    "DiagnosisDocument",
    "EmptyBundle",
    "Evidence",
    "Finding",
    "Group",
    "IncidentNotFound",
    "IncidentSummary",
    "NoLogsFound",
    "Outcome",
    "RunbookError",
    "RunbookRecord",
    "Settings",
    "SlackSettings",
    "Store",
    "StoreError",
    "StoredIncident",
    "UnsafeBundlePath",
    "VerificationFailed",
    "approve_runbook",
    "diagnose",
    "get_runbook",
    "llm_summary",
    "open_bundle",
    "record_runbook_refusal",
    "redact_text",
    "reject_runbook",
    "render_postmortem",
    "render_runbook_md",
    "render_timeline",
]
