"""Telemetry detection: throttling, stragglers and error counters in the parsed series -> findings."""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from crashcart.models import Evidence, Finding, Severity
from crashcart.scan.telemetry.parse import (
    _ECC,
    _NVLINK,
    ACTIVE_FLOOR,
    CLOCK_DROP,
    COUNTER_JUMP,
    COUNTER_TOTAL,
    ECC_XIDS,
    GPU_IDLE,
    GPU_TEMP,
    GPU_UTIL,
    HOT_C,
    HW_SLOWDOWN,
    IDLE_CEILING,
    NVLINK_XIDS,
    PCIE_REPLAY,
    POWER_VIOL,
    REASONS,
    ROBUST_Z,
    SM_ACTIVE,
    SM_CLOCK,
    STEP_RUN,
    STEP_SLOW,
    STEP_TIME,
    STEP_Z_SLOW,
    STRAGGLER_RUN,
    TENSOR_ACTIVE,
    THERMAL_VIOL,
    THROTTLE_RUN,
    XID,
    Z_DROP,
    Z_RISE,
    Dev,
    GpuSeries,
    Sample,
    TelemetryResult,
    _find_header,
    _fmt,
    _looks_like_json,
    _mask,
    _parse_csv,
    _parse_prometheus,
    _reasons,
    _slots,
    _Store,
)


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
