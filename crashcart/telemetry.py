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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from crashcart.gpuid import canonical_pci
from crashcart.models import Evidence, Finding, Severity

__all__ = ["GpuSeries", "Sample", "TelemetryResult", "analyse_telemetry", "looks_like_telemetry"]

# --- canonical metric names (DCGM field names; the newer name for the throttle bitmask) ------------
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER = "DCGM_FI_DEV_POWER_USAGE"
REASONS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
THERMAL_VIOL = "DCGM_FI_DEV_THERMAL_VIOLATION"
POWER_VIOL = "DCGM_FI_DEV_POWER_VIOLATION"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
XID = "DCGM_FI_DEV_XID_ERRORS"
STEP_TIME = "step_time"

_ALIASES: dict[str, str] = {
    # short DCGM names (field name without DCGM_FI_DEV_/DCGM_FI_PROF_), dcgmi dmon column tags,
    # collectd-style names, and nvidia-smi --query-gpu names (units stripped).
    **dict.fromkeys(["sm_clock", "smclk", "clocks.sm", "clocks.current.sm"], SM_CLOCK),
    **dict.fromkeys(["gpu_temp", "tmptr", "gtemp", "temperature.gpu", "gpu_temperature"], GPU_TEMP),
    **dict.fromkeys(["power_usage", "power", "power.draw", "power.draw.instant", "power_draw"], POWER),
    **dict.fromkeys(
        [
            "clock_throttle_reasons",
            "clocks_throttle_reasons",
            "clocks_event_reasons",
            "clocks_throttle_reasons.active",
            "clocks_event_reasons.active",
            "throttle_reasons",
        ],
        REASONS,
    ),
    "thermal_violation": THERMAL_VIOL,
    "power_violation": POWER_VIOL,
    **dict.fromkeys(["gpu_util", "gpu_utilization", "utilization.gpu", "gputl"], GPU_UTIL),
    **dict.fromkeys(["sm_active", "smact"], SM_ACTIVE),
    **dict.fromkeys(["pipe_tensor_active", "tensor_active", "tenso"], TENSOR_ACTIVE),
    **dict.fromkeys(
        ["ecc_dbe_vol_total", "ecc_dbe_volatile_total", "ecc.errors.uncorrected.volatile.total"],
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    ),
    **dict.fromkeys(
        ["ecc_dbe_agg_total", "ecc_dbe_aggregate_total", "ecc.errors.uncorrected.aggregate.total"],
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    ),
    **dict.fromkeys(
        ["uncorrectable_remapped_rows", "remapped_rows.uncorrectable"],
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    ),
    **dict.fromkeys(["row_remap_failure", "remapped_rows.failure"], "DCGM_FI_DEV_ROW_REMAP_FAILURE"),
    **dict.fromkeys(
        ["retired_dbe", "retired_pages_dbe", "retired_pages.double_bit.count"], "DCGM_FI_DEV_RETIRED_DBE"
    ),
    **dict.fromkeys(
        ["nvlink_crc_flit_error_count_total", "nvlink_flit_crc_error_count_total"],
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    ),
    **dict.fromkeys(
        ["nvlink_crc_data_error_count_total", "nvlink_data_crc_error_count_total"],
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    ),
    "nvlink_replay_error_count_total": "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "nvlink_recovery_error_count_total": "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    **dict.fromkeys(["pcie_replay_counter", "pcie_replay", "pcie.replay.counter"], PCIE_REPLAY),
    **dict.fromkeys(["xid_errors", "xid"], XID),
    **dict.fromkeys(
        ["step_time", "step_time_ms", "iter_time_ms", "iteration_time_ms", "step_ms", "iter_time"], STEP_TIME
    ),
}
# NVML clock event reasons (TAXONOMY class 34); nvidia-smi also prints one Active/Not Active column each.
_REASON_BITS: tuple[tuple[int, str, str], ...] = (
    (0x1, "GpuIdle", "gpu_idle"),
    (0x2, "ApplicationsClocksSetting", "applications_clocks_setting"),
    (0x4, "SwPowerCap", "sw_power_cap"),
    (0x8, "HwSlowdown", "hw_slowdown"),
    (0x10, "SyncBoost", "sync_boost"),
    (0x20, "SwThermalSlowdown", "sw_thermal_slowdown"),
    (0x40, "HwThermalSlowdown", "hw_thermal_slowdown"),
    (0x80, "HwPowerBrakeSlowdown", "hw_power_brake_slowdown"),
    (0x100, "DisplayClockSetting", "display_clock_setting"),
)
_BIT_COLUMNS = {
    f"{prefix}.{key}": bit
    for bit, _, key in _REASON_BITS
    for prefix in ("clocks_throttle_reasons", "clocks_event_reasons")
}
HW_SLOWDOWN = 0x8 | 0x40 | 0x80
GPU_IDLE = 0x1

