"""The ``no_failure`` verdict: the job completed and nothing in the bundle is a failure (TAXONOMY §2, row "—").

Input: findings. Output: a ``Diagnosis`` with class ``no_failure`` citing the completion line, and reasoning that
says what was checked, or None when anything in the bundle is a failure or nothing says the job completed.
Benign lines (an optional NCCL network plugin that is not installed, shutdown noise) are never contributing
factors. Pure.
"""

from __future__ import annotations

from crashcart.catalogue import load_catalogue
from crashcart.models import Culprit, Diagnosis, Finding, TimelineEntry

# What says a job completed (context signatures): torchrun's agent when every local worker exited 0
# (torch/distributed/elastic/agent/server/api.py, WorkerState.SUCCEEDED), DeepSpeed's launcher for each worker
# that returned 0 (deepspeed/launcher/launch.py), Slurm's COMPLETED state (scontrol show job, sacct).
SUCCESS_SIGNATURES = frozenset({"torchrun.group_succeeded", "deepspeed.process_succeeded", "slurm.job_completed"})
# Lines that fire on healthy runs and say nothing about a failure: NCCL's net plugin probe
# (src/plugin/net.cc: "NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file"
# when the optional external plugin is absent; NCCL then uses its internal IB/socket transports).
BENIGN_TEXT = ("NET/Plugin", "libnccl-net.so", "Plugin load returned", "No plugin found")
CHECKED = (
    "error and exception lines",
    "crashes and signals",
    "collective and store timeouts",
    "peer and network failures",
    "OOM kills and other kills",
    "GPU, driver and kernel faults",
    "scheduler and launcher failure records",
)


def benign(f: Finding) -> bool:
    """A line that healthy runs print: never a cause and never a contributing factor. Besides the plugin probe,
    any line a context signature calls benign (e.g. nccl.benign_warn: a setting NCCL adjusted, a feature skipped)."""
    text = f.evidence[0].text
    if f.severity != "info" or f.class_id != "unknown":
        return False
    if any(t in text for t in BENIGN_TEXT):
        return True
    cat = load_catalogue()
    return any(
        s.role == "context" and "(benign)" in s.summary and cat.extract(i, text) is not None
        for i, s in enumerate(cat.signatures)
    )


def no_failure(findings: list[Finding]) -> Diagnosis | None:
    """``no_failure`` when the launcher reported success and no finding is a failure; None otherwise."""
    done = [f for f in findings if f.signature in SUCCESS_SIGNATURES]
    if not done:
        return None
    failing = [f for f in findings if f.role != "context" and not benign(f)]
    if failing:
        return None
    first = min(done, key=lambda f: (f.evidence[0].file, f.evidence[0].line))
    ignored = [f for f in findings if f.role != "context" and benign(f)]
    reasons = [
        f"no failure found: {first.summary} ({first.evidence[0].file}:{first.evidence[0].line})",
        "checked every file read for " + ", ".join(CHECKED) + ": none found",
    ]
    if ignored:
        reasons.append(
            f"{len(ignored)} benign line(s) ignored, e.g. {ignored[0].summary!r} (the optional NCCL net plugin "
            "is not installed; NCCL uses its internal transports)"
        )
    return Diagnosis(
        root_class="no_failure",
        summary="No failure found: the job completed and no line in the bundle is a failure",
        culprit=Culprit(),
        time=first.time,
        confidence=0.85,
        root_evidence=[first.evidence[0].id],
        contributing=[],
        symptoms=[],
        hypotheses=[],
        timeline=[
            TimelineEntry(time=first.time, evidence_id=first.evidence[0].id, role="context", class_id="no_failure")
        ],
        reasoning=reasons,
    )
