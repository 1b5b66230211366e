"""Report stage: a ``DiagnosisDocument`` (and optional GPU telemetry) -> ``timeline.png``.

Ranks, nodes or bands of nodes on y, UTC time on x (event order when times are missing): the root cause
as a labelled star, symptom spans per class with counts, the first symptom and the teardown, and the
culprit GPU's SM clock and temperature in a small panel. Matplotlib Agg, fixed size and DPI, no
timestamps in the file, so the same input gives the same bytes. Writes one file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import median

from matplotlib import dates as mdates
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from crashcart.gpuid import canonical_pci
from crashcart.models import DiagnosisDocument
from crashcart.scan.catalogue import load_catalogue
from crashcart.telemetry import GPU_TEMP, SM_CLOCK, GpuSeries

SIZE, DPI = (10.0, 5.625), 120  # 1200 x 675 px; still legible as a 360 px Slack preview
MAX_ROWS, MAX_LANES = 64, 4
RED, INK, GREY, BG = "#d7191c", "#111111", "#8c8c8c", "#ffffff"
PALETTE = ["#2b83ba", "#fdae61", "#7b3294", "#1a9641"]  # colour-blind-safe, distinct from the root red
TEARDOWN = "#b0b0b0"
FONT = {"family": "DejaVu Sans"}


@dataclass
class _Rows:
    n: int
    unit: str  # "rank", "node", "band", "job"
    of_rank: dict[int, int]
    of_node: dict[str, int]
    ticks: list[tuple[float, str]]
    bands: list[tuple[int, int, str]] = field(default_factory=list)  # node bands in rank mode


@dataclass
class _Lane:
    title: str
    count: int
    rows: list[int]
    start: datetime | None
    end: datetime | None
    teardown: bool
    color: str = TEARDOWN


def _time(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        t = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- what to draw ------------------------------------------------------------------------------------------


def _rows(doc: DiagnosisDocument) -> _Rows:
    topo = {int(r): info for r, info in doc.topology.items() if r.lstrip("-").isdigit()}
    ranks = set(topo) | {r for s in doc.symptoms for r in s.ranks}
    if doc.root_cause.culprit.rank is not None:
        ranks.add(doc.root_cause.culprit.rank)
    node_of = {r: str(info["node"]) for r, info in topo.items() if info.get("node")}
    nodes: list[str] = []
    for r in sorted(node_of):
        if node_of[r] not in nodes:
            nodes.append(node_of[r])
    for n in [doc.root_cause.culprit.node, *(x for s in doc.symptoms for x in s.nodes)]:
        if n and n not in nodes:
            nodes.append(n)
    if not ranks and not nodes:
        return _Rows(1, "job", {}, {}, [(0.5, "job")])
    world = max(ranks) + 1 if ranks else 0
    if 0 < world <= MAX_ROWS:
        of_node: dict[str, list[int]] = {}
        for r in range(world):
            if r in node_of:
                of_node.setdefault(node_of[r], []).append(r)
        bands = [(min(rs), max(rs), n) for n, rs in of_node.items()]
        ticks = [(r + 0.5, f"rank {r}") for r in range(world)] if world <= 16 else []
        rows = _Rows(world, "rank", {r: r for r in range(world)}, {n: min(rs) for n, rs in of_node.items()}, ticks)
        rows.bands = bands
        return rows
    if not nodes:  # many ranks, no node names: bands of ranks
        per = math.ceil(world / MAX_ROWS)
        n = math.ceil(world / per)
        ticks = [(0.5, "rank 0"), (n - 0.5, f"rank {world - 1}")]
        return _Rows(n, "band", {r: r // per for r in range(world)}, {}, ticks)
    per = math.ceil(len(nodes) / MAX_ROWS)
    row_of_node = {name: i // per for i, name in enumerate(nodes)}
    n = math.ceil(len(nodes) / per)
    of_rank = {r: row_of_node[node_of[r]] for r in node_of}
    ticks = [(0.5, nodes[0]), (n - 0.5, nodes[-1])]
    return _Rows(n, "node" if per == 1 else "band", of_rank, row_of_node, ticks)


def _role_of(doc: DiagnosisDocument, class_id: str) -> str:
    roles = [e.role for e in doc.timeline if e.class_ == class_id]
    if roles:
        return max(set(roles), key=roles.count)
    info = load_catalogue().classes.get(class_id)
    return info.default_role if info else "cascade"


def _lanes(doc: DiagnosisDocument, rows: _Rows) -> list[_Lane]:
    cat = load_catalogue()
    lanes: list[_Lane] = []
    for s in doc.symptoms:
        hit = {rows.of_rank[r] for r in s.ranks if r in rows.of_rank}
        hit |= {rows.of_node[n] for n in s.nodes if n in rows.of_node} if not hit else set()
        if rows.unit == "rank" and not s.ranks and s.nodes:  # node-level symptom: every rank of the node
            hit |= {r for lo, hi, n in rows.bands if n in s.nodes for r in range(lo, hi + 1)}
        teardown = _role_of(doc, s.class_) == "teardown"
        lanes.append(
            _Lane(
                cat.class_title(s.class_),
                s.count,
                sorted(hit) or list(range(rows.n)),
                _time(s.first_time),
                _time(s.last_time) or _time(s.first_time),
                teardown,
            )
        )
    shown = [x for x in lanes if not x.teardown][:MAX_LANES]  # the document lists symptoms by weight
    for lane, colour in zip(shown, PALETTE, strict=False):
        lane.color = colour
    rest = [x for x in lanes if not x.teardown and x not in shown]
    if rest:
        times = [t for x in rest for t in (x.start, x.end) if t]
        other = _Lane(
            f"{len(rest)} other symptoms",
            sum(x.count for x in rest),
            sorted({r for x in rest for r in x.rows}),
            min(times, default=None),
            max(times, default=None),
            False,
            GREY,
        )
        shown.append(other)
    tear = [x for x in lanes if x.teardown]
    if tear:
        times = [t for x in tear for t in (x.start, x.end) if t]
        rows_hit = sorted({r for x in tear for r in x.rows})
        shown.append(
            _Lane(
                "teardown",
                sum(x.count for x in tear),
                rows_hit,
                min(times, default=None),
                max(times, default=None),
                True,
            )
        )
    return shown


# --- drawing -----------------------------------------------------------------------------------------------


@dataclass
class _Axis:
    timed: bool
    lo: float
    hi: float
    gutter: tuple[float, float] | None  # where untimed things go, in a time plot

    def x(self, t: datetime | None, order: int) -> tuple[float, float]:
        """Left edge and width of an event (``order`` places it when there are no times)."""
        if not self.timed:
            return order + 0.1, 0.8
        if t is None and self.gutter is not None:
            return self.gutter[0], self.gutter[1] - self.gutter[0]
        return float(mdates.date2num(t)), 0.0


def _axis(doc: DiagnosisDocument, lanes: list[_Lane]) -> _Axis:
    times = [t for x in lanes for t in (x.start, x.end) if t]
    root = _time(doc.root_cause.time)
    times += [root] if root else []
    if not times:
        return _Axis(False, -0.2, len(lanes) + 1.2, None)
    lo, hi = min(times), max(times)
    span = max((hi - lo).total_seconds(), 20.0)
    pad = timedelta(seconds=span * 0.08)
    left, right = float(mdates.date2num(lo - pad)), float(mdates.date2num(hi + pad))
    untimed = any(x.start is None for x in lanes) or root is None
    gutter = (right, right + (right - left) * 0.12) if untimed else None
    return _Axis(True, left, gutter[1] if gutter else right, gutter)


def _draw_lanes(ax: Axes, lanes: list[_Lane], axis: _Axis) -> None:
    """Each lane (symptom class) gets its own strip inside every row it touches."""
    h = 0.84 / max(len(lanes), 1)
    min_w = (axis.hi - axis.lo) * 0.008
    for i, lane in enumerate(lanes):
        left, width = axis.x(lane.start, i)
        if axis.timed and lane.start is not None:
            width = float(mdates.date2num(lane.end or lane.start)) - left
        ys = [r + 0.08 + i * h for r in lane.rows]
        ax.barh(
            ys,
            max(width, min_w),
            left=left,
            height=h * 0.92,
            align="edge",
            color=lane.color,
            alpha=0.55 if lane.teardown else 0.95,
            hatch="///" if lane.teardown else None,
            edgecolor="#555555" if lane.teardown else lane.color,
            linewidth=0.4,
            zorder=3,
        )


def _draw_rows(ax: Axes, rows: _Rows, culprit_row: int | None) -> None:
    for k, (lo, hi, _) in enumerate(rows.bands):
        if k % 2:
            ax.axhspan(lo, hi + 1, color="#f0f0f0", zorder=0)
    if culprit_row is not None:
        ax.axhspan(culprit_row, culprit_row + 1, color=RED, alpha=0.12, zorder=1)
    ax.set_ylim(rows.n, 0)  # rank 0 / the first node on top
    if rows.bands and len(rows.bands) <= 16:
        ticks = [
            ((lo + hi + 1) / 2, f"{name}\nranks {lo}-{hi}" if hi > lo else f"{name}\nrank {lo}")
            for lo, hi, name in rows.bands
        ]
    else:
        ticks = rows.ticks
    ax.set_yticks([y for y, _ in ticks], [label for _, label in ticks])
    ax.tick_params(axis="y", labelsize=11, length=0)


def _verdict(doc: DiagnosisDocument) -> tuple[str, str]:
    root = doc.root_cause
    title = load_catalogue().class_title(root.class_)
    head = "NO ROOT CAUSE FOUND" if root.class_ == "unknown" else f"ROOT CAUSE: {title}"
    c = root.culprit
    bits = [c.node or "", f"GPU {c.gpu}" if c.gpu else "", f"rank {c.rank}" if c.rank is not None else ""]
    t = _time(root.time)
    bits.append(f"{t:%H:%M:%S} UTC" if t else "time unknown")
    bits.append(f"confidence {root.confidence:.0%}")
    return _short(head, 60), " · ".join(b for b in bits if b)


def _culprit_row(doc: DiagnosisDocument, rows: _Rows) -> int | None:
    c = doc.root_cause.culprit
    if c.rank is not None and c.rank in rows.of_rank:
        return rows.of_rank[c.rank]
    if c.node and c.node in rows.of_node:
        return rows.of_node[c.node]
    return None


def _marks(ax: Axes, doc: DiagnosisDocument, lanes: list[_Lane], axis: _Axis, row: int | None, rows: _Rows) -> None:
    root_t = _time(doc.root_cause.time)
    y = (row + 0.5) if row is not None else rows.n / 2
    if doc.root_cause.class_ != "unknown":
        left, width = axis.x(root_t, -1) if axis.timed else (axis.lo + 0.45, 0.0)
        x = left + width / 2
        ax.scatter([x], [y], marker="*", s=900, color=RED, edgecolors=INK, linewidths=1.5, zorder=10)
        right_half = (x - axis.lo) > (axis.hi - axis.lo) * 0.6
        ax.annotate(
            "ROOT CAUSE",
            (x, y),
            xytext=(-18 if right_half else 18, 0),
            textcoords="offset points",
            ha="right" if right_half else "left",
            va="center",
            fontsize=15,
            fontweight="bold",
            color=RED,
            zorder=11,
            bbox={"boxstyle": "round,pad=0.2", "fc": BG, "ec": RED, "lw": 1.5},
        )
    symptom_starts = [x.start for x in lanes if not x.teardown and x.start]
    if axis.timed and symptom_starts:
        first = min(symptom_starts)
        xf = float(mdates.date2num(first))
        ax.axvline(xf, color=INK, ls="--", lw=1.6, zorder=5)
        label = "first symptom"
        if root_t is not None:
            delta = (first - root_t).total_seconds()
            label += (
                f"\n{'+' if delta >= 0 else '-'}{_dur(abs(delta))} after root"
                if delta >= 0
                else f"\n{_dur(-delta)} before root*"
            )
        ax.text(xf, -0.01, label, transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=11, color=INK)
    if axis.gutter is not None:
        ax.axvspan(*axis.gutter, color="#fafafa", zorder=0)
        ax.text(
            sum(axis.gutter) / 2,
            1.0,
            "no time",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=10,
            color=GREY,
        )


def _dur(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _telemetry(series: Sequence[GpuSeries], doc: DiagnosisDocument) -> tuple[list[GpuSeries], list[GpuSeries]]:
    """The culprit GPU's SM clock/temperature series, and its peers' SM clock series."""
    c = doc.root_cause.culprit
    gpu = canonical_pci(c.gpu) if c.gpu else None
    if gpu is None:
        return [], []

    def mine(s: GpuSeries) -> bool:
        return (canonical_pci(s.gpu) or s.gpu) == gpu and (c.node is None or s.host is None or s.host == c.node)

    own = [s for s in series if s.metric in (SM_CLOCK, GPU_TEMP) and mine(s) and s.samples]
    peers = [s for s in series if s.metric == SM_CLOCK and not mine(s) and s.samples]
    return own, peers


def _draw_telemetry(ax: Axes, own: list[GpuSeries], peers: list[GpuSeries], axis: _Axis) -> None:
    clock = next((s for s in own if s.metric == SM_CLOCK), None)
    temp = next((s for s in own if s.metric == GPU_TEMP), None)
    if peers:
        buckets: dict[float, list[float]] = {}
        for s in peers:
            for p in s.samples:
                buckets.setdefault(round(float(mdates.date2num(p.time)) * 86400) / 86400, []).append(p.value)
        xs = sorted(buckets)
        ax.plot(xs, [median(buckets[x]) for x in xs], color=GREY, lw=2, ls="--", label="other GPUs (median)")
    if clock is not None:
        ax.plot(
            [mdates.date2num(p.time) for p in clock.samples],
            [p.value for p in clock.samples],
            color=RED,
            lw=2.5,
            label="culprit GPU",
        )
    ax.set_ylabel("SM MHz", fontsize=11)
    if temp is not None:
        tw = ax.twinx()
        tw.plot(
            [mdates.date2num(p.time) for p in temp.samples], [p.value for p in temp.samples], color="#fdae61", lw=1.8
        )
        tw.set_ylabel("°C", fontsize=11, color="#e08214")
        tw.tick_params(labelsize=9, colors="#e08214")
    ax.legend(loc="lower left", fontsize=9, frameon=False, ncols=2)
    ax.tick_params(labelsize=9)
    ax.set_xlim(axis.lo, axis.hi)


def render_timeline(doc: DiagnosisDocument, out: Path, *, series: list[GpuSeries] | None = None) -> Path:
    """Draw the incident timeline to ``out`` (PNG) and return ``out``.

    :param series: GPU telemetry (``ScanResult.series``); the culprit GPU's SM clock and temperature are
        drawn under the timeline when the culprit GPU is known and has samples
    """
    rows = _rows(doc)
    lanes = _lanes(doc, rows)
    axis = _axis(doc, lanes)
    own, peers = _telemetry(series or [], doc) if axis.timed else ([], [])
    fig = Figure(figsize=SIZE, dpi=DPI, facecolor=BG)
    FigureCanvasAgg(fig)
    if own:
        grid = fig.add_gridspec(2, 1, height_ratios=[4, 1.3], hspace=0.12, left=0.16, right=0.97, top=0.8, bottom=0.1)
        ax = fig.add_subplot(grid[0])
        tax: Axes | None = fig.add_subplot(grid[1], sharex=ax)
    else:
        grid = fig.add_gridspec(1, 1, left=0.16, right=0.97, top=0.8, bottom=0.14)
        ax, tax = fig.add_subplot(grid[0]), None
    head, sub = _verdict(doc)
    fig.text(
        0.02,
        0.975,
        head,
        ha="left",
        va="top",
        fontsize=22,
        fontweight="bold",
        color=RED if doc.root_cause.class_ != "unknown" else INK,
        **FONT,
    )
    fig.text(0.02, 0.895, sub, ha="left", va="top", fontsize=15, color=INK, **FONT)
    row = _culprit_row(doc, rows)
    _draw_rows(ax, rows, row)
    _draw_lanes(ax, lanes, axis)
    _marks(ax, doc, lanes, axis, row, rows)
    ax.set_xlim(axis.lo, axis.hi)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if axis.timed:
        loc = mdates.AutoDateLocator(tz=UTC, maxticks=6)
        target = tax if tax is not None else ax
        target.xaxis.set_major_locator(loc)
        target.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))
        target.set_xlabel("time (UTC)", fontsize=11)
        if tax is not None:
            ax.tick_params(axis="x", labelbottom=False)
    else:
        ax.set_xticks([])
        ax.set_xlabel("times not aligned: events in order", fontsize=12, color=INK)
    ax.tick_params(axis="x", labelsize=11)
    if tax is not None:
        _draw_telemetry(tax, own, peers, axis)
    handles = [
        Patch(
            facecolor=x.color,
            hatch="///" if x.teardown else None,
            edgecolor="#555555" if x.teardown else x.color,
            label=f"{_short(x.title, 34)} ×{x.count}",
        )
        for x in lanes
    ]
    if handles:
        fig.legend(
            handles=handles,
            loc="upper right",
            bbox_to_anchor=(0.99, 0.84),
            ncols=min(len(handles), 3),
            fontsize=10,
            frameon=False,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=DPI, facecolor=BG, metadata={"Software": None})
    return out
