"""Synth dashboard: a Grafana-like PNG of the telemetry, as on-call engineers screenshot it.

Input: the rows of ``telemetry/dcgm.csv``; output: ``dashboard/gpu-dashboard.png`` (SM clock and
temperature per GPU over time). Deterministic bytes: Agg backend, fixed size, no metadata.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path


def render(rows: list[str], out: Path) -> None:
    """Plot SM clock and temperature of every GPU from wide DCGM CSV rows (header first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    head = rows[0].split(",")
    col = {name: i for i, name in enumerate(head)}
    series: dict[str, tuple[list[datetime], list[float], list[float]]] = {}
    for row in rows[1:]:
        cells = row.split(",")
        key = f"{cells[col['hostname']]} GPU{cells[col['gpu']]}"
        ts, clock, temp = series.setdefault(key, ([], [], []))
        ts.append(datetime.fromisoformat(cells[col["timestamp"]].replace("Z", "+00:00")))
        clock.append(float(cells[col["DCGM_FI_DEV_SM_CLOCK"]]))
        temp.append(float(cells[col["DCGM_FI_DEV_GPU_TEMP"]]))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.6), dpi=80, sharex=True)
    fig.patch.set_facecolor("#111217")
    for ax, idx, title in ((top, 1, "SM clock (MHz)"), (bottom, 2, "GPU temperature (C)")):
        ax.set_facecolor("#181b1f")
        ax.set_title(title, color="#d8d9da", loc="left", fontsize=10)
        ax.tick_params(colors="#9fa7b3", labelsize=8)
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        for key in sorted(series):
            ax.plot(series[key][0], series[key][idx], linewidth=1.0, label=key)
    top.legend(fontsize=6, ncol=4, loc="lower left", facecolor="#181b1f", labelcolor="#d8d9da", framealpha=0.8)
    fig.suptitle("DCGM / GPU health", color="#d8d9da", x=0.01, ha="left", fontsize=12)
    fig.autofmt_xdate()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, facecolor=fig.get_facecolor(), metadata={"Software": None})
    plt.close(fig)
