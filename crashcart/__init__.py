"""CrashCart: finds and proves the root cause of failed multi-node GPU training jobs.

The public surface is ``__all__``; everything else is internal. ``diagnose`` runs the whole
pipeline (ingest, scan, group, reduce, verify, report) on a bundle path.
"""

from crashcart.bundle import Bundle, open_bundle
from crashcart.errors import (
    BundleError,
    BundleNotFound,
    BundleTooLarge,
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
from crashcart.settings import Settings
from crashcart.store import IncidentSummary, Store, StoredIncident

__all__ = [
    "Bundle",
    "BundleError",
    "BundleNotFound",
    "BundleTooLarge",
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
    "Settings",
    "Store",
    "StoreError",
    "StoredIncident",
    "UnsafeBundlePath",
    "VerificationFailed",
    "diagnose",
    "open_bundle",
]
