"""Synth documents: the structured files of a bundle (manifest, config, sacct, scontrol, k8s events,
DCGM telemetry CSV), rendered line by line so root lines keep their flag.

Input: a finished Story (fates resolved by the cascade); output: entries in ``Story.docs``. Pure.
"""

from __future__ import annotations

import json
import random

from crashcart.synth import formats as fmt
from crashcart.synth.layout import kernel_path
from crashcart.synth.story import K8sEvent, Line, Story


def build(s: Story) -> None:
    """Add every document the world and scenario call for."""
    w, rng = s.world, s.rng
    if w.kernel_clock == "mono" or rng.random() < 0.5:
        s.docs["manifest.json"] = _plain(_manifest(s))
    if rng.random() < 0.6:
        if w.scheduler == "k8s":
            s.docs["job.yaml"] = _plain(_job_yaml(s))
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
        s.docs["events.json"] = _events(s)
    if s.want_telemetry or s.telemetry is not None or rng.random() < 0.35:
        s.docs["telemetry/dcgm.csv"] = _dcgm(s)
    s.docs.update(s.extra_docs)


def _plain(text: str) -> list[Line]:
    return [Line(0.0, ln) for ln in text.splitlines()]


def elapsed(sec: float) -> str:
    sec = int(max(sec, 0))
    d, rest = divmod(sec, 86400)
    h, rest = divmod(rest, 3600)
    m, x = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:{x:02d}" if d else f"{h:02d}:{m:02d}:{x:02d}"


def job_end(s: Story) -> float:
    ends = [t for t in s.ended.values() if t < float("inf")]
    return max(ends) if ends else s.t_end


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


def _job_yaml(s: Story) -> str:
    w = s.world
    nproc = len(w.nodes[0].ranks)
    lines = [
        "apiVersion: kubeflow.org/v1",
        "kind: PyTorchJob",
        "metadata:",
        f"  name: {w.job_name}",
        f"  namespace: {w.namespace}",
        "spec:",
        "  pytorchReplicaSpecs:",
    ]
    for role, count in (("Master", 1), ("Worker", len(w.nodes) - 1)):
        if count <= 0:
            continue
        lines += [
            f"    {role}:",
            f"      replicas: {count}",
            "      restartPolicy: Never",
            "      template:",
            "        spec:",
            "          hostNetwork: true",
            "          containers:",
            "          - name: pytorch",
            "            image: nvcr.io/nvidia/pytorch:24.03-py3",
            f"            command: [torchrun, --nproc_per_node={nproc}, /workspace/{w.script}]",
            "            resources:",
            "              limits:",
            "                memory: 1600Gi",
            f"                nvidia.com/gpu: {nproc}",
        ]
    return "\n".join(lines)


def _sacct_rows(s: Story) -> list[tuple[str, str, str, str, bool]]:
    """(jobid, name, state, exitcode, root) rows: job, batch, extern, step 0."""
    w = s.world
    state, code = s.sacct_state, s.sacct_exit
    step_state = "CANCELLED" if state.startswith("CANCELLED") else state
    batch = (
        "CANCELLED"
        if state in ("NODE_FAIL", "TIMEOUT", "PREEMPTED") or state.startswith("CANCELLED")
        else "FAILED"
    )
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


