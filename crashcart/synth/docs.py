"""Synth documents: the structured files of a bundle (manifest, config, sacct, scontrol; k8s and DCGM
files via k8sdocs / telemetry), rendered line by line so root lines keep their flag.

Input: a finished Story (fates resolved by the cascade); output: entries in ``Story.docs``. Pure.
"""

from __future__ import annotations

import json

from crashcart.synth import formats as fmt
from crashcart.synth import k8sdocs, telemetry
from crashcart.synth.k8sdocs import job_end
from crashcart.synth.layout import kernel_path
from crashcart.synth.story import Line, Story


def build(s: Story) -> None:
    """Add every document the world and scenario call for."""
    w, rng = s.world, s.rng
    if w.kernel_clock == "mono" or rng.random() < 0.5:
        s.docs["manifest.json"] = _plain(_manifest(s))
    if rng.random() < 0.6:
        if w.scheduler == "k8s":
            s.docs["job.yaml"] = _plain(k8sdocs.job_yaml(s))
        else:
            s.docs["config.json"] = _plain(_config(s))
    if w.scheduler == "slurm":
        if rng.random() < 0.6 or s.sacct_root:
            s.docs["sacct.txt"] = _sacct_text(s)
        else:
            s.docs["sacct.json"] = _plain(_sacct_json(s))
    if w.scheduler == "slurm" and s.scontrol_down is not None:
        s.docs["scontrol.txt"] = _scontrol(s, s.scontrol_down)
    if w.scheduler == "k8s":
        s.docs["events.json"] = k8sdocs.events(s)
    if s.want_telemetry or s.telemetry is not None or rng.random() < 0.35:
        s.docs["telemetry/dcgm.csv"] = telemetry.dcgm(s)
    s.docs.update(s.extra_docs)


def _plain(text: str) -> list[Line]:
    return [Line(0.0, ln) for ln in text.splitlines()]


def elapsed(sec: float) -> str:
    sec = int(max(sec, 0))
    d, rest = divmod(sec, 86400)
    h, rest = divmod(rest, 3600)
    m, x = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:{x:02d}" if d else f"{h:02d}:{m:02d}:{x:02d}"


def _manifest(s: Story) -> str:
    w = s.world
    collected = w.at(s.t_end + 600.0)
    nodes = [
        {"host": n.host, "boot_time": fmt.iso(w.at(n.boot)) + "Z", "kernel_log": kernel_path(w, n.index)}
        for n in w.nodes
    ]
    doc = {
        "job_id": w.job_id if w.scheduler != "k8s" else w.job_name,
        "cluster": f"{w.job_name.split('-')[0]}-prod",
        "scheduler": w.scheduler if w.scheduler != "none" else "torchrun",
        "collected_at": fmt.iso(collected) + "Z",
        "nodes": nodes,
    }
    return json.dumps(doc, indent=2)


