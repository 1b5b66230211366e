"""Synth Kubernetes documents: ``kubectl get events -o json``, ``kubectl describe pod`` and the
PyTorchJob manifest, rendered line by line so root lines keep their flag.

Input: a Story; output: Line lists. Pure.
"""

from __future__ import annotations

import json

from crashcart.synth import formats as fmt
from crashcart.synth.story import K8sEvent, Line, Story


def job_end(s: Story) -> float:
    """When the last rank process ended (or the end of the story if none did)."""
    ends = [t for t in s.ended.values() if t < float("inf")]
    return max(ends) if ends else s.t_end


def job_yaml(s: Story) -> str:
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


def events(s: Story) -> list[Line]:
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
        items.append((_event(s, e.t, e.reason, e.message, e.kind, e.name, e.host, e.type, e.component), e.root))
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
