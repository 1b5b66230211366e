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

SIZE, DPI = (10.0, 5.625), 120  # 1200 x 675 px: a Slack preview shows it ~360 px wide
MAX_ROWS, MAX_LANES, LANE_ROWS = 64, 4, 16  # sub-lanes per row only while rows are tall enough
GAP = timedelta(minutes=35)  # events further apart than this (longer than an NCCL timeout) leave the window
RED, INK, GREY, BG, TEMP = "#d7191c", "#111111", "#8c8c8c", "#ffffff", "#e66101"
PALETTE = ["#2b83ba", "#fdae61", "#7b3294", "#1a9641"]  # colour-blind-safe, all distinct from the root red
TEARDOWN = "#9e9e9e"


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
    teardown: bool
    color: str = TEARDOWN


@dataclass
class _Axis:
    timed: bool
    lo: float
    hi: float
    gutter: tuple[float, float] | None = None  # where untimed events go in a timed plot
    before: bool = False  # some event lies before / after the window
    after: bool = False

    def span(self, start: datetime | None, end: datetime | None, order: int) -> tuple[float, float]:
        """Left edge and width of an event, clipped to the window; ``order`` places it when untimed."""
        if not self.timed:
            return order + 0.15, 0.7
        if start is None:
            assert self.gutter is not None
            return self.gutter[0] + (self.gutter[1] - self.gutter[0]) * 0.15, (self.gutter[1] - self.gutter[0]) * 0.7
        a = min(max(float(mdates.date2num(start)), self.lo), self.data_hi)
        b = min(max(float(mdates.date2num(end or start)), self.lo), self.data_hi)
        return a, b - a

    @property
    def data_hi(self) -> float:
        return self.gutter[0] if self.gutter else self.hi


def _time(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        t = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)


