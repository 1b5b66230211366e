"""Scan-stage helper for telemetry files: GPU time series in, per-GPU series and findings out.

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
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from crashcart.models import Evidence, Finding, Severity
from crashcart.text.gpuid import canonical_pci

__all__ = ["GpuSeries", "Sample", "TelemetryResult", "analyse_telemetry", "looks_like_telemetry"]

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


class _Peers:
    """The values of one metric of every GPU at each slot (or step): peer medians and robust z."""

    def __init__(self, series: Iterable[dict[int, Sample]]) -> None:
        self.values: dict[int, list[float]] = {}
        for by_key in series:
            for key, s in by_key.items():
                self.values.setdefault(key, []).append(s.value)
        for values in self.values.values():
            values.sort()
        self._spread: dict[int, tuple[float, float]] = {}

    def median(self, key: int, value: float, least: int) -> float | None:
        """Median of the *other* GPUs at ``key`` (``value`` is this GPU's), None with < ``least`` peers."""
        ordered = self.values.get(key, [])
        n = len(ordered) - 1
        if n < least:
            return None
        p = bisect_left(ordered, value)

        def at(k: int) -> float:
            return ordered[k] if k < p else ordered[k + 1]

        return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2

    def z(self, key: int, value: float) -> float:
        """(value - median) / (1.4826 * MAD) over all GPUs at ``key``; +-inf when the MAD is 0."""
        if key not in self._spread:
            values = self.values[key]
            med = statistics.median(values)
            self._spread[key] = (med, statistics.median(abs(v - med) for v in values))
        med, mad = self._spread[key]
        if mad == 0:
            return 0.0 if value == med else math.copysign(math.inf, value - med)
        return (value - med) / (1.4826 * mad)


class _Analysis:
    def __init__(self, store: _Store) -> None:
        self.store = store
        slots = _slots(store)
        self.at: dict[str, dict[Dev, dict[int, Sample]]] = {}
        for dev, metrics in store.samples.items():
            for metric, samples in metrics.items():
                samples.sort(key=lambda s: (s.time, s.line))
                by_slot = self.at.setdefault(metric, {}).setdefault(dev, {})
                for s in samples:
                    by_slot[slots[s.time.timestamp()]] = s
        self._peers: dict[str, _Peers] = {}
        self.rising: dict[Dev, set[int]] = {}  # slots where a violation counter rose faster than peers'
        for metric in (THERMAL_VIOL, POWER_VIOL):
            deltas = {
                dev: {b: y._replace(value=y.value - x.value) for (_, x), (b, y) in pairwise(points)}
                for dev, points in self.points(metric)
            }
            peers = _Peers(deltas.values())
            for dev, by_slot in deltas.items():
                for slot, d in by_slot.items():
                    peer = peers.median(slot, d.value, 1)
                    if d.value > 0 and (peer is None or d.value > 2 * max(peer, 0.0)):
                        self.rising.setdefault(dev, set()).add(slot)

    def peers(self, metric: str) -> _Peers:
        if metric not in self._peers:
            self._peers[metric] = _Peers(self.at.get(metric, {}).values())
        return self._peers[metric]

    def points(self, metric: str) -> Iterable[tuple[Dev, list[tuple[int, Sample]]]]:
        for dev, by_slot in self.at.get(metric, {}).items():
            yield dev, sorted(by_slot.items())

    def value(self, metric: str, dev: Dev, slot: int) -> float | None:
        s = self.at.get(metric, {}).get(dev, {}).get(slot)
        return None if s is None else s.value

    def flags(self, dev: Dev, slot: int) -> int:
        value = self.value(REASONS, dev, slot)
        return 0 if value is None else _mask(value)

    def hot(self, dev: Dev, slot: int) -> bool:
        """>= 85 C, a HW slowdown bit, or a thermal/power violation counter rising > 2x its peers'."""
        temp = self.value(GPU_TEMP, dev, slot)
        if bool(self.flags(dev, slot) & HW_SLOWDOWN) or (temp is not None and temp >= HOT_C):
            return True
        return slot in self.rising.get(dev, ())

    def baseline(self, dev: Dev, metric: str, before: Sample, ok: Callable[[Sample], bool]) -> list[int]:
        """The line of the last earlier sample of this GPU that ``ok`` calls normal, if any."""
        samples = self.store.samples.get(dev, {}).get(metric, [])
        end = bisect_left(samples, (before.time, before.line), key=lambda s: (s.time, s.line))
        return next(([s.line] for s in reversed(samples[:end]) if ok(s)), [])


def _within(low: float, high: float) -> Callable[[Sample], bool]:
    return lambda s: low <= s.value <= high


def _first_run(points: Sequence[tuple[int, Sample]], need: int, judge: Callable[[int, Sample], bool]) -> int | None:
    """Index of the first sample of the first run of ``need`` consecutive samples ``judge`` flags."""
    run = 0
    for i, (key, s) in enumerate(points):
        run = run + 1 if judge(key, s) else 0
        if run == need:
            return i - need + 1
    return None


# --- detectors --------------------------------------------------------------------------------------


@dataclass
class _Hit:
    class_id: str
    signature: str
    severity: Severity
    dev: Dev
    sample: Sample
    summary: str
    fields: dict[str, str]
    baseline: list[int]


def _where(dev: Dev) -> str:
    return f"GPU {dev[1]}" + (f" on {dev[0]}" if dev[0] else "")


def _keep(best: dict[Dev, _Hit], hit: _Hit) -> None:
    if hit.dev not in best or hit.sample.time < best[hit.dev].sample.time:
        best[hit.dev] = hit


def _detect_throttle(a: _Analysis) -> list[_Hit]:
    """Class 34, P1. (a) The clock-event bitmask has a hardware slowdown bit (0x8 HwSlowdown, 0x40
    HwThermalSlowdown, 0x80 HwPowerBrakeSlowdown) in >= 2 consecutive samples of one GPU; GpuIdle and
    SwPowerCap are normal. (b) The SM clock of one GPU is <= 70% of the median of the other GPUs at
    the same time (peers above 300 MHz) for >= 2 consecutive samples while it is >= 85 C or its
    thermal/power violation counter rises more than twice as fast as the peers' (every GPU under a
    power cap accumulates power-violation time; one GPU doing so alone is limited). The earlier wins."""
    best: dict[Dev, _Hit] = {}
    clocks = a.peers(SM_CLOCK)
    for metric in (REASONS, SM_CLOCK):
        for dev, points in a.points(metric):

            def judge(slot: int, s: Sample, dev: Dev = dev, metric: str = metric) -> bool:
                if metric == REASONS:
                    return bool(_mask(s.value) & HW_SLOWDOWN)
                peer = clocks.median(slot, s.value, 1)
                low = peer is not None and peer >= ACTIVE_FLOOR[SM_CLOCK] and s.value <= CLOCK_DROP * peer
                return low and a.hot(dev, slot) and not a.flags(dev, slot) & GPU_IDLE

            if (i := _first_run(points, THROTTLE_RUN, judge)) is not None:
                _keep(best, _throttle_hit(a, dev, *points[i], metric, clocks))
    return list(best.values())


def _throttle_hit(a: _Analysis, dev: Dev, slot: int, s: Sample, metric: str, clocks: _Peers) -> _Hit:
    mask = a.flags(dev, slot)
    clock, temp = a.value(SM_CLOCK, dev, slot), a.value(GPU_TEMP, dev, slot)
    peer = clocks.median(slot, clock, 1) if clock is not None else None
    fields = {"reasons": _reasons(mask), "rule": "reasons" if metric == REASONS else "clock"}
    if metric == REASONS:
        summary = f"{_where(dev)}: clocks slowed by hardware ({_reasons(mask & HW_SLOWDOWN)})"
    else:
        summary = f"{_where(dev)}: SM clock >= 30% below its peers while hot or power/thermal-limited"
    facts = []
    for key, value, unit in (
        ("clock_mhz", clock, " MHz"),
        ("peer_clock_mhz", peer, " MHz on peers"),
        ("temp_c", temp, " C"),
    ):
        if value is not None:
            fields[key] = _fmt(value)
            facts.append(_fmt(value) + unit)
    summary += ": " + ", ".join(facts) if facts else ""

    def normal(x: Sample) -> bool:
        if metric == REASONS:
            return not _mask(x.value) & HW_SLOWDOWN
        return peer is not None and x.value > CLOCK_DROP * peer

    return _Hit(
        "gpu_thermal_power_throttling",
        "telemetry.gpu_throttling",
        "P1",
        dev,
        s,
        summary,
        fields,
        a.baseline(dev, metric, s, normal),
    )


def _detect_straggler(a: _Analysis) -> list[_Hit]:
    """Class 35, P1. Needs >= 3 GPUs at a time. A sample is an outlier when it is <= 70% of the median
    of the other GPUs, or its robust z-score (median/MAD over all GPUs) is <= -4 and it is >= 15%
    below them; for SM/tensor activity also z >= 4 and >= 30% above (a slow GPU can look busier than
    peers that wait for it). Peers must be active (SM clock > 300 MHz, util > 20%, SM active > 0.1,
    tensor active > 0.05). Fires after >= 5 consecutive outlier samples; a sample with GpuIdle, a HW
    slowdown bit, >= 85 C or a violation counter outpacing the peers breaks the run (idle is not
    slow, and a thermally or power-limited GPU is class 34)."""
    best: dict[Dev, _Hit] = {}
    for metric in (SM_CLOCK, SM_ACTIVE, TENSOR_ACTIVE, GPU_UTIL):
        peers = a.peers(metric)
        for dev, points in a.points(metric):

            def judge(slot: int, s: Sample, dev: Dev = dev, metric: str = metric, peers: _Peers = peers) -> bool:
                peer = peers.median(slot, s.value, 2)
                if peer is None or peer <= ACTIVE_FLOOR[metric] or a.hot(dev, slot) or a.flags(dev, slot) & GPU_IDLE:
                    return False
                z = peers.z(slot, s.value)
                if s.value <= IDLE_CEILING[metric]:
                    return False  # a GPU doing nothing has stopped (a hang or a dead rank), it is not slow
                if s.value <= CLOCK_DROP * peer or (z <= -ROBUST_Z and s.value <= Z_DROP * peer):
                    return True
                return metric in (SM_ACTIVE, TENSOR_ACTIVE, GPU_UTIL) and z >= ROBUST_Z and s.value >= Z_RISE * peer

            if (i := _first_run(points, STRAGGLER_RUN, judge)) is not None:
                slot, s = points[i]
                _keep(
                    best,
                    _straggler_hit(a, dev, metric, s, peers.median(slot, s.value, 2) or 0.0, peers.z(slot, s.value)),
                )
    for hit in _detect_step_stragglers(a):
        _keep(best, hit)
    return list(best.values())


def _straggler_hit(a: _Analysis, dev: Dev, metric: str, s: Sample, peer: float, z: float) -> _Hit:
    short = metric.removeprefix("DCGM_FI_DEV_").removeprefix("DCGM_FI_PROF_")
    fields = {"metric": metric, "value": _fmt(s.value), "peer_median": _fmt(peer)}
    fields["robust_z"] = f"{z:.1f}"
    summary = (
        f"{_where(dev)}: {short} {_fmt(s.value)} vs peer median {_fmt(peer)}, sustained, without "
        "thermal or hardware slowdown: fail-slow straggler"
    )
    baseline = a.baseline(dev, metric, s, _within(Z_DROP * peer, (2 - Z_DROP) * peer))
    return _Hit("straggler_fail_slow", "telemetry.straggler", "P1", dev, s, summary, fields, baseline)


def _detect_step_stragglers(a: _Analysis) -> list[_Hit]:
    """Per-rank step time (``step_time`` and aliases; aligned by a step column when there is one, else
    by time) is an outlier at >= 1.3x the median of the other ranks, or z >= 4 and >= 1.15x, for >= 3
    consecutive steps, with >= 3 ranks reporting."""
    keyed = {dev: a.store.steps.get(dev) or by_slot for dev, by_slot in a.at.get(STEP_TIME, {}).items()}
    peers = _Peers(keyed.values())
    hits = []
    for dev, by_key in keyed.items():
        points = sorted(by_key.items())

        def judge(key: int, s: Sample) -> bool:
            peer = peers.median(key, s.value, 2)
            if peer is None or peer <= 0:
                return False
            return s.value >= STEP_SLOW * peer or (peers.z(key, s.value) >= ROBUST_Z and s.value >= STEP_Z_SLOW * peer)

        if (i := _first_run(points, STEP_RUN, judge)) is None:
            continue
        key, s = points[i]
        peer = peers.median(key, s.value, 2) or 0.0
        rank = a.store.ranks.get(dev)
        who = _where(dev) if rank is None else f"rank {rank}" + (f" on {dev[0]}" if dev[0] else "")
        fields = {"metric": STEP_TIME, "value": _fmt(s.value), "peer_median": _fmt(peer)}
        summary = f"{who}: step time {_fmt(s.value)} vs peer median {_fmt(peer)} for {STEP_RUN}+ steps"
        baseline = a.baseline(dev, STEP_TIME, s, _within(0.0, STEP_Z_SLOW * peer))
        hits.append(
            _Hit(
                "straggler_fail_slow",
                "telemetry.step_time_straggler",
                "P1",
                dev,
                s,
                summary,
                fields,
                baseline,
            )
        )
    return hits


def _counter_rise(samples: list[Sample], jump: float, total: float) -> tuple[Sample, Sample, float] | None:
    """(previous, anomalous, total rise): the first sample where a cumulative counter rose by >= ``jump``
    since the previous one, else the first rise if the file's total rise (resets ignored) is >= ``total``."""
    first: tuple[Sample, Sample] | None = None
    rise = 0.0
    for prev, cur in pairwise(samples):
        if cur.value > prev.value:
            rise += cur.value - prev.value
            first = first or (prev, cur)
            if cur.value - prev.value >= jump:
                return prev, cur, rise
    return (*first, rise) if first is not None and rise >= total else None


def _detect_counters(a: _Analysis) -> list[_Hit]:
    """Classes 10, 11 and 21, P0. Uncorrectable ECC (DBE volatile/aggregate, uncorrectable remapped rows,
    row-remap failure, retired DBE pages) and NVLink recovery errors: any increase. NVLink CRC flit/data
    and replay errors, PCIe replays: a jump of >= 10 between consecutive samples, or >= 50 over the
    file. ``DCGM_FI_DEV_XID_ERRORS`` changing to an ECC Xid (48/63/64/94/95/140) or an NVLink Xid
    (74, 144-150) counts as well. A counter that decreases was reset: that step is ignored."""
    best: dict[str, dict[Dev, _Hit]] = {}
    for dev, metrics in a.store.samples.items():
        for metric, samples in metrics.items():
            nvlink = _NVLINK.fullmatch(metric)
            if _ECC.fullmatch(metric) or (nvlink and nvlink.group(1) == "RECOVERY"):
                limits = (1.0, 1.0)
            elif nvlink or metric == PCIE_REPLAY:
                limits = (COUNTER_JUMP, COUNTER_TOTAL)
            elif metric == XID:
                for hit in _xid_hits(dev, samples):
                    _keep(best.setdefault(hit.class_id, {}), hit)
                continue
            else:
                continue
            if (found := _counter_rise(samples, *limits)) is None:
                continue
            prev, cur, rise = found
            class_id, signature = (
                ("gpu_nvlink_error", "telemetry.nvlink_errors")
                if nvlink
                else ("pcie_aer_error", "telemetry.pcie_replay")
                if metric == PCIE_REPLAY
                else ("gpu_memory_ecc_uncorrectable", "telemetry.ecc_uncorrectable")
            )
            fields = {
                "metric": metric,
                "before": _fmt(prev.value),
                "after": _fmt(cur.value),
                "total_increase": _fmt(rise),
            }
            short = metric.removeprefix("DCGM_FI_DEV_")
            summary = f"{_where(dev)}: {short} rose from {_fmt(prev.value)} to {_fmt(cur.value)}"
            if rise > cur.value - prev.value:
                summary += f" ({_fmt(rise)} over the file)"
            _keep(
                best.setdefault(class_id, {}),
                _Hit(class_id, signature, "P0", dev, cur, summary, fields, [prev.line]),
            )
    return [hit for by_dev in best.values() for hit in by_dev.values()]


def _xid_hits(dev: Dev, samples: list[Sample]) -> Iterable[_Hit]:
    for prev, cur in pairwise(samples):
        xid = int(cur.value) if cur.value.is_integer() and cur.value != prev.value else -1
        if xid in ECC_XIDS or xid in NVLINK_XIDS:
            ecc = xid in ECC_XIDS
            class_id = "gpu_memory_ecc_uncorrectable" if ecc else "gpu_nvlink_error"
            signature = "telemetry.ecc_uncorrectable" if ecc else "telemetry.nvlink_errors"
            summary = f"{_where(dev)}: DCGM reports Xid {xid}"
            yield _Hit(class_id, signature, "P0", dev, cur, summary, {"metric": XID, "xid": str(xid)}, [prev.line])


# --- public API -------------------------------------------------------------------------------------


def looks_like_telemetry(path: str, head: Sequence[str]) -> bool:
    """True when the first lines look like a format ``analyse_telemetry`` reads (content decides,
    not ``path``): a CSV header with a time column and DCGM/nvidia-smi columns, or Prometheus JSON."""
    del path
    return _looks_like_json(head) or _find_header(head) is not None


def analyse_telemetry(path: str, lines: Sequence[str], *, host_hint: str | None = None) -> TelemetryResult:
    """Parse ``lines`` (index 0 = line 1) into per-GPU series and run the detectors.

    :param path: bundle-relative path, used as ``Evidence.file``.
    :param lines: the file's lines, newline stripped, exactly as the canonical reader gives them.
    :param host_hint: host to use when the file names none (e.g. from the file's path).
    :returns: series, findings (at most one per class, host and GPU: the first anomalous time) and
        the format name; no series and no findings for anything unreadable (format ``unknown``).
    """
    store = _Store()
    fmt = "unknown"
    if _looks_like_json(lines[:50]) and _parse_prometheus(lines, host_hint, store):
        fmt = "prometheus_json"
    elif (head := _find_header(lines)) is not None:
        fmt = head.fmt
        _parse_csv(lines, head, host_hint, store)
    if not store.samples:
        return TelemetryResult(series=[], findings=[], format=fmt)
    a = _Analysis(store)
    hits = _detect_counters(a) + _detect_throttle(a) + _detect_straggler(a)
    hits.sort(key=lambda h: (h.sample.time, h.class_id, h.dev[0] or "", _gpu_order(h.dev[1])))
    ordered = sorted(store.samples.items(), key=lambda kv: (kv[0][0] or "", _gpu_order(kv[0][1])))
    return TelemetryResult(
        series=[
            GpuSeries.model_construct(host=dev[0], gpu=dev[1], metric=metric, samples=samples)
            for dev, metrics in ordered
            for metric, samples in sorted(metrics.items())
        ],
        findings=[f for hit in hits if (f := _finding(path, lines, hit, store.ranks.get(hit.dev)))],
        format=fmt,
    )


def _gpu_order(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isascii() and gpu.isdigit() else (1 << 30, gpu)


def _finding(path: str, lines: Sequence[str], hit: _Hit, rank: int | None) -> Finding | None:
    numbers = dict.fromkeys([hit.sample.line, *hit.baseline])
    evidence = [Evidence(id="", file=path, line=n, text=lines[n - 1]) for n in numbers if 1 <= n <= len(lines)]
    if not evidence:
        return None
    return Finding(
        id="",
        class_id=hit.class_id,
        signature=hit.signature,
        role="root_candidate",
        severity=hit.severity,
        summary=hit.summary,
        time=hit.sample.time,
        rank=rank,
        node=hit.dev[0],
        gpu=None if hit.dev[1].startswith("rank") else hit.dev[1],
        fields=hit.fields,
        evidence=evidence,
        source="telemetry",
    )
