"""Tests for crashcart.scan.telemetry: every format parses, every detector fires on a clear case, and a
healthy fleet or a malformed file gives no findings and never an exception."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crashcart.scan.telemetry import TelemetryResult, analyse_telemetry, looks_like_telemetry

T0 = datetime(2025, 11, 30, 2, 0, 0, tzinfo=UTC)
STEP_S = 10
HOST = "gpu-node-017"
BUSES = ["18", "2a", "3b", "5d", "9a", "ab", "ba", "db", "19", "2b", "3c", "5e", "9b", "ac", "bb", "dc"]
TEMP, CLOCK, POWER = "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_POWER_USAGE"
REASONS, UTIL, SM_ACTIVE = (
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_SM_ACTIVE",
)
POWER_VIOL, THERMAL_VIOL = "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION"
ECC, NVLINK = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
PCIE = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
METRICS = [TEMP, CLOCK, POWER, REASONS, UTIL, SM_ACTIVE, POWER_VIOL, THERMAL_VIOL, ECC, NVLINK, PCIE]

Row = dict[str, float | int | str]


# --- generators -------------------------------------------------------------------------------------


def fleet(gpus: int = 8, samples: int = 30, seed: int = 7, host: str = HOST) -> list[Row]:
    """A healthy node: normal jitter, SW power cap (0x4) now and then, GPU 6 idle (0x1) for 2 samples."""
    rng = random.Random(seed)
    rows: list[Row] = []
    for i in range(samples):
        for g in range(gpus):
            rows.append(
                {
                    "i": i,
                    "gpu": g,
                    "host": host,
                    TEMP: 62 + rng.randint(-4, 9),
                    CLOCK: 1980 - rng.choice([0, 15, 30, 45, 60]),
                    POWER: round(650 + rng.uniform(-40, 40), 2),
                    REASONS: 4 if rng.random() < 0.3 else 0,
                    UTIL: 100 - rng.randint(0, 4),
                    SM_ACTIVE: round(0.8 + rng.uniform(-0.04, 0.04), 3),
                    POWER_VIOL: i * 1500 + g,
                    THERMAL_VIOL: 0,
                    ECC: 0,
                    NVLINK: 3 + (i > 20),
                    PCIE: 1 + (i > 25),
                }
            )
    patch(rows, 6, 10, 12, **{REASONS: 1, CLOCK: 345, UTIL: 0, SM_ACTIVE: 0.0, POWER: 90.0})
    return rows


def patch(
    rows: list[Row], gpu: int, start: int, end: int | None = None, **values: float | Callable[[Row], float]
) -> None:
    """Set ``values`` on ``gpu`` for samples start..end-1 (a callable gets the row)."""
    for row in rows:
        if row["gpu"] == gpu and start <= int(row["i"]) < (end if end is not None else 1 << 30):
            for key, value in values.items():
                row[key] = value(row) if callable(value) else value


def when(i: int) -> datetime:
    return T0 + timedelta(seconds=STEP_S * i)


def pci(g: int) -> str:
    return f"00000000:{BUSES[g].upper()}:00.0"


def canon(g: int) -> str:
    return f"0000:{BUSES[g]}:00"


def num(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def to_wide(rows: list[Row], metrics: Sequence[str] = METRICS, hex_reasons: bool = False) -> list[str]:
    lines = ["timestamp,hostname,gpu,pci_bus_id," + ",".join(metrics)]
    for r in rows:
        cells = [
            when(int(r["i"])).isoformat().replace("+00:00", "Z"),
            str(r["host"]),
            str(r["gpu"]),
            pci(int(r["gpu"])),
        ]
        cells += [hex(int(r[m])) if m == REASONS and hex_reasons else num(r[m]) for m in metrics]
        lines.append(",".join(cells))
    return lines


def to_long(rows: list[Row], metrics: Sequence[str] = METRICS) -> list[str]:
    lines = ["timestamp,hostname,gpu,metric,value,pci_bus_id"]
    for r in rows:
        ms = int(when(int(r["i"])).timestamp() * 1000)
        lines += [f"{ms},{r['host']},{r['gpu']},{m},{num(r[m])},{pci(int(r['gpu']))}" for m in metrics]
    return lines


def to_nvsmi(rows: list[Row]) -> list[str]:
    lines = [
        "timestamp, index, pci.bus_id, temperature.gpu, clocks.current.sm [MHz], power.draw [W], "
        "utilization.gpu [%], clocks_throttle_reasons.active, clocks_throttle_reasons.hw_slowdown"
    ]
    for r in rows:
        stamp = when(int(r["i"])).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        mask = int(r[REASONS])
        lines.append(
            f"{stamp}, {r['gpu']}, {pci(int(r['gpu']))}, {r[TEMP]}, {r[CLOCK]} MHz, {float(r[POWER]):.2f} W, "
            f"{r[UTIL]} %, 0x{mask:016x}, {'Active' if mask & 0x8 else 'Not Active'}"
        )
    return lines


def to_prom(rows: list[Row], metrics: Sequence[str] = (CLOCK, TEMP, REASONS), indent: int | None = 2) -> list[str]:
    result = []
    for m in metrics:
        for host, g in sorted({(str(r["host"]), int(r["gpu"])) for r in rows}):
            mine = sorted((r for r in rows if (r["host"], r["gpu"]) == (host, g)), key=lambda r: int(r["i"]))
            labels = {"__name__": m, "Hostname": host, "gpu": str(g), "pci_bus_id": pci(g)}
            labels |= {
                "UUID": f"GPU-{g:08x}-aaaa",
                "device": f"nvidia{g}",
                "modelName": "NVIDIA H100 80GB HBM3",
            }
            values = [[when(int(r["i"])).timestamp(), num(r[m])] for r in mine]
            result.append({"metric": labels, "values": values})
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    return json.dumps(doc, indent=indent).split("\n")


def line_of(lines: Sequence[str], *needles: str) -> int:
    return next(n for n, text in enumerate(lines, 1) if all(x in text for x in needles))


def wide_line(lines: Sequence[str], i: int, g: int) -> int:
    return line_of(lines, when(i).isoformat().replace("+00:00", "Z") + f",{HOST},{g},")


def analyse(lines: list[str], path: str = "telemetry/dcgm.csv") -> TelemetryResult:
    result = analyse_telemetry(path, lines)
    for f in result.findings:  # every piece of evidence quotes its line exactly
        assert f.source == "telemetry" and f.role == "root_candidate" and f.evidence
        for ev in f.evidence:
            assert ev.file == path and ev.text == lines[ev.line - 1]
    return result


# --- parsing ----------------------------------------------------------------------------------------


def test_wide_csv_parses_series_with_canonical_gpu_ids_and_utc_times() -> None:
    lines = to_wide(fleet(gpus=2, samples=3))
    result = analyse(lines)
    assert result.format == "dcgm_csv_wide"
    clock = next(s for s in result.series if s.gpu == canon(1) and s.metric == CLOCK)
    assert clock.host == HOST
    assert [s.time for s in clock.samples] == [when(0), when(1), when(2)]
    assert all(s.time.utcoffset() == timedelta(0) for s in clock.samples)
    assert clock.samples[0].line == wide_line(lines, 0, 1)
    # the old throttle-reasons name is mapped to the current DCGM field name
    assert {s.metric for s in result.series} >= {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", ECC, NVLINK, PCIE}
    assert {s.gpu for s in result.series} == {canon(0), canon(1)}


def test_long_csv_parses_epoch_milliseconds() -> None:
    lines = to_long(fleet(gpus=2, samples=3))
    result = analyse(lines)
    assert result.format == "dcgm_csv_long"
    temp = next(s for s in result.series if s.gpu == canon(0) and s.metric == TEMP)
    assert [s.time for s in temp.samples] == [when(0), when(1), when(2)]
    assert lines[temp.samples[1].line - 1].startswith(f"{int(when(1).timestamp() * 1000)},{HOST},0,{TEMP},")


def test_nvidia_smi_csv_strips_units_and_reads_hex_masks() -> None:
    rows = fleet(gpus=2, samples=3)
    patch(rows, 1, 0, **{REASONS: 0x48})
    result = analyse(to_nvsmi(rows), "nodes/n1/nvidia-smi.csv")
    assert result.format == "nvidia_smi_csv"
    assert {s.host for s in result.series} == {None}
    clock = next(s for s in result.series if s.gpu == canon(0) and s.metric == CLOCK)
    assert clock.samples[0].value == rows[0][CLOCK]
    assert clock.samples[0].time == when(0)
    reasons = next(s for s in result.series if s.gpu == canon(1) and s.metric.endswith("EVENT_REASONS"))
    assert {s.value for s in reasons.samples} == {0x48}


def test_nvidia_smi_per_reason_columns_make_a_bitmask_and_host_hint_applies() -> None:
    lines = [
        "timestamp, index, clocks.sm [MHz], clocks_event_reasons.hw_slowdown, clocks_event_reasons.sw_power_cap",
        "2025/11/30 02:00:00.000, 0, 1410 MHz, Not Active, Active",
        "2025/11/30 02:00:10.000, 0, 705 MHz, Active, Not Active",
        "2025/11/30 02:00:20.000, 0, 705 MHz, Active, [N/A]",
    ]
    result = analyse_telemetry("smi.csv", lines, host_hint="n7")
    reasons = next(s for s in result.series if s.metric.endswith("EVENT_REASONS"))
    assert (reasons.host, reasons.gpu, [s.value for s in reasons.samples]) == ("n7", "0", [4.0, 8.0, 8.0])
    assert [(f.class_id, f.node, f.gpu, f.time) for f in result.findings] == [
        ("gpu_thermal_power_throttling", "n7", "0", when(1))
    ]


@pytest.mark.parametrize("indent", [2, None], ids=["pretty", "one-line"])
def test_prometheus_json_parses_and_points_at_the_value_line(indent: int | None) -> None:
    rows = fleet(gpus=4, samples=4)
    patch(rows, 2, 2, **{CLOCK: 1111})
    lines = to_prom(rows, indent=indent)
    result = analyse(lines, "prom/sm_clock.json")
    assert result.format == "prometheus_json"
    clock = next(s for s in result.series if s.gpu == canon(2) and s.metric == CLOCK)
    assert clock.host == HOST and [s.time for s in clock.samples] == [when(i) for i in range(4)]
    hit = clock.samples[2]
    assert hit.value == 1111
    assert '"1111"' in lines[hit.line - 1]
    if indent is None:
        assert len(lines) == 1 and hit.line == 1


def test_times_accept_iso_offsets_epoch_units_and_unsorted_rows() -> None:
    header = "time,host,gpu_id,gpu_temp,sm_clock"
    stamps = ["2025-11-30T04:00:20+02:00", str(int(when(1).timestamp() * 1e6)), str(when(0).timestamp())]
    lines = [header] + [f"{t},h1,GPU {2},70,1900" for t in stamps]
    result = analyse(lines)
    temp = next(s for s in result.series if s.metric == TEMP)
    assert (temp.host, temp.gpu) == ("h1", "2")
    assert [s.time for s in temp.samples] == [when(0), when(1), when(2)]
    assert [s.line for s in temp.samples] == [4, 3, 2]


def test_looks_like_telemetry_on_heads() -> None:
    assert looks_like_telemetry("a.csv", to_wide(fleet(gpus=1, samples=1)))
    assert looks_like_telemetry("a.csv", to_long(fleet(gpus=1, samples=1))[:5])
    assert looks_like_telemetry("a.csv", to_nvsmi(fleet(gpus=1, samples=1)))
    assert looks_like_telemetry("a.json", to_prom(fleet(gpus=1, samples=2))[:20])
    assert not looks_like_telemetry("rank0.log", ["[rank0]: NCCL WARN timeout", "Traceback (most recent call last):"])
    assert not looks_like_telemetry("cfg.json", ['{"lr": 0.1, "batch": 8}'])
    assert not looks_like_telemetry("x.csv", ["name,age", "bob,3"])
    assert not looks_like_telemetry("values.json", ['{"values": {"replicas": 3}, "image": "x"}'])


def test_header_with_byte_order_mark_and_tabs() -> None:
    lines = ["\ufeffTimestamp\tHostname\tGPU\tDCGM_FI_DEV_GPU_TEMP", "2025-11-30T02:00:00Z\th1\t0\t70"]
    [series] = analyse(lines).series
    assert (series.host, series.gpu, series.metric, series.samples[0].value) == ("h1", "0", TEMP, 70.0)


# --- detectors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "render",
    [to_wide, to_long, lambda rows: to_prom(rows, METRICS)],
    ids=["wide", "long", "prometheus"],
)
def test_healthy_fleet_gives_no_findings(render: Callable[[list[Row]], list[str]]) -> None:
    lines = render(fleet())
    result = analyse(lines)
    assert result.series and result.findings == []


def test_healthy_fleet_shuffled_and_nvidia_smi_gives_no_findings() -> None:
    lines = to_wide(fleet(seed=3))
    body = lines[1:]
    random.Random(1).shuffle(body)
    assert analyse([lines[0], *body]).findings == []
    assert analyse(to_nvsmi(fleet(seed=4))).findings == []


def test_hw_thermal_slowdown_bitmask_is_throttling() -> None:
    rows = fleet()
    patch(rows, 3, 12, **{REASONS: 0x48, CLOCK: 1100, TEMP: 91})
    lines = to_wide(rows, hex_reasons=True)
    result = analyse(lines)
    [f] = result.findings
    assert (f.class_id, f.severity, f.node, f.gpu, f.time) == (
        "gpu_thermal_power_throttling",
        "P1",
        HOST,
        canon(3),
        when(12),
    )
    assert f.signature.startswith("telemetry.")
    assert [ev.line for ev in f.evidence] == [wide_line(lines, 12, 3), wide_line(lines, 11, 3)]
    assert "HwThermalSlowdown" in f.fields["reasons"] and "HwSlowdown" in f.fields["reasons"]
    assert (f.fields["clock_mhz"], f.fields["temp_c"]) == ("1100", "91")
    assert 1900 <= float(f.fields["peer_clock_mhz"]) <= 1980


def test_single_hw_slowdown_sample_is_not_enough() -> None:
    rows = fleet()
    patch(rows, 3, 12, 13, **{REASONS: 0x8})
    assert analyse(to_wide(rows)).findings == []


def test_hot_gpu_with_low_clock_is_throttling_without_a_bitmask() -> None:
    rows = fleet()
    patch(rows, 5, 15, **{CLOCK: 1200, TEMP: 88})
    metrics = [m for m in METRICS if m != REASONS]
    lines = to_wide(rows, metrics)
    result = analyse(lines)
    [f] = result.findings
    assert (f.class_id, f.gpu, f.time, f.fields["rule"]) == (
        "gpu_thermal_power_throttling",
        canon(5),
        when(15),
        "clock",
    )
    assert f.evidence[0].line == wide_line(lines, 15, 5)


def test_violation_counter_rise_with_low_clock_is_throttling() -> None:
    rows = fleet()
    patch(rows, 5, 15, **{CLOCK: 1200, THERMAL_VIOL: lambda r: 10**6 * int(r["i"])})
    result = analyse(to_wide(rows, [m for m in METRICS if m != REASONS]))
    assert [(f.class_id, f.gpu, f.time) for f in result.findings] == [
        ("gpu_thermal_power_throttling", canon(5), when(15))
    ]


def test_slow_gpu_without_heat_is_a_straggler() -> None:
    rows = fleet()
    patch(rows, 2, 8, **{CLOCK: 1290})
    lines = to_wide(rows)
    result = analyse(lines)
    [f] = result.findings
    assert (f.class_id, f.severity, f.node, f.gpu, f.time) == (
        "straggler_fail_slow",
        "P1",
        HOST,
        canon(2),
        when(8),
    )
    assert f.fields["metric"] == CLOCK and f.fields["value"] == "1290"
    assert [ev.line for ev in f.evidence] == [wide_line(lines, 8, 2), wide_line(lines, 7, 2)]


def test_low_sm_activity_across_hosts_is_a_straggler() -> None:
    rows = fleet(gpus=4, host="a") + fleet(gpus=4, host="b", seed=9)
    patch([r for r in rows if r["host"] == "b"], 1, 4, **{SM_ACTIVE: 0.31})
    result = analyse(to_wide(rows))
    assert [(f.class_id, f.node, f.gpu, f.time) for f in result.findings] == [
        ("straggler_fail_slow", "b", canon(1), when(4))
    ]


def test_short_outlier_is_not_a_straggler() -> None:
    rows = fleet()
    patch(rows, 2, 8, 12, **{CLOCK: 1290})
    assert analyse(to_wide(rows)).findings == []


def test_per_rank_step_time_straggler() -> None:
    lines = ["timestamp,hostname,rank,step,step_time_ms"]
    rng = random.Random(2)
    for step in range(40):
        for rank in range(8):
            slow = rank == 5 and step >= 20
            ms = 1000 * (1.6 if slow else 1.0) + rng.uniform(-20, 20)
            stamp = T0 + timedelta(seconds=step * 1.05 + rank * 0.01)
            lines.append(f"{stamp.isoformat()},node{rank // 4},{rank},{step},{ms:.1f}")
    result = analyse(lines, "metrics/steps.csv")
    [f] = result.findings
    assert (f.class_id, f.rank, f.node, f.gpu) == ("straggler_fail_slow", 5, "node1", None)
    assert f.evidence[0].text.split(",")[2:4] == ["5", "20"]


def test_dbe_increase_is_uncorrectable_ecc() -> None:
    rows = fleet()
    patch(rows, 6, 20, **{ECC: 1})
    lines = to_wide(rows)
    [f] = analyse(lines).findings
    assert (f.class_id, f.severity, f.node, f.gpu, f.time) == (
        "gpu_memory_ecc_uncorrectable",
        "P0",
        HOST,
        canon(6),
        when(20),
    )
    assert [ev.line for ev in f.evidence] == [wide_line(lines, 20, 6), wide_line(lines, 19, 6)]
    assert (f.fields["before"], f.fields["after"]) == ("0", "1")


def test_nvlink_crc_burst_and_pcie_replays() -> None:
    rows = fleet()
    patch(rows, 1, 17, **{NVLINK: 504})
    patch(rows, 4, 5, **{PCIE: lambda r: 1 + 40 * (int(r["i"]) - 4)})
    result = analyse(to_long(rows))
    got = sorted((f.class_id, f.gpu, f.time, f.severity) for f in result.findings)
    assert got == [
        ("gpu_nvlink_error", canon(1), when(17), "P0"),
        ("pcie_aer_error", canon(4), when(5), "P0"),
    ]


def test_counter_reset_and_slow_drip_are_ignored() -> None:
    rows = fleet()
    patch(rows, 1, 10, **{NVLINK: 0})  # reset
    patch(rows, 2, 0, **{PCIE: lambda r: int(r["i"]) // 5})  # +1 every 5 samples
    assert analyse(to_wide(rows)).findings == []


def test_xid_field_maps_to_ecc() -> None:
    rows = fleet(gpus=2, samples=5)
    patch(rows, 0, 0, DCGM_FI_DEV_XID_ERRORS=0)
    patch(rows, 1, 0, DCGM_FI_DEV_XID_ERRORS=lambda r: 95 if int(r["i"]) >= 3 else 0)
    [f] = analyse(to_wide(rows, ["DCGM_FI_DEV_XID_ERRORS"])).findings
    assert (f.class_id, f.gpu, f.time, f.fields["xid"]) == (
        "gpu_memory_ecc_uncorrectable",
        canon(1),
        when(3),
        "95",
    )


def test_single_gpu_only_runs_bitmask_and_counter_detectors() -> None:
    rows = fleet(gpus=1)
    patch(rows, 0, 10, **{CLOCK: 600, TEMP: 95})  # no peers: no clock comparison
    assert analyse(to_wide(rows)).findings == []
    patch(rows, 0, 12, **{REASONS: 0x80, ECC: 2})
    result = analyse(to_wide(rows))
    assert sorted((f.class_id, f.time) for f in result.findings) == [
        ("gpu_memory_ecc_uncorrectable", when(12)),
        ("gpu_thermal_power_throttling", when(12)),
    ]


def test_one_finding_per_class_and_gpu_at_the_first_time() -> None:
    rows = fleet()
    patch(rows, 3, 6, **{REASONS: 0x40, TEMP: 90, CLOCK: 1000, ECC: lambda r: int(r["i"])})
    result = analyse(to_prom(rows, METRICS))
    keys = [(f.class_id, f.gpu) for f in result.findings]
    assert sorted(keys) == [
        ("gpu_memory_ecc_uncorrectable", canon(3)),
        ("gpu_thermal_power_throttling", canon(3)),
    ]
    assert {f.time for f in result.findings} == {when(6)}


def test_thousands_of_rows_stay_fast() -> None:
    rows = fleet(gpus=16, samples=400)
    patch(rows, 9, 300, **{CLOCK: 1000})
    result = analyse(to_wide(rows))
    assert [(f.class_id, f.node, f.gpu, f.time) for f in result.findings] == [
        ("straggler_fail_slow", HOST, canon(9), when(300))
    ]


# --- malformed input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lines",
    [
        [],
        [""],
        ["timestamp,hostname,gpu,DCGM_FI_DEV_SM_CLOCK"],
        [
            "timestamp,hostname,gpu,DCGM_FI_DEV_SM_CLOCK",
            "not a time,h,0,1",
            "2025-11-30T02:00:00Z,h,,",
            ",,,",
        ],
        ["\x00\x01\x02\ufffd\ufffd", "\x7fELF\x02\x01\x01", "PK\x03\x04\ufffd"],
        ['{"status":"success","data":{"resultType":"matrix","result":[{"metric":{}, "values": [[1, "x"]]}]}}'],
        ['{"status":"success","data":{"resultType":"matrix","result":[', "broken"],
        ["[" * 5000],
        ["timestamp,metric,value", "2025-11-30T02:00:00Z,DCGM_FI_DEV_GPU_TEMP,70"],
        ["timestamp;gpu;sm_clock", "0x10;0;0x", "2025-11-30T02:00:00Z;0;NaN", "2025-11-30T02:00:00Z;0;1e999"],
    ],
    ids=[
        "empty",
        "blank",
        "header-only",
        "bad-cells",
        "binary",
        "json-no-gpu",
        "json-broken",
        "deep",
        "no-gpu",
        "odd",
    ],
)
def test_malformed_input_gives_an_empty_result(lines: list[str]) -> None:
    result = analyse_telemetry("t.csv", lines)
    assert result.series == [] and result.findings == []
    looks_like_telemetry("t.csv", lines)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=30))
def test_random_text_never_raises(lines: list[str]) -> None:
    result = analyse_telemetry("t.csv", lines)
    assert result.findings == [] or all(ev.text == lines[ev.line - 1] for f in result.findings for ev in f.evidence)
    looks_like_telemetry("t.csv", lines)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_mangled_telemetry_never_raises_and_evidence_matches(data: st.DataObject) -> None:
    rows = fleet(gpus=3, samples=8)
    patch(rows, 1, 3, **{REASONS: 0x40, ECC: 1})
    render = data.draw(st.sampled_from([to_wide, to_long, to_nvsmi, lambda r: to_prom(r, METRICS)]))
    lines = render(rows)
    junk = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
    for _ in range(data.draw(st.integers(0, 6))):
        n = data.draw(st.integers(0, len(lines) - 1))
        cells = lines[n].split(",")
        cells[data.draw(st.integers(0, len(cells) - 1))] = data.draw(junk)
        lines[n] = ",".join(cells)
    analyse(lines)
