"""Synth stage 2: the incident being built: timed lines per source stream, plus the label facts.

A scenario writes into a :class:`Story` (root lines flagged, symptom lines tagged with their class);
background, cascade and document builders read and extend it. Pure, no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from crashcart.synth import formats as fmt
from crashcart.synth.world import World

# Stream kinds: ("rank", r), ("agent", node), ("kernel", node), ("fm", node), ("slurm", 0)
Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Line:
    """One output line at job-relative second ``t``; ``root`` lines become expected root_cause_lines."""

    t: float
    text: str
    root: bool = False
    symptom: str | None = None


@dataclass(frozen=True, slots=True)
class Fate:
    """How a rank process ends: ``exit`` at ``t`` with ``code`` (negative: a signal), or ``hang``."""

    kind: str
    t: float
    code: int = 0


@dataclass(frozen=True, slots=True)
class Step:
    step: int
    t: float
    dt: float
    loss: float
    gnorm: float
    lr: float


@dataclass
class Telemetry:
    """What dcgm.csv should show: ``anomaly`` in {"", "throttle", "brake", "straggler", "missing"}."""

    anomaly: str = ""
    node: int = 0
    local: int = 0
    onset: float = 0.0


@dataclass
class K8sEvent:
    t: float
    reason: str
    message: str
    kind: str  # involved object kind: Pod | Node
    name: str
    host: str
    type: str = "Warning"
    component: str = "kubelet"
    root: bool = False


@dataclass
class Story:
    """Mutable incident under construction."""

    world: World
    class_id: str
    rng: random.Random
    t0: float = 0.0
    streams: dict[Key, list[Line]] = field(default_factory=dict)
    docs: dict[str, list[Line]] = field(default_factory=dict)
    fate: dict[int, Fate] = field(default_factory=dict)
    stop: dict[int, float] = field(default_factory=dict)
    kernel_stop: dict[int, float] = field(default_factory=dict)  # node -> its kernel log ends here
    reach: dict[int, str] = field(default_factory=dict)  # "none" | "banner" | "nccl" | "train"
    agent_ok: dict[int, bool] = field(default_factory=dict)  # False: the node's launcher never started ranks
    mode: str = "timeout"  # how healthy ranks react: timeout | remote | store | initremote | none
    slow: list[tuple[float, float]] = field(default_factory=list)  # (from t, step-time factor)
    loss_at: dict[int, float] = field(default_factory=dict)  # logged step -> forced loss value
    wd_override: dict[int, tuple[int, str, int, int, int]] = field(default_factory=dict)
    driver_override: dict[int, str] = field(default_factory=dict)
    nccl_override: dict[int, str] = field(default_factory=dict)
    ifname_override: dict[int, tuple[str, str]] = field(default_factory=dict)
    wd_root: set[int] = field(default_factory=set)  # ranks whose watchdog timeout line is a root line
    desync: tuple[int, int] | None = None  # (culprit, its seq): healthy ranks print a desync report
    lagging: int | None = None  # healthy ranks print "ranks [r] are the lagging ranks"
    root_steps: set[int] = field(default_factory=set)  # logged training steps whose iteration line is root
    root_nccl_nodes: set[int] = field(default_factory=set)  # nodes whose "NCCL version" lines are root
    root_driver_nodes: set[int] = field(default_factory=set)  # nodes whose driver-load kernel line is root
    root_last_rank: int | None = None  # that rank's last line is the root line (a log that just stops)
    srun_status: dict[int, str] = field(default_factory=dict)  # rank -> srun status text override
    summary_root: int | None = None
    agent_signal: dict[int, tuple[float, int, bool]] = field(
        default_factory=dict
    )  # node -> (t, signal, root)  # rank whose torchrun "Root Cause" entry is the root line
    culprit_node: int | None = None
    culprit_rank: int | None = None
    culprit_gpu: str | None = None
    telemetry: Telemetry | None = None
    want_telemetry: bool = False
    caught_oom: bool = False
    xid45: bool = False
    dataloader_noise: bool = True
    sacct_state: str = "FAILED"
    sacct_exit: str = "1:0"
    scontrol_down: int | None = None
    time_limit: str = "2-00:00:00"
    ended: dict[int, float] = field(default_factory=dict)  # rank -> when its process ended (set by cascade)
    sacct_root: bool = False
    k8s_events: list[K8sEvent] = field(default_factory=list)
    extra_docs: dict[str, list[Line]] = field(default_factory=dict)
    t_end: float = 0.0
    _steps: list[Step] | None = None
    _horizon: float = 0.0

    # ---- emitting -------------------------------------------------------------------------
    def emit(self, key: Key, t: float, text: str, *, root: bool = False, symptom: str | None = None) -> None:
        self.streams.setdefault(key, []).append(Line(t, text, root, symptom))

    def block(
        self,
        key: Key,
        t: float,
        texts: Sequence[str],
        *,
        roots: Iterable[int] = (),
        symptom: str | None = None,
        dt: float = 0.0002,
    ) -> float:
        """Emit consecutive lines; ``roots`` are indexes of root lines. Returns the time after the last."""
        root_set = set(roots)
        for i, text in enumerate(texts):
            self.emit(key, t + i * dt, text, root=i in root_set, symptom=None if i in root_set else symptom)
        return t + len(texts) * dt

    def rank(self, r: int, t: float, text: str, *, root: bool = False, symptom: str | None = None) -> None:
        self.emit(("rank", r), t, text, root=root, symptom=symptom)

    def kernel(self, node: int, t: float, msg: str, *, root: bool = False, symptom: str | None = None) -> None:
        if t > self.kernel_stop.get(node, float("inf")):
            return
        self.emit(("kernel", node), t, fmt.kernel(self.world, node, t, msg), root=root, symptom=symptom)

    def kernel_block(
        self,
        node: int,
        t: float,
        msgs: Sequence[str],
        *,
        roots: Iterable[int] = (),
        symptom: str | None = None,
    ) -> float:
        root_set = set(roots)
        for i, msg in enumerate(msgs):
            tt = t + i * 0.000013
            self.kernel(node, tt, msg, root=i in root_set, symptom=None if i in root_set else symptom)
        return t + len(msgs) * 0.000013

    def agent(
        self,
        node: int,
        t: float,
        level: str,
        src: str,
        msg: str,
        *,
        root: bool = False,
        symptom: str | None = None,
    ) -> None:
        self.emit(("agent", node), t, fmt.elastic(self.world, node, t, level, src, msg), root=root, symptom=symptom)

    def slurm(self, t: float, text: str, *, root: bool = False, symptom: str | None = None) -> None:
        self.emit(("slurm", 0), t, text, root=root, symptom=symptom)

    def nccl(
        self,
        r: int,
        t: float,
        msg: str,
        *,
        level: str = "INFO",
        src: str | None = None,
        tid: int = 0,
        root: bool = False,
        symptom: str | None = None,
    ) -> None:
        self.rank(r, t, fmt.nccl(self.world, r, msg, level=level, src=src, tid=tid), root=root, symptom=symptom)

    # ---- the training plan ----------------------------------------------------------------
    def factor(self, t: float) -> float:
        f = 1.0
        for start, k in self.slow:
            if t >= start:
                f = k
        return f

    def steps(self, until: float) -> list[Step]:
        """Logged training steps up to ``until`` (shared by every rank: training is synchronous)."""
        if self._steps is None or until > self._horizon:
            self._horizon = until + 4 * 3600.0
            self._steps = self._plan(self._horizon)
        return [s for s in self._steps if s.t <= until]

    def force_loss(self, step: int, value: float) -> None:
        """Make logged step ``step`` report ``value`` as its loss (NaN, spikes)."""
        self.loss_at[step] = value
        self._steps = None

    def slow_down(self, start: float, factor: float) -> None:
        """From ``start`` on, every step takes ``factor`` times longer (throttling, stragglers)."""
        self.slow.append((start, factor))
        self.slow.sort()
        self._steps = None

    def _plan(self, until: float) -> list[Step]:
        w = self.world
        rng = random.Random(f"crashcart-synth/steps/{w.seed}/{w.ranks}")
        out: list[Step] = []
        t = w.t_train0
        step = w.start_step
        loss = 2.2 + 6.0 / (1.0 + (step / 3000.0))
        while t <= until:
            k = self.factor(t)
            dt = w.step_time * k * rng.uniform(0.97, 1.04)
            t += dt
            step += 1
            if step % w.log_every == 0:
                base = 2.2 + 6.0 / (1.0 + (step / 3000.0))
                loss = self.loss_at.get(step, base + rng.uniform(-0.06, 0.06))
                lr = 1.5e-4 * min(1.0, step / 2000.0 + 0.05)
                out.append(Step(step, t, dt, loss, rng.uniform(0.18, 0.9), lr))
        return out

    def step_before(self, t: float) -> Step:
        """The last logged step at or before ``t`` (the first logged step if none)."""
        steps = self.steps(t + 3600.0)
        before = [s for s in steps if s.t <= t]
        return before[-1] if before else steps[0]

    def seq_at(self, t: float) -> int:
        """NCCL collective sequence number completed by time ``t`` (default process group)."""
        w = self.world
        if t < w.t_train0:
            return 1
        s = self.step_before(t)
        extra = int(max(0.0, t - s.t) / max(s.dt, 1e-3))
        return w.seq_base + max(0, s.step - w.start_step + extra) * w.coll_per_step

    # ---- helpers scenarios use --------------------------------------------------------------
    def node_of(self, r: int) -> int:
        return self.world.rank_node[r]

    def pick_rank(self, *, avoid_zero: bool = False) -> int:
        lo = 1 if avoid_zero and self.world.ranks > 1 else 0
        return self.rng.randrange(lo, self.world.ranks)

    def set_culprit(self, node: int | None = None, rank: int | None = None, gpu: str | None = None) -> None:
        self.culprit_node, self.culprit_rank, self.culprit_gpu = node, rank, gpu

    def alive(self) -> list[int]:
        """Ranks whose fate is not decided yet."""
        return [r for r in range(self.world.ranks) if r not in self.fate]
