"""Scan: run the signature catalogue over every log file and turn matches into Findings with Evidence.

``reader`` walks a file in newline-aligned buffers, ``matcher`` runs the patterns (hyperscan, or ``re``),
``findings`` turns matches into Findings (times, fields, tracebacks), ``telemetry`` reads DCGM/Prometheus
series and detects throttling and stragglers, and ``run`` is the thread pool: ``open_scanning`` opens the
bundle and starts scanning archive members as they are read, ``scan`` finishes the rest. ``cluster`` runs the
same per-file scan (``run.scan_files``) on Ray tasks instead, for a directory every worker can read.
"""

from crashcart.scan.run import Progress, ScanResult, open_scanning, scan
from crashcart.scan.telemetry import GpuSeries

__all__ = ["GpuSeries", "Progress", "ScanResult", "open_scanning", "scan"]
