"""Telemetry parsing: DCGM / nvidia-smi CSV and Prometheus JSON -> samples per GPU and metric.

Input: one file's lines (DCGM CSV wide or long, nvidia-smi ``--query-gpu`` CSV, Prometheus range-query
JSON). Output: ``TelemetryResult`` with series and ``source="telemetry"`` findings for throttling,
stragglers, uncorrectable ECC, NVLink and PCIe replay errors. Pure: no I/O, never raises on bad input.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from crashcart.models import Finding
from crashcart.text.gpuid import canonical_pci

SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
REASONS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"  # also DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (older name)
THERMAL_VIOL = "DCGM_FI_DEV_THERMAL_VIOLATION"
POWER_VIOL = "DCGM_FI_DEV_POWER_VIOLATION"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
XID = "DCGM_FI_DEV_XID_ERRORS"
STEP_TIME = "step_time"

# canonical name: aliases (DCGM name without DCGM_FI_DEV_/DCGM_FI_PROF_, dcgmi dmon tags, collectd
# names, nvidia-smi --query-gpu names with units stripped). Other DCGM_FI_* columns keep their name.
_ALIAS_TABLE = """
DCGM_FI_DEV_SM_CLOCK: sm_clock smclk clocks.sm clocks.current.sm
DCGM_FI_DEV_GPU_TEMP: gpu_temp tmptr gtemp temperature.gpu gpu_temperature
DCGM_FI_DEV_POWER_USAGE: power_usage power power.draw power.draw.instant power_draw
DCGM_FI_DEV_CLOCKS_EVENT_REASONS: clock_throttle_reasons clocks_event_reasons clocks_throttle_reasons
    clocks_throttle_reasons.active clocks_event_reasons.active throttle_reasons
DCGM_FI_DEV_THERMAL_VIOLATION: thermal_violation
DCGM_FI_DEV_POWER_VIOLATION: power_violation
DCGM_FI_DEV_GPU_UTIL: gpu_util gpu_utilization utilization.gpu gputl
DCGM_FI_PROF_SM_ACTIVE: sm_active smact
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: pipe_tensor_active tensor_active tenso
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL: ecc_dbe_vol_total ecc_dbe_volatile_total
    ecc.errors.uncorrected.volatile.total
DCGM_FI_DEV_ECC_DBE_AGG_TOTAL: ecc_dbe_agg_total ecc_dbe_aggregate_total
    ecc.errors.uncorrected.aggregate.total
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS: uncorrectable_remapped_rows remapped_rows.uncorrectable
DCGM_FI_DEV_ROW_REMAP_FAILURE: row_remap_failure remapped_rows.failure
DCGM_FI_DEV_RETIRED_DBE: retired_dbe retired_pages_dbe retired_pages.double_bit.count
DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: nvlink_crc_flit_error_count_total
    nvlink_flit_crc_error_count_total
DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: nvlink_crc_data_error_count_total
    nvlink_data_crc_error_count_total
DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: nvlink_replay_error_count_total
DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: nvlink_recovery_error_count_total
DCGM_FI_DEV_PCIE_REPLAY_COUNTER: pcie_replay_counter pcie_replay pcie.replay.counter
DCGM_FI_DEV_XID_ERRORS: xid_errors xid
step_time: step_time step_time_ms iter_time_ms iteration_time_ms step_ms iter_time
"""
_ALIASES = {
    alias: name.strip()
    for entry in re.sub(r"\n\s+", " ", _ALIAS_TABLE).strip().splitlines()
    for name, aliases in [entry.split(":", 1)]
    for alias in aliases.split()
}
# NVML clock event reason bits (TAXONOMY class 34); nvidia-smi prints one Active/Not Active column each
_REASON_BITS = [
    (0x1, "GpuIdle", "gpu_idle"),
    (0x2, "ApplicationsClocksSetting", "applications_clocks_setting"),
    (0x4, "SwPowerCap", "sw_power_cap"),
    (0x8, "HwSlowdown", "hw_slowdown"),
    (0x10, "SyncBoost", "sync_boost"),
    (0x20, "SwThermalSlowdown", "sw_thermal_slowdown"),
    (0x40, "HwThermalSlowdown", "hw_thermal_slowdown"),
    (0x80, "HwPowerBrakeSlowdown", "hw_power_brake_slowdown"),
    (0x100, "DisplayClockSetting", "display_clock_setting"),
]
_BIT_COLUMNS = {
    f"{prefix}.{key}": bit
    for bit, _, key in _REASON_BITS
    for prefix in ("clocks_throttle_reasons", "clocks_event_reasons")
}
HW_SLOWDOWN, GPU_IDLE = 0x8 | 0x40 | 0x80, 0x1

_TIME_COLS = {"timestamp", "time", "ts", "datetime", "date_time", "time_stamp", "@timestamp", "_time"}
_HOST_COLS = {"hostname", "host", "node", "nodename", "node_name", "kubernetes_node", "instance"}
_GPU_COLS = {"gpu", "gpu_id", "gpu_index", "gpuid", "gpu-id", "device", "device_id", "index", "entity_id"}
_PCI_COLS = {"pci_bus_id", "pci.bus_id", "pci", "bus_id", "busid", "pci.bus", "gpu_bus_id"}
_UUID_COLS = {"uuid", "gpu_uuid"}
_RANK_COLS = {"rank", "global_rank"}
_STEP_COLS = {"step", "iteration", "iter", "global_step"}
_METRIC_COLS = {"metric", "field", "field_name", "metric_name", "name", "__name__"}
_VALUE_COLS = {"value", "val"}

# detector thresholds (each detector's docstring explains them)
HOT_C = 85.0  # GPU core temperature near NVIDIA's slowdown limit
CLOCK_DROP = 0.70  # >= 30% below the median of the peers
IDLE_CEILING = {SM_CLOCK: 400.0, GPU_UTIL: 5.0, SM_ACTIVE: 0.02, TENSOR_ACTIVE: 0.005}  # at or below: stopped
ACTIVE_FLOOR = {SM_CLOCK: 300.0, GPU_UTIL: 20.0, SM_ACTIVE: 0.1, TENSOR_ACTIVE: 0.05}  # peers idle below
THROTTLE_RUN, STRAGGLER_RUN, STEP_RUN = 2, 5, 3
ROBUST_Z = 4.0
Z_DROP, Z_RISE = 0.85, 1.30  # a z-score outlier must also be >= 15% below / 30% above its peers
STEP_SLOW, STEP_Z_SLOW = 1.30, 1.15
COUNTER_JUMP, COUNTER_TOTAL = 10.0, 50.0  # NVLink CRC/replay, PCIe replay
ECC_XIDS, NVLINK_XIDS = {48, 63, 64, 94, 95, 140}, {74, *range(144, 151)}
_ECC = re.compile(r"DCGM_FI_DEV_(ECC_DBE_(VOL|AGG)_\w+|UNCORRECTABLE_REMAPPED_ROWS|ROW_REMAP_FAILURE|RETIRED_DBE)")
_NVLINK = re.compile(r"DCGM_FI_DEV_NVLINK_(CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR_COUNT_(TOTAL|L\d+)")

_NUM = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_UNIT_SUFFIX = re.compile(r"\s*[a-z%/]*")
_UNIT = re.compile(r"\s*(?:\[[^\]]*\]|\([^)]*\))$")
_INDEX = re.compile(r"(?:gpu|nvidia|device|dev)?[\s_:#-]*(\d{1,6})", re.IGNORECASE)
_PAIR = re.compile(r'\[\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*,\s*"([^"\\]*)"\s*\]')
_EPOCH_MIN, _EPOCH_MAX = 946_684_800.0, 4_102_444_800.0  # 2000-01-01 .. 2100-01-01


class Sample(NamedTuple):
    time: datetime
    line: int  # 1-based line in the file
    value: float


class GpuSeries(BaseModel):
    """One metric of one GPU. ``gpu`` is ``canonical_pci`` when a bus id is known, else the index
    ("3"), else the UUID; a per-rank series without a GPU (step time) uses ``"rank<N>"``.
    ``metric`` is the DCGM field name when known (aliases mapped), else the column/metric name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str | None
    gpu: str
    metric: str
    samples: list[Sample]


class TelemetryResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    series: list[GpuSeries]
    findings: list[Finding]
    format: str  # dcgm_csv_wide | dcgm_csv_long | nvidia_smi_csv | prometheus_json | unknown


