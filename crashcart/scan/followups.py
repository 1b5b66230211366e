"""Scan stage, second look at one file's findings: what a single matched line cannot say alone.

Input: the findings ``build_findings`` made for one file, the catalogue and the bundle (to read lines back).
Output: the same findings, refined, plus any new ones, in line order. Pure apart from reading bundle lines.

- ``Last error:`` stitching, and a DataLoader worker's ``Original Traceback`` (re-raised by torch/_utils.py).
  PyTorch's c10d prints NCCL's ``ncclGetLastError`` text after its own line (``NCCL error in: ...``,
  ``ncclUnhandledCudaError: ...``, then ``Last error:`` and the detail, on the same or the next line;
  torch/csrc/distributed/c10d/NCCLUtils). The detail is the real clue: it joins the finding, and when the
  catalogue knows it as a more specific cause, the finding takes that class.
- Xid chains (NVRM, open-gpu-kernel-modules ``krcReportXid``): an Xid line ending ``caused by previous Xid N``
  is a consequence and promotes the earlier Xid N on that GPU; the summary Xid 154 (``GPU recovery action
  changed ... to 0x1 (GPU Reset Required)``) is a fallback root, carrying its PCI id, when no other Xid on that
  GPU is a root candidate.
- Loss-scale trends (fp16 dynamic loss scaling: DeepSpeed ``OVERFLOW! ... Attempted loss scale``, apex/Megatron
  ``Gradient overflow. Skipping step``): a scale halving step after step down to its floor, or overflow skips
  running to the end of the log, make ``fp16_loss_scale_overflow`` a root, not an info line.
- Wrapped lines: ``crashcart.scan.wrapped``; a Slurm prolog's shell error on its own lines: ``script_output``;
  the first frame after a faulthandler/glog stack header: ``first_frame``; an scontrol node record's node:
  ``scontrol``.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Callable

from crashcart.catalogue import Catalogue
from crashcart.ingest.bundle import Bundle
from crashcart.models import BundleFile, Evidence, Finding
from crashcart.scan import first_frame, scontrol, script_output, wrapped
from crashcart.scan.wrapped import Maker
from crashcart.text import prefix

_LAST_ERROR = re.compile(r"\bLast error:\s*(?P<rest>.*)$")
_LOOK_AHEAD = 3  # "Last error:" follows the error line within this many lines
_WORKER_WRAPPER = "dataloader.worker_exception"
_STITCH_BUDGET = 64
_NOT_WRAPPERS = frozenset({"nccl.error_return_trace", "nccl.comm_init", "nccl.version"})  # never followed by one
_WORKER_TRACE_MAX = 80  # lines of a worker's original traceback
_MIN_DETAIL_PRIORITY = 55
_CAUSED_BY = re.compile(r"caused by previous Xid (?P<xid>\d+)", re.IGNORECASE)
_RECOVERY = re.compile(r"recovery action changed from .* to 0x[0-9a-fA-F]+ \((?P<action>[^)]*)\)")
_SCALE_KEYS = ("loss_scale", "attempted", "reduced")
_SKIP_SIGNATURES = frozenset({"fp16.overflow_skip", "fp16.overflow_skip_fairseq", "megatron.skipped_iterations"})
_FLOOR_SIGNATURE = "fp16.min_loss_scale"
_MIN_TREND = 4  # overflow skips that make a trend
_END_SLACK = 3  # a skip among the last lines of the log


def refine(
    cat: Catalogue,
    bundle: Bundle,
    bf: BundleFile,
    findings: list[Finding],
    make: Maker,
    evidence_id: Callable[[], str],
) -> list[Finding]:
    """Stitch, chain and trend the findings of one file; add wrapped-line findings.

    ``make(signature index, head line text, evidence, fields)`` builds a numbered finding the way the scanner
    does; ``evidence_id()`` numbers an extra evidence span."""
    budget = [_STITCH_BUDGET]  # look-aheads per file: a log with thousands of NCCL lines pays for a few only
    out = [_stitch_last_error(cat, bundle, bf, f, evidence_id, budget) for f in findings]
    out = _xid_chains(cat, out)
    out.extend(_loss_scale_trend(cat, bundle, bf, out, make))
    out = wrapped.add_wrapped(cat, bundle, bf, out, make)
    out = script_output.stitch(cat, bundle, bf, out, make)  # a Slurm script's shell error on the lines around
    out = first_frame.first_frames(cat, bundle, bf, out, evidence_id)  # a stack header's first frame
    out = scontrol.record_nodes(bundle, bf, out, evidence_id)  # a node record's reason names its NodeName
    return sorted(out, key=lambda f: f.evidence[0].line)


# --- Last error ----------------------------------------------------------------------------------


def _stitch_last_error(
    cat: Catalogue, bundle: Bundle, bf: BundleFile, f: Finding, evidence_id: Callable[[], str], budget: list[int]
) -> Finding:
    """The detail behind a wrapper line: NCCL's ``Last error:`` or a DataLoader worker's original exception."""
    if f.role == "context" or f.source != "rule" or f.evidence[0].end_line is not None or budget[0] <= 0:
        return f
    if f.signature in _NOT_WRAPPERS:
        return f
    head = f.evidence[0]
    if f.signature == _WORKER_WRAPPER:
        found, key, label = _original_exception(bundle, bf, head.line), "worker_error", "DataLoader worker"
    elif f.signature.startswith(("nccl.", "cuda.", "generic.")) or "NCCL" in head.text:
        found, key, label = _last_error(bundle, bf, head.line), "last_error", "NCCL's last error behind"
    else:
        return f
    budget[0] -= 1
    if found is None:
        return f
    detail, detail_at, lines = found
    fields = {**f.fields, key: detail[:300]}
    evidence = list(f.evidence)
    if detail_at > 0:
        span = lines[: detail_at + 1]
        end = head.line + detail_at
        evidence.append(Evidence(id=evidence_id(), file=head.file, line=head.line, end_line=end, text="\n".join(span)))
    best = _best_signature(cat, detail)
    if best is not None and cat.signatures[best].class_id not in {f.class_id, "unknown", "context"}:
        s = cat.signatures[best]
        detail_fields = cat.extract(best, detail) or {}
        return f.model_copy(
            update={
                "class_id": s.class_id,
                "role": s.role,
                "severity": s.severity,
                "summary": f"{cat.summarize(best, detail_fields)} ({label}: {f.summary})",
                "fields": {**fields, "_detail_signature": s.id},
                "evidence": evidence,
            }
        )
    if best is not None:  # same class: the detail's own facts (the peer it could not reach) join the finding
        fields.update({k: v for k, v in (cat.extract(best, detail) or {}).items() if k not in fields})
        fields["_detail_signature"] = cat.signatures[best].id
    return f.model_copy(
        update={
            "summary": f"{f.summary}; {key.replace('_', ' ')}: {detail[:200]}",
            "fields": fields,
            "evidence": evidence,
        }
    )


def _last_error(bundle: Bundle, bf: BundleFile, line: int) -> tuple[str, int, list[str]] | None:
    """(detail, its offset from ``line``, the lines read) of a ``Last error:`` within a few lines."""
    lines = bundle.read_lines(bf.path, line, line + _LOOK_AHEAD + 2)
    if not lines:
        return None
    want = prefix.view(lines[0]).rank
    for offset, text in enumerate(lines[: _LOOK_AHEAD + 1]):
        view = prefix.view(text)
        if view.rank != want:
            continue
        m = _LAST_ERROR.search(view.rest) if "Last error:" in view.rest else None  # the regex, led by \b, is slow
        if m is None:
            continue
        if m.group("rest").strip():
            return m.group("rest").strip(), offset, lines
        for later, nxt in enumerate(lines[offset + 1 :], start=offset + 1):
            body = prefix.view(nxt).rest.strip()
            if body:
                return body, later, lines
        return None
    return None


def _original_exception(bundle: Bundle, bf: BundleFile, line: int) -> tuple[str, int, list[str]] | None:
    """The final exception line of the ``Original Traceback`` that torch's ExceptionWrapper.reraise prints
    after ``Caught <E> in DataLoader worker process <n>.`` (torch/_utils.py)."""
    lines = bundle.read_lines(bf.path, line, line + _WORKER_TRACE_MAX)
    if not lines:
        return None
    want = prefix.view(lines[0]).rank
    indent: int | None = None  # of the "Original Traceback" header; the exception line is as deep
    for offset, text in enumerate(lines[1:], start=1):
        view = prefix.view(text)
        if view.rank != want:
            continue
        body = view.rest
        depth = len(body) - len(body.lstrip())
        if indent is None:
            if body.lstrip().startswith("Original Traceback"):
                indent = depth
            elif offset > 2:
                return None
            continue
        if body.strip() and depth <= indent:
            return body.strip(), offset, lines
    return None


def _best_signature(cat: Catalogue, text: str) -> int | None:
    """The most specific failure signature matching ``text`` (no context, generic or block signatures)."""
    best: int | None = None
    for i, s in enumerate(cat.signatures):
        if s.role == "context" or s.block or s.id.startswith("generic.") or s.class_id in {"xid", "sxid"}:
            continue
        if s.priority < _MIN_DETAIL_PRIORITY or (best is not None and s.priority <= cat.signatures[best].priority):
            continue
        if cat.regex(i).search(text):
            best = i
    return best


# --- Xid chains ----------------------------------------------------------------------------------


def _xid_chains(cat: Catalogue, findings: list[Finding]) -> list[Finding]:
    xids = [(i, f) for i, f in enumerate(findings) if f.signature == "kernel.xid" and f.fields.get("xid")]
    if not xids:
        return findings
    out = list(findings)
    by_gpu: dict[str | None, list[int]] = defaultdict(list)
    for i, f in xids:
        by_gpu[f.gpu].append(i)
    for gpu, idxs in by_gpu.items():
        for i in idxs:
            f = out[i]
            m = _CAUSED_BY.search(f.evidence[0].text)
            if m is None:
                continue
            if f.role != "context":
                out[i] = f.model_copy(update={"role": "cascade", "fields": {**f.fields, "_caused_by_xid": m["xid"]}})
            cause = next(
                (
                    j
                    for j in idxs
                    if out[j].fields.get("xid") == m["xid"] and not _CAUSED_BY.search(out[j].evidence[0].text)
                ),
                None,
            )
            if cause is None or "_promoted" in out[cause].fields:
                continue
            c = out[cause]
            info = cat.classes.get(c.class_id)
            role = "root_candidate" if info is not None and info.hardware else "confirmation"
            if c.role in {"teardown", "context", "cascade"} or (role == "root_candidate" and c.role != role):
                out[cause] = c.model_copy(
                    update={"role": role, "fields": {**c.fields, "_promoted": f"later Xids on GPU {gpu} cite it"}}
                )
        roots = [i for i in idxs if out[i].role == "root_candidate"]
        if roots:
            continue
        for i in idxs:
            f = out[i]
            rec = _RECOVERY.search(f.evidence[0].text)
            if f.fields.get("xid") == "154" and rec is not None and rec["action"].strip().lower() != "none":
                out[i] = f.model_copy(
                    update={
                        "role": "root_candidate",
                        "severity": "P1",
                        "fields": {**f.fields, "_fallback": "summary Xid: no other Xid names a cause on this GPU"},
                    }
                )
                break
    return out


# --- loss scale ----------------------------------------------------------------------------------


def _scale(f: Finding) -> float | None:
    for key in _SCALE_KEYS:
        value = f.fields.get(key)
        if value:
            try:
                return float(value)
            except ValueError:
                return None
    return None


def _loss_scale_trend(
    cat: Catalogue, bundle: Bundle, bf: BundleFile, findings: list[Finding], make: Maker
) -> list[Finding]:
    skips = [f for f in findings if f.signature in _SKIP_SIGNATURES]
    if len(skips) < 3 or any(f.signature == _FLOOR_SIGNATURE for f in findings):
        return []
    per_rank: dict[int | None, list[Finding]] = defaultdict(list)
    for f in skips:
        per_rank[f.rank].append(f)
    out: list[Finding] = []
    for run in per_rank.values():
        scales = [s for f in run if (s := _scale(f)) is not None]
        halving = (
            len(scales) >= _MIN_TREND
            and all(b <= a for a, b in itertools.pairwise(scales))
            and sum(b < a for a, b in itertools.pairwise(scales)) >= _MIN_TREND - 1
            and scales[-1] <= 1.0
        )
        last = run[-1].evidence[0].line
        tail = bundle.read_lines(bf.path, last + 1, last + 50)
        at_end = len(run) >= 3 and sum(1 for t in tail if t.strip()) <= _END_SLACK - 1 and len(tail) < 50
        if not (halving or at_end):
            continue
        why = (
            f"loss scale fell from {scales[0]:g} to {scales[-1]:g} over {len(run)} overflow skips"
            if halving
            else f"{len(run)} overflow skips, the last at the end of the log"
        )
        first, final = run[0], run[-1]
        cited = (final.evidence[0], first.evidence[0]) if first is not final else (final.evidence[0],)
        evidence = [Evidence(id="", file=e.file, line=e.line, text=e.text) for e in cited]
        fields = {**final.fields, "_trend": why}
        made = make(cat.index[_FLOOR_SIGNATURE], final.evidence[0].text, evidence, fields)
        out.append(made.model_copy(update={"summary": f"fp16 loss scaling collapsed: {why}"}))
    return out