def _events(s: Story) -> list[Line]:
    w = s.world
    items: list[tuple[dict[str, object], bool]] = []
    for node in w.nodes:
        base = -40.0 + node.index
        for i, (reason, comp, msg) in enumerate(
            (
                (
                    "Scheduled",
                    "default-scheduler",
                    f"Successfully assigned {w.namespace}/{node.pod} to {node.host}",
                ),
                (
                    "Pulled",
                    "kubelet",
                    'Container image "nvcr.io/nvidia/pytorch:24.03-py3" already present on machine',
                ),
                ("Created", "kubelet", "Created container pytorch"),
                ("Started", "kubelet", "Started container pytorch"),
            )
        ):
            ev = _event(s, base + i * 3.0, reason, msg, "Pod", node.pod, node.host, "Normal", comp)
            items.append((ev, False))
    failed = [n for n in w.nodes if any(s.ended.get(r, float("inf")) < float("inf") for r in n.ranks)]
    if failed:
        role = "Master" if failed[0].index == 0 else "Worker"
        s.k8s_events.append(
            K8sEvent(
                job_end(s) + 5.0,
                "PyTorchJobFailed",
                f"PyTorchJob {w.namespace}/{w.job_name} is failed because 1 {role} replica(s) failed.",
                "PyTorchJob",
                w.job_name,
                "",
                component="pytorchjob-controller",
            )
        )
    for e in sorted(s.k8s_events, key=lambda e: e.t):
        items.append(
            (_event(s, e.t, e.reason, e.message, e.kind, e.name, e.host, e.type, e.component), e.root)
        )
    out = [Line(0.0, "{"), Line(0.0, '    "apiVersion": "v1",'), Line(0.0, '    "items": [')]
    for k, (item, root) in enumerate(items):
        body = json.dumps(item, indent=4).splitlines()
        for j, ln in enumerate(body):
            text = " " * 8 + ln + ("," if j == len(body) - 1 and k < len(items) - 1 else "")
            key = ln.strip().split(":")[0]
            out.append(Line(0.0, text, root=root and key in ('"message"', '"reason"')))
    out += [
        Line(0.0, t)
        for t in (
            "    ],",
            '    "kind": "List",',
            '    "metadata": {',
            '        "resourceVersion": ""',
            "    }",
            "}",
        )
    ]
    return out


def _event(
    s: Story, t: float, reason: str, msg: str, kind: str, name: str, host: str, typ: str, comp: str
) -> dict[str, object]:
    w = s.world
    stamp = fmt.iso(w.at(t)) + "Z"
    uid = f"{abs(hash_str(name + reason + str(round(t, 3)))):032x}"
    obj: dict[str, object] = {"kind": kind, "name": name}
    if kind == "Pod":
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "namespace": w.namespace,
            "uid": f"{uid[:8]}-{uid[8:12]}-{uid[12:16]}-{uid[16:20]}-{uid[20:32]}",
        }
    return {
        "apiVersion": "v1",
        "count": 1,
        "eventTime": None,
        "firstTimestamp": stamp,
        "involvedObject": obj,
        "kind": "Event",
        "lastTimestamp": stamp,
        "message": msg,
        "metadata": {"creationTimestamp": stamp, "name": f"{name}.{uid[:16]}", "namespace": w.namespace},
        "reason": reason,
        "reportingComponent": comp,
        "reportingInstance": host if comp == "kubelet" else "",
        "source": {"component": comp, "host": host} if comp == "kubelet" else {"component": comp},
        "type": typ,
    }


def hash_str(text: str) -> int:
    """A stable (non-randomised) string hash: FNV-1a, 128 bits."""
    h = 0x6C62272E07BB014262B821756295C58D
    for ch in text.encode():
        h ^= ch
        h = (h * 0x0000000001000000000000000000013B) % (1 << 128)
    return h


def describe_pod(s: Story, n: int, state: list[str], roots: set[int], *, in_container: bool) -> None:
    """``kubectl describe pod`` for node ``n``'s pod. ``state`` goes under the container (``in_container``)
    or right after ``Status:``; ``roots`` index into ``state``."""
    w = s.world
    node = w.nodes[n]
    start = w.at(-35.0 + n)
    head = [
        f"Name:             {node.pod}",
        f"Namespace:        {w.namespace}",
        "Priority:         0",
        "Service Account:  default",
        f"Node:             {node.host}/{node.ip}",
        f"Start Time:       {start:%a, %d %b %Y %H:%M:%S} +0000",
        f"Labels:           training.kubeflow.org/job-name={w.job_name}",
        f"                  training.kubeflow.org/replica-index={max(n - 1, 0)}",
        "Status:           Failed",
    ]
    body = [
        f"IP:               {node.ip}",
        "Containers:",
        "  pytorch:",
        "    Image:          nvcr.io/nvidia/pytorch:24.03-py3",
    ]
    tail = [
        "    Limits:",
        "      memory:          1600Gi",
        f"      nvidia.com/gpu:  {len(node.ranks)}",
        "Events:           <none>",
    ]
    marked = [Line(0.0, t, root=i in roots) for i, t in enumerate(state)]
    plain = [Line(0.0, t) for t in head]
    if in_container:
        lines = plain + [Line(0.0, t) for t in body] + marked
    else:
        lines = plain + marked + [Line(0.0, t) for t in body]
    s.extra_docs[f"pods/{node.pod}.describe.txt"] = lines + [Line(0.0, t) for t in tail]