def _short(title: str, limit: int = 30) -> str:
    text = title.split(" (")[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dur(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


# --- what to draw ------------------------------------------------------------------------------------------


def _rows(doc: DiagnosisDocument) -> _Rows:
    topo = {int(r): info for r, info in doc.topology.items() if r.isdigit()}
    culprit = doc.root_cause.culprit
    ranks = (
        set(topo) | {r for s in doc.symptoms for r in s.ranks} | ({culprit.rank} if culprit.rank is not None else set())
    )
    node_of = {r: str(info["node"]) for r, info in topo.items() if info.get("node")}
    nodes = list(dict.fromkeys([node_of[r] for r in sorted(node_of)] + [n for s in doc.symptoms for n in s.nodes]))
    if culprit.node and culprit.node not in nodes:
        nodes.append(culprit.node)
    world = max(ranks) + 1 if ranks else 0
    if world == 0 and not nodes:
        return _Rows(1, {}, {}, [(0.5, "job")], "")
    if 0 < world <= MAX_ROWS:
        members: dict[str, list[int]] = {}
        for r in range(world):
            if r in node_of:
                members.setdefault(node_of[r], []).append(r)
        bands = [(min(rs), max(rs), n) for n, rs in members.items()]
        if len(bands) <= LANE_ROWS:
            ticks = [
                ((lo + hi + 1) / 2, f"{n}\nranks {lo}-{hi}" if hi > lo else f"{n}\nrank {lo}") for lo, hi, n in bands
            ]
        else:
            ticks = [(0.5, "rank 0"), (world - 0.5, f"rank {world - 1}")]
        label = f"{world} ranks" + (f" on {len(members)} nodes" if members else "")
        return _Rows(
            world, {r: r for r in range(world)}, {n: min(rs) for n, rs in members.items()}, ticks, label, bands
        )
    if not nodes:  # many ranks and no host names: bands of ranks
        per = math.ceil(world / MAX_ROWS)
        n = math.ceil(world / per)
        return _Rows(
            n,
            {r: r // per for r in range(world)},
            {},
            [(0.5, "rank 0"), (n - 0.5, f"rank {world - 1}")],
            f"{world:,} ranks, {per} per row",
        )
    per = math.ceil(len(nodes) / MAX_ROWS)
    of_node = {name: i // per for i, name in enumerate(nodes)}
    n = math.ceil(len(nodes) / per)
    label = (
        f"{len(nodes)} nodes" + (f", {world:,} ranks" if world else "") + (f" ({per} nodes per row)" if per > 1 else "")
    )
    ticks = [(0.5, nodes[0]), (n - 0.5, nodes[-1])]
    return _Rows(n, {r: of_node[node_of[r]] for r in node_of}, of_node, ticks, label)


def _role(doc: DiagnosisDocument, class_id: str) -> str:
    roles = [e.role for e in doc.timeline if e.class_ == class_id]
    if roles:
        return max(sorted(set(roles)), key=roles.count)
    info = load_catalogue().classes.get(class_id)
    return info.default_role if info else "cascade"


def _merge(title: str, lanes: list[_Lane], teardown: bool, color: str) -> _Lane:
    times = [t for x in lanes for t in (x.start, x.end) if t]
    rows = sorted({r for x in lanes for r in x.rows})
    return _Lane(
        title, sum(x.count for x in lanes), rows, min(times, default=None), max(times, default=None), teardown, color
    )


def _lanes(doc: DiagnosisDocument, rows: _Rows) -> list[_Lane]:
    cat = load_catalogue()
    lanes: list[_Lane] = []
    for s in doc.symptoms:
        hit = {rows.of_rank[r] for r in s.ranks if r in rows.of_rank}
        if not hit:
            hit = {rows.of_node[n] for n in s.nodes if n in rows.of_node}
            hit |= {r for lo, hi, n in rows.bands if n in s.nodes for r in range(lo, hi + 1)}
        start = _time(s.first_time)
        lane = _Lane(
            cat.class_title(s.class_),
            s.count,
            sorted(hit) or list(range(rows.n)),
            start,
            _time(s.last_time) or start,
            False,
        )
        lane.teardown = _role(doc, s.class_) == "teardown"
        lanes.append(lane)
    shown = [x for x in lanes if not x.teardown][:MAX_LANES]  # the document lists symptoms heaviest first
    for lane, colour in zip(shown, PALETTE, strict=False):
        lane.color = colour
    if rest := [x for x in lanes if not x.teardown and x not in shown]:
        shown.append(_merge(f"{len(rest)} more symptoms", rest, False, GREY))
    if tear := [x for x in lanes if x.teardown]:
        shown.append(_merge("teardown", tear, True, TEARDOWN))
    return shown


def _axis(doc: DiagnosisDocument, lanes: list[_Lane]) -> _Axis:
    """The time window: the cluster of events around the root cause (events > GAP away are clipped)."""
    root = _time(doc.root_cause.time)
    times = sorted({t for x in lanes for t in (x.start, x.end) if t} | ({root} if root else set()))
    if not times:
        return _Axis(False, -0.3, len(lanes) + 0.8)
    clusters: list[list[datetime]] = []
    for t in times:
        if clusters and t - clusters[-1][-1] <= GAP:
            clusters[-1].append(t)
        else:
            clusters.append([t])
    pick = next((c for c in clusters if root in c), None) or max(reversed(clusters), key=len)
    lo, hi = pick[0], pick[-1]
    pad = timedelta(seconds=max((hi - lo).total_seconds(), 20.0) * 0.06)
    left, right = float(mdates.date2num(lo - pad)), float(mdates.date2num(hi + pad))
    untimed = root is None or any(x.start is None for x in lanes)
    gutter = (right, right + (right - left) * 0.1) if untimed else None
    return _Axis(True, left, gutter[1] if gutter else right, gutter, times[0] < lo, times[-1] > hi)


# --- drawing -----------------------------------------------------------------------------------------------


def _draw_rows(ax: Axes, rows: _Rows, culprit_row: int | None) -> None:
    for k, (lo, hi, _) in enumerate(rows.bands):
        if k % 2:
            ax.axhspan(lo, hi + 1, color="#eeeeee", zorder=0)
    if culprit_row is not None:
        ax.axhspan(culprit_row, culprit_row + 1, color=RED, alpha=0.15, zorder=1, lw=0)
    ax.set_ylim(rows.n, 0)  # rank 0 / the first node on top
    ax.set_yticks([y for y, _ in rows.ticks], [label for _, label in rows.ticks])
    ax.tick_params(axis="y", labelsize=12, length=0)
    if rows.label:
        ax.set_ylabel(rows.label, fontsize=12, color=INK)


def _draw_lanes(ax: Axes, lanes: list[_Lane], axis: _Axis, rows: _Rows) -> None:
    """Few rows: each lane gets its own strip in every row. Many rows: full-height blocks per run of rows,
    the largest drawn first so that rare symptoms stay on top."""
    min_w = (axis.hi - axis.lo) * 0.01
    strips = rows.n <= LANE_ROWS
    h = 0.84 / max(len(lanes), 1)
    order = (
        range(len(lanes))
        if strips
        else sorted(range(len(lanes)), key=lambda i: (not lanes[i].teardown, -len(lanes[i].rows)))
    )
    for z, i in enumerate(order):
        lane = lanes[i]
        left, width = axis.span(lane.start, lane.end, i)
        if strips:
            ys, height = [r + 0.08 + i * h for r in lane.rows], h * 0.9
        else:
            runs = _runs(lane.rows)
            ys, height = [lo for lo, _ in runs], [hi - lo + 1 for lo, hi in runs]
        ax.barh(
            ys,
            max(width, min_w),
            left=left,
            height=height,
            align="edge",
            color=lane.color,
            alpha=0.45 if lane.teardown else 0.95,
            hatch="///" if lane.teardown else None,
            edgecolor="#444444" if lane.teardown else lane.color,
            linewidth=0.5,
            zorder=3 + z * 0.01,
        )


def _runs(rows: Sequence[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for r in sorted(set(rows)):
        if out and r == out[-1][1] + 1:
            out[-1] = (out[-1][0], r)
        else:
            out.append((r, r))
    return out


def _culprit_row(doc: DiagnosisDocument, rows: _Rows) -> int | None:
    c = doc.root_cause.culprit
    if c.rank is not None and c.rank in rows.of_rank:
        return rows.of_rank[c.rank]
    return rows.of_node.get(c.node) if c.node else None


def _draw_marks(
    ax: Axes, doc: DiagnosisDocument, lanes: list[_Lane], axis: _Axis, row: int | None, n_rows: int
) -> None:
    root_t = _time(doc.root_cause.time)
    label_y = 1.005
    if axis.timed and (starts := [x.start for x in lanes if not x.teardown and x.start]):
        first = min(starts)
        xf = float(mdates.date2num(first))
        if axis.lo <= xf <= axis.data_hi:
            ax.axvline(xf, color=INK, ls="--", lw=1.8, zorder=6)
            text = "first symptom"
            if root_t is not None:
                delta = (first - root_t).total_seconds()
                text += f" (root +{_dur(delta)})" if delta >= 0 else f" ({_dur(-delta)} before root: clocks?)"
            ax.text(xf, label_y, text, transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=11)
    if axis.timed and (tears := [x.start for x in lanes if x.teardown and x.start]):
        xt = max(float(mdates.date2num(min(tears))), axis.lo)
        ax.axvspan(xt, axis.data_hi, color=TEARDOWN, alpha=0.12, zorder=0, lw=0)
    if axis.gutter is not None:
        ax.axvspan(*axis.gutter, color="#f4f4f4", zorder=0, lw=0)
        ax.text(
            sum(axis.gutter) / 2,
            -0.045,
            "no time",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="top",
            fontsize=11,
            color=GREY,
        )
    for flag, x, text, ha in (
        (axis.before, axis.lo, "◀ earlier events", "left"),
        (axis.after, axis.data_hi, "later events ▶", "right"),
    ):
        if flag:
            ax.text(
                x,
                0.01,
                text,
                transform=ax.get_xaxis_transform(),
                ha=ha,
                va="bottom",
                fontsize=10,
                color=GREY,
                zorder=12,
            )
    if doc.root_cause.class_ == "unknown":
        return
    y = row + 0.5 if row is not None else n_rows / 2
    left, width = axis.span(root_t, root_t, -1) if axis.timed else (axis.lo + 0.3, 0.0)
    x = left + width / 2
    ax.scatter([x], [y], marker="*", s=1100, color=RED, edgecolors=INK, linewidths=1.5, zorder=20, clip_on=False)
    flip = (x - axis.lo) > (axis.hi - axis.lo) * 0.55
    ax.annotate(
        "ROOT CAUSE",
        (x, y),
        xytext=(-22 if flip else 22, 0),
        textcoords="offset points",
        ha="right" if flip else "left",
        va="center",
        fontsize=16,
        fontweight="bold",
        color=RED,
        zorder=21,
        bbox={"boxstyle": "round,pad=0.25", "fc": BG, "ec": RED, "lw": 2},
    )


def _telemetry(series: Sequence[GpuSeries], doc: DiagnosisDocument) -> tuple[list[GpuSeries], list[GpuSeries]]:
    """The culprit GPU's SM clock and temperature series, and the other GPUs' SM clock series."""
    c = doc.root_cause.culprit
    gpu = canonical_pci(c.gpu) if c.gpu else None
    if gpu is None:
        return [], []

    def mine(s: GpuSeries) -> bool:
        same_host = c.node is None or s.host is None or s.host == c.node
        return (canonical_pci(s.gpu) or s.gpu) == gpu and same_host

    own = [s for s in series if s.metric in (SM_CLOCK, GPU_TEMP) and s.samples and mine(s)]
    peers = [s for s in series if s.metric == SM_CLOCK and s.samples and not mine(s)]
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
        ax.plot(xs, [median(buckets[x]) for x in xs], color=GREY, lw=2, ls="--", label="other GPUs")
    if clock is not None:
        xs2 = [float(mdates.date2num(p.time)) for p in clock.samples]
        ax.plot(xs2, [p.value for p in clock.samples], color=RED, lw=2.5, label="culprit GPU")
        ax.set_ylabel("SM MHz", fontsize=11)
    if temp is not None:
        tw = ax.twinx()
        tw.plot(
            [float(mdates.date2num(p.time)) for p in temp.samples], [p.value for p in temp.samples], color=TEMP, lw=1.8
        )
        tw.set_ylabel("°C", fontsize=11, color=TEMP)
        tw.tick_params(labelsize=9, colors=TEMP)
        tw.spines["top"].set_visible(False)
    ax.legend(loc="lower left", fontsize=10, frameon=False, ncols=2)
    ax.tick_params(labelsize=9)
    ax.spines["top"].set_visible(False)
    ax.set_xlim(axis.lo, axis.hi)


def _verdict(doc: DiagnosisDocument) -> tuple[str, str]:
    root = doc.root_cause
    head = (
        "NO ROOT CAUSE FOUND"
        if root.class_ == "unknown"
        else f"ROOT CAUSE: {_short(load_catalogue().class_title(root.class_), 48)}"
    )
    c = root.culprit
    bits = [c.node or "", f"GPU {c.gpu}" if c.gpu else "", f"rank {c.rank}" if c.rank is not None else ""]
    t = _time(root.time)
    bits += [f"{t:%Y-%m-%d %H:%M:%S} UTC" if t else "time unknown", f"confidence {root.confidence:.0%}"]
    return head, " · ".join(b for b in bits if b)


def render_timeline(doc: DiagnosisDocument, out: Path, *, series: list[GpuSeries] | None = None) -> Path:
    """Draw the incident timeline to ``out`` (PNG, created with its directory) and return ``out``.

    :param series: GPU telemetry (the scan's ``ScanResult.series``); the culprit GPU's SM clock and
        temperature are drawn under the timeline when the culprit GPU is known and has samples
    """
    rows = _rows(doc)
    lanes = _lanes(doc, rows)
    axis = _axis(doc, lanes)
    own, peers = _telemetry(series or [], doc) if axis.timed else ([], [])
    fig = Figure(figsize=SIZE, dpi=DPI, facecolor=BG)
    FigureCanvasAgg(fig)
    top = 0.70 if len(lanes) > 3 else 0.75
    if own:
        grid = fig.add_gridspec(2, 1, height_ratios=[3.2, 1.2], hspace=0.1, left=0.15, right=0.94, top=top, bottom=0.1)
        ax = fig.add_subplot(grid[0])
        tax: Axes | None = fig.add_subplot(grid[1], sharex=ax)
    else:
        ax, tax = fig.add_subplot(fig.add_gridspec(1, 1, left=0.15, right=0.97, top=top, bottom=0.12)[0]), None
    head, sub = _verdict(doc)
    fig.text(
        0.015,
        0.975,
        head,
        ha="left",
        va="top",
        fontsize=24,
        fontweight="bold",
        color=INK if doc.root_cause.class_ == "unknown" else RED,
    )
    fig.text(0.015, 0.885, sub, ha="left", va="top", fontsize=15, color=INK)
    row = _culprit_row(doc, rows)
    _draw_rows(ax, rows, row)
    _draw_lanes(ax, lanes, axis, rows)
    _draw_marks(ax, doc, lanes, axis, row, rows.n)
    ax.set_xlim(axis.lo, axis.hi)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    bottom = tax if tax is not None else ax
    if axis.timed:
        bottom.xaxis.set_major_locator(mdates.AutoDateLocator(tz=UTC, minticks=3, maxticks=6))
        bottom.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))
        bottom.set_xlabel("time (UTC)", fontsize=12)
        ax.tick_params(axis="x", labelsize=12, labelbottom=tax is None)
    else:
        ax.set_xticks([])
        ax.set_xlabel("times not aligned: events shown in order", fontsize=13, color=INK)
    if tax is not None:
        _draw_telemetry(tax, own, peers, axis)
    handles = [
        Patch(
            facecolor=x.color,
            alpha=0.45 if x.teardown else 0.95,
            hatch="///" if x.teardown else None,
            edgecolor="#444444" if x.teardown else x.color,
            label=f"{_short(x.title)} ×{x.count:,}",
        )
        for x in lanes
    ]
    if handles:
        fig.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(0.01, 0.83),
            ncols=3,
            fontsize=12,
            frameon=False,
            handlelength=1.6,
            columnspacing=1.4,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=DPI, facecolor=BG, metadata={"Software": None})
    return out
