"""Numeric trends that no single line states (issue 14, capability 8; TAXONOMY classes 31 and 32).

Input: findings (the fields of ``progress.iteration_time`` — Megatron's iteration line — and of the ``fp16.*``
overflow lines). Output: scored ``Candidate``s for the offline reduce:

- *loss-scale collapse*: a dynamic loss scaler halving step after step down to its floor (DeepSpeed's and Megatron's
  minimum scale defaults to 1; a scale "reduced" to itself is pinned at the configured minimum), or a log whose last
  iteration lines skipped every iteration -> ``fp16_loss_scale_overflow`` citing the end of the run and its start.
  One skip, or a burst while the scaler searches its first scale, is how dynamic scaling works and says nothing;
- *loss spike*: the training loss of one log jumping to about twice what it was and not coming back down ->
  ``loss_spike_divergence`` citing the iteration where it jumped (and a grad-norm jump just before it).

Both are inferences from numbers, so they carry a penalty (never a high-confidence answer on their own). Pure.
"""

from __future__ import annotations

import math
from collections import defaultdict
from itertools import pairwise
from statistics import median

from crashcart.models import Finding
from crashcart.reduce.causal import Candidate

OVERFLOW = "fp16_loss_scale_overflow"
SPIKE = "loss_spike_divergence"
ITERATION = "progress.iteration_time"

FLOOR = 1.0  # DeepSpeed DynamicLossScaler(min_scale=1), Megatron OptimizerConfig.min_loss_scale = 1.0
MIN_RUN = 3  # halvings in a row before the floor: a collapse, not one unlucky batch
BASE_COLLAPSE = 48.0  # about a P2 error line: the scaler cannot train any more
BASE_SPIKE = 36.0  # below an error line of the job's own (P2: 38), above "nothing failed"

SPIKE_RATIO = 1.8  # the loss at least this many times its earlier median ...
SPIKE_ABS = 0.5  # ... and this much higher in absolute terms (a loss near zero doubles on noise)
STAYS_UP = 1.4  # ... and the median from the jump on stays this far up (diverged, not a blip)
MIN_BEFORE = 3  # iteration lines before the jump that set the baseline
GRAD_JUMP = 5.0  # a grad norm this many times its earlier median, just before the loss jumped
GRAD_BEFORE = 3  # iteration lines: how far before the loss jump a grad-norm jump is cited


def _num(v: str | None) -> float | None:
    try:
        x = float(v) if v else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) else None


def _line(f: Finding) -> tuple[str, int]:
    return f.evidence[0].file, f.evidence[0].line


def _as_root(f: Finding, cls: str, summary: str, severity: str = "P2") -> Finding:
    return f.model_copy(update={"class_id": cls, "role": "root_candidate", "severity": severity, "summary": summary})


# ---------------------------------------------------------------------------------------------
# Loss scale


def overflow_scales(f: Finding) -> tuple[float, float | None] | None:
    """(attempted scale, scale after the skip) of an overflow line; the second is None when the line does not
    say (DeepSpeed's hysteresis wording keeps the scale, so it is the attempted one)."""
    if not f.signature.startswith("fp16.overflow_skip"):
        return None
    fields = f.fields
    attempted = _num(fields.get("loss_scale")) or _num(fields.get("attempted"))
    after = _num(fields.get("reduced_to")) or _num(fields.get("attempted_to")) or _num(fields.get("reduced"))
    if fields.get("hysteresis") and attempted is not None:
        after = attempted
    if attempted is None and after is None:
        return None
    if attempted is None:
        assert after is not None
        attempted = after * 2  # apex amp prints only the new scale; it halves by default
    return attempted, after


