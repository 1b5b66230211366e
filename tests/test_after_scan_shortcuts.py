"""The shortcuts of the stages after the scan (locate, group, reduce, report) give the answers of the work they skip.

Each oracle is the plain computation the shortcut replaces:

- ``mask.mask`` masks a line's digit classes once (``_mask_mapped``) and keeps that only when it holds no digit:
  the same as masking the line itself;
- ``prefix.may_name_address`` is False only where ``view`` finds no host starting with a digit, and
  ``may_name_rank`` or ``[default`` is needed for ``view`` to find a rank or a local rank (``locate.last``);
- ``topology.nccl_prefix`` and ``launcher_rank`` skip lines without the words their patterns hold;
- ``causal.teardown_aborts`` reads what the rest of the bundle says only when a failure summary holds an error;
  ``causal.versions`` reads every version key in one pass; ``adjust.specific_lines`` asks about aborts only when
  a line is near; ``throughput.points`` reads only its signature's measures; ``explain._support`` asks whether a
  line names the culprit only while that is needed, and only of lines of its rank or a cited file;
- ``reading`` works out the progress and benign signatures once per catalogue.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crashcart.catalogue import load_catalogue
from crashcart.locate import topology
from crashcart.models import Culprit, Evidence, Finding
from crashcart.reduce import adjust, causal, explain, throughput
from crashcart.report import reading
from crashcart.text import mask, prefix
from crashcart.verify import gpu_named, node_named, rank_named

# --- masking ---------------------------------------------------------------------------------------

# NCCL's watchdog line (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, 2.4), as every rank prints it
WATCHDOG = (
    "[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, "
    "NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for {ms} milliseconds before timing out."
)
NUMBERY = st.text(alphabet="0123456789abcdefABCDEFxX.:-_+<>eEPCI \t/()=,", max_size=80)


@given(st.one_of(NUMBERY, st.text(max_size=120)))
def test_mask_of_the_mapped_digits_is_the_mask_of_the_line(text: str) -> None:
    assert mask.mask(text) == mask._mask(text)


@given(st.lists(st.sampled_from(["0x1f", "0000:3b:00.7", "10.0.0.7:29500", "gpu-node-017", "8.9", "1e-5", " "])))
def test_mask_of_volatile_token_soup_is_unchanged(parts: list[str]) -> None:
    text = " ".join(parts)
    assert mask.mask(text) == mask._mask(text)


def test_timeouts_that_differ_only_in_numbers_are_masked_once() -> None:
    mask._mask_mapped.cache_clear()
    lines = [WATCHDOG.format(r=r, s=4011, n=466119168, ms=600060) for r in range(512)]
    templates = {mask.mask(line) for line in lines}
    assert len(templates) == 1 and "<N>" in next(iter(templates))
    assert mask._mask_mapped.cache_info().misses <= 3 + 3**2 + 3**3  # one per mapped form of a rank: 0, 1 or 8


# --- prefixes ---------------------------------------------------------------------------------------

PREFIXES = [
    "(pid=4242, ip=10.0.0.7) ",
    "(RayTrainWorker pid=7, ip=10.1.2.3) ",
    "[pod/10.0.0.1/trainer] ",
    "[pod/trainer-0/main] ",
    "10.0.0.7: ",
    "gpu-node-017: ",
    "[rank7]:",
    "[default3]:",
    "[1,7]<stderr>:",
    "3: ",
    " ",
    "\t",
    "x",
    ":",
    "{",
    '{"log": "10.0.0.1: [rank3]: boom"}',
    "NCCL ",
    "gpu-node-1:12:34 [2] NCCL INFO ",
]
SOUP = st.lists(st.sampled_from(PREFIXES), max_size=6).map("".join)


@given(st.one_of(SOUP, st.text(max_size=60)))
def test_a_line_that_may_name_no_address_has_no_digit_host(line: str) -> None:
    if not prefix.may_name_address(line):
        host = prefix.view(line).host
        assert not (host and host[0].isdigit())


@given(st.one_of(SOUP, st.text(max_size=60)))
def test_last_lines_views_every_line_that_may_name_a_rank(line: str) -> None:
    if not (prefix.may_name_rank(line) or "[default" in line):
        pre = prefix.view(line)
        assert pre.rank is None and pre.local is None


@given(st.one_of(SOUP, st.text(max_size=60)))
def test_address_and_rank_prefixes_as_view_gives_them(line: str) -> None:
    host = prefix.view(line).host
    assert prefix.address_of(line) == (host if host and re.fullmatch(r"(?:\d{1,3}\.){3}\d{1,3}", host) else None)
    assert prefix.names_rank(line) == (prefix.view(line).rank is not None)


def plain_nccl(text: str) -> tuple[str, str, int] | None:
    m = topology._NCCL_PREFIX.search(prefix.view(text).rest[:200])
    return (m.group("host"), m.group("pid"), int(m.group("dev"))) if m else None


def plain_launcher(text: str) -> int | None:
    m = topology._LAUNCHER_RANK.search(prefix.view(text).rest)
    return None if m is None else int(m.group("a") or m.group("b"))


@given(st.one_of(SOUP, st.text(max_size=60)), st.sampled_from(["", "NCCL WARN x", "[Rank 3] x", "rank=2) y"]))
def test_nccl_and_launcher_prefixes_as_without_the_word_checks(line: str, tail: str) -> None:
    for text in (line, line + tail, "(VllmWorker rank=1 pid=7) " + line, "[rank=3] " + tail):
        assert topology.nccl_prefix(text) == plain_nccl(text)
        assert topology.launcher_rank(text) == plain_launcher(text)


# --- findings ---------------------------------------------------------------------------------------

# (signature, class, role, text, fields): torchrun's summary heads (torch/distributed/elastic/multiprocessing/
# errors), a worker's error and its re-print, aborts after a watchdog timeout (ProcessGroupNCCL.cpp), versions
KINDS = [
    ("torchrun.root_cause", "torchelastic_childfailed_summary", "cascade", "Root Cause (first observed failure):", {}),
    ("torchrun.child_failed_error", "torchelastic_childfailed_summary", "cascade", "ChildFailedError:", {}),
    ("generic.exception", "unknown", "root_candidate", "RuntimeError: disk full", {"message": "disk full"}),
    ("generic.exception", "unknown", "root_candidate", "[rank1]: RuntimeError: disk full", {}),
    ("generic.exception", "unknown", "root_candidate", "----------", {}),
    ("python.exception", "python_exception_rank_crash", "root_candidate", "ValueError: bad", {"message": " bad "}),
    ("nccl.watchdog_timeout", "nccl_watchdog_timeout", "cascade", "[Rank 1] Watchdog caught ...", {}),
    ("native.terminate_called", "native_crash_segfault_abort", "teardown", "terminate called after throwing", {}),
    ("native.fatal_python_error", "native_crash_segfault_abort", "root_candidate", "Fatal Python error: Aborted", {}),
    ("nccl.terminate_dist_error", "nccl_watchdog_timeout", "teardown", "what():  [PG 0 Rank 1] ...", {}),
    ("native.frame0", "native_crash_segfault_abort", "context", "frame #0: c10::Error", {}),
    ("nccl.version", "unknown", "context", "NCCL version 2.18.1", {"nccl_version": "2.18.1"}),
    ("nccl.version", "unknown", "context", "NCCL version 2.21.5", {"nccl_version": "2.21.5"}),
    ("nvidia.driver", "unknown", "context", "Driver Version: 535", {"driver_version": "535", "cuda_version": "12.2"}),
    ("nvidia.driver", "unknown", "context", "Driver Version: 550", {"driver_version": "550", "cuda_version": "12.4"}),
]


@st.composite
def findings(draw: st.DrawFn) -> list[Finding]:
    out: list[Finding] = []
    for i in range(draw(st.integers(0, 30))):
        sig, cls, role, text, fields = draw(st.sampled_from(KINDS))
        line = draw(st.integers(1, 300))
        out.append(
            Finding(
                id=f"F{i:05d}",
                class_id=cls,
                signature=sig,
                role=role,  # type: ignore[arg-type]
                severity="P1",
                summary=text,
                rank=draw(st.sampled_from([None, 0, 1, 2])),
                node=draw(st.sampled_from([None, "n1", "n2", "n3"])),
                fields=dict(fields),
                evidence=[
                    Evidence(
                        id=f"E{i:05d}",
                        file=draw(st.sampled_from(["a.log", "b.log"])),
                        line=line,
                        end_line=draw(st.sampled_from([None, line + 3])),
                        text=text,
                    )
                ],
            )
        )
    return out


def plain_summary_reprints(fs: list[Finding]) -> dict[str, str]:
    """``causal._summary_reprints`` before it skipped the bundle's other errors."""
    heads: dict[str, list[int]] = defaultdict(list)
    for f in fs:
        if f.signature in {"torchrun.root_cause", "torchrun.child_failed_error"}:
            heads[f.evidence[0].file].append(f.evidence[0].line)
    elsewhere: set[str] = set()
    inside: list[Finding] = []
    for f in fs:
        ev = f.evidence[0]
        end = ev.end_line or ev.line
        span = causal.SUMMARY_SPAN
        if any(0 < ev.line - h <= span or 0 < end - h <= span for h in heads.get(ev.file, [])):
            inside.append(f)
        elif f.role != "context":
            elsewhere.add(causal._last_text(f))
            if f.fields.get("message"):
                elsewhere.add(f.fields["message"].strip())
    out: dict[str, str] = {}
    for f in fs:
        if f.signature.startswith("generic.") and causal._SEPARATOR.fullmatch(causal._last_text(f)):
            out[f.id] = "a separator line, not an error"
    for f in inside:
        if f.role == "context" or f.signature.startswith("torchrun."):
            continue
        if causal._last_text(f) in elsewhere or f.fields.get("message", "").strip() in elsewhere - {""}:
            out.setdefault(f.id, "torchrun's failure summary re-printing a worker's error")
    return out


