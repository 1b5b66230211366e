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
from datetime import datetime, timedelta
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes

from crashcart.catalogue import load_catalogue
from crashcart.models import DiagnosisDocument
from crashcart.scan.telemetry import GPU_TEMP, SM_CLOCK, GpuSeries
from crashcart.text.clock import from_iso
from crashcart.text.gpuid import canonical_pci

SIZE, DPI = (10.0, 5.625), 120  # 1200 x 675 px: a Slack preview shows it ~360 px wide
MAX_ROWS, MAX_LANES, LANE_ROWS = 64, 4, 16  # each class gets its own strip per row while rows are few
GAP = timedelta(minutes=35)  # events further apart than this (more than an NCCL timeout) leave the window
RED, INK, GREY, BG, TEMP, TEARDOWN = "#d7191c", "#111111", "#8c8c8c", "#ffffff", "#e66101", "#9e9e9e"
PALETTE = ["#2b83ba", "#fdae61", "#7b3294", "#1a9641"]  # colour-blind-safe, all distinct from the root red
_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400]


@dataclass
class _Rows:
    n: int
    of_rank: dict[int, int]
    of_node: dict[str, int]
    ticks: list[tuple[float, str]]
    label: str
    bands: list[tuple[int, int, str]] = field(default_factory=list)  # (first row, last row, node) in rank mode


@dataclass
class _Lane:
    title: str
    count: int
    rows: list[int]
    start: datetime | None
    end: datetime | None
    teardown: bool = False
    color: str = TEARDOWN


@dataclass
class _Axis:
    """x is seconds since ``ref`` (timed) or event order (not timed); ``gutter`` holds untimed events."""

    timed: bool
    lo: float
    hi: float
    ref: datetime | None = None
    gutter: tuple[float, float] | None = None
    before: bool = False
    after: bool = False

    @property
    def data_hi(self) -> float:
        return self.gutter[0] if self.gutter else self.hi

    def x(self, t: datetime) -> float:
        assert self.ref is not None
        return (t - self.ref).total_seconds()

    def inside(self, t: datetime | None) -> bool:
        return self.timed and t is not None and self.lo <= self.x(t) <= self.data_hi

    def span(self, start: datetime | None, end: datetime | None, order: int) -> tuple[float, float, bool]:
        """Left edge and width of an event inside the window, and whether it starts before the window."""
        if not self.timed:
            return order + 1.15, 0.7, False  # position 0 is the root cause's
        if start is None:
            g0, g1 = self.gutter or (self.hi, self.hi)
            return g0 + (g1 - g0) * 0.15, (g1 - g0) * 0.7, False
        a, b = self.x(start), self.x(end or start)
        ca, cb = min(max(a, self.lo), self.data_hi), min(max(b, self.lo), self.data_hi)
        return ca, cb - ca, a < self.lo


