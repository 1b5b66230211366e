"""Ingest: open a bundle safely and know its files.

``extract`` materialises a directory, tar (any compression), zip or single log safely (no links, no
escapes, caps on size, count and ratio), ``archive`` reads the archive formats, ``bundle`` classifies each
file (rank log, kernel log, scheduler data, telemetry, …) with its clock and line index, and
``fingerprint`` identifies the bundle. ``open_bundle`` is the stage's verb; the scan stage's
``open_scanning`` wraps it to scan members while the archive is still being read.
"""

from crashcart.ingest.bundle import Bundle, open_bundle
from crashcart.ingest.fingerprint import fingerprint, unaligned_clocks

__all__ = ["Bundle", "fingerprint", "open_bundle", "unaligned_clocks"]