def plain_versions(fs: list[Finding]) -> tuple[str, dict[str, str], list[Finding]] | None:
    """``causal.versions`` reading the findings once per key."""
    for key in ("nccl_version", "driver_version", "cuda_driver_version", "cuda_version"):
        per_host: dict[str, dict[str, Finding]] = defaultdict(dict)
        for f in fs:
            v = f.fields.get(key)
            if f.role == "context" and v and f.node:
                per_host[f.node].setdefault(v, f)
        single = {h: next(iter(vs)) for h, vs in per_host.items() if len(vs) == 1}
        values = Counter(single.values())
        if len(values) > 1 and len(per_host) > 1:
            common = max(values, key=lambda v: (values[v], causal._version_key(v)))
            odd = {h: v for h, v in single.items() if v != common}
            evidence = [per_host[h][v] for h, v in sorted(odd.items())]
            normal = next(f for vs in per_host.values() for v, f in vs.items() if v == common)
            return key, odd, [*evidence, normal]
    return None


def plain_specific_lines(class_id: str, first: Finding, fs: list[Finding]) -> list[Evidence]:
    ev0 = first.evidence[0]
    skip = causal.teardown_aborts(fs)
    near = [
        f
        for f in fs
        if (f.class_id == class_id or (f.signature in adjust.FRAME_SIGNATURES and class_id == adjust.NATIVE))
        and f is not first
        and f.id not in skip
        and (f.role in {"root_candidate", "confirmation"} or f.signature in adjust.FRAME_SIGNATURES)
        and f.rank == first.rank
        and f.evidence[0].file == ev0.file
        and -adjust.SPECIFIC_BEFORE <= f.evidence[0].line - ev0.line <= adjust.SPECIFIC_AFTER
        and f.evidence[0].line != ev0.line
    ]
    near.sort(key=lambda f: abs(f.evidence[0].line - ev0.line))
    return [f.evidence[0] for f in near[:2]]


