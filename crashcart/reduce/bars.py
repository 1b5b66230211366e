"""Progress bars and announced steps of work that runs outside collectives (reduce/hangs.py's "long work").

A rank busy in such work while the others wait in a collective is the rank that did not arrive: tqdm bars of
datasets maps, tokenization, evaluation and generation loops, checkpoint loading; the steps a rank announces
before such work (``progress.step_announced`` and the like). Pure.
"""

from __future__ import annotations

import re

from crashcart.models import Evidence, Finding
from crashcart.text.prefix import split_prefix

REACHES = 0.8  # a bar whose elapsed time is this share of the timeout "reaches" it

# tqdm/std.py format_meter: '<desc>: <pct>%|<bar>| <n>/<total> [<elapsed><<remaining>, <rate>]', and without a
# total '<desc>: <n><unit> [<elapsed>, <rate>]' (format_interval: [H:]MM:SS)
_TQDM = re.compile(
    r"(?P<percent>\d{1,3})%\|[^|]*\| ?(?P<n>\d+(?:\.\d+)?[kMGTPEZY]?)/(?P<total>\d+(?:\.\d+)?[kMGTPEZY]?) "
    r"\[(?P<elapsed>(?:\d+:)?\d\d:\d\d)<"
    r"|\b\d+(?:\.\d+)?[kMGTPEZY]?(?:it|[A-Za-z ]{1,24}) \[(?P<elapsed_only>(?:\d+:)?\d\d:\d\d), +(?:\d|\?)"
)
# Descriptions of bars that run outside collectives (datasets: "Map", "Filter", "Generating train split";
# transformers examples: "Running tokenizer on dataset", "Grouping texts in chunks of", "Loading checkpoint shards";
# lm-evaluation-harness: "Running loglikelihood requests"; Lightning: "Validation DataLoader 0"; YOLO val: "Class
# Images ... mAP"; vLLM's LLM.generate inside a training job: "Processed prompts", "Adding requests"); training
# loops ("Epoch 3", "Training", "Steps") advance in step with collectives and say nothing.
_WORK_DESC = re.compile(
    r"tokeni[sz]|\bmap\b|filter|pre-?process|group|pack|generat|eval|valid|test|predict|infer|index|cluster"
    r"|download|extract|convert|load|sav(?:e|ing)|build|compil|shard|request|embed|encod|sort|shuffl|cach|prompt",
    re.I,
)
# Loops where ranks run different shares of requests and meet at a gather afterwards (lm-evaluation-harness
# "Running generate_until requests" / "Running loglikelihood requests", vLLM's "Processed prompts", evaluation,
# prediction, inference): one rank's unfinished bar before the others' timeouts is where it was when they gave up.
_EVAL_LOOP = re.compile(r"request|generat|eval|valid|predict|infer|prompt", re.I)
_TRAIN_DESC = re.compile(r"^\W*(?:epoch|train(?:ing)?|steps?|iter(?:ation)?s?|batch(?:es)?)\b", re.I)
STEP_SIGNATURES = frozenset({"training.step_loss", "megatron.iteration", "training.hf_log", "progress.iteration_time"})
# A step outside any collective a rank announces: long work, or a dispatcher's worker idle between tasks.
ANNOUNCING = frozenset({"progress.step_announced", "progress.waiting_for_work", "lm_eval.building_contexts"})


def bar_of(text: str) -> tuple[str, float, int] | None:
    """The last tqdm bar of a line (carriage-return updates share a line): description, elapsed seconds, percent
    (-1 for a bar without a total)."""
    last = None
    for m in _TQDM.finditer(text):
        last = m
    if last is None:
        return None
    before = text[: last.start()]
    cut = max(before.rfind("\r"), before.rfind("]"), before.rfind("|"))
    desc = split_prefix(before[cut + 1 :]).rest.strip().rstrip(":").strip()
    parts = [int(p) for p in (last.group("elapsed") or last.group("elapsed_only")).split(":")]
    seconds = sum(v * 60**i for i, v in enumerate(reversed(parts)))
    percent = last.group("percent")
    return desc, float(seconds), int(percent) if percent is not None else -1  # -1: a bar without a total


def bar_count(text: str) -> tuple[str, str] | None:
    """``n`` and ``total`` of a line's last tqdm bar that has a total (None for none, or a bar without one)."""
    last = None
    for m in _TQDM.finditer(text):
        last = m
    if last is None or last.group("n") is None:
        return None
    return last.group("n"), last.group("total")


