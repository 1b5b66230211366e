"""Telemetry files: GPU time series in, per-GPU series and findings out.

``parse`` reads DCGM CSV (wide or long), nvidia-smi ``--query-gpu`` CSV and Prometheus range-query JSON into
samples per GPU and metric; ``detect`` finds throttling, stragglers, uncorrectable ECC, NVLink and PCIe
replay errors in them. Pure: no I/O, never raises on bad input.
"""

from crashcart.scan.telemetry.detect import analyse_telemetry, looks_like_telemetry
from crashcart.scan.telemetry.parse import GPU_TEMP, SM_CLOCK, GpuSeries, Sample, TelemetryResult

__all__ = [
    "GPU_TEMP",
    "SM_CLOCK",
    "GpuSeries",
    "Sample",
    "TelemetryResult",
    "analyse_telemetry",
    "looks_like_telemetry",
]