_TIME_COLS = {"timestamp", "time", "ts", "datetime", "date_time", "time_stamp", "@timestamp", "_time"}
_HOST_COLS = {"hostname", "host", "node", "nodename", "node_name", "kubernetes_node", "instance"}
_GPU_COLS = {"gpu", "gpu_id", "gpu_index", "gpuid", "gpu-id", "device", "device_id", "index", "entity"}
_GPU_COLS |= {"entity_id", "entityid", "minor_number"}
_PCI_COLS = {"pci_bus_id", "pci.bus_id", "pci", "bus_id", "busid", "pci.bus", "gpu_bus_id"}
_UUID_COLS = {"uuid", "gpu_uuid"}
_RANK_COLS = {"rank", "global_rank"}
_STEP_COLS = {"step", "iteration", "iter", "global_step"}
_METRIC_COLS = {"metric", "field", "field_name", "metric_name", "name", "__name__"}
_VALUE_COLS = {"value", "val"}

# --- detector thresholds (see each detector's docstring) ---------------------------------------------
HOT_C = 85.0  # GPU temperature at which NVIDIA parts approach their slowdown limit
CLOCK_DROP = 0.70  # "falling >= 30% below the median of its peers"
CLOCK_FLOOR_MHZ = 300.0  # below this the peers are idle: no comparison
THROTTLE_MIN_SAMPLES = 2
STRAGGLER_MIN_SAMPLES = 5
STEP_MIN_SAMPLES = 3
ROBUST_Z = 4.0
Z_MIN_DROP = 0.85  # a z-score outlier must also be >= 15% below its peers
Z_MIN_RISE = 1.30  # ... or >= 30% above them (activity metrics)
STEP_SLOW = 1.30
STEP_Z_RISE = 1.15
ACTIVITY_FLOOR = {SM_CLOCK: CLOCK_FLOOR_MHZ, GPU_UTIL: 20.0, SM_ACTIVE: 0.1, TENSOR_ACTIVE: 0.05}
COUNTER_JUMP = 10.0  # NVLink CRC/replay, PCIe replay: errors between two consecutive samples
COUNTER_TOTAL = 50.0  # ... or over the whole file
ECC_XIDS = {48, 63, 64, 94, 95, 140}
NVLINK_XIDS = {74, *range(144, 151)}
_ECC = re.compile(
    r"^DCGM_FI_DEV_(ECC_DBE_(VOL|AGG)_\w+|UNCORRECTABLE_REMAPPED_ROWS|ROW_REMAP_FAILURE|RETIRED_DBE)$"
)
_NVLINK = re.compile(r"^DCGM_FI_DEV_NVLINK_(CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR_COUNT_(TOTAL|L\d+)$")

_NUM = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_UNIT = re.compile(r"\s*(?:\[[^\]]*\]|\([^)]*\))$")
_FRACTION = re.compile(r"(\.\d{6})\d+")
_SLASH_DATE = re.compile(r"^\d{4}/\d{1,2}/\d{1,2}")
_INDEX = re.compile(r"(?:gpu|nvidia|device|dev)?[\s_:#-]*(\d{1,6})", re.IGNORECASE)
_PAIR = re.compile(r'\[\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*,\s*"([^"\\]*)"\s*\]')
_EPOCH_MIN, _EPOCH_MAX = 946_684_800.0, 4_102_444_800.0  # 2000-01-01 .. 2100-01-01


class Sample(NamedTuple):
    time: datetime
    line: int  # 1-based line in the file
    value: float


class GpuSeries(BaseModel):
    """One metric of one GPU. ``gpu`` is ``canonical_pci`` when a bus id is known, else the index
    ("3"), else the UUID; a per-rank series without a GPU (step time) uses ``"rank<N>"``."""

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


# --- small parsers ----------------------------------------------------------------------------------


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
    if _SLASH_DATE.match(text):
        text = text.replace("/", "-", 2)
    text = _FRACTION.sub(r"\1", text)
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(text)
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    return when if 2000 <= when.year <= 2100 else None


def _parse_value(raw: object) -> float | None:
    """A number from a cell: units stripped ("1410 MHz"), hex bitmasks, Active/Yes = 1; blanks -> None."""
    if isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str):
        text = raw.strip().strip('"').strip().lower()
        if text in ("active", "yes", "true", "enabled"):
            return 1.0
        if text in ("not active", "no", "false", "disabled"):
            return 0.0
        if text.startswith("0x"):
            digits = text[2:].split()[0] if text[2:].split() else ""
            if not 0 < len(digits) <= 16 or any(c not in "0123456789abcdef" for c in digits):
                return None
            return float(int(digits, 16))
        m = _NUM.match(text)
        if m is None or len(text) > 64:
            return None
        rest = text[m.end() :].strip()
        if rest and not re.fullmatch(r"[a-z%/]+", rest):
            return None
        value = float(m.group())
    else:
        return None
    if not math.isfinite(value):
        return None
    if value >= 2.0**47 or 2_147_483_632 <= value <= 2_147_483_647:  # DCGM "blank" sentinels
        return None
    return value