@hsettings(max_examples=200, deadline=None)
@given(findings())
def test_reduce_shortcuts_give_the_plain_answers(fs: list[Finding]) -> None:
    assert causal._summary_reprints(fs) == plain_summary_reprints(fs)
    assert causal.versions(fs) == plain_versions(fs)
    for first in fs[:5]:
        assert adjust.specific_lines(first.class_id, first, fs) == plain_specific_lines(first.class_id, first, fs)


def test_a_reprint_inside_torchrun_summary_is_still_found() -> None:
    def f(i: int, sig: str, cls: str, role: str, line: int, text: str, file: str = "a.log") -> Finding:
        return Finding(
            id=f"F{i}",
            class_id=cls,
            signature=sig,
            role=role,  # type: ignore[arg-type]
            severity="P1",
            summary=text,
            evidence=[Evidence(id=f"E{i}", file=file, line=line, text=text)],
        )

    fs = [
        f(1, "generic.exception", "unknown", "root_candidate", 10, "[rank1]: RuntimeError: disk full", "r1.log"),
        f(2, "torchrun.child_failed_error", "torchelastic_childfailed_summary", "cascade", 100, "ChildFailedError:"),
        f(3, "generic.exception", "unknown", "root_candidate", 130, "RuntimeError: disk full"),
    ]
    assert causal._summary_reprints(fs) == {"F3": "torchrun's failure summary re-printing a worker's error"}


