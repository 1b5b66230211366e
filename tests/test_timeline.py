"""Timeline picture: renders for small and huge jobs, with and without times and telemetry; deterministic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib import image

from crashcart.models import DiagnosisDocument
from crashcart.report.timeline import figure, render_timeline
from crashcart.scan.telemetry import GPU_TEMP, SM_CLOCK, GpuSeries, Sample

T0 = datetime(2026, 11, 30, 2, 13, 7, tzinfo=UTC)
PNG = b"\x89PNG\r\n\x1a\n"


def iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat().replace("+00:00", "Z")


def make_doc(
    ranks: int, per_node: int = 8, *, timed: bool = True, culprit: int = 27, cls: str = "gpu_fallen_off_bus"
) -> DiagnosisDocument:
    """A GPU on ``culprit``'s node falls off the bus; every other rank times out 10 min later; teardown follows."""
    node = lambda r: f"gpu-node-{r // per_node:03d}"  # noqa: E731
    gpu = lambda r: f"0000:{0x18 + r % per_node:02x}:00"  # noqa: E731
    t = (lambda d: T0 + d) if timed else (lambda d: None)
    others = [r for r in range(ranks) if r != culprit]
    nodes = sorted({node(r) for r in range(ranks)})
    symptoms: list[dict[str, Any]] = [
        {
            "class": "nccl_watchdog_timeout",
            "summary": "timeouts",
            "count": 2 * len(others),
            "ranks": others,
            "nodes": nodes,
            "first_time": iso(t(timedelta(minutes=10))),
            "last_time": iso(t(timedelta(minutes=10, seconds=2))),
            "citations": [],
        },
        {
            "class": "nccl_remote_peer_failure",
            "summary": "peer gone",
            "count": 3,
            "ranks": others[:3],
            "nodes": [node(others[0])],
            "first_time": iso(t(timedelta(minutes=10, seconds=1))),
            "last_time": None,
            "citations": [],
        },
        {
            "class": "torchelastic_childfailed_summary",
            "summary": "summary",
            "count": len(nodes),
            "ranks": [],
            "nodes": nodes,
            "first_time": iso(t(timedelta(minutes=10, seconds=5))),
            "last_time": iso(t(timedelta(minutes=10, seconds=6))),
            "citations": [],
        },
        {
            "class": "python_exception_rank_crash",
            "summary": "untimed",
            "count": 1,
            "ranks": [0],
            "nodes": [node(0)],
            "first_time": None,
            "last_time": None,
            "citations": [],
        },
    ]
    timeline = [
        {
            "time": iso(t(timedelta(0))),
            "file": "dmesg.log",
            "line": 1,
            "text": "Xid 79",
            "role": "root_candidate",
            "class": cls,
        },
        {
            "time": iso(t(timedelta(minutes=10, seconds=5))),
            "file": "launcher.log",
            "line": 9,
            "text": "ChildFailedError",
            "role": "teardown",
            "class": "torchelastic_childfailed_summary",
        },
    ]
    return DiagnosisDocument.model_validate(
        {
            "incident_id": "cc-timeline",
            "job_id": "42",
            "engine": "offline",
            "bundle": {"sha256": "0" * 64, "files": 1, "bytes": 1},
            "root_cause": {
                "class": cls,
                "summary": "s",
                "culprit": {"node": node(culprit), "rank": culprit, "gpu": gpu(culprit)},
                "time": iso(t(timedelta(0))),
                "confidence": 0.9,
                "citations": [],
            },
            "contributing": [],
            "symptoms": symptoms,
            "hypotheses": [],
            "timeline": timeline,
            "runbook": {"steps": []},
            "stats": {"files": 1, "lines": 1, "bytes": 1, "findings": 1, "groups": 1, "seconds": 0.1},
            "topology": {str(r): {"node": node(r), "gpu": gpu(r), "local_rank": r % per_node} for r in range(ranks)},
        }
    )


def check_png(path: Path, min_colours: int = 12) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG) and len(data) > 10_000
    pixels = (image.imread(str(path))[..., :3] * 255).astype(np.uint32)
    assert pixels.shape[:2] == (675, 1200)
    packed = (pixels[..., 0] << 16) | (pixels[..., 1] << 8) | pixels[..., 2]
    assert len(np.unique(packed)) >= min_colours  # not blank: text, bars, the red star, grey bands


@pytest.mark.parametrize(("ranks", "per_node", "culprit"), [(8, 4, 5), (1024, 8, 615)], ids=["8-ranks", "1024-ranks"])
def test_renders_small_and_huge_jobs(tmp_path: Path, ranks: int, per_node: int, culprit: int) -> None:
    out = render_timeline(make_doc(ranks, per_node, culprit=culprit), tmp_path / "sub" / "timeline.png")
    assert out == tmp_path / "sub" / "timeline.png"
    check_png(out)
    pixels = image.imread(str(out))[..., :3]
    red = (np.abs(pixels - np.array([0xD7, 0x19, 0x1C]) / 255).sum(axis=-1) < 0.05).sum()
    assert red > 500  # the verdict title and the root-cause star are drawn in the root red


def _drawn(fig: Any) -> tuple[list[Any], Any]:
    """Every text artist of a drawn figure (tick labels included), and the renderer that measured them."""
    from matplotlib.text import Text

    fig.canvas.draw()
    texts = [t for t in [*fig.texts, *fig.findobj(Text)] if t.get_visible() and t.get_text()]
    return texts, fig.canvas.get_renderer()


