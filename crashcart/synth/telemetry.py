"""Synth DCGM telemetry: ``telemetry/dcgm.csv`` in the wide dcgm-exporter layout, one row per GPU
per sample. Healthy, idle, waiting (NCCL busy-wait) and anomalous GPUs (thermal throttle, power
brake, straggler, fallen off the bus) each have their own profile; anomalous rows are root rows.

Input: a finished Story; output: Line list. Pure.
"""

from __future__ import annotations

import random

from crashcart.synth import formats as fmt
from crashcart.synth.k8sdocs import job_end
from crashcart.synth.story import Line, Story


def dcgm(s: Story) -> list[Line]:
    w, tel = s.world, s.telemetry
    rng = random.Random(f"crashcart-synth/dcgm/{w.seed}/{s.class_id}")
    interval = 30.0 if w.timeout_ms <= 600000 else 60.0
    first = min(s.t0, tel.onset if tel and tel.anomaly else s.t0) - 20 * 60
    start = max(w.t_train0 + 5.0, first)
    grid0 = w.at(start)
    skew = (grid0.second % int(interval)) + grid0.microsecond / 1e6
    t = start + (interval - skew)
    end = min(s.t_end, job_end(s) + 600.0)
    hi, idle = (1980, 345) if w.gpu_kind == "h100" else (1410, 210)
    tdp = 700.0 if w.gpu_kind == "h100" else 400.0
    out = [
        Line(
            0.0,
            "timestamp,hostname,gpu,pci_bus_id,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_SM_CLOCK,"
            "DCGM_FI_DEV_POWER_USAGE,DCGM_FI_DEV_CLOCK_THROTTLE_REASONS,DCGM_FI_DEV_GPU_UTIL",
        )
    ]
    while t <= end:
        stamp = fmt.iso(w.at(t)) + "Z"
        for node in w.nodes:
            for r in node.ranks:
                L = w.local[r]
                culprit = tel is not None and bool(tel.anomaly) and tel.node == node.index and tel.local == L
                active = culprit and tel is not None and t >= tel.onset and t < s.ended.get(r, float("inf"))
                if active and tel is not None and tel.anomaly == "missing":
                    continue
                row, root = _sample(s, r, t, rng, hi, idle, tdp, active, culprit)
                temp, clock, power, reason, util = row
                gpu = f"{node.host},{L},{fmt.smi_busid(w.bus(r))}"
                text = f"{stamp},{gpu},{temp},{clock},{power:.3f},{reason},{util}"
                out.append(Line(t, text, root=root))
        t += interval
    return out


def _sample(
    s: Story,
    r: int,
    t: float,
    rng: random.Random,
    hi: int,
    idle: int,
    tdp: float,
    active: bool,
    culprit: bool,
) -> tuple[tuple[int, int, float, int, int], bool]:
    """One GPU sample: (temp, SM clock, power, throttle reasons, util) and whether it is a root row."""
    tel = s.telemetry
    fate = s.fate.get(r)
    if t >= s.ended.get(r, float("inf")):
        return (rng.randrange(33, 41), idle, rng.uniform(62, 88), 1, 0), False
    if active and tel is not None:
        since = t - tel.onset
        if tel.anomaly == "throttle":
            clock = max(705, hi - 225 * int(since // 240 + 1))
            reason = 0x40 | (0x8 if since > 600 else 0)
            return (rng.randrange(87, 94), clock, rng.uniform(0.5, 0.62) * tdp, reason, 100), True
        if tel.anomaly == "brake":
            return (
                rng.randrange(58, 66),
                rng.choice((345, 420, 510)),
                rng.uniform(0.25, 0.33) * tdp,
                0x80,
                100,
            ), True
        if tel.anomaly == "straggler":
            return (rng.randrange(76, 82), hi, rng.uniform(0.985, 1.0) * tdp, 0, 100), True
    if t >= s.t0:
        if fate is not None and fate.kind == "hang" and not culprit:
            return (rng.randrange(44, 49), hi, rng.uniform(0.13, 0.16) * tdp, 0, 0), False
        return (rng.randrange(47, 56), hi, rng.uniform(0.2, 0.3) * tdp, 0, 100), False
    if tel is not None and tel.anomaly == "straggler" and t >= tel.onset:
        return (rng.randrange(55, 62), hi, rng.uniform(0.42, 0.52) * tdp, 0, rng.randrange(52, 68)), False
    reason = 0x4 if rng.random() < 0.04 else 0
    return (rng.randrange(61, 75), hi, rng.uniform(0.88, 0.99) * tdp, reason, rng.randrange(96, 101)), False