def _halving_runs(lines: list[tuple[Finding, float, float | None]]) -> list[list[tuple[Finding, float, float | None]]]:
    """Runs of overflow lines whose scale never goes up from one to the next (the scaler kept skipping)."""
    runs: list[list[tuple[Finding, float, float | None]]] = []
    for item in lines:
        if runs and item[1] <= runs[-1][-1][1]:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def loss_scale_collapse(findings: list[Finding]) -> Candidate | None:
    """The loss scale halving line after line to its floor, or every iteration skipped at the end of a log."""
    per_file: dict[tuple[str, int | None], list[tuple[Finding, float, float | None]]] = defaultdict(list)
    for f in findings:
        got = overflow_scales(f)
        if got is not None:
            per_file[(f.evidence[0].file, f.rank)].append((f, *got))
    best: tuple[int, list[Finding], str] | None = None
    for items in per_file.values():
        items.sort(key=lambda x: _line(x[0]))
        for run in _halving_runs(items):
            end, attempted, after = run[-1]
            pinned = sum(1 for _, a, b in run if b is not None and b >= a)  # "reducing" to the same scale
            floor = (after if after is not None else attempted) <= FLOOR or pinned >= 2
            if not floor or len(run) < MIN_RUN:
                continue
            why = (
                f"the loss scale fell from {run[0][1]:g} to {after if after is not None else attempted:g} "
                f"over {len(run)} skipped steps in a row and reached its floor"
            )
            if best is None or len(run) > best[0]:
                best = (len(run), [end, run[0][0]], why)  # the floor says most; the lines above it show the run
    for tail in (_all_skipped_at_end(findings), _iteration_scale_floor(findings)):
        if tail is not None and best is None:
            best = (len(tail[0]), tail[0], tail[1])
    if best is None:
        return None
    _, cited, why = best
    lead = _as_root(cited[0], OVERFLOW, "fp16 loss scale collapsing: " + why)
    rest = [_as_root(f, OVERFLOW, "where the run of skipped steps began") for f in cited[1:] if f.id != cited[0].id]
    c = Candidate(OVERFLOW, [lead, *rest], [])
    c.lead = lead
    c.score = BASE_COLLAPSE
    c.reasons.append(why + ": with the scale at its minimum every step overflows and is skipped, so training stopped")
    c.penalties.append("inferred from the trend of the loss scale, not from one line that says training failed")
    return c


def _all_skipped_at_end(findings: list[Finding]) -> tuple[list[Finding], str] | None:
    """Megatron's last iteration lines of a log each skipped every iteration of their interval (the skipped count
    equals the step between two printed iteration numbers)."""
    per_file: dict[tuple[str, int | None], list[Finding]] = defaultdict(list)
    for f in findings:
        if f.signature == ITERATION and f.fields.get("iteration", "").isdigit() and f.fields.get("skipped"):
            per_file[(f.evidence[0].file, f.rank)].append(f)
    for items in per_file.values():
        items.sort(key=_line)
        tail: list[Finding] = []
        for prev, cur in list(pairwise(items))[-3:]:
            interval = int(cur.fields["iteration"]) - int(prev.fields["iteration"])
            if interval > 0 and int(cur.fields["skipped"]) >= interval:
                tail.append(cur)
            else:
                tail = []
        if len(tail) >= 2 and tail[-1] is items[-1]:
            why = (
                f"every iteration was skipped in the last {len(tail)} logged intervals "
                f"(iterations {tail[0].fields['iteration']} to {tail[-1].fields['iteration']})"
            )
            return [tail[-1], tail[0]], why
    return None


def _iteration_scale_floor(findings: list[Finding]) -> tuple[list[Finding], str] | None:
    """Megatron's "loss scale:" halving from one iteration line to the next down to its floor, with iterations
    skipped on the way (the scaler lowers the scale only on an overflow, which skips the iteration)."""
    per_file: dict[tuple[str, int | None], list[tuple[Finding, float]]] = defaultdict(list)
    for f in findings:
        if f.signature == ITERATION and (v := _num(f.fields.get("loss_scale"))) is not None:
            per_file[(f.evidence[0].file, f.rank)].append((f, v))
    for items in per_file.values():
        items.sort(key=lambda x: _line(x[0]))
        run = [items[-1]]
        for item in reversed(items[:-1]):  # back from the last line while the scale was higher before
            if item[1] < run[0][1]:
                break
            run.insert(0, item)
        drops = sum(1 for a, b in pairwise(run) if b[1] < a[1])
        skipped = any(int(f.fields.get("skipped") or 0) > 0 for f, _ in run[1:])
        if run[-1][1] <= FLOOR and drops >= MIN_RUN and skipped:
            why = f"the loss scale fell from {run[0][1]:g} to {run[-1][1]:g} over {drops} logged intervals"
            return [run[-1][0], run[0][0]], why + ", skipping iterations, and reached its floor"
    return None