def _norm(cell: str) -> str:
    return _UNIT.sub("", cell.strip().strip('"').strip()).lower()


def _canonical_metric(name: str) -> str | None:
    """DCGM field names and their short aliases -> the DCGM field name; None if not a metric we know."""
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
        if raw and raw.strip() and len(raw.strip()) <= 64:
            return raw.strip().strip('"')
    return None


def _host(raw: str | None, hint: str | None) -> str | None:
    text = (raw or "").strip().strip('"')
    if re.fullmatch(r"[^\s:]+:\d{1,5}", text):  # Prometheus instance="host:9400"
        text = text.rsplit(":", 1)[0]
    return text or hint


def _rank(raw: str | None) -> int | None:
    text = (raw or "").strip()
    return int(text) if text.isdigit() and len(text) < 8 else None


def _reasons(mask: int) -> str:
    return ",".join(name for bit, name, _ in _REASON_BITS if mask & bit) or "None"


def _mask(value: float) -> int:
    return int(value) if 0 <= value < 2**63 else 0


# --- collection -------------------------------------------------------------------------------------


@dataclass
class _Store:
    samples: dict[Dev, dict[str, list[Sample]]] = field(default_factory=dict)
    ranks: dict[Dev, int] = field(default_factory=dict)
    steps: dict[Dev, dict[int, Sample]] = field(default_factory=dict)  # step time keyed by step

    def add(self, dev: Dev, metric: str, sample: Sample) -> None:
        self.samples.setdefault(dev, {}).setdefault(metric, []).append(sample)


def _split(line: str, delim: str) -> list[str]:
    if '"' not in line:
        return line.split(delim)
    try:
        return next(csv.reader([line], delimiter=delim, skipinitialspace=True), [])
    except csv.Error:
        return []


@dataclass
class _Header:
    line: int  # 0-based index of the header in lines
    delim: str
    cells: list[str]  # normalised names
    fmt: str


def _find_header(lines: Sequence[str]) -> _Header | None:
    """The first of the first ten content lines that names a time column and telemetry columns."""
    seen = 0
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        seen += 1
        if seen > 10 or len(line) > 20_000:
            return None
        delim = max(",\t;", key=line.count)
        if line.count(delim) == 0:
            continue
        cells = [_norm(c) for c in _split(line, delim)]
        if not _TIME_COLS & set(cells):
            continue
        names = set(cells)
        if names & _METRIC_COLS and names & _VALUE_COLS:
            return _Header(i, delim, cells, "dcgm_csv_long")
        if any(_canonical_metric(c) or c in _BIT_COLUMNS for c in cells if c not in _TIME_COLS):
            nvsmi = any("." in c for c in cells) and "timestamp" in names
            return _Header(i, delim, cells, "nvidia_smi_csv" if nvsmi else "dcgm_csv_wide")
    return None


def _col(cells: list[str], names: set[str]) -> int | None:
    return next((i for i, c in enumerate(cells) if c in names), None)


def _parse_csv(lines: Sequence[str], head: _Header, hint: str | None, store: _Store) -> None:
    cells = head.cells
    t_col, host_col = _col(cells, _TIME_COLS), _col(cells, _HOST_COLS)
    gpu_col, pci_col, uuid_col = _col(cells, _GPU_COLS), _col(cells, _PCI_COLS), _col(cells, _UUID_COLS)
    rank_col, step_col = _col(cells, _RANK_COLS), _col(cells, _STEP_COLS)
    name_col, value_col = _col(cells, _METRIC_COLS), _col(cells, _VALUE_COLS)
    ids = {t_col, host_col, gpu_col, pci_col, uuid_col, rank_col, step_col}
    long = head.fmt == "dcgm_csv_long"
    metrics: list[tuple[int, str]] = []
    bits: list[tuple[int, int]] = []
    if not long:
        for i, c in enumerate(cells):
            if i in ids:
                continue
            if (name := _canonical_metric(c)) is not None:
                metrics.append((i, name))
            elif c in _BIT_COLUMNS:
                bits.append((i, _BIT_COLUMNS[c]))
        if any(name == REASONS for _, name in metrics):
            bits = []
    times: dict[str, datetime | None] = {}
    header_line = lines[head.line].strip()

    def cell(row: list[str], i: int | None) -> str | None:
        return row[i] if i is not None and i < len(row) else None

    for n in range(head.line + 2, len(lines) + 1):
        line = lines[n - 1]
        text = line.strip()
        if not text or text.startswith("#") or text == header_line:
            continue
        row = _split(line, head.delim)
        raw_t = cell(row, t_col)
        if raw_t is None:
            continue
        if raw_t not in times:
            times[raw_t] = _parse_time(raw_t)
        when = times[raw_t]
        if when is None:
            continue
        rank = _rank(cell(row, rank_col))
        gpu = _gpu_id(cell(row, pci_col), cell(row, gpu_col), cell(row, uuid_col))
        if gpu is None and rank is None:
            continue
        dev: Dev = (_host(cell(row, host_col), hint), gpu if gpu is not None else f"rank{rank}")
        if rank is not None:
            store.ranks[dev] = rank
        step = _rank(cell(row, step_col))
        pairs: Iterable[tuple[int, str]] = metrics
        if long:
            raw_name = (cell(row, name_col) or "").strip().strip('"')
            name = _canonical_metric(raw_name) or (raw_name[:200] if raw_name else None)
            pairs = [(value_col, name)] if name is not None and value_col is not None else []
        for i, name in pairs:
            value = _parse_value(cell(row, i))
            if value is None:
                continue
            sample = Sample(when, n, value)
            store.add(dev, name, sample)
            if name == STEP_TIME and step is not None:
                store.steps.setdefault(dev, {})[step] = sample
        if bits:
            got = [(bit, _parse_value(cell(row, i))) for i, bit in bits]
            if any(v is not None for _, v in got):
                mask = sum(bit for bit, v in got if v)
                store.add(dev, REASONS, Sample(when, n, float(mask)))