def _short(title: str, limit: int = 32) -> str:
    text = title.split(" (")[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dur(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


# --- what to draw ------------------------------------------------------------------------------------------


def _rows(doc: DiagnosisDocument) -> _Rows:
    """One row per rank (grouped by node) up to MAX_ROWS ranks; else one per node, or per band of nodes."""
    topo = {int(r): info for r, info in doc.topology.items() if r.isdigit()}
    c = doc.root_cause.culprit
    ranks = set(topo) | {r for s in doc.symptoms for r in s.ranks} | ({c.rank} if c.rank is not None else set())
    node_of = {r: str(info["node"]) for r, info in topo.items() if info.get("node")}
    nodes = list(dict.fromkeys([node_of[r] for r in sorted(node_of)] + [n for s in doc.symptoms for n in s.nodes]))
    nodes += [c.node] if c.node and c.node not in nodes else []
    world = max(ranks) + 1 if ranks else 0
    if world == 0 and not nodes:
        return _Rows(1, {}, {}, [(0.5, "job")], "")
    if 0 < world <= MAX_ROWS:
        members: dict[str, list[int]] = {}
        for r in range(world):
            if r in node_of:
                members.setdefault(node_of[r], []).append(r)
        bands = [(min(rs), max(rs), n) for n, rs in members.items()]
        ticks = [((lo + hi + 1) / 2, f"{n}\nranks {lo}-{hi}" if hi > lo else f"{n}\nrank {lo}") for lo, hi, n in bands]
        if not ticks or len(bands) > LANE_ROWS:
            ticks = [(0.5, "rank 0"), (world - 0.5, f"rank {world - 1}")]
        label = f"{world} ranks" + (f" on {len(members)} nodes" if members else "")
        first = {n: min(rs) for n, rs in members.items()}
        return _Rows(world, {r: r for r in range(world)}, first, ticks, label, bands)
    if not nodes:  # many ranks and no host names: bands of ranks
        per = math.ceil(world / MAX_ROWS)
        n = math.ceil(world / per)
        ticks = [(0.5, "rank 0"), (n - 0.5, f"rank {world - 1}")]
        return _Rows(n, {r: r // per for r in range(world)}, {}, ticks, f"{world:,} ranks, {per} per row")
    per = math.ceil(len(nodes) / MAX_ROWS)
    of_node = {name: i // per for i, name in enumerate(nodes)}
    n = math.ceil(len(nodes) / per)
    label = f"{len(nodes)} nodes" + (f", {world:,} ranks" if world else "") + (f" ({per} per row)" if per > 1 else "")
    rows = _Rows(n, {r: of_node[node_of[r]] for r in node_of}, of_node, [(0.5, nodes[0]), (n - 0.5, nodes[-1])], label)
    if c.node in of_node and 2 < of_node[c.node] < n - 3:
        rows.ticks.insert(1, (of_node[c.node] + 0.5, c.node))
    return rows


def _role(doc: DiagnosisDocument, class_id: str) -> str:
    roles = [e.role for e in doc.timeline if e.class_ == class_id]
    if roles:
        return max(sorted(set(roles)), key=roles.count)
    info = load_catalogue().classes.get(class_id)
    return info.default_role if info else "cascade"


def _lanes(doc: DiagnosisDocument, rows: _Rows) -> list[_Lane]:
    """Symptom classes, heaviest first (as the document lists them): four in colour, the rest merged into a
    grey one, then each teardown class (hatched, one legend entry)."""
    cat = load_catalogue()
    lanes: list[_Lane] = []
    for s in doc.symptoms:
        hit = {rows.of_rank[r] for r in s.ranks if r in rows.of_rank}
        if not hit:
            hit = {rows.of_node[n] for n in s.nodes if n in rows.of_node}
            hit |= {r for lo, hi, n in rows.bands if n in s.nodes for r in range(lo, hi + 1)}
        start = from_iso(s.first_time)
        lane = _Lane(cat.class_title(s.class_), s.count, sorted(hit) or list(range(rows.n)), start, start)
        lane.end = from_iso(s.last_time) or start
        lane.teardown = _role(doc, s.class_) == "teardown" or s.class_ == "unknown"  # unclassified: background
        lanes.append(lane)
    shown = [x for x in lanes if not x.teardown][:MAX_LANES]
    for lane, colour in zip(shown, PALETTE, strict=False):
        lane.color = colour
    if rest := [x for x in lanes if not x.teardown and x not in shown]:
        times = [t for x in rest for t in (x.start, x.end) if t]
        hit_rows = sorted({r for x in rest for r in x.rows})
        first, last = min(times, default=None), max(times, default=None)
        more = _Lane(f"{len(rest)} more symptoms", sum(x.count for x in rest), hit_rows, first, last, color=GREY)
        shown.append(more)
    return shown + [x for x in lanes if x.teardown]


def _axis(doc: DiagnosisDocument, lanes: list[_Lane]) -> _Axis:
    """The window: the cluster of event times (gaps <= GAP) holding the root cause; the rest is clipped."""
    root = from_iso(doc.root_cause.time)
    raw = [root, *(t for s in doc.symptoms for t in (from_iso(s.first_time), from_iso(s.last_time)))]
    times = sorted({t for t in raw if t is not None})
    if not times:
        return _Axis(False, -0.1, len(lanes) + 1.1)
    clusters: list[list[datetime]] = []
    for t in times:
        if clusters and t - clusters[-1][-1] <= GAP:
            clusters[-1].append(t)
        else:
            clusters.append([t])
    k = next((i for i, c in enumerate(clusters) if root in c), None)
    if k is None:
        pick = max(reversed(clusters), key=len)
    else:  # a root alone in its cluster: show what followed it too (a slow fault can precede its symptoms long)
        pick = clusters[k] + (clusters[k + 1] if len(clusters[k]) == 1 and k + 1 < len(clusters) else [])
    span = max((pick[-1] - pick[0]).total_seconds(), 20.0)
    ref, lo, hi = pick[0], -span * 0.06, (pick[-1] - pick[0]).total_seconds() + span * 0.06
    gutter = (hi, hi + (hi - lo) * 0.1) if root is None or any(x.start is None for x in lanes) else None
    return _Axis(True, lo, gutter[1] if gutter else hi, ref, gutter, times[0] < pick[0], times[-1] > pick[-1])


# --- drawing -----------------------------------------------------------------------------------------------


def _style(lane: _Lane) -> dict[str, Any]:
    alpha, edge, hatch = (0.45, "#444444", "///") if lane.teardown else (0.95, lane.color, None)
    return {"facecolor": lane.color, "alpha": alpha, "hatch": hatch, "edgecolor": edge, "lw": 0.5}


def _earlier(lane: _Lane, axis: _Axis) -> bool:
    return axis.timed and lane.start is not None and axis.x(lane.end or lane.start) < axis.lo


def _runs(rows: Sequence[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for r in sorted(set(rows)):
        if out and r == out[-1][1] + 1:
            out[-1] = (out[-1][0], r)
        else:
            out.append((r, r))
    return out


def _draw_rows(ax: Axes, rows: _Rows, culprit_row: int | None) -> None:
    for k, (lo, hi, _) in enumerate(rows.bands):
        if k % 2:
            ax.axhspan(lo, hi + 1, color="#eeeeee", zorder=0, lw=0)
    if culprit_row is not None:
        ax.axhspan(culprit_row, culprit_row + 1, color=RED, alpha=0.15, zorder=1, lw=0)
    ax.set_ylim(rows.n, 0)  # rank 0 / the first node on top
    ax.set_yticks([y for y, _ in rows.ticks], [label for _, label in rows.ticks])
    ax.tick_params(axis="y", labelsize=12, length=0)
    ax.set_ylabel(rows.label, fontsize=12, color=INK)


def _draw_lanes(ax: Axes, lanes: list[_Lane], axis: _Axis, rows: _Rows) -> None:
    """Few rows: each lane gets its own strip (teardown a thinner one) in every row it touches. Many rows:
    full-height blocks per run of rows, the widest first so rare symptoms stay on top."""
    strips = rows.n <= LANE_ROWS
    weights = [0.5 if x.teardown else 1.0 for x in lanes]
    unit = 0.84 / max(sum(weights), 1.0)
    offsets = [0.08 + unit * sum(weights[:i]) for i in range(len(lanes))]
    order = range(len(lanes)) if strips else sorted(range(len(lanes)), key=lambda i: -len(lanes[i].rows))
    min_w = (axis.hi - axis.lo) * 0.014
    for z, i in enumerate(order):
        lane = lanes[i]
        if _earlier(lane, axis):
            continue  # wholly before the window: the "earlier events" note and the legend say so
        if strips:
            ys: list[float] = [r + offsets[i] for r in lane.rows]
            heights: list[float] = [unit * weights[i] * 0.9] * len(ys)
        else:
            runs = _runs(lane.rows)
            ys, heights = [float(lo) for lo, _ in runs], [float(hi - lo + 1) for lo, hi in runs]
        left, width, early = axis.span(lane.start, lane.end, i)
        if early:  # its first line predates the window (often a clock problem): mark only what is inside
            left, width = max(left + width - min_w, axis.lo), min_w
        ax.barh(ys, max(width, min_w), left=left, height=heights, align="edge", zorder=3 + z * 0.01, **_style(lane))


def _culprit_row(doc: DiagnosisDocument, rows: _Rows) -> int | None:
    c = doc.root_cause.culprit
    if c.rank is not None and c.rank in rows.of_rank:
        return rows.of_rank[c.rank]
    return rows.of_node.get(c.node) if c.node else None


def _note(ax: Axes, x: float, y: float, text: str, ha: str, va: str = "bottom", color: str = INK) -> None:
    box = {"boxstyle": "round,pad=0.15", "fc": BG, "ec": "none", "alpha": 0.85}
    ax.text(x, y, text, transform=ax.get_xaxis_transform(), ha=ha, va=va, fontsize=11, color=color, zorder=15, bbox=box)


def _draw_marks(ax: Axes, doc: DiagnosisDocument, lanes: list[_Lane], axis: _Axis, row: int | None, n: int) -> None:
    root_t = from_iso(doc.root_cause.time) if doc.root_cause.class_ != "unknown" else None
    if axis.gutter is not None:
        ax.axvspan(*axis.gutter, color="#f2f2f2", zorder=0, lw=0)
        _note(ax, sum(axis.gutter) / 2, 0.99, "no time", "center", "top", color=GREY)
    if axis.before:
        _note(ax, axis.lo, 0.99, "◀ earlier events", "left", "top", color=GREY)
    if axis.after:
        _note(ax, axis.data_hi, 0.99, "later events ▶", "right", "top", color=GREY)
    starts = [x.start for x in lanes if not x.teardown and x.start and axis.inside(x.start)]
    if starts:
        xf = axis.x(min(starts))
        ax.axvline(xf, color=INK, ls="--", lw=1.8, zorder=6)
        text = "first symptom"
        if root_t is not None and (delta := (min(starts) - root_t).total_seconds()) < 0:
            text += f" ({_dur(-delta)} before the root: clocks?)"
        elif root_t is not None:
            text += f" (root +{_dur(delta)})"
        frac = (xf - axis.lo) / (axis.hi - axis.lo)
        _note(ax, xf, 1.005, text, "left" if frac < 0.25 else "right" if frac > 0.75 else "center")
    if doc.root_cause.class_ == "unknown":
        return
    y = row + 0.5 if row is not None else n / 2  # no culprit: job-wide, a red line across every row
    left, width, _ = axis.span(root_t, root_t, -1) if axis.timed else (0.4, 0.0, False)
    x = left + width / 2
    if row is None:
        ax.axvline(x, color=RED, lw=2.5, zorder=8)
    ax.scatter([x], [y], marker="*", s=1100, color=RED, edgecolors=INK, linewidths=1.5, zorder=20, clip_on=False)
    if starts and root_t is not None and (gap := axis.x(min(starts)) - x) > (axis.hi - axis.lo) * 0.2:
        ya = y + max(n * 0.09, 0.45) * (1 if y < n / 2 else -1)  # under the star, or over it near the bottom
        arrow = {"arrowstyle": "-|>", "color": INK, "lw": 1.6, "shrinkA": 14, "shrinkB": 2}
        ax.annotate("", (x + gap, ya), xytext=(x, ya), arrowprops=arrow, zorder=7)
        ax.text(x + gap / 2, ya, f"{_dur(gap)} later", ha="center", va="bottom", fontsize=12, color=INK, zorder=7)
    flip = (x - axis.lo) > (axis.hi - axis.lo) * 0.55
    label: dict[str, Any] = {"ha": "right" if flip else "left", "va": "center", "fontsize": 16, "fontweight": "bold"}
    box = {"boxstyle": "round,pad=0.25", "fc": BG, "ec": RED, "lw": 2}
    at = (-22 if flip else 22, 0)
    ax.annotate("ROOT CAUSE", (x, y), xytext=at, textcoords="offset points", color=RED, zorder=21, bbox=box, **label)


def _telemetry(series: Sequence[GpuSeries], doc: DiagnosisDocument) -> tuple[list[GpuSeries], list[GpuSeries]]:
    """The culprit GPU's SM clock and temperature series, and the other GPUs' SM clock series."""
    c = doc.root_cause.culprit
    gpu = canonical_pci(c.gpu) if c.gpu else None
    if gpu is None:
        return [], []

    def mine(s: GpuSeries) -> bool:
        return (canonical_pci(s.gpu) or s.gpu) == gpu and (c.node is None or s.host is None or s.host == c.node)

    own = [s for s in series if s.metric in (SM_CLOCK, GPU_TEMP) and s.samples and mine(s)]
    return own, [s for s in series if s.metric == SM_CLOCK and s.samples and not mine(s)]


def _draw_telemetry(ax: Axes, own: list[GpuSeries], peers: list[GpuSeries], axis: _Axis) -> None:
    def xy(s: GpuSeries) -> tuple[list[float], list[float]]:
        kept = [p for p in s.samples if axis.lo <= axis.x(p.time) <= axis.data_hi]
        return [axis.x(p.time) for p in kept], [p.value for p in kept]

    clock = next((s for s in own if s.metric == SM_CLOCK), None)
    temp = next((s for s in own if s.metric == GPU_TEMP), None)
    if peers:
        buckets: dict[float, list[float]] = {}
        for s in peers:
            for x, v in zip(*xy(s), strict=True):
                buckets.setdefault(round(x), []).append(v)
        xs = sorted(buckets)
        ax.plot(xs, [median(buckets[x]) for x in xs], color=GREY, lw=2, ls="--", label="other GPUs, SM clock")
    if clock is not None:
        ax.plot(*xy(clock), color=RED, lw=2.5, label="culprit GPU, SM clock")
    ax.set_ylabel("MHz", fontsize=11)
    if temp is not None:
        tw = ax.twinx()
        tw.plot(*xy(temp), color=TEMP, lw=1.6)
        tw.set_ylabel("°C", fontsize=11, color=TEMP)
        tw.tick_params(labelsize=9, colors=TEMP)
        tw.spines["top"].set_visible(False)
    ax.legend(loc="lower left", fontsize=10, frameon=False, ncols=2)
    ax.tick_params(labelsize=9)
    ax.spines["top"].set_visible(False)
    ax.set_xlim(axis.lo, axis.hi)


def _time_ticks(ax: Axes, axis: _Axis) -> None:
    assert axis.ref is not None
    width = axis.data_hi - axis.lo
    step = next((s for s in _STEPS if width / s <= 5), _STEPS[-1])
    first = math.ceil((axis.ref.timestamp() + axis.lo) / step) * step - axis.ref.timestamp()
    ticks = [first + k * step for k in range(int((axis.data_hi - first) // step) + 1)]
    fmt = "%H:%M:%S" if step < 60 else "%H:%M"
    ax.set_xticks(ticks, [f"{axis.ref + timedelta(seconds=t):{fmt}}" for t in ticks])
    ax.set_xlabel(f"time (UTC), {axis.ref:%Y-%m-%d}", fontsize=12)
    ax.tick_params(axis="x", labelsize=12)


def _verdict(doc: DiagnosisDocument) -> tuple[str, str]:
    root = doc.root_cause
    title = _short(load_catalogue().class_title(root.class_), 48)
    head = "NO ROOT CAUSE FOUND" if root.class_ == "unknown" else f"ROOT CAUSE: {title}"
    c = root.culprit
    bits = [c.node or "", f"GPU {c.gpu}" if c.gpu else "", f"rank {c.rank}" if c.rank is not None else ""]
    t = from_iso(root.time)
    bits += [f"{t:%Y-%m-%d %H:%M:%S} UTC" if t else "time unknown", f"confidence {root.confidence:.0%}"]
    return head, " · ".join(b for b in bits if b)


def render_timeline(doc: DiagnosisDocument, out: Path, *, series: list[GpuSeries] | None = None) -> Path:
    """Draw the incident timeline to ``out`` (PNG; its directory is created) and return ``out``.

    :param series: GPU telemetry (the scan's ``ScanResult.series``); the culprit GPU's SM clock and
        temperature are drawn under the timeline when the culprit GPU is known and has samples
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # only when drawing: a slow import
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = _rows(doc)
    lanes = _lanes(doc, rows)
    axis = _axis(doc, lanes)
    own, peers = _telemetry(series or [], doc) if axis.timed else ([], [])
    fig = Figure(figsize=SIZE, dpi=DPI, facecolor=BG)
    FigureCanvasAgg(fig)
    top = 0.69 if len({x.title for x in lanes if not x.teardown}) > 2 else 0.73
    if own:
        grid = fig.add_gridspec(2, 1, height_ratios=[3.2, 1.2], hspace=0.1, left=0.15, right=0.94, top=top, bottom=0.1)
        ax = fig.add_subplot(grid[0])
        tax: Axes | None = fig.add_subplot(grid[1], sharex=ax)
    else:
        ax, tax = fig.add_subplot(fig.add_gridspec(1, 1, left=0.15, right=0.97, top=top, bottom=0.12)[0]), None
    head, sub = _verdict(doc)
    colour = INK if doc.root_cause.class_ == "unknown" else RED
    for text, y, size, weight, ink in ((head, 0.975, 24, "bold", colour), (sub, 0.885, 15, "normal", INK)):
        drawn = fig.text(0.015, y, text, ha="left", va="top", fontsize=size, fontweight=weight, color=ink)
        wide = drawn.get_window_extent().width / (SIZE[0] * DPI * 0.97)
        if wide > 1:  # shrink to fit rather than cut the verdict off
            drawn.set_fontsize(size / wide)
    row = _culprit_row(doc, rows)
    _draw_rows(ax, rows, row)
    _draw_lanes(ax, lanes, axis, rows)
    _draw_marks(ax, doc, lanes, axis, row, rows.n)
    ax.set_xlim(axis.lo, axis.hi)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if tax is not None:
        _draw_telemetry(tax, own, peers, axis)
        ax.tick_params(axis="x", labelbottom=False)
    if axis.timed:
        _time_ticks(tax if tax is not None else ax, axis)
    else:
        ax.set_xticks([])
        ax.set_xlabel("times not aligned: events shown in order", fontsize=13, color=INK)
    tear = [x for x in lanes if x.teardown]
    keys = [x for x in lanes if not x.teardown]
    keys += [_Lane("teardown", sum(x.count for x in tear), [], None, None, True)] if tear else []
    names = [f"{_short(x.title)} ×{x.count:,}" + (" (earlier)" if _earlier(x, axis) else "") for x in keys]
    handles = [Patch(label=name, **_style(x)) for x, name in zip(keys, names, strict=True)]
    if handles:
        fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.01, 0.83), ncols=3, fontsize=12, frameon=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=DPI, facecolor=BG, metadata={"Software": None})
    return out