# Megatron-LM's iteration line (megatron/training/training.py training_log) gives the time and TFLOP/s;
# Megatron-DeepSpeed's its samples per second and TFLOPs
MEASURES = st.fixed_dictionaries(
    {},
    optional={
        "iter_time": st.sampled_from(["1738.5", "0", "-1", "x", "1,024.5", ""]),
        "unit": st.sampled_from(["ms", "s"]),
        "gpu_tflops": st.sampled_from(["180.2", "0", ""]),
        "samples_per_s": st.sampled_from(["12.5", ""]),
        "tflops": st.sampled_from(["3.1", "nan"]),
        "rate": st.sampled_from(["2.5", "0.4", ""]),
        "rate_unit": st.sampled_from(["it/s", "s/it"]),
        "total": st.sampled_from(["100", ""]),
        "tps": st.sampled_from(["5000", ""]),
    },
)


def plain_float(v: str) -> float | None:
    try:
        x = float(v.replace(",", ""))
    except ValueError:
        return None
    return x if x > 0 else None


def plain_points(f: Finding) -> list[throughput.Point]:
    """``throughput.points`` before it kept a table of each signature's measures."""
    out: list[throughput.Point] = []
    if f.signature not in throughput._MEASURED:
        return out
    for sig, name, kind, measure in throughput._MEASURES:
        if f.signature != sig or not (v := plain_float(f.fields.get(name, ""))):
            continue
        if kind == "time":
            out.append(throughput.Point(f, v / 1000.0 if f.fields.get("unit") == "ms" else v, measure))
        else:
            out.append(throughput.Point(f, 1.0 / v, measure))
    if f.signature == "progress.tqdm" and (v := plain_float(f.fields.get("rate", ""))):
        unit = f.fields.get("rate_unit", "").strip()
        cost = v if unit.startswith("s/") else 1.0 / v
        out.append(throughput.Point(f, cost, "progress-bar rate " + (f.fields.get("total") or "")))
    return out


@given(
    st.sampled_from(
        ["progress.iteration_time", "progress.throughput", "progress.rank_throughput", "progress.tqdm", "x"]
    ),
    MEASURES,
)
def test_points_read_only_their_signatures_measures(sig: str, fields: dict[str, str]) -> None:
    f = Finding(
        id="F1",
        class_id="unknown",
        signature=sig,
        role="context",
        severity="info",
        summary="",
        fields=fields,
        evidence=[Evidence(id="E1", file="a.log", line=1, text="x")],
    )
    assert throughput.points(f) == plain_points(f)