# ---------------------------------------------------------------------------------------------
# Loss spike


def loss_spike(findings: list[Finding], recovered: bool = False) -> Candidate | None:
    """The loss of one log's iteration lines jumping to about twice its earlier level and staying up; with
    ``recovered``, a jump that came back down but that a gradient-norm jump just before it confirms (TAXONOMY 32:
    a spike is the event, divergence is what may follow)."""
    series: dict[tuple[str, int | None], list[Finding]] = defaultdict(list)
    for f in findings:
        if f.signature == ITERATION and _num(f.fields.get("loss")) is not None:
            series[(f.evidence[0].file, f.rank)].append(f)
    best: tuple[float, Candidate] | None = None
    for items in series.values():
        items.sort(key=_line)
        values = [_num(f.fields["loss"]) or 0.0 for f in items]
        for i in range(MIN_BEFORE, len(values)):
            base = median(values[:i])
            v = values[i]
            if base <= 0 or v < SPIKE_RATIO * base or v - base < SPIKE_ABS:
                continue
            if (median(values[i:]) < STAYS_UP * base) != recovered:
                continue  # it came back down (a blip) / it stayed up (a divergence, not a blip)
            c = _spike_candidate(items, i, base, v, values if recovered else None)
            if c is not None and (best is None or v / base > best[0]):
                best = (v / base, c)
            break
    return best[1] if best is not None else None


def _spike_candidate(
    items: list[Finding], i: int, base: float, v: float, values: list[float] | None = None
) -> Candidate | None:
    """The candidate citing the jump (and a grad-norm jump just before it); ``values`` given: a recovered spike,
    None without that grad-norm jump."""
    summary = (
        f"training loss jumped from about {base:.3g} to {v:.3g} at iteration {items[i].fields.get('iteration', '?')}"
    )
    lead = _as_root(items[i], SPIKE, summary)
    cited = [lead]
    norms = [_num(f.fields.get("grad_norm")) for f in items]
    for j in range(max(MIN_BEFORE - 1, i - GRAD_BEFORE), i):
        earlier = [n for n in norms[:j] if n is not None]
        n = norms[j]
        if n is not None and len(earlier) >= 2 and n >= GRAD_JUMP * median(earlier):
            cited.insert(0, _as_root(items[j], SPIKE, f"the gradient norm jumped to {n:g} just before"))
            break
    if values is not None and len(cited) == 1:
        return None  # a loss blip alone is noise; with the gradient blowing up first it is a spike
    c = Candidate(SPIKE, cited, [])
    c.lead = lead
    c.score = BASE_SPIKE
    if values is None:
        c.reasons.append(summary + " and did not come back down: the run diverged")
    else:
        back = next((k for k in range(i + 1, len(values)) if values[k] < STAYS_UP * base), None)
        when = f" by iteration {items[back].fields.get('iteration', '?')}" if back is not None else ""
        c.reasons.append(summary + f", after the gradient norm blew up, and came back down{when}: a loss spike")
        c.penalties.append("the loss recovered and training went on: a spike, not a crash")
    c.penalties.append("inferred from the trend of the logged loss, not from a line that reports a failure")
    return c


def recovered_spike(findings: list[Finding]) -> Candidate | None:
    """Last resort: a loss spike the run recovered from, when nothing in the bundle failed."""
    if any(f.role in {"root_candidate", "cascade"} and f.signature != ITERATION for f in findings):
        return None
    return loss_spike(findings, recovered=True)


WAIT_DISCOUNT = 12.0  # a diverged loss does not stop a rank from arriving at a collective


def trend_candidates(findings: list[Finding], timed_out: bool = False) -> list[Candidate]:
    """Every numeric-trend candidate the findings show; a loss spike is weaker when the job ended in collective
    timeouts (those need a rank that did not arrive, which a diverging loss does not explain)."""
    spike = loss_spike(findings)
    if spike is not None and timed_out:
        spike.score -= WAIT_DISCOUNT
        spike.penalties.append("the job ended in collective timeouts, which a diverging loss does not explain")
    return [c for c in (loss_scale_collapse(findings), spike) if c is not None]