def _config(s: Story) -> str:
    w = s.world
    doc = {
        "model": {"name": w.job_name, "hidden_size": 8192, "num_layers": 80, "seq_length": 8192},
        "optimizer": {"lr": 1.5e-4, "warmup_steps": 2000, "weight_decay": 0.1},
        "train": {
            "global_batch_size": 512,
            "micro_batch_size": 1,
            "train_iters": w.total_steps,
            "log_interval": w.log_every,
            "save_interval": w.log_every * 40,
            "bf16": True,
        },
        "distributed": {"backend": "nccl", "world_size": w.ranks, "timeout_minutes": w.timeout_ms // 60000},
        "data": {"path": f"/data/tokenized/{w.job_name}", "num_workers": 4},
    }
    return json.dumps(doc, indent=2)


def _sacct_rows(s: Story) -> list[tuple[str, str, str, str, bool]]:
    """(jobid, name, state, exitcode, root) rows: job, batch, extern, step 0."""
    w = s.world
    state, code = s.sacct_state, s.sacct_exit
    step_state = "CANCELLED" if state.startswith("CANCELLED") else state
    batch = "CANCELLED" if state in ("NODE_FAIL", "TIMEOUT", "PREEMPTED") or state.startswith("CANCELLED") else "FAILED"
    return [
        (w.job_id, w.job_name, state, code, s.sacct_root),
        (f"{w.job_id}.batch", "batch", batch, code if batch == "FAILED" else "0:15", False),
        (f"{w.job_id}.extern", "extern", "COMPLETED" if state != "NODE_FAIL" else "CANCELLED", "0:0", False),
        (f"{w.job_id}.0", "python" if w.launcher == "srun" else "torchrun", step_state, code, s.sacct_root),
    ]


def _sacct_text(s: Story) -> list[Line]:
    w = s.world
    hosts = fmt.hostlist([n.host for n in w.nodes])
    took = elapsed(job_end(s) + 2.0)
    cpus = 28 * w.ranks
    head = (
        f"{'JobID':<18} {'JobName':>12} {'Partition':>10} {'Account':>10} {'AllocCPUS':>10} {'State':>20} "
        f"{'ExitCode':>8} {'Elapsed':>10} {'Timelimit':>10} {'NodeList':<30}"
    )
    sep = " ".join("-" * n for n in (18, 12, 10, 10, 10, 20, 8, 10, 10, 30))
    out = [Line(0.0, head.rstrip()), Line(0.0, sep)]
    for jobid, name, state, code, root in _sacct_rows(s):
        part = "batch" if "." not in jobid else ""
        limit = s.time_limit if "." not in jobid else ""
        text = (
            f"{jobid:<18} {name[:12]:>12} {part:>10} {'ml-llm':>10} {cpus:>10} {state:>20} {code:>8} "
            f"{took:>10} {limit:>10} {hosts:<30}"
        )
        out.append(Line(0.0, text.rstrip(), root=root))
    return out


def _sacct_json(s: Story) -> str:
    w = s.world
    start = int(w.at(0.0).timestamp())
    end = int(w.at(job_end(s) + 2.0).timestamp())
    jobs = []
    rows = _sacct_rows(s)
    steps = [
        {
            "step": {"id": jobid, "name": name},
            "state": state.split()[0],
            "exit_code": {"return_code": int(code.split(":")[0]), "signal": {"id": int(code.split(":")[1])}},
            "nodes": {"range": fmt.hostlist([n.host for n in w.nodes])},
        }
        for jobid, name, state, code, _ in rows[1:]
    ]
    jobs.append(
        {
            "job_id": int(w.job_id),
            "name": w.job_name,
            "user": w.user,
            "account": "ml-llm",
            "partition": "batch",
            "nodes": fmt.hostlist([n.host for n in w.nodes]),
            "state": {"current": [rows[0][2].split()[0]], "reason": "None"},
            "exit_code": {
                "status": ["EXITED"],
                "return_code": {"set": True, "infinite": False, "number": int(rows[0][3].split(":")[0])},
            },
            "time": {
                "start": start,
                "end": end,
                "elapsed": end - start,
                "limit": {"set": True, "infinite": False, "number": 2880},
            },
            "steps": steps,
        }
    )
    doc = {
        "meta": {"slurm": {"version": {"major": "23", "minor": "11", "micro": "4"}, "release": "23.11.4"}},
        "jobs": jobs,
        "warnings": [],
        "errors": [],
    }
    return json.dumps(doc, indent=2)


def _scontrol(s: Story, n: int) -> list[Line]:
    """``scontrol show node`` of the failed node."""
    w = s.world
    node = w.nodes[n]
    seen = fmt.iso(w.at(s.t0 + 90.0))
    gpus = len(node.ranks)
    text = [
        f"NodeName={node.host} Arch=x86_64 CoresPerSocket=56 ",
        "   CPUAlloc=0 CPUEfctv=224 CPUTot=224 CPULoad=N/A",
        f"   AvailableFeatures={w.gpu_kind},ib",
        f"   ActiveFeatures={w.gpu_kind},ib",
        f"   Gres=gpu:{w.gpu_kind}:{gpus}",
        f"   NodeAddr={node.host} NodeHostName={node.host} ",
        "   RealMemory=2063937 AllocMem=0 FreeMem=N/A Sockets=2 Boards=1",
        "   State=DOWN+NOT_RESPONDING ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        "   Partitions=batch ",
        f"   BootTime={fmt.iso(w.at(node.boot))} SlurmdStartTime={fmt.iso(w.at(node.boot + 80.0))}",
        f"   CfgTRES=cpu=224,mem=2063937M,billing=224,gres/gpu={gpus}",
        f"   Reason=Not responding [slurm@{seen}]",
    ]
    return [Line(0.0, t, root=i in (7, 11)) for i, t in enumerate(text)]
