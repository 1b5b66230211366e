"""Synth scenarios for numerics classes: NaN/Inf, fp16 loss-scale collapse, loss spikes, and silent
data corruption flagged by Megatron's rerun machinery; the clue is in iteration lines or one
rank's validation messages, and the job usually ends on every rank at once.

Input/output: a Story (one function per TAXONOMY class). Pure, no I/O.
"""

from __future__ import annotations

from crashcart.synth import formats as fmt
from crashcart.synth import kit
from crashcart.synth.story import Fate, Story

_DIST = "/usr/local/lib/python3.10/dist-packages"


def _rank_culprit(s: Story) -> int:
    r = s.pick_rank()
    s.set_culprit(s.node_of(r), r, None)
    return r


def nan_inf_loss_or_grad(s: Story) -> None:
    w, rng = s.world, s.rng
    v = rng.randrange(3)
    if v < 2:
        r = _rank_culprit(s)
        it = s.step_before(s.t0).step + 1
        text = (
            (
                f"RuntimeError: Rank {r}, node {w.host(r)}, device {w.local[r]}, iteration {it}: Unexpected "
                "result nan "
                "(message='found NaN in local grad norm for bucket #0 in backward pass before data-parallel "
                "communication collective')"
            )
            if v == 0
            else (
                f"AssertionError: Rank {r}: found NaN in local grad norm in backward pass before "
                "data-parallel "
                f"communication collective. Device: {w.local[r]}, node: {w.host(r)}"
            )
        )
        frames = fmt.train_frames(
            w,
            (
                "/workspace/megatron/core/distributed/param_and_grad_buffer.py",
                257,
                "start_grad_sync",
                "rerun_state_machine.validate_result(",
            ),
        )
        kit.crash(s, r, s.t0, [text], frames=frames)
        return
    s.set_culprit(None, None, None)
    steps = s.steps(s.t0)
    first = steps[-3]
    for st in steps[-3:]:
        s.force_loss(st.step, float("nan"))
    s.root_steps = {first.step}
    for r in range(w.ranks):
        kit.crash(s, r, s.t0 + 0.01 * r, [f"FloatingPointError: loss is nan at step {steps[-1].step}; stopping run"])
    s.mode = "none"


def fp16_loss_scale_overflow(s: Story) -> None:
    w, rng = s.world, s.rng
    s.set_culprit(None, None, None)

    def ds(t: float, msg: str) -> None:
        dt = w.at(t)
        s.rank(
            0,
            t,
            f"[{dt:%Y-%m-%d %H:%M:%S},{dt.microsecond // 1000:03d}] [INFO] [loss_scaler.py:183:update_scale]"
            f" [deepspeed] {msg}",
        )

    steps = s.steps(s.t0)
    for st in (steps[len(steps) // 5], steps[len(steps) // 3]):
        ds(st.t + 0.3, "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768")
    scale = 2 ** rng.randrange(12, 17)
    t = s.t0 - 20 * w.step_time
    while scale > 1:
        ds(t, f"OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {scale}, reducing to {scale // 2}")
        scale //= 2
        t += w.step_time
    frames = fmt.train_frames(
        w,
        (f"{_DIST}/deepspeed/runtime/engine.py", 2169, "step", "self._take_model_step(lr_kwargs)"),
        (
            f"{_DIST}/deepspeed/runtime/fp16/fused_optimizer.py",
            253,
            "step",
            "self._update_scale(self.overflow)",
        ),
        (f"{_DIST}/deepspeed/runtime/fp16/loss_scaler.py", 174, "update_scale", "raise Exception("),
    )
    last = ["Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."]
    for r in range(w.ranks):
        kit.crash(s, r, s.t0 + 0.005 * r, last, frames=frames)
    s.mode = "none"


def loss_spike_divergence(s: Story) -> None:
    w, rng = s.world, s.rng
    s.set_culprit(None, None, None)
    steps = s.steps(s.t0)
    i = len(steps) - rng.randrange(4, 10)
    spike = steps[i]
    value = spike.loss * rng.uniform(9.0, 16.0)
    s.force_loss(spike.step, value)
    s.root_steps = {spike.step}
    if rng.random() < 0.5:
        s.t0 = spike.t + 0.3
        for r in range(w.ranks):
            text = (
                f"RuntimeError: Rank {r}, node {w.host(r)}, device {w.local[r]}, iteration {spike.step}: "
                "Unexpected "
                f"result {value:.4f} (message='Spiky loss')"
            )
            kit.crash(s, r, s.t0 + 0.004 * r, [text])
    else:
        cur = value
        for st in steps[i + 1 :]:
            cur = cur * rng.uniform(0.55, 0.8) if cur > spike.loss * 3 else cur * rng.uniform(1.1, 1.4)
            s.force_loss(st.step, cur)
        s.t0 = steps[-1].t + 0.3
        for r in range(w.ranks):
            text = (
                f"ValueError: training diverged at step {steps[-1].step}: loss {cur:.3f} is more than 3x the "
                "running"
                f" mean {spike.loss:.3f}; stopping"
            )
            kit.crash(s, r, s.t0 + 0.004 * r, [text])
    for r in range(w.ranks):
        s.stop[r] = s.t0
    s.mode = "none"


def silent_data_corruption_suspect(s: Story) -> None:
    w, rng = s.world, s.rng
    r = s.pick_rank()
    host, L = w.host(r), w.local[r]
    it = s.step_before(s.t0).step + 1
    name = "megatron.core.rerun_state_machine"
    t = s.t0
    s.set_culprit(s.node_of(r), r, None)
    s.rank(
        r,
        t,
        fmt.pylog(
            w,
            t,
            "ERROR",
            name,
            f"Unexpected result nan at megatron/core/distributed/"
            f"param_and_grad_buffer.py line 257, invokation #1 at iteration #{it} (message='found NaN "
            "in local grad norm for bucket #0 in backward pass before data-parallel communication "
            "collective')",
        ),
    )
    t2 = t + w.step_time * 1.1
    s.rank(
        r,
        t2,
        fmt.pylog(
            w,
            t2,
            "WARNING",
            name,
            f"First rerun: unexpected result is not reproducible within the "
            f"tolerance ({rng.uniform(1.8, 2.6):.4f} != nan)",
        ),
        root=True,
    )
    s.rank(
        r,
        t2 + 0.001,
        fmt.pylog(w, t2 + 0.001, "ERROR", name, f"Rank {r}, node {host}, device {L}: Possible transient error!"),
        root=True,
    )
    t3 = t2 + 0.2
    s.rank(
        0,
        t3,
        fmt.pylog(
            w,
            t3,
            "WARNING",
            name,
            "Exiting now. A checkpoint at the last iteration is being saved if further examination is needed",
        ),
    )
    s.rank(
        0,
        t3 + 0.1,
        fmt.pylog(
            w,
            t3 + 0.1,
            "INFO",
            "checkpoint",
            f"saving checkpoint at iteration {it} to /checkpoints/{w.job_name}/iter_{it:07d}",
        ),
    )
    t_exit = t3 + rng.uniform(35.0, 70.0)
    for q in range(w.ranks):
        s.fate[q] = Fate("exit", t_exit + 0.01 * q, 17)
        s.stop[q] = t
    s.mode, s.sacct_exit = "none", "17:0"
