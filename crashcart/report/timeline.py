"""Report stage: a ``DiagnosisDocument`` (and optional GPU telemetry) -> ``timeline.png``.

Rows are the culprit (its own labelled row, with the root cause as a star) and bands of ranks that behaved
alike (one row each, with a count), whatever the job's size; UTC time on x (event order when no time is
known), one strip per symptom class in every row it touches, lines without a clock of their own in a "no
clock" column, markers at the edge for events outside the window, and the culprit GPU's SM clock and
temperature in a small panel. Matplotlib Agg, fixed size and DPI, no timestamps in the file, so the same
input gives the same bytes. Writes one file.
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
    from matplotlib.figure import Figure

from crashcart.models import DiagnosisDocument, DocSymptom
from crashcart.report.reading import NOT_A_FAILURE
from crashcart.report.spans import _dur, _short, ranges
from crashcart.report.words import ROOT_UNKNOWN, class_title
from crashcart.scan.telemetry import GPU_TEMP, SM_CLOCK, GpuSeries
from crashcart.text.clock import from_iso
from crashcart.text.gpuid import canonical_pci

SIZE, DPI = (10.0, 5.625), 120  # 1200 x 675 px: a Slack preview shows it ~360 px wide
MAX_BANDS, MAX_LANES = 5, 4  # bands of alike ranks besides the culprit's row; coloured symptom classes
GAP = timedelta(minutes=35)  # events further apart than this (more than an NCCL timeout) leave the window
RED, INK, GREY, BG, TEARDOWN = "#d7191c", "#111111", "#8c8c8c", "#ffffff", "#9e9e9e"
PALETTE = ["#2b83ba", "#7b3294", "#1a9641", "#a6611a"]  # colour-blind-safe, none red or orange
TEMP, PEERS = "#e66101", "#555555"  # telemetry: the culprit's temperature (orange), the other GPUs (dark grey)
_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400]


@dataclass
class _Row:
    label: str
    ranks: set[int]
    culprit: bool = False
    nodes: set[str] = field(default_factory=set)  # a node row (no rank known) or a job-wide row (empty)


@dataclass
class _Lane:
    title: str
    count: int
    rows: list[int]
    start: datetime | None
    end: datetime | None
    untimed: int = 0
    teardown: bool = False
    color: str = TEARDOWN


@dataclass
class _Axis:
    """x is seconds since ``ref`` (timed) or event order (not timed); ``gutter`` holds lines without a clock."""

    timed: bool
    lo: float
    hi: float
    ref: datetime | None = None
    gutter: tuple[float, float] | None = None

    @property
    def data_hi(self) -> float:
        return self.gutter[0] if self.gutter else self.hi

    def x(self, t: datetime) -> float:
        assert self.ref is not None
        return (t - self.ref).total_seconds()

    def where(self, t: datetime) -> int:
        """-1 before the window, 0 inside, 1 after."""
        x = self.x(t)
        return -1 if x < self.lo else 1 if x > self.data_hi else 0


def _ranges(values: Sequence[int], limit: int = 22) -> str:
    return ranges(values, limit)


# --- what to draw ------------------------------------------------------------------------------------------


def _node_of(doc: DiagnosisDocument) -> dict[int, str]:
    return {int(r): str(i["node"]) for r, i in doc.topology.items() if r.isdigit() and i.get("node")}


def _touches(s: DocSymptom, rank: int, node_of: dict[int, str]) -> bool:
    return rank in s.ranks if s.ranks else node_of.get(rank) in s.nodes


def _rows(doc: DiagnosisDocument, groups: list[list[DocSymptom]]) -> list[_Row]:
    """The culprit's own row first, then bands of ranks that printed the same kinds of line, largest first."""
    node_of = _node_of(doc)
    c = doc.root_cause.culprit
    ranks = set(node_of) | {r for g in groups for s in g for r in s.ranks}
    ranks |= {c.rank} if c.rank is not None else set()
    rows: list[_Row] = []
    if c.rank is not None:
        gpu = c.gpu.removeprefix("0000:") if c.gpu else None
        where = " · ".join(x for x in (c.node or node_of.get(c.rank), f"GPU {gpu}" if gpu else None) if x)
        rows.append(_Row(f"rank {c.rank} (culprit)" + (f"\n{where}" if where else ""), {c.rank}, culprit=True))
    elif c.node:
        mine = {r for r, n in node_of.items() if n == c.node}
        rows.append(_Row(f"{c.node}\n(culprit node)", mine, culprit=True, nodes={c.node}))
    taken = set().union(*(r.ranks for r in rows)) if rows else set()
    bands: dict[tuple[int, ...], list[int]] = {}
    for r in sorted(ranks - taken):
        key = tuple(i for i, g in enumerate(groups) if any(_touches(s, r, node_of) for s in g))
        bands.setdefault(key, []).append(r)
    ordered = sorted(bands.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    if len(ordered) > MAX_BANDS:
        rest = [r for _, rs in ordered[MAX_BANDS - 1 :] for r in rs]
        ordered = [*ordered[: MAX_BANDS - 1], ((-1,), sorted(rest))]
    for key, members in ordered:
        nodes = {node_of[r] for r in members if r in node_of}
        on = f" on {next(iter(nodes))}" if len(nodes) == 1 else f" on {len(nodes)} nodes" if nodes else ""
        if len(members) == 1:
            rows.append(_Row(f"rank {members[0]}{on}" + (" (no error line)" if key == () else ""), set(members)))
            continue
        what = "other ranks" if key == (-1,) else "ranks"
        quiet = " (no error line)" if key == () else ""
        rows.append(_Row(f"{len(members):,} {what}{on}{quiet}\n{_ranges(members)}", set(members)))
    if not rows or any(not s.ranks and not s.nodes for g in groups for s in g):
        rows.append(_Row("job-wide\n(no rank named)", set()))
    return rows


def _hits(row: _Row, s: DocSymptom, node_of: dict[int, str]) -> bool:
    if row.ranks:
        return any(_touches(s, r, node_of) for r in row.ranks)
    if row.nodes:  # a culprit node whose ranks are not known
        return bool(row.nodes & set(s.nodes))
    return not s.ranks and not s.nodes  # the job-wide row


def _lanes(doc: DiagnosisDocument) -> list[tuple[_Lane, list[DocSymptom]]]:
    """Symptom classes (four in colour, the rest merged into a grey one), then the teardown classes merged
    into one hatched lane; benign lines are not drawn. Each lane keeps the symptom groups it stands for."""

    def lane(
        title: str, members: list[DocSymptom], color: str, teardown: bool = False
    ) -> tuple[_Lane, list[DocSymptom]]:
        firsts = [t for s in members if (t := from_iso(s.first_time))]
        lasts = [t for s in members for t in (from_iso(s.last_time), from_iso(s.first_time)) if t]
        untimed = sum(s.untimed or (s.count if not s.first_time else 0) for s in members)
        count = sum(s.count for s in members)
        made = _Lane(title, count, [], min(firsts, default=None), max(lasts, default=None), untimed, teardown, color)
        return made, members

    failing = [s for s in doc.symptoms if s.kind not in {"benign", "teardown"}]
    out = [lane(class_title(s.class_), [s], c) for s, c in zip(failing[:MAX_LANES], PALETTE, strict=False)]
    if rest := failing[MAX_LANES:]:
        out.append(lane(f"{len(rest)} more kinds", rest, GREY))
    if tear := [s for s in doc.symptoms if s.kind == "teardown"]:
        out.append(lane("teardown", tear, TEARDOWN, teardown=True))
    return out


def _root_time(doc: DiagnosisDocument) -> datetime | None:
    rc = doc.root_cause
    if rc.class_ in NOT_A_FAILURE:
        return None
    return from_iso(rc.time) if rc.time_trusted else from_iso(doc.impact.fault)


def _axis(doc: DiagnosisDocument, lanes: list[_Lane]) -> _Axis:
    """The window: the cluster of event times (gaps <= GAP) holding the root cause; the rest is off-chart."""
    root = _root_time(doc)
    raw = [root, *(t for x in lanes for t in (x.start, x.end))]
    times = sorted({t for t in raw if t is not None})
    needs_gutter = any(x.untimed for x in lanes) or (root is None and doc.root_cause.class_ not in NOT_A_FAILURE)
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
    ref, lo, hi = pick[0], -span * 0.08, (pick[-1] - pick[0]).total_seconds() + span * 0.08
    gutter = (hi, hi + (hi - lo) * 0.12) if needs_gutter else None
    return _Axis(True, lo, gutter[1] if gutter else hi, ref, gutter)


# --- drawing -----------------------------------------------------------------------------------------------


def _style(lane: _Lane) -> dict[str, Any]:
    alpha, edge, hatch = (0.5, "#444444", "///") if lane.teardown else (0.95, lane.color, None)
    return {"facecolor": lane.color, "alpha": alpha, "hatch": hatch, "edgecolor": edge, "lw": 0.5}


def _draw_rows(ax: Axes, rows: list[_Row]) -> None:
    for i, row in enumerate(rows):
        if row.culprit:
            ax.axhspan(i + 0.04, i + 0.96, color=RED, alpha=0.10, zorder=1, lw=0)
        elif i % 2:
            ax.axhspan(i, i + 1, color="#f3f3f3", zorder=0, lw=0)
    ax.set_ylim(len(rows) + 0.05, -0.05)  # the culprit on top
    ax.set_yticks([i + 0.5 for i in range(len(rows))], [r.label for r in rows])
    ax.tick_params(axis="y", labelsize=10, length=0)
    for label, row in zip(ax.get_yticklabels(), rows, strict=True):
        if row.culprit:
            label.set_color(RED)
            label.set_fontweight("bold")


def _draw_lanes(ax: Axes, lanes: list[_Lane], axis: _Axis) -> list[str]:
    """One strip per lane in each row it touches; returns notes on what lies outside the window."""
    weights = [0.6 if x.teardown else 1.0 for x in lanes]
    unit = 0.8 / max(sum(weights), 1.0)
    offsets = [0.1 + unit * sum(weights[:i]) for i in range(len(lanes))]
    min_w = (axis.hi - axis.lo) * 0.012
    off: list[str] = []
    for i, lane in enumerate(lanes):
        ys = [r + offsets[i] for r in lane.rows]
        h = unit * weights[i] * 0.85
        if not ys:
            continue
        style = _style(lane)
        if not axis.timed:
            ax.barh(ys, 0.7, left=i + 1.15, height=h, align="edge", zorder=3, **style)
            continue
        if lane.untimed and axis.gutter is not None:
            g0, g1 = axis.gutter
            ax.barh(ys, (g1 - g0) * 0.6, left=g0 + (g1 - g0) * 0.2, height=h, align="edge", zorder=3, **style)
        if lane.start is None:
            continue
        end = lane.end or lane.start
        a, b = axis.where(lane.start), axis.where(end)
        left = min(max(axis.x(lane.start), axis.lo), axis.data_hi)
        right = min(max(axis.x(end), axis.lo), axis.data_hi)
        if a == b != 0:  # wholly outside: a marker at the edge it lies beyond
            edge = axis.lo if a < 0 else axis.data_hi
            gap = axis.x(lane.start if a > 0 else end) - (axis.lo if a < 0 else axis.data_hi)
            marker = "<" if a < 0 else ">"
            ax.scatter([edge] * len(ys), [y + h / 2 for y in ys], marker=marker, s=90, color=lane.color, zorder=9)
            ax.scatter(
                [edge] * len(ys),
                [y + h / 2 for y in ys],
                marker=marker,
                s=90,
                facecolor="none",
                edgecolors=INK,
                lw=0.6,
                zorder=9,
                clip_on=False,
            )
            side = "earlier" if a < 0 else "later"
            off.append(f"{'◀' if a < 0 else '▶'} {_short(lane.title, 30)}: {_dur(gap)} {side}")
            continue
        ax.barh(ys, max(right - left, min_w), left=left, height=h, align="edge", zorder=3, **style)
    return off


def _note(ax: Axes, x: float, y: float, text: str, ha: str, va: str = "bottom", color: str = INK) -> None:
    box = {"boxstyle": "round,pad=0.15", "fc": BG, "ec": "none", "alpha": 0.9}
    ax.text(x, y, text, transform=ax.get_xaxis_transform(), ha=ha, va=va, fontsize=10, color=color, zorder=15, bbox=box)


def _draw_marks(ax: Axes, doc: DiagnosisDocument, lanes: list[_Lane], axis: _Axis, culprit: int | None) -> None:
    root_t = _root_time(doc)
    if axis.gutter is not None:
        ax.axvspan(*axis.gutter, color="#ececec", zorder=0, lw=0)
        _note(ax, sum(axis.gutter) / 2, 0.995, "no clock", "center", "top", color=INK)
    starts = [x.start for x in lanes if not x.teardown and x.start and axis.timed and axis.where(x.start) == 0]
    first = min(starts, default=None)
    if first is not None:
        xf = axis.x(first)
        ax.axvline(xf, color=INK, ls="--", lw=1.4, zorder=6)
        text = "first symptom"
        if root_t is not None and first < root_t:
            ahead = _dur((root_t - first).total_seconds())
            text += f": stamped {ahead} before the root cause (the two logs' clocks differ)"
        elif root_t is not None:
            text += f", {_dur((first - root_t).total_seconds())} after the root cause"
        frac = (xf - axis.lo) / (axis.hi - axis.lo)
        _note(ax, xf, 1.01, text, "left" if frac < 0.3 else "right" if frac > 0.7 else "center")
    if doc.root_cause.class_ in NOT_A_FAILURE:
        return
    y = culprit + 0.5 if culprit is not None else 0.5
    if not axis.timed:
        x = 0.5
    elif root_t is not None and axis.where(root_t) == 0:
        x = axis.x(root_t)
    elif axis.gutter is not None:  # the root's line has no clock of its own
        x = sum(axis.gutter) / 2
    else:
        x = axis.lo
    ax.scatter([x], [y], marker="*", s=650, color=RED, edgecolors=INK, linewidths=1.2, zorder=20)
    flip = (x - axis.lo) > (axis.hi - axis.lo) * 0.55
    label: dict[str, Any] = {"ha": "right" if flip else "left", "va": "center", "fontsize": 12, "fontweight": "bold"}
    box = {"boxstyle": "round,pad=0.2", "fc": BG, "ec": RED, "lw": 1.5}
    at = (-16 if flip else 16, 0)
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


def _inside(s: GpuSeries, axis: _Axis) -> tuple[list[float], list[float]]:
    kept = [p for p in s.samples if axis.lo <= axis.x(p.time) <= axis.data_hi]
    return [axis.x(p.time) for p in kept], [p.value for p in kept]


def _draw_telemetry(ax: Axes, own: list[GpuSeries], peers: list[GpuSeries], axis: _Axis) -> None:
    clock = next((s for s in own if s.metric == SM_CLOCK), None)
    temp = next((s for s in own if s.metric == GPU_TEMP), None)
    handles: list[Any] = []
    if peers:
        buckets: dict[float, list[float]] = {}
        for s in peers:
            for x, v in zip(*_inside(s, axis), strict=True):
                buckets.setdefault(round(x), []).append(v)
        enough = max(1, len(peers) // 2)  # a median of a few stragglers' last samples is not "the other GPUs"
        xs = sorted(x for x, vs in buckets.items() if len(vs) >= enough)
        if xs:
            handles += ax.plot(
                xs,
                [median(buckets[x]) for x in xs],
                color=PEERS,
                lw=1.8,
                ls="--",
                label="other GPUs, SM clock (median)",
            )
    if clock is not None:
        handles += ax.plot(*_inside(clock, axis), color=RED, lw=2.2, label="culprit GPU, SM clock")
    ax.set_ylabel("MHz", fontsize=10)
    if temp is not None:
        tw = ax.twinx()
        handles += tw.plot(*_inside(temp, axis), color=TEMP, lw=1.6, ls=":", label="culprit GPU, temperature (°C)")
        tw.set_ylabel("°C", fontsize=10, color=TEMP)
        tw.tick_params(labelsize=9, colors=TEMP)
        tw.spines["top"].set_visible(False)
    if handles:  # above the panel, never over its lines
        ax.legend(
            handles=handles,
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0),
            fontsize=9,
            frameon=False,
            ncols=3,
            borderaxespad=0.1,
        )
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
    ax.set_xlabel(f"time (UTC), {axis.ref:%Y-%m-%d}", fontsize=11)
    ax.tick_params(axis="x", labelsize=10)


def _verdict(doc: DiagnosisDocument) -> tuple[str, str]:
    root = doc.root_cause
    if root.class_ in NOT_A_FAILURE:
        head = "NO FAILURE FOUND" if root.class_ == "no_failure" else ROOT_UNKNOWN.upper()
    else:
        head = f"ROOT CAUSE: {_short(class_title(root.class_), 48)}"
    c = root.culprit
    bits = [c.node or "", f"GPU {c.gpu}" if c.gpu else "", f"rank {c.rank}" if c.rank is not None else ""]
    t = _root_time(doc)
    if root.class_ not in NOT_A_FAILURE:
        bits.append(f"{t:%Y-%m-%d %H:%M:%S} UTC" if t else "time unknown (no clock on its line)")
    bits.append(f"confidence {root.confidence:.0%}")
    return head, " · ".join(b for b in bits if b)


def figure(doc: DiagnosisDocument, *, series: list[GpuSeries] | None = None) -> Figure:
    """The timeline as a matplotlib Figure (``render_timeline`` saves it)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # only when drawing: a slow import
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    grouped = _lanes(doc)
    rows = _rows(doc, [g for _, g in grouped])
    node_of = _node_of(doc)
    for lane, members in grouped:
        lane.rows = [i for i, row in enumerate(rows) if any(_hits(row, s, node_of) for s in members)]
    lanes = [lane for lane, _ in grouped]
    axis = _axis(doc, lanes)
    own, peers = _telemetry(series or [], doc) if axis.timed else ([], [])
    if not any(len(_inside(s, axis)[0]) >= 2 for s in own):
        own, peers = [], []  # nothing to draw inside the window
    fig = Figure(figsize=SIZE, dpi=DPI, facecolor=BG)
    FigureCanvasAgg(fig)
    keys = [x for x in lanes if not x.teardown] + [x for x in lanes if x.teardown]
    top = 0.70 if len(keys) + (axis.gutter is not None) > 3 else 0.75
    longest = max((len(line) for r in rows for line in r.label.split("\n")), default=10)
    left = min(0.34, 0.03 + longest * 0.0082)  # room for the longest row label, never cut at the edge
    if own:
        grid = fig.add_gridspec(2, 1, height_ratios=[3.0, 1.1], hspace=0.32, left=left, right=0.93, top=top, bottom=0.1)
        ax = fig.add_subplot(grid[0])
        tax: Axes | None = fig.add_subplot(grid[1], sharex=ax)
    else:
        ax, tax = fig.add_subplot(fig.add_gridspec(1, 1, left=left, right=0.97, top=top, bottom=0.11)[0]), None
    head, sub = _verdict(doc)
    colour = INK if doc.root_cause.class_ in NOT_A_FAILURE else RED
    for text, y, size, weight, ink in ((head, 0.975, 22, "bold", colour), (sub, 0.895, 13, "normal", INK)):
        drawn = fig.text(0.015, y, text, ha="left", va="top", fontsize=size, fontweight=weight, color=ink)
        wide = drawn.get_window_extent().width / (SIZE[0] * DPI * 0.97)
        if wide > 1:  # shrink to fit rather than cut the verdict off
            drawn.set_fontsize(size / wide)
    culprit = next((i for i, r in enumerate(rows) if r.culprit), None)
    _draw_rows(ax, rows)
    off = _draw_lanes(ax, lanes, axis)
    _draw_marks(ax, doc, lanes, axis, culprit)
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
        ax.set_xlabel("no line has a clock CrashCart trusts: events shown in order", fontsize=11, color=INK)
    names = [f"{_short(x.title)} ×{x.count:,}" for x in keys]
    names = [
        n.replace("teardown", "teardown (shutting down)") if x.teardown else n for n, x in zip(names, keys, strict=True)
    ]
    handles: list[Any] = [Patch(label=name, **_style(x)) for x, name in zip(keys, names, strict=True)]
    if axis.gutter is not None:
        handles.append(
            Patch(label="no clock: lines without a time of their own", facecolor="#ececec", edgecolor="#bbbbbb")
        )
    if handles:
        fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.01, 0.85), ncols=3, fontsize=10, frameon=False)
    if off:
        fig.text(0.015, 0.015, "off the chart:  " + "   ".join(off), fontsize=9.5, color=INK, ha="left", va="bottom")
    return fig


def render_timeline(doc: DiagnosisDocument, out: Path, *, series: list[GpuSeries] | None = None) -> Path:
    """Draw the incident timeline to ``out`` (PNG; its directory is created) and return ``out``.

    :param series: GPU telemetry (the scan's ``ScanResult.series``); the culprit GPU's SM clock and
        temperature are drawn under the timeline when the culprit GPU is known and has samples in the window
    """
    fig = figure(doc, series=series)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=DPI, facecolor=BG, metadata={"Software": None})
    return out
