"""CrashCart: finds and proves the root cause of failed multi-node GPU training jobs.

The public surface is ``__all__``; everything else is internal. ``diagnose`` runs the whole
pipeline (ingest, scan, group, reduce, verify, report) on a bundle path.
"""

from crashcart.catalogue import load_catalogue
from crashcart.errors import (
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
from crashcart.ingest.bundle import Bundle, open_bundle
from crashcart.models import DiagnosisDocument, Evidence, Finding, Group
from crashcart.pipeline import Outcome, diagnose
from crashcart.report.document import llm_summary
from crashcart.report.postmortem import render_postmortem
from crashcart.report.timeline import render_timeline
from crashcart.runbook.render import render_runbook_md
from crashcart.runbook.workflow import RunbookRecord
from crashcart.runbook.workflow import approve as approve_runbook
from crashcart.runbook.workflow import get as get_runbook
from crashcart.runbook.workflow import record_refusal as record_runbook_refusal
from crashcart.runbook.workflow import reject as reject_runbook
from crashcart.settings import Settings
from crashcart.store import IncidentSummary, Store, StoredIncident
from crashcart.text.redact import redact_text

__all__ = [
    "Bundle",
    "BundleError",
    "BundleNotFound",
    "BundleNotVisible",
    "BundleTooLarge",
    "ClusterError",
    "ClusterUnavailable",
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
    "Store",
    "StoreError",
    "StoredIncident",
    "UnsafeBundlePath",
    "VerificationFailed",
    "approve_runbook",
    "diagnose",
    "get_runbook",
    "llm_summary",
    "load_catalogue",
    "open_bundle",
    "record_runbook_refusal",
    "redact_text",
    "reject_runbook",
    "render_postmortem",
    "render_runbook_md",
    "render_timeline",
]