def test_progress_and_benign_signatures_once_per_catalogue() -> None:
    cat = load_catalogue()
    step = set(reading._STEP_FIELDS)
    progress = [
        i
        for i, s in enumerate(cat.signatures)
        if s.role == "context" and step & set(re.findall(r"\(\?P<(\w+)>", s.pattern))
    ]
    benign = [i for i, s in enumerate(cat.signatures) if s.role == "context" and "benign" in s.summary.lower()]
    assert (
        reading._progress_signatures() == progress and reading._progress_signatures() is reading._progress_signatures()
    )
    assert reading._benign_signatures() == benign
    # Megatron-LM's iteration line (megatron/training/training.py training_log) is progress
    assert reading.is_progress_line(
        " [2026-12-01 00:00:01] iteration        2/  250000 | consumed samples:         1024 | "
        "elapsed time per iteration (ms): 1738.5 | learning rate: 1.500E-04 | global batch size:   512 |"
    )


def plain_support(culprit: Culprit, findings: list[Finding], cited: list[Evidence]) -> list[str]:
    """``explain._support`` before it asked each naming test only while needed, and of related lines only."""
    out: list[str] = []
    texts = [(e.file, e.text) for e in cited]
    need_rank = culprit.rank is not None and not any(rank_named(culprit.rank, f, t) for f, t in texts)
    need_node = culprit.node is not None and not any(node_named(culprit.node, f, t) for f, t in texts)
    need_gpu = culprit.gpu is not None and not any(gpu_named(culprit.gpu, t) for _, t in texts)
    files = {e.file for e in cited}
    for f in findings:
        if not (need_rank or need_node or need_gpu):
            break
        if f.role != "context" and not (need_node and f.node == culprit.node):
            continue
        ev = f.evidence[0]
        names_rank = (
            f.role == "context"
            and culprit.rank is not None
            and f.rank == culprit.rank
            and rank_named(culprit.rank, ev.file, ev.text)
        )
        names_node = culprit.node is not None and node_named(culprit.node, ev.file, ev.text)
        names_gpu = culprit.gpu is not None and gpu_named(culprit.gpu, ev.text)
        useful = (need_rank and names_rank) or (need_node and names_node) or (need_gpu and names_gpu)
        related = (f.rank == culprit.rank and culprit.rank is not None) or ev.file in files
        if useful and related:
            out.append(ev.id)
            need_rank = need_rank and not names_rank
            need_node = need_node and not names_node
            need_gpu = need_gpu and not names_gpu
    return out


# NCCL's init line names host, rank and bus id (src/init.cc "%s:%d:%d [%d] NCCL INFO comm %p rank %d nRanks %d
# nNodes %d localRanks %d localRank %d MNNVL %d", "Init COMPLETE"; busId from "ncclCommInitRank ... busId 3b000")
NAMING = [
    "n1:4242:4301 [0] NCCL INFO comm 0x55d0 rank 1 nRanks 4 nNodes 2 localRanks 2 localRank 1 - Init COMPLETE",
    "n2:4243:4302 [1] NCCL INFO ncclCommInitRank comm 0x55d1 rank 2 nranks 4 cudaDev 1 busId 3b000 - Init START",
    "[rank1]: RuntimeError: CUDA error on n1 GPU 0000:3b:00",
    "nothing here",
]


@hsettings(max_examples=200, deadline=None)
@given(
    findings(),
    st.builds(
        Culprit,
        node=st.sampled_from([None, "n1", "n2"]),
        rank=st.sampled_from([None, 1, 2]),
        gpu=st.sampled_from([None, "0000:3b:00"]),
    ),
    st.lists(st.sampled_from(NAMING), max_size=len(KINDS)),
    st.integers(0, 3),
)
def test_support_lines_as_before(fs: list[Finding], culprit: Culprit, texts: list[str], cited_n: int) -> None:
    fs = [
        f.model_copy(update={"evidence": [f.evidence[0].model_copy(update={"text": t})]})
        for f, t in zip(fs, texts, strict=False)
    ] + fs
    init = Finding(
        id="F99999",
        class_id="unknown",
        signature="nccl.comm_init",
        role="context",
        severity="info",
        summary="init",
        rank=1,
        node="n1",
        evidence=[Evidence(id="E99999", file="a.log", line=1, text=NAMING[0])],
    )
    fs = [*fs, init]
    cited = [f.evidence[0] for f in fs[:cited_n]]
    c = causal.Candidate("unknown", fs[:1], [])
    assert explain._support(culprit, c, fs, cited) == plain_support(culprit, fs, cited)