Dev = tuple[str | None, str]  # (host, gpu)


# --- cells ------------------------------------------------------------------------------------------


def _parse_time(raw: str) -> datetime | None:
    """ISO-8601 (naive = UTC), nvidia-smi ``2025/11/30 02:13:07.123``, or epoch s/ms/us/ns -> UTC."""
    text = raw.strip().strip('"').strip()
    if not text or len(text) > 64:
        return None
    if _NUM.fullmatch(text):
        x = float(text)
        for scale in (1.0, 1e3, 1e6, 1e9):
            if _EPOCH_MIN <= x / scale <= _EPOCH_MAX:
                return datetime.fromtimestamp(x / scale, tz=UTC)
        return None
    if re.match(r"\d{4}/\d\d?/\d\d?", text):
        text = text.replace("/", "-", 2)
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    text = text[:-1] + "+00:00" if text[-1] in "Zz" else text
    try:
        when = datetime.fromisoformat(text)
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    return when if 2000 <= when.year <= 2100 else None


def _parse_value(raw: object) -> float | None:
    """A number from a cell: units stripped ("1410 MHz"), hex bitmasks, Active/Yes = 1; blanks -> None."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        return None
    if isinstance(raw, str):
        try:
            return _finite(float(raw))  # the common case: a plain number
        except ValueError:
            pass
        text = raw.strip().strip('"').strip().lower()
        if text in ("active", "yes", "true", "enabled", "not active", "no", "false", "disabled"):
            return 1.0 if text in ("active", "yes", "true", "enabled") else 0.0
        if text.startswith("0x"):
            digits = text[2:].split(" ", 1)[0]
            ok = 0 < len(digits) <= 16 and all(c in "0123456789abcdef" for c in digits)
            return float(int(digits, 16)) if ok else None
        m = _NUM.match(text)
        if m is None or len(text) > 64 or not _UNIT_SUFFIX.fullmatch(text[m.end() :]):
            return None
        raw = m.group()
    return _finite(float(raw))


def _finite(value: float) -> float | None:
    if not math.isfinite(value) or value >= 2.0**47 or 2_147_483_632 <= value <= 2_147_483_647:
        return None  # NaN/inf, and DCGM's "blank" sentinels (int32, int64 and fp64 blanks)
    return value


def _norm(cell: str) -> str:
    return _UNIT.sub("", cell.strip().strip('"\ufeff').strip()).lower()


def _canonical_metric(name: str) -> str | None:
    """DCGM field names and their short aliases -> the DCGM field name; None if not a known metric."""
    low = _norm(name)
    if low in _ALIASES:
        return _ALIASES[low]
    for prefix in ("dcgm_fi_dev_", "dcgm_fi_prof_", "dcgm_fi_"):
        if low.startswith(prefix):
            return _ALIASES.get(low[len(prefix) :], low.upper())
    return None


def _gpu_id(pci: str | None, index: str | None, uuid: str | None) -> str | None:
    """PCI bus id (canonical) > index ("3", "GPU 3", "nvidia3") > UUID > whatever the GPU column says."""
    for raw in (pci, index):
        if raw and ":" in raw and (canonical := canonical_pci(raw.strip().strip('"'))) is not None:
            return canonical
    index = (index or "").strip().strip('"')
    if (m := _INDEX.fullmatch(index)) is not None:
        return m.group(1).lstrip("0") or "0"
    for raw in (uuid, index):
        text = (raw or "").strip().strip('"')
        if text and len(text) <= 64:
            return text
    return None


def _host(raw: str | None, hint: str | None) -> str | None:
    text = (raw or "").strip().strip('"')
    if re.fullmatch(r"[^\s:]+:\d{1,5}", text):  # Prometheus instance="host:9400"
        text = text.rsplit(":", 1)[0]
    return text or hint


def _int(raw: str | None) -> int | None:
    text = (raw or "").strip().strip('"')
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None


def _mask(value: float) -> int:
    return int(value) if 0 <= value < 2**63 else 0


def _reasons(mask: int) -> str:
    return ",".join(name for bit, name, _ in _REASON_BITS if mask & bit) or "None"


def _fmt(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.0f}"


# --- formats ----------------------------------------------------------------------------------------


@dataclass
class _Store:
    samples: dict[Dev, dict[str, list[Sample]]] = field(default_factory=dict)
    ranks: dict[Dev, int] = field(default_factory=dict)
    steps: dict[Dev, dict[int, Sample]] = field(default_factory=dict)  # step time keyed by step number

    def add(self, dev: Dev, metric: str, sample: Sample) -> None:
        self.samples.setdefault(dev, {}).setdefault(metric, []).append(sample)


@dataclass
class _Header:
    index: int  # 0-based index of the header line
    delim: str
    cells: list[str]  # normalised column names
    fmt: str


def _split(line: str, delim: str) -> list[str]:
    if '"' not in line:
        return line.split(delim)
    try:
        return next(csv.reader([line], delimiter=delim, skipinitialspace=True), [])
    except csv.Error:
        return []


def _find_header(lines: Sequence[str]) -> _Header | None:
    """Among the first ten content lines, the first that names a time column and telemetry columns."""
    seen = 0
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        seen += 1
        if seen > 10 or len(line) > 20_000:
            return None
        delim = max(",\t;", key=line.count)
        cells = [_norm(c) for c in _split(line, delim)]
        names = set(cells)
        if line.count(delim) == 0 or not names & _TIME_COLS:
            continue
        if names & _METRIC_COLS and names & _VALUE_COLS:
            return _Header(i, delim, cells, "dcgm_csv_long")
        if any(_canonical_metric(c) or c in _BIT_COLUMNS for c in cells):
            nvsmi = "timestamp" in names and any("." in c for c in cells)
            return _Header(i, delim, cells, "nvidia_smi_csv" if nvsmi else "dcgm_csv_wide")
    return None


def _parse_csv(lines: Sequence[str], head: _Header, hint: str | None, store: _Store) -> None:
    cells = head.cells

    def col(names: set[str]) -> int | None:
        return next((i for i, c in enumerate(cells) if c in names), None)

    t_col, host_col, gpu_col, pci_col = col(_TIME_COLS), col(_HOST_COLS), col(_GPU_COLS), col(_PCI_COLS)
    uuid_col, rank_col, step_col = col(_UUID_COLS), col(_RANK_COLS), col(_STEP_COLS)
    name_col, value_col = col(_METRIC_COLS), col(_VALUE_COLS)
    ids = {t_col, host_col, gpu_col, pci_col, uuid_col, rank_col, step_col}
    long = head.fmt == "dcgm_csv_long"
    metrics = [(i, m) for i, c in enumerate(cells) if i not in ids and (m := _canonical_metric(c))]
    bits = [(i, _BIT_COLUMNS[c]) for i, c in enumerate(cells) if c in _BIT_COLUMNS and not long]
    if long or any(m == REASONS for _, m in metrics):
        bits = []  # the bitmask column wins over per-reason Active/Not Active columns
    times: dict[str, datetime | None] = {}
    header = lines[head.index].strip()
    for n in range(head.index + 2, len(lines) + 1):
        text = lines[n - 1].strip()
        if not text or text.startswith("#") or text == header:
            continue
        row = _split(lines[n - 1], head.delim)

        def cell(i: int | None, row: list[str] = row) -> str | None:
            return row[i] if i is not None and i < len(row) else None

        raw_t = cell(t_col)
        if raw_t is None:
            continue
        when = times[raw_t] if raw_t in times else times.setdefault(raw_t, _parse_time(raw_t))
        rank = _int(cell(rank_col))
        gpu = _gpu_id(cell(pci_col), cell(gpu_col), cell(uuid_col))
        if when is None or (gpu is None and rank is None):
            continue
        dev: Dev = (_host(cell(host_col), hint), gpu if gpu is not None else f"rank{rank}")
        if rank is not None:
            store.ranks[dev] = rank
        step = _int(cell(step_col))
        pairs: list[tuple[int, str]] = metrics
        if long:
            raw_name = (cell(name_col) or "").strip().strip('"')
            name = _canonical_metric(raw_name) or raw_name[:200]
            pairs = [(value_col, name)] if name and value_col is not None else []
        for i, name in pairs:
            if (value := _parse_value(cell(i))) is not None:
                store.add(dev, name, Sample(when, n, value))
                if name == STEP_TIME and step is not None:
                    store.steps.setdefault(dev, {})[step] = Sample(when, n, value)
        got = [(bit, _parse_value(cell(i))) for i, bit in bits]
        if any(v is not None for _, v in got):
            store.add(dev, REASONS, Sample(when, n, float(sum(bit for bit, v in got if v))))


def _looks_like_json(head: Sequence[str]) -> bool:
    text = "\n".join(head[:50]).lstrip()
    series = '"metric"' in text and ('"values"' in text or '"value"' in text)
    return text[:1] in ("{", "[") and ('"resultType"' in text or '"__name__"' in text or series)


def _prom_series(doc: object, depth: int = 0) -> list[dict[str, Any]]:
    """The series objects of a range (or instant) query response, or of a list of responses."""
    if isinstance(doc, dict) and depth < 5:
        if "metric" in doc and ("values" in doc or "value" in doc):
            return [doc]
        key = next((k for k in ("data", "result") if k in doc), None)
        return _prom_series(doc[key], depth + 1) if key else []
    if isinstance(doc, list) and depth < 5:
        return [s for item in doc for s in _prom_series(item, depth + 1)]
    return []


def _label(labels: dict[str, Any], *names: str) -> str | None:
    for name in names:
        value = labels.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value)
    return None


def _parse_prometheus(lines: Sequence[str], hint: str | None, store: _Store) -> bool:
    """Prometheus JSON; a sample's evidence line is the line holding its value string (line 1 when
    the document is on one line, or when the sample cannot be located in the text)."""
    text = "\n".join(lines)
    try:
        series = _prom_series(json.loads(text))
    except (ValueError, RecursionError):
        return False
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    pairs = list(_PAIR.finditer(text))
    cursor = 0
    for item in series:
        labels: dict[str, Any] = item["metric"] if isinstance(item.get("metric"), dict) else {}
        raw_name = _label(labels, "__name__")
        metric = (_canonical_metric(raw_name) or raw_name[:200]) if raw_name else None
        pci, uuid = _label(labels, "pci_bus_id", "PCI_BUS_ID"), _label(labels, "UUID", "uuid")
        gpu = _gpu_id(pci, _label(labels, "gpu", "GPU", "gpu_index", "minor_number", "device"), uuid)
        rank = _int(_label(labels, "rank"))
        if metric is None or (gpu is None and rank is None):
            continue
        host = _host(_label(labels, "Hostname", "hostname", "host", "node", "nodename", "instance"), hint)
        dev: Dev = (host, gpu if gpu is not None else f"rank{rank}")
        if rank is not None:
            store.ranks[dev] = rank
        values = item.get("values", [item.get("value")])
        for pair in values if isinstance(values, list) else []:
            if not isinstance(pair, list) or len(pair) != 2:
                continue
            when = _parse_time(str(pair[0])) if isinstance(pair[0], int | float | str) else None
            number = 1
            for k in range(cursor, min(cursor + 64, len(pairs))):
                m = pairs[k]
                if when is not None and m.group(2) == pair[1] and _parse_time(m.group(1)) == when:
                    number, cursor = bisect_right(starts, m.start(2)), k + 1
                    break
            if when is not None and (value := _parse_value(pair[1])) is not None:
                store.add(dev, metric, Sample(when, number, value))
    return bool(series)


# --- alignment and peers ----------------------------------------------------------------------------


def _slots(store: _Store) -> dict[float, int]:
    """Align GPUs: sorted timestamps closer than half the typical sampling interval share a slot."""
    steps: list[float] = []
    stamps: set[float] = set()
    for metrics in store.samples.values():
        for metric, samples in metrics.items():
            ts = sorted({s.time.timestamp() for s in samples})
            stamps.update(ts)
            if len(ts) > 1 and metric != STEP_TIME:
                steps.append(statistics.median(b - a for a, b in pairwise(ts)))
    tol = statistics.median(steps) / 2 if steps else 0.5
    slots: dict[float, int] = {}
    slot, start = -1, -math.inf
    for t in sorted(stamps):
        if t - start >= tol:
            slot, start = slot + 1, t
        slots[t] = slot
    return slots
