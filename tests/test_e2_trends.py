"""Numeric trends (crashcart/reduce/trends.py) and per-rank throughput (crashcart/reduce/throughput.py).

Lines are in the shapes their emitters print: DeepSpeed runtime/fp16/loss_scaler.py and fused_optimizer.py overflow
lines, apex amp's "Gradient overflow.  Skipping step", Megatron-LM training_log's iteration line, DeepSpeed's
ThroughputTimer, torchtitan's step line, tqdm's format_meter.
"""

from __future__ import annotations

import asyncio

from crashcart.models import Finding, RankInfo, Topology
from crashcart.pipeline import diagnose
from crashcart.reduce import throughput, trends
from crashcart.settings import Settings
from tests.kit import finding


def ds_overflow(scale: int, line: int, *, to: int | None = None) -> Finding:
    nxt = max(scale // 2, 1) if to is None else to
    text = (
        "[2024-05-01 10:00:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
        f"step. Attempted loss scale: {scale}, reducing to {nxt}"
    )
    return finding("fp16.overflow_skip", text, line=line)


def megatron(
    it: int,
    line: int,
    *,
    loss: float | None = 2.1,
    scale: float = 4096.0,
    skipped: int = 0,
    grad: float = 1.2,
    ms: float = 1000.0,
    file: str = "train.log",
    rank: int | None = None,
) -> Finding:
    lm = f" lm loss: {loss:.6E} |" if loss is not None else ""
    text = (
        f" [2026-03-01 10:00:00.123456] iteration {it:8d}/   20000 | consumed samples: {it * 512:12d} | elapsed time "
        f"per iteration (ms): {ms:.1f} | learning rate: 1.000000E-04 | global batch size:   512 |{lm} loss scale: "
        f"{scale:.1f} | grad norm: {grad:.3f} | number of skipped iterations: {skipped:3d} | number of nan "
        "iterations:   0 |"
    )
    return finding("progress.iteration_time", text, line=line, file=file, rank=rank)


# ---------------------------------------------------------------------------------------------
# Loss scale


def test_the_loss_scale_halving_to_its_floor_is_a_collapse() -> None:
    run = [ds_overflow(2**k, line=100 - k) for k in range(12, 0, -1)]  # 4096 -> ... -> 2 -> 1
    c = trends.loss_scale_collapse(run)
    assert c is not None and c.class_id == "fp16_loss_scale_overflow"
    assert c.first.evidence[0] == run[-1].evidence[0]  # "reducing to 1"
    assert run[0].evidence[0] in [f.evidence[0] for f in c.findings]  # where the run began
    assert c.penalties  # an inference: never shown as high confidence


def test_a_scale_pinned_at_its_configured_minimum_is_the_floor() -> None:
    pinned = [ds_overflow(s, line=i, to=t) for i, (s, t) in enumerate(((256, 128), (128, 128), (128, 128)), 1)]
    assert trends.loss_scale_collapse(pinned) is not None


def test_the_warm_up_search_or_a_recovering_scale_is_no_collapse() -> None:
    # DeepSpeed starts at 2**32 and halves until a step fits: a burst at the start, then training goes on
    warmup = [ds_overflow(2**k, line=40 - k) for k in range(32, 15, -1)]
    assert trends.loss_scale_collapse(warmup) is None
    # the scale fell, grew back (scale_window) and fell again: no run reaches the floor
    ups = [ds_overflow(s, line=i) for i, s in enumerate((64, 32, 16, 64, 32, 16, 8), 1)]
    assert trends.loss_scale_collapse(ups) is None
    # two overflows at a small scale: too few to call a trend
    assert trends.loss_scale_collapse([ds_overflow(2, 1), ds_overflow(1, 2, to=1)]) is None


def test_apex_and_deepspeed_wordings_give_the_scales() -> None:
    apex = finding(
        "fp16.overflow_skip", "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 0.5", line=3
    )
    assert trends.overflow_scales(apex) == (1.0, 0.5)
    fused = finding(
        "fp16.overflow_skip",
        "[INFO] [fused_optimizer.py:266:step] Overflow detected. Skipping step. Attempted loss scale: 2.0, reducing "
        "to 1.0",
    )
    assert trends.overflow_scales(fused) == (2.0, 1.0)
    hyst = finding(
        "fp16.overflow_skip",
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis is 2. Reducing "
        "hysteresis to 1",
    )
    assert trends.overflow_scales(hyst) == (65536.0, 65536.0)


def test_every_iteration_skipped_at_the_end_of_a_megatron_log() -> None:
    good = [megatron(it, line=it // 10) for it in (10, 20, 30, 40)]
    bad = [megatron(it, line=it // 10, loss=None, scale=1.0, skipped=10) for it in (50, 60, 70)]
    c = trends.loss_scale_collapse(good + bad)
    assert c is not None and c.first.evidence[0] == bad[-1].evidence[0]
    recovered = [*good, *bad, megatron(80, line=8)]
    assert trends.loss_scale_collapse(recovered) is None  # the last interval trained again
    some = [*good, megatron(50, line=5, skipped=3), megatron(60, line=6, skipped=2)]
    assert trends.loss_scale_collapse(some) is None  # a few skips per interval are how dynamic scaling works


# ---------------------------------------------------------------------------------------------
# Loss spike


def test_a_loss_that_doubles_and_stays_up_is_a_divergence() -> None:
    losses = (3.31, 3.42, 3.37, 3.40, 7.27, 6.90, 7.41)
    grads = (0.9, 1.1, 1.0, 12.0, 30.0, 20.0, 25.0)
    series = [megatron(100 + i, line=1 + i, loss=v, grad=g) for i, (v, g) in enumerate(zip(losses, grads, strict=True))]
    c = trends.loss_spike(series)
    assert c is not None and c.class_id == "loss_spike_divergence"
    assert c.first.evidence[0] == series[4].evidence[0]
    assert series[3].evidence[0] in [f.evidence[0] for f in c.findings]  # the grad-norm jump just before


def test_a_blip_a_falling_loss_or_a_loss_near_zero_is_no_spike() -> None:
    blip = [megatron(i, line=i, loss=v) for i, v in enumerate((3.3, 3.4, 3.3, 7.2, 3.3, 3.2, 3.3), 1)]
    falling = [megatron(i, line=i, loss=v) for i, v in enumerate((10.9, 8.1, 6.0, 4.5, 3.9, 3.5), 1)]
    tiny = [megatron(i, line=i, loss=v) for i, v in enumerate((0.05, 0.04, 0.05, 0.12, 0.13, 0.12), 1)]
    for series in (blip, falling, tiny):
        assert trends.loss_spike(series) is None


def test_a_megatron_log_that_diverges_is_diagnosed_as_a_loss_spike(make_bundle, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    losses = (2.95, 2.91, 2.93, 2.90, 2.94, 6.80, 6.95, 7.10)
    lines = [megatron(5000 + 10 * i, line=i + 1, loss=v).evidence[0].text for i, v in enumerate(losses)]
    out = asyncio.run(diagnose(make_bundle({"logs/train.log": "\n".join(lines) + "\n"}), settings))
    rc = out.document.root_cause
    assert rc.class_ == "loss_spike_divergence"
    assert any(c.line == 6 and c.verified for c in rc.citations)
    assert rc.confidence < 0.8


def test_deepspeed_scale_collapsing_to_one_is_diagnosed(make_bundle, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    lines = ["[2024-05-01 09:59:00,000] [INFO] [engine.py:100:__init__] DeepSpeed info: version=0.9.5"]
    lines += [ds_overflow(2**k, line=1).evidence[0].text for k in range(16, 0, -1)]
    out = asyncio.run(diagnose(make_bundle({"train.log": "\n".join(lines) + "\n"}), settings))
    rc = out.document.root_cause
    assert rc.class_ == "fp16_loss_scale_overflow"
    assert 17 in {c.line for c in rc.citations if c.verified}  # "reducing to 1"


# ---------------------------------------------------------------------------------------------
# Throughput


def titan(rank: int, step: int, tps: int, tflops: float) -> Finding:
    text = (
        f"[rank{rank}]:[titan] 2024-11-30 02:00:00,123 - root - INFO - step: {step:2}  loss:  9.8012  memory: "
        f"30.12GiB(31.70%)  tps: {tps:,}  tflops: {tflops:,.2f}  mfu: 22.93%"
    )
    return finding("progress.rank_throughput", text, rank=rank, line=step)


def test_one_rank_clearly_slower_than_the_others_is_the_straggler() -> None:
    found = [titan(r, s, 1_650 if r == 5 else 2_400 + 7 * r, 50.0) for r in range(8) for s in (10, 20, 30)]
    topo = Topology(world_size=8, ranks={r: RankInfo(rank=r, node="node-b" if r >= 4 else "node-a") for r in range(8)})
    c = throughput.slow_rank(found, topo)
    assert c is not None and c.class_id == "straggler_fail_slow"
    assert c.first.rank == 5 and "node-b" in c.reasons[0]


def test_ranks_that_agree_or_disagree_everywhere_name_no_straggler() -> None:
    even = [titan(r, s, 2_400 + 9 * r, 50.0) for r in range(8) for s in (10, 20)]
    assert throughput.slow_rank(even, Topology()) is None
    spread = [titan(r, 10, 1_000 + 300 * r, 50.0) for r in range(6)]  # no single odd one out
    assert throughput.slow_rank(spread, Topology()) is None
    two = [titan(r, 10, (1_000, 2_400)[r], 50.0) for r in range(2)]  # two ranks: which one is odd?
    assert throughput.slow_rank(two, Topology()) is None


def test_deepspeed_samples_per_second_that_drop_and_stay_down() -> None:
    rates = (41.2, 41.0, 41.3, 40.9, 30.1, 30.4, 29.9)
    found = [
        finding(
            "progress.rank_throughput",
            f"[INFO] [timer.py:260:stop] epoch=0/micro_step={100 * (i + 1)}/global_step={100 * (i + 1)}, "
            f"RunningAvgSamplesPerSec={v + 0.5}, CurrSamplesPerSec={v}, MemAllocated=9.1GB, MaxMemAllocated=17.3GB",
            line=i + 1,
        )
        for i, v in enumerate(rates)
    ]
    c = throughput.throughput_drop(found)
    assert c is not None and c.first.evidence[0] == found[4].evidence[0]
    assert "samples per second" in c.reasons[0]


def test_progress_bar_rates_compare_ranks_doing_the_same_work() -> None:
    def bar(rank: int, rate: str) -> Finding:
        text = f"[rank{rank}]: Running generate_until requests:  41%|████      | 410/1000 [25:02<36:01, {rate}]"
        return finding("progress.tqdm", text, rank=rank, line=rank + 1)

    found = [bar(0, " 3.66s/it"), bar(1, " 3.70s/it"), bar(2, " 3.61s/it"), bar(3, "11.92s/it")]
    c = throughput.slow_rank(found, Topology())
    assert c is not None and c.first.rank == 3


def test_a_straggler_weakens_when_the_job_also_failed_with_its_own_error() -> None:
    found = [titan(r, s, 1_650 if r == 5 else 2_400, 50.0) for r in range(8) for s in (10, 20)]
    alone = throughput.slow_candidates(found, Topology(), other_errors=False)
    beside = throughput.slow_candidates(found, Topology(), other_errors=True)
    assert alone[0].score > beside[0].score and beside[0].penalties[-1].startswith("the job also failed")


def test_a_straggler_rank_in_per_rank_logs_is_the_root(make_bundle, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    files: dict[str, str] = {}
    for r in range(4):
        tps = 1_200 if r == 2 else 2_400
        rows = [titan(r, s, tps, 40.0).evidence[0].text.split("]:", 1)[1] for s in range(10, 60, 10)]
        files[f"logs/rank{r}.log"] = "\n".join(rows) + "\n"
    out = asyncio.run(diagnose(make_bundle(files), settings))
    rc = out.document.root_cause
    assert rc.class_ == "straggler_fail_slow" and rc.culprit.rank == 2
    assert all(c.verified for c in rc.citations) and rc.confidence < 0.8


def test_all_ranks_of_one_node_slower_name_that_node() -> None:
    nodes = {r: f"node-{r // 2}" for r in range(8)}  # 4 nodes, 2 ranks each; node-2 is slow
    found = [titan(r, s, 1_300 if nodes[r] == "node-2" else 2_400, 50.0) for r in range(8) for s in (10, 20)]
    topo = Topology(world_size=8, ranks={r: RankInfo(rank=r, node=nodes[r]) for r in range(8)})
    c = throughput.slow_rank(found, topo)
    assert c is not None and "node node-2" in c.reasons[0]
    assert c.first.rank in {4, 5}


def _nccl(host: str, text: str) -> Finding:
    sig = "nccl.socket_fallback" if "No device" in text or "Socket" in text else "nccl.interface_in_use"
    f = finding(sig, f"{host}:5521:5521 [0] NCCL INFO {text}", file=f"{host}.log")
    return f.model_copy(update={"node": host})


def test_one_node_on_sockets_among_nodes_on_infiniband_is_the_straggler() -> None:
    ib = "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.10.1.5<0>"
    found = [_nccl(h, ib) for h in ("gpu-01", "gpu-02", "gpu-04")] + [_nccl("gpu-03", "NET/IB : No device found.")]
    c = throughput.socket_fallback(found)
    assert c is not None and c.first.node == "gpu-03" and c.penalties
    ethernet = [_nccl(h, "NET/IB : No device found.") for h in ("gpu-01", "gpu-02", "gpu-03")]
    assert throughput.socket_fallback(ethernet) is None  # a cluster without IB is not slow
    assert throughput.socket_fallback(found[3:]) is None  # one host alone: nothing to compare with


def test_a_loss_spike_is_weaker_when_the_job_ended_in_collective_timeouts() -> None:
    series = [megatron(100 + i, line=1 + i, loss=v) for i, v in enumerate((3.3, 3.4, 3.3, 3.4, 7.3, 7.1, 7.2))]
    alone = trends.trend_candidates(series)
    beside = trends.trend_candidates(series, timed_out=True)
    assert [c.class_id for c in alone] == ["loss_spike_divergence"]
    assert beside[0].score < alone[0].score and "timeouts" in beside[0].penalties[-1]


def test_megatron_s_loss_scale_halving_to_one_across_iteration_lines() -> None:
    scales = (65536.0, 65536.0, 8192.0, 256.0, 8.0, 1.0)
    rows = [megatron(10 * (i + 1), line=i + 1, scale=v, skipped=0 if i < 2 else 6) for i, v in enumerate(scales)]
    c = trends.loss_scale_collapse(rows)
    assert c is not None and c.first.evidence[0] == rows[-1].evidence[0]
    steady = [megatron(10 * (i + 1), line=i + 1, scale=1.0) for i in range(6)]  # bf16-style constant 1.0
    assert trends.loss_scale_collapse(steady) is None
    no_skips = [megatron(10 * (i + 1), line=i + 1, scale=v) for i, v in enumerate(scales)]
    assert trends.loss_scale_collapse(no_skips) is None


def test_a_spike_the_run_recovers_from_needs_the_gradient_blowing_up_first() -> None:
    losses = (1.91, 1.95, 1.93, 1.90, 4.70, 3.10, 2.20, 1.94, 1.92, 1.93)
    grads = (0.31, 0.28, 0.30, 9.5, 210.0, 80.0, 3.0, 0.4, 0.3, 0.3)
    spiked = [megatron(700 + i, line=1 + i, loss=v, grad=g) for i, (v, g) in enumerate(zip(losses, grads, strict=True))]
    assert trends.loss_spike(spiked) is None  # it came back down: no divergence
    c = trends.recovered_spike(spiked)
    assert c is not None and c.first.evidence[0] == spiked[4].evidence[0]
    assert spiked[3].evidence[0] in [f.evidence[0] for f in c.findings]
    assert c.penalties  # never high on its own
    calm = [megatron(700 + i, line=1 + i, loss=v) for i, v in enumerate(losses)]  # the same loss, a steady grad norm
    assert trends.recovered_spike(calm) is None


def test_a_recovered_spike_is_the_answer_only_when_nothing_failed(make_bundle, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    losses = (1.91, 1.95, 1.93, 1.90, 4.70, 3.10, 2.20, 1.94, 1.92, 1.93)
    grads = (0.31, 0.28, 0.30, 9.5, 210.0, 80.0, 3.0, 0.4, 0.3, 0.3)
    lines = [
        megatron(700 + i, line=1 + i, loss=v, grad=g).evidence[0].text
        for i, (v, g) in enumerate(zip(losses, grads, strict=True))
    ]
    alone = asyncio.run(diagnose(make_bundle({"logs/train.log": "\n".join(lines) + "\n"}), settings))
    rc = alone.document.root_cause
    assert rc.class_ == "loss_spike_divergence" and 0.55 <= rc.confidence < 0.8
    assert any(c.line == 5 and c.verified for c in rc.citations)
    crashed = "\n".join(
        [*lines, "Traceback (most recent call last):", '  File "t.py", line 3, in <module>', "KeyError: 'x'"]
    )
    out = asyncio.run(diagnose(make_bundle({"logs/train.log": crashed + "\n"}), settings))
    assert out.document.root_cause.class_ == "python_exception_rank_crash"


def test_a_summary_names_no_place_the_culprit_check_withheld(make_bundle, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    losses = (2.95, 2.91, 2.93, 2.90, 2.94, 6.80, 6.95, 7.10)
    lines = ["[default3]:" + megatron(5000 + 10 * i, line=i + 1, loss=v).evidence[0].text for i, v in enumerate(losses)]
    out = asyncio.run(diagnose(make_bundle({"train.log": "\n".join(lines) + "\n"}), settings))
    rc = out.document.root_cause
    assert rc.class_ == "loss_spike_divergence"
    assert rc.culprit.rank is None  # a local rank in one pasted log is no global rank the lines prove
    assert "rank 3" not in rc.summary