def _looks_like_json(head: Sequence[str]) -> bool:
    text = "\n".join(head[:50]).lstrip()
    return text[:1] in ("{", "[") and any(k in text for k in ('"resultType"', '"__name__"', '"values"'))


def _prom_series(doc: object, depth: int = 0) -> list[dict[str, Any]]:
    """The series objects of a range (or instant) query response, or of a list of responses."""
    if depth > 4:
        return []
    if isinstance(doc, dict):
        if "metric" in doc and ("values" in doc or "value" in doc):
            return [doc]
        for key in ("data", "result"):
            if key in doc:
                return _prom_series(doc[key], depth + 1)
        return []
    if isinstance(doc, list):
        return [s for item in doc for s in _prom_series(item, depth + 1)]
    return []


def _label(labels: dict[str, Any], names: Iterable[str]) -> str | None:
    for name in names:
        value = labels.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value)
    return None


def _parse_prometheus(lines: Sequence[str], hint: str | None, store: _Store) -> bool:
    """Prometheus JSON; each sample's evidence line is the line holding its ``"value"`` string."""
    text = "\n".join(lines)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return False
    series = _prom_series(doc)
    if not series:
        return False
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    pairs = list(_PAIR.finditer(text))
    cursor = 0
    for item in series:
        got = item.get("metric")
        labels: dict[str, Any] = got if isinstance(got, dict) else {}
        raw_name = _label(labels, ["__name__"])
        metric = (_canonical_metric(raw_name) or raw_name[:200]) if raw_name else None
        gpu = _gpu_id(
            _label(labels, ["pci_bus_id", "PCI_BUS_ID", "pci"]),
            _label(labels, ["gpu", "GPU", "gpu_index", "minor_number", "device"]),
            _label(labels, ["UUID", "uuid"]),
        )
        rank = _rank(_label(labels, ["rank"]))
        if metric is None or (gpu is None and rank is None):
            continue
        host = _host(_label(labels, ["Hostname", "hostname", "host", "node", "nodename", "instance"]), hint)
        dev: Dev = (host, gpu if gpu is not None else f"rank{rank}")
        if rank is not None:
            store.ranks[dev] = rank
        values = item.get("values", [item.get("value")])
        for pair in values if isinstance(values, list) else []:
            if not isinstance(pair, list) or len(pair) != 2:
                continue
            raw_t, raw_v = pair
            when = _parse_time(str(raw_t)) if isinstance(raw_t, int | float | str) else None
            line = 1
            for k in range(cursor, min(cursor + 64, len(pairs))):
                m = pairs[k]
                if m.group(2) == str(raw_v) and when is not None and _parse_time(m.group(1)) == when:
                    line, cursor = bisect_right(starts, m.start(2)), k + 1
                    break
            value = _parse_value(raw_v)
            if when is not None and value is not None:
                store.add(dev, metric, Sample(when, line, value))
    return True


# --- analysis ---------------------------------------------------------------------------------------


@dataclass
class _Hit:
    class_id: str
    signature: str
    severity: Severity
    dev: Dev
    time: datetime
    lines: list[int]
    summary: str
    fields: dict[str, str]


def _fmt(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.0f}"