def is_work(desc: str) -> bool:
    """A bar description of work that runs outside collectives (not a training loop's own bar)."""
    return bool(desc) and _TRAIN_DESC.search(desc) is None and _WORK_DESC.search(desc) is not None


def bar_step(bar: Finding, findings: list[Finding]) -> str:
    """What a bar without a description counts: the step its rank announced last before it in its file, when no
    training step and no end of that step lies between. HF Trainer's bars have no description (transformers
    trainer_callback.py ProgressCallback: tqdm(total=...)); its evaluation_loop logs "***** Running Evaluation
    *****" before the evaluation bar, and log_metrics "***** eval metrics *****" after it."""
    ev = bar.evidence[0]
    step = ""
    before = [
        f for f in findings if f.rank == bar.rank and f.evidence[0].file == ev.file and f.evidence[0].line < ev.line
    ]
    for f in sorted(before, key=lambda f: f.evidence[0].line):
        if f.signature in ANNOUNCING:
            step = f.fields.get("step", "")
        elif f.signature in STEP_SIGNATURES or f.signature == "progress.step_done":
            step = ""  # training went on, or the announced step ended, before this bar
    return step


def long_bars(findings: list[Finding], waiting: list[Finding], limit_ms: int | None) -> list[Finding]:
    """Bars of non-collective work, not on a waiting rank, whose elapsed time reaches the collective's timeout."""
    if limit_ms is None:
        return []
    waited = {f.rank for f in waiting if f.rank is not None}
    out: list[tuple[float, Finding]] = []
    for f in findings:
        if f.signature != "progress.tqdm" or (f.rank is not None and f.rank in waited):
            continue
        bar = bar_of(f.evidence[0].text)
        if bar is None or not is_work(bar[0] or bar_step(f, findings)) or bar[1] * 1000 < REACHES * limit_ms:
            continue
        out.append((bar[1], f))
    out.sort(key=lambda x: (-x[0], x[1].evidence[0].file, x[1].evidence[0].line))
    return [f for _, f in out]


def unowned_bar(findings: list[Finding], waiting: list[Finding]) -> Finding | None:
    """In a log where the waiting ranks' timeouts follow it, the last bar before them when it is an unfinished
    evaluation or generation loop printed by a line that names no rank, with no training step or "finished" line
    between it and the first timeout (line order as time: lm-evaluation-harness draws its bar on rank 0 only,
    without a rank prefix). A short bar of other work (a datasets map) says nothing: it reaches no timeout."""
    first_wait: dict[str, int] = {}
    for f in waiting:
        ev = f.evidence[0]
        first_wait[ev.file] = min(first_wait.get(ev.file, ev.line), ev.line)
    best: Finding | None = None
    for f in findings:
        ev = f.evidence[0]
        if f.signature != "progress.tqdm" or f.rank is not None or ev.line >= first_wait.get(ev.file, 0):
            continue
        if best is None or (ev.file, ev.line) > (best.evidence[0].file, best.evidence[0].line):
            best = f
    bar = work_bar(best.evidence[0], findings) if best is not None else None
    if best is None or bar is None or _EVAL_LOOP.search(bar[0]) is None:
        return None  # the last bar before the timeouts finished, counts training steps, or is no evaluation loop
    return None if stepped_after(best.evidence[0], findings, first_wait) else best


def stepped_after(ev: Evidence, findings: list[Finding], first_wait: dict[str, int]) -> bool:
    """A step or a finished step was printed between ``ev`` and the first wait of its file: the work it
    announced ended before the others waited."""
    return any(
        f.rank is None
        and (f.signature in STEP_SIGNATURES or f.signature == "progress.step_done")
        and f.evidence[0].file == ev.file
        and ev.line < f.evidence[0].line < first_wait[ev.file]
        for f in findings
    )


def work_bar(ev: Evidence, findings: list[Finding]) -> tuple[str, float, int] | None:
    """A line's last tqdm bar when it counts work outside collectives and had not finished: (what, elapsed
    seconds, percent or -1). A bar without a description counts the step its rank announced before it."""
    bar = bar_of(ev.text)
    if bar is None or bar[2] == 100:
        return None
    what = bar[0]
    if not what:
        at = (ev.file, ev.line)
        own = next(
            (f for f in findings if f.signature == "progress.tqdm" and (f.evidence[0].file, f.evidence[0].line) == at),
            None,
        )
        what = bar_step(own, findings) if own is not None else ""
    return (what, bar[1], bar[2]) if is_work(what) else None