@pytest.mark.parametrize(
    ("ranks", "per_node", "culprit"),
    [(8, 4, 5), (64, 8, 43), (512, 8, 345), (1024, 8, 691)],
    ids=["8-ranks", "64-ranks", "512-ranks", "1024-ranks"],
)
def test_the_culprit_has_its_own_labelled_row_and_nothing_overlaps(ranks: int, per_node: int, culprit: int) -> None:
    doc = make_doc(ranks, per_node, culprit=culprit)
    fig = figure(doc)
    texts, renderer = _drawn(fig)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0].startswith(f"rank {culprit} (culprit)\ngpu-node-{culprit // per_node:03d}")
    assert 2 <= len(labels) <= 7  # a band per kind of behaviour, not a row per rank
    others = ranks - 1
    assert any(label.startswith(f"{others - 3:,} ranks") for label in labels)  # the big band carries its count
    boxes = [t.get_window_extent(renderer) for t in ax.get_yticklabels()]
    assert all(not a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert all(b.x0 >= 0 for b in boxes)  # no row label is cut at the left edge
    legend = fig.legends[0].get_window_extent(renderer)
    assert legend.y0 >= ax.get_window_extent(renderer).y1  # the legend sits above the chart, never on it
    assert "ROOT CAUSE" in {t.get_text() for t in texts}


def test_events_outside_the_window_get_a_marker_and_plain_words(tmp_path: Path) -> None:
    doc = make_doc(8, 4, culprit=5)
    late = doc.symptoms[0].model_copy(
        update={"first_time": iso(T0 + timedelta(hours=3)), "last_time": iso(T0 + timedelta(hours=3, seconds=5))}
    )
    doc = doc.model_copy(update={"symptoms": [late, *doc.symptoms[1:]]})
    texts, _ = _drawn(figure(doc))
    words = " ".join(t.get_text() for t in texts)
    assert "off the chart:" in words and "NCCL collective timed out: 2.8 h later" in words
    assert "clocks?" not in words and "first symptom, 10 min after the root cause" in words


def test_same_input_same_bytes(tmp_path: Path) -> None:
    doc = make_doc(64, 8)
    a = render_timeline(doc, tmp_path / "a.png").read_bytes()
    b = render_timeline(doc, tmp_path / "b.png").read_bytes()
    assert a == b
    assert b"Software" not in a and b"Creation Time" not in a


def test_missing_times_are_laid_out_in_order(tmp_path: Path) -> None:
    timed = render_timeline(make_doc(8, 4), tmp_path / "timed.png").read_bytes()
    untimed = render_timeline(make_doc(8, 4, timed=False), tmp_path / "untimed.png")
    check_png(untimed)
    assert untimed.read_bytes() != timed


def test_an_undecided_or_empty_document_still_renders(tmp_path: Path) -> None:
    doc = make_doc(8, 4, cls="unknown")
    check_png(render_timeline(doc, tmp_path / "unknown.png"))
    bare = doc.model_copy(update={"symptoms": [], "timeline": [], "topology": {}})
    bare = bare.model_copy(
        update={
            "root_cause": bare.root_cause.model_copy(
                update={"culprit": bare.root_cause.culprit.model_copy(update={"rank": None, "node": None})}
            )
        }
    )
    check_png(render_timeline(bare, tmp_path / "bare.png"), min_colours=4)


def test_the_culprit_gpu_telemetry_is_drawn(tmp_path: Path) -> None:
    doc = make_doc(16, 8, culprit=5)

    def series(gpu: str, metric: str, values: list[float]) -> GpuSeries:
        samples = [Sample(T0 + timedelta(seconds=30 * i - 60), i + 1, v) for i, v in enumerate(values)]
        return GpuSeries(host="gpu-node-000", gpu=gpu, metric=metric, samples=samples)

    falling = [1980.0 - 60 * i for i in range(24)]
    telemetry = [
        series("0000:1d:00", SM_CLOCK, falling),
        series("0000:1d:00", GPU_TEMP, [70.0 + i for i in range(24)]),
        series("0000:18:00", SM_CLOCK, [1980.0] * 24),
        series("0000:19:00", SM_CLOCK, [1975.0] * 24),
    ]
    plain = render_timeline(doc, tmp_path / "plain.png").read_bytes()
    with_panel = render_timeline(doc, tmp_path / "panel.png", series=telemetry)
    check_png(with_panel)
    assert with_panel.read_bytes() != plain
    other_gpu = render_timeline(doc, tmp_path / "other.png", series=telemetry[2:]).read_bytes()
    assert other_gpu == plain  # no series of the culprit GPU: no panel
    fig = figure(doc, series=telemetry)
    _, renderer = _drawn(fig)
    legend = fig.axes[1].get_legend()
    names = [t.get_text() for t in legend.get_texts()]
    assert names == ["other GPUs, SM clock (median)", "culprit GPU, SM clock", "culprit GPU, temperature (°C)"]
    assert legend.get_window_extent(renderer).y0 >= fig.axes[1].get_window_extent(renderer).y1 - 1  # above its lines
    from matplotlib.colors import to_hex

    lines = {to_hex(line.get_color()) for ax in fig.axes for line in ax.get_lines() if line.get_label()[0] != "_"}
    lanes = {to_hex(h.get_facecolor(), keep_alpha=False) for h in fig.legends[0].legend_handles}
    assert len(lines) == 3 and not lines & lanes  # telemetry colours are their own, never a symptom's
