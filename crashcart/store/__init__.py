"""Store: every diagnosis run in one SQLite file, with runbooks, their audit trail and model calls.

``Store`` (``store``) opens the file, migrates it (``migrations``: named sets of numbered steps per owner;
the bot's job-queue tables are a set of their own) and saves and reads runs; ``records`` are the models it
returns.
"""

from crashcart.store.migrations import MIGRATIONS, Migration, migrate, record_table
from crashcart.store.records import ApprovalEntry, Decision, IncidentSummary, RunbookPlan, StoredIncident
from crashcart.store.store import Store

__all__ = [
    "MIGRATIONS",
    "ApprovalEntry",
    "Decision",
    "IncidentSummary",
    "Migration",
    "RunbookPlan",
    "Store",
    "StoredIncident",
    "migrate",
    "record_table",
]