def _median_without(ordered: list[float], value: float) -> float:
    """Median of ``ordered`` (sorted, containing ``value``) with one copy of ``value`` removed."""
    p = bisect_left(ordered, value)
    n = len(ordered) - 1

    def at(k: int) -> float:
        return ordered[k] if k < p else ordered[k + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


def _grid(store: _Store) -> dict[float, int]:
    """Align samples of different GPUs: timestamps closer than half the typical interval share a slot."""
    steps: list[float] = []
    stamps: set[float] = set()
    for metrics in store.samples.values():
        for samples in metrics.values():
            ts = sorted({s.time.timestamp() for s in samples})
            stamps.update(ts)
            gaps = [b - a for a, b in zip(ts, ts[1:], strict=False) if b > a]
            if gaps:
                steps.append(statistics.median(gaps))
    tol = statistics.median(steps) / 2 if steps else 0.5
    slots: dict[float, int] = {}
    slot, start = -1, -math.inf
    for t in sorted(stamps):
        if t - start >= tol:
            slot, start = slot + 1, t
        slots[t] = slot
    return slots


class _Analysis:
    def __init__(self, store: _Store) -> None:
        self.store = store
        self.slots = _grid(store)
        self.at: dict[str, dict[Dev, dict[int, Sample]]] = {}
        for dev, metrics in store.samples.items():
            for metric, samples in metrics.items():
                samples.sort(key=lambda s: (s.time, s.line))
                by_slot = self.at.setdefault(metric, {}).setdefault(dev, {})
                for s in samples:
                    by_slot[self.slots[s.time.timestamp()]] = s
        self._cols: dict[str, dict[int, list[float]]] = {}
        self._mad: dict[tuple[str, int], tuple[float, float]] = {}
        self.rising: dict[Dev, set[int]] = {}
        for metric in (THERMAL_VIOL, POWER_VIOL):
            for dev, by_slot in self.at.get(metric, {}).items():
                ordered = sorted(by_slot.items())
                up = {b for (_, x), (b, y) in zip(ordered, ordered[1:], strict=False) if y.value > x.value}
                self.rising.setdefault(dev, set()).update(up)

    def value(self, metric: str, dev: Dev, slot: int) -> float | None:
        s = self.at.get(metric, {}).get(dev, {}).get(slot)
        return None if s is None else s.value

    def column(self, metric: str) -> dict[int, list[float]]:
        if metric not in self._cols:
            col: dict[int, list[float]] = {}
            for by_slot in self.at.get(metric, {}).values():
                for slot, s in by_slot.items():
                    col.setdefault(slot, []).append(s.value)
            for values in col.values():
                values.sort()
            self._cols[metric] = col
        return self._cols[metric]

    def robust_z(self, metric: str, slot: int, value: float) -> float:
        """(value - median) / (1.4826 * MAD) over all GPUs at this time; +-inf when MAD is 0."""
        key = (metric, slot)
        if key not in self._mad:
            values = self.column(metric)[slot]
            med = statistics.median(values)
            self._mad[key] = (med, statistics.median(abs(v - med) for v in values))
        med, mad = self._mad[key]
        if mad == 0:
            return 0.0 if value == med else math.copysign(math.inf, value - med)
        return (value - med) / (1.4826 * mad)

    def peers(self, metric: str, slot: int, value: float, least: int) -> float | None:
        values = self.column(metric).get(slot, [])
        return _median_without(values, value) if len(values) > least else None

    def flags(self, dev: Dev, slot: int) -> int:
        value = self.value(REASONS, dev, slot)
        return 0 if value is None else _mask(value)

    def hot(self, dev: Dev, slot: int) -> bool:
        temp = self.value(GPU_TEMP, dev, slot)
        return bool(self.flags(dev, slot) & HW_SLOWDOWN) or (temp is not None and temp >= HOT_C)

    def series(self, metric: str) -> Iterable[tuple[Dev, list[tuple[int, Sample]]]]:
        for dev, by_slot in self.at.get(metric, {}).items():
            yield dev, sorted(by_slot.items())

    def baseline(self, dev: Dev, metric: str, before: Sample, ok: Any) -> list[int]:
        """The line of the last earlier sample of this GPU that ``ok`` accepts (a normal reading)."""
        samples = self.store.samples.get(dev, {}).get(metric, [])
        for s in reversed(samples[: bisect_left(samples, (before.time, before.line), key=lambda x: x[:2])]):
            if ok(s):
                return [s.line]
        return []


def _where(dev: Dev) -> str:
    return f"GPU {dev[1]}" + (f" on {dev[0]}" if dev[0] else "")


def _detect_throttle(a: _Analysis) -> list[_Hit]:
    """Class 34, P1. (a) The clock-event bitmask has a hardware slowdown bit (0x8 HwSlowdown, 0x40
    HwThermalSlowdown, 0x80 HwPowerBrakeSlowdown) for >= 2 consecutive samples of one GPU; GpuIdle and
    SwPowerCap are normal. (b) The SM clock of one GPU is <= 70% of the median of the other GPUs at
    the same time (peers above 300 MHz) for >= 2 consecutive samples while it is >= 85 C or its
    thermal/power violation counter rises. The earlier of the two wins."""
    hits: dict[Dev, _Hit] = {}
    for dev, points in a.series(REASONS):
        run = 0
        for i, (slot, s) in enumerate(points):
            run = run + 1 if _mask(s.value) & HW_SLOWDOWN else 0
            if run == THROTTLE_MIN_SAMPLES:
                hits[dev] = _throttle_hit(a, dev, *points[i - run + 1], REASONS)
                break
    for dev, points in a.series(SM_CLOCK):
        run = 0
        for i, (slot, s) in enumerate(points):
            peer = a.peers(SM_CLOCK, slot, s.value, 1)
            low = peer is not None and peer >= CLOCK_FLOOR_MHZ and s.value <= CLOCK_DROP * peer
            cause = a.hot(dev, slot) or slot in a.rising.get(dev, set())
            run = run + 1 if low and cause and not a.flags(dev, slot) & GPU_IDLE else 0
            if run == THROTTLE_MIN_SAMPLES:
                hit = _throttle_hit(a, dev, *points[i - run + 1], SM_CLOCK)
                if dev not in hits or hit.time < hits[dev].time:
                    hits[dev] = hit
                break
    return list(hits.values())


def _throttle_hit(a: _Analysis, dev: Dev, slot: int, s: Sample, metric: str) -> _Hit:
    mask = a.flags(dev, slot)
    clock, temp = a.value(SM_CLOCK, dev, slot), a.value(GPU_TEMP, dev, slot)
    peer = a.peers(SM_CLOCK, slot, clock, 1) if clock is not None else None
    fields = {"reasons": _reasons(mask), "rule": "reasons" if metric == REASONS else "clock"}
    if metric == REASONS:
        summary = f"{_where(dev)}: clocks slowed by hardware ({_reasons(mask & HW_SLOWDOWN)})"
    else:
        summary = f"{_where(dev)}: SM clock >= 30% below its peers while hot or power/thermal-limited"
    facts = []
    for key, value, unit in (("clock_mhz", clock, " MHz"), ("peer_clock_mhz", peer, " MHz on peers")):
        if value is not None:
            fields[key] = _fmt(value)
            facts.append(f"{_fmt(value)}{unit}")
    if temp is not None:
        fields["temp_c"] = _fmt(temp)
        facts.append(f"{_fmt(temp)} C")
    if facts:
        summary += ": " + ", ".join(facts)

    def normal(x: Sample) -> bool:
        if metric == REASONS:
            return not _mask(x.value) & HW_SLOWDOWN
        return peer is not None and x.value > CLOCK_DROP * peer

    lines = [s.line, *a.baseline(dev, metric, s, normal)]
    return _Hit(
        "gpu_thermal_power_throttling", "telemetry.gpu_throttling", "P1", dev, s.time, lines, summary, fields
    )


def _detect_straggler(a: _Analysis) -> list[_Hit]:
    """Class 35, P1. Needs >= 3 GPUs at a time. A sample is an outlier when its value is <= 70% of the
    median of the other GPUs, or its robust z-score (median/MAD over all GPUs) is <= -4 and it is
    >= 15% below them; for SM/tensor activity also z >= 4 and >= 30% above (a slow GPU can look
    busier than peers that wait for it). Peers must be active (clock > 300 MHz, util > 20%, SM active
    > 0.1). Fires after >= 5 consecutive outlier samples; a sample with GpuIdle, a HW slowdown bit or
    >= 85 C breaks the run (idle is not slow, and hot is class 34). Per-rank step time (``step_time``
    and aliases, aligned by a step column when present) is an outlier at >= 1.3x the peer median (or
    z >= 4 and >= 1.15x) for >= 3 consecutive steps."""
    hits: dict[Dev, _Hit] = {}
    for metric in (SM_CLOCK, SM_ACTIVE, TENSOR_ACTIVE, GPU_UTIL):
        for dev, points in a.series(metric):
            run: list[tuple[int, Sample, float, float]] = []
            for slot, s in points:
                peer = a.peers(metric, slot, s.value, 2)
                if peer is None or peer <= ACTIVITY_FLOOR[metric] or a.hot(dev, slot):
                    run = []
                    continue
                if a.flags(dev, slot) & GPU_IDLE:
                    run = []
                    continue
                z = a.robust_z(metric, slot, s.value)
                low = s.value <= CLOCK_DROP * peer or (z <= -ROBUST_Z and s.value <= Z_MIN_DROP * peer)
                high = metric in (SM_ACTIVE, TENSOR_ACTIVE) and z >= ROBUST_Z and s.value >= Z_MIN_RISE * peer
                run = [*run, (slot, s, peer, z)] if low or high else []
                if len(run) == STRAGGLER_MIN_SAMPLES:
                    _, first, peer0, z0 = run[0]
                    if dev not in hits or first.time < hits[dev].time:
                        hits[dev] = _straggler_hit(a, dev, metric, first, peer0, z0, len(run))
                    break
    for dev, hit in _step_stragglers(a).items():
        if dev not in hits or hit.time < hits[dev].time:
            hits[dev] = hit
    return list(hits.values())


def _straggler_hit(a: _Analysis, dev: Dev, metric: str, s: Sample, peer: float, z: float, n: int) -> _Hit:
    fields = {"metric": metric, "value": _fmt(s.value), "peer_median": _fmt(peer), "samples": str(n)}
    fields["robust_z"] = "inf" if math.isinf(z) else f"{z:.1f}"
    direction = "below" if s.value < peer else "above"
    short = metric.removeprefix("DCGM_FI_DEV_").removeprefix("DCGM_FI_PROF_")
    summary = (
        f"{_where(dev)}: {short} {_fmt(s.value)} vs peer median {_fmt(peer)} ({direction}) for {n}+ "
        "samples, without thermal or HW slowdown: fail-slow straggler"
    )
    lines = [s.line, *a.baseline(dev, metric, s, lambda x: abs(x.value - peer) <= 0.15 * peer)]
    return _Hit("straggler_fail_slow", "telemetry.straggler", "P1", dev, s.time, lines, summary, fields)


def _step_stragglers(a: _Analysis) -> dict[Dev, _Hit]:
    store = a.store
    keyed: dict[Dev, dict[int, Sample]] = {}
    for dev, by_slot in a.at.get(STEP_TIME, {}).items():
        keyed[dev] = store.steps[dev] if store.steps.get(dev) else by_slot
    column: dict[int, list[float]] = {}
    for points in keyed.values():
        for key, s in points.items():
            column.setdefault(key, []).append(s.value)
    stats = {k: (sorted(v), statistics.median(v)) for k, v in column.items() if len(v) >= 3}
    hits: dict[Dev, _Hit] = {}
    for dev, points in keyed.items():
        run: list[tuple[Sample, float]] = []
        for key, s in sorted(points.items()):
            if key not in stats:
                run = []
                continue
            ordered, med = stats[key]
            peer = _median_without(ordered, s.value)
            mad = statistics.median(abs(v - med) for v in ordered)
            z = (s.value - med) / (1.4826 * mad) if mad else (math.inf if s.value > med else 0.0)
            slow = peer > 0 and (
                s.value >= STEP_SLOW * peer or (z >= ROBUST_Z and s.value >= STEP_Z_RISE * peer)
            )
            run = [*run, (s, peer)] if slow else []
            if len(run) == STEP_MIN_SAMPLES:
                first, peer0 = run[0]
                rank = store.ranks.get(dev)
                who = (
                    f"rank {rank}" + (f" on {dev[0]}" if dev[0] else "") if rank is not None else _where(dev)
                )
                fields = {"metric": STEP_TIME, "value": _fmt(first.value), "peer_median": _fmt(peer0)}
                fields["samples"] = str(len(run))
                summary = (
                    f"{who}: step time {_fmt(first.value)} vs peer median {_fmt(peer0)} for {len(run)}+ steps"
                )
                lines = [
                    first.line,
                    *a.baseline(dev, STEP_TIME, first, lambda x: x.value < STEP_Z_RISE * peer0),
                ]
                hit = _Hit(
                    "straggler_fail_slow",
                    "telemetry.step_time_straggler",
                    "P1",
                    dev,
                    first.time,
                    lines,
                    summary,
                    fields,
                )
                hits[dev] = hit
                break
    return hits


def _counter_rise(samples: list[Sample], jump: float, total: float) -> tuple[Sample, Sample, float] | None:
    """First sample where a cumulative counter jumps by >= ``jump`` over the previous sample, or, if
    the total increase over the file (resets ignored) reaches ``total``, the first increase."""
    first: tuple[Sample, Sample] | None = None
    rise = 0.0
    for prev, cur in zip(samples, samples[1:], strict=False):
        delta = cur.value - prev.value
        if delta <= 0:
            continue
        rise += delta
        first = first or (prev, cur)
        if delta >= jump:
            return prev, cur, rise
    return (first[0], first[1], rise) if first is not None and rise >= total else None


def _detect_counters(a: _Analysis) -> list[_Hit]:
    """Classes 10, 11, 21 (P0). Uncorrectable ECC (DBE volatile/aggregate, uncorrectable remapped rows,
    row-remap failure, retired DBE pages): any increase. NVLink recovery errors: any increase. NVLink
    CRC flit/data and replay errors, PCIe replays: a jump of >= 10 between consecutive samples or >= 50
    over the file. ``DCGM_FI_DEV_XID_ERRORS`` changing to an ECC Xid (48/63/64/94/95/140) or an NVLink
    Xid (74, 144-150) counts too. Counter resets (a decrease) are ignored."""
    best: dict[tuple[str, Dev], _Hit] = {}
    for dev, metrics in a.store.samples.items():
        for metric, samples in metrics.items():
            if _ECC.match(metric):
                spec = ("gpu_memory_ecc_uncorrectable", "telemetry.ecc_uncorrectable", 1.0, 1.0)
            elif (m := _NVLINK.match(metric)) is not None and m.group(1) == "RECOVERY":
                spec = ("gpu_nvlink_error", "telemetry.nvlink_errors", 1.0, 1.0)
            elif m is not None:
                spec = ("gpu_nvlink_error", "telemetry.nvlink_errors", COUNTER_JUMP, COUNTER_TOTAL)
            elif metric == PCIE_REPLAY:
                spec = ("pcie_aer_error", "telemetry.pcie_replay", COUNTER_JUMP, COUNTER_TOTAL)
            elif metric == XID:
                _xid_hits(dev, samples, best)
                continue
            else:
                continue
            class_id, signature, jump, total = spec
            found = _counter_rise(samples, jump, total)
            if found is None:
                continue
            prev, cur, rise = found
            short = metric.removeprefix("DCGM_FI_DEV_")
            fields = {"metric": metric, "before": _fmt(prev.value), "after": _fmt(cur.value)}
            fields["total_increase"] = _fmt(rise)
            summary = f"{_where(dev)}: {short} rose from {_fmt(prev.value)} to {_fmt(cur.value)}"
            if rise > cur.value - prev.value:
                summary += f" ({_fmt(rise)} in the file)"
            hit = _Hit(class_id, signature, "P0", dev, cur.time, [cur.line, prev.line], summary, fields)
            key = (class_id, dev)
            if key not in best or hit.time < best[key].time:
                best[key] = hit
    return list(best.values())


def _xid_hits(dev: Dev, samples: list[Sample], best: dict[tuple[str, Dev], _Hit]) -> None:
    for prev, cur in zip(samples, samples[1:], strict=False):
        xid = int(cur.value) if cur.value.is_integer() else -1
        if cur.value == prev.value or not (xid in ECC_XIDS or xid in NVLINK_XIDS):
            continue
        if xid in ECC_XIDS:
            class_id, signature = "gpu_memory_ecc_uncorrectable", "telemetry.ecc_uncorrectable"
        else:
            class_id, signature = "gpu_nvlink_error", "telemetry.nvlink_errors"
        fields = {"metric": XID, "xid": str(xid)}
        summary = f"{_where(dev)}: DCGM reports Xid {xid}"
        hit = _Hit(class_id, signature, "P0", dev, cur.time, [cur.line, prev.line], summary, fields)
        key = (class_id, dev)
        if key not in best or hit.time < best[key].time:
            best[key] = hit


# --- public API -------------------------------------------------------------------------------------


def looks_like_telemetry(path: str, head: Sequence[str]) -> bool:
    """True when the first lines look like a format ``analyse_telemetry`` reads (``path`` is unused
    beyond that: content decides)."""
    del path
    return _looks_like_json(head) or _find_header(head) is not None


def analyse_telemetry(path: str, lines: Sequence[str], *, host_hint: str | None = None) -> TelemetryResult:
    """Parse ``lines`` (index 0 = line 1) into per-GPU series and run the detectors.

    :param path: bundle-relative path, used as ``Evidence.file``.
    :param lines: the file's lines, newline stripped, exactly as the canonical reader gives them.
    :param host_hint: host to use when the file names none (e.g. from the file's path).
    :returns: series, findings (at most one per class, host and GPU; the first anomalous time) and
        the format name; an empty result with format ``unknown`` for anything unreadable.
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
    hits.sort(key=lambda h: (h.time, h.class_id, h.dev[0] or "", _gpu_order(h.dev[1])))
    findings = [_finding(path, lines, h, store.ranks.get(h.dev)) for h in hits]
    series = [
        GpuSeries(host=dev[0], gpu=dev[1], metric=metric, samples=samples)
        for dev, metrics in sorted(
            store.samples.items(), key=lambda kv: (kv[0][0] or "", _gpu_order(kv[0][1]))
        )
        for metric, samples in sorted(metrics.items())
    ]
    return TelemetryResult(series=series, findings=findings, format=fmt)


def _gpu_order(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)


def _finding(path: str, lines: Sequence[str], hit: _Hit, rank: int | None) -> Finding:
    evidence: list[Evidence] = []
    for n in dict.fromkeys(hit.lines):
        if 1 <= n <= len(lines):
            evidence.append(Evidence(id="", file=path, line=n, text=lines[n - 1]))
    gpu = None if hit.dev[1].startswith("rank") else hit.dev[1]
    return Finding(
        id="",
        class_id=hit.class_id,
        signature=hit.signature,
        role="root_candidate",
        severity=hit.severity,
        summary=hit.summary,
        time=hit.time,
        rank=rank,
        node=hit.dev[0],
        gpu=gpu,
        fields=hit.fields,
        evidence=evidence,
        source="telemetry",
    )