def _dcgm(s: Story) -> list[Line]:
    w, tel = s.world, s.telemetry
    rng = random.Random(f"crashcart-synth/dcgm/{w.seed}/{s.class_id}")
    interval = 30.0 if w.timeout_ms <= 600000 else 60.0
    first = min(s.t0, tel.onset if tel and tel.anomaly else s.t0) - 20 * 60
    start = max(w.t_train0 + 5.0, first)
    grid0 = w.at(start)
    skew = (grid0.second % int(interval)) + grid0.microsecond / 1e6
    t = start + (interval - skew)
    end = min(s.t_end, job_end(s) + 600.0)
    hi, idle = (1980, 345) if w.gpu_kind == "h100" else (1410, 210)
    tdp = 700.0 if w.gpu_kind == "h100" else 400.0
    out = [
        Line(
            0.0,
            "timestamp,hostname,gpu,pci_bus_id,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_SM_CLOCK,"
            "DCGM_FI_DEV_POWER_USAGE,DCGM_FI_DEV_CLOCK_THROTTLE_REASONS,DCGM_FI_DEV_GPU_UTIL",
        )
    ]
    while t <= end:
        stamp = fmt.iso(w.at(t)) + "Z"
        for node in w.nodes:
            for r in node.ranks:
                L = w.local[r]
                culprit = tel is not None and bool(tel.anomaly) and tel.node == node.index and tel.local == L
                active = culprit and tel is not None and t >= tel.onset and t < s.ended.get(r, float("inf"))
                if active and tel is not None and tel.anomaly == "missing":
                    continue
                row, root = _sample(s, r, t, rng, hi, idle, tdp, active, culprit)
                temp, clock, power, reason, util = row
                gpu = f"{node.host},{L},{fmt.smi_busid(w.bus(r))}"
                text = f"{stamp},{gpu},{temp},{clock},{power:.3f},{reason},{util}"
                out.append(Line(t, text, root=root))
        t += interval
    return out


def _sample(
    s: Story,
    r: int,
    t: float,
    rng: random.Random,
    hi: int,
    idle: int,
    tdp: float,
    active: bool,
    culprit: bool,
) -> tuple[tuple[int, int, float, int, int], bool]:
    """One GPU sample: (temp, SM clock, power, throttle reasons, util) and whether it is a root row."""
    tel = s.telemetry
    fate = s.fate.get(r)
    if t >= s.ended.get(r, float("inf")):
        return (rng.randrange(33, 41), idle, rng.uniform(62, 88), 1, 0), False
    if active and tel is not None:
        since = t - tel.onset
        if tel.anomaly == "throttle":
            clock = max(705, hi - 225 * int(since // 240 + 1))
            reason = 0x40 | (0x8 if since > 600 else 0)
            return (rng.randrange(87, 94), clock, rng.uniform(0.5, 0.62) * tdp, reason, 100), True
        if tel.anomaly == "brake":
            return (
                rng.randrange(58, 66),
                rng.choice((345, 420, 510)),
                rng.uniform(0.25, 0.33) * tdp,
                0x80,
                100,
            ), True
        if tel.anomaly == "straggler":
            return (rng.randrange(76, 82), hi, rng.uniform(0.985, 1.0) * tdp, 0, 100), True
    if t >= s.t0:
        if fate is not None and fate.kind == "hang" and not culprit:
            return (rng.randrange(44, 49), hi, rng.uniform(0.13, 0.16) * tdp, 0, 0), False
        return (rng.randrange(47, 56), hi, rng.uniform(0.2, 0.3) * tdp, 0, 100), False
    if tel is not None and tel.anomaly == "straggler" and t >= tel.onset:
        return (rng.randrange(55, 62), hi, rng.uniform(0.42, 0.52) * tdp, 0, rng.randrange(52, 68)), False
    reason = 0x4 if rng.random() < 0.04 else 0
    return (rng.randrange(61, 75), hi, rng.uniform(0.88, 0.99) * tdp, reason, rng.randrange(96, 101)), False
