"""Synth layout and writer: which file each stream lands in, with which per-line prefix.

Input: a finished Story and an empty output directory; output: the files on disk, plus the
(file, 1-based line) of every root line and the symptom classes actually written. Root positions
are recorded at the moment each line is written, never searched for afterwards. Does I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from crashcart.synth import dashboard
from crashcart.synth.story import Key, Line, Story
from crashcart.synth.world import World


@dataclass(frozen=True)
class Written:
    roots: list[dict[str, object]]
    symptoms: list[str]


def kernel_path(w: World, n: int) -> str:
    host = w.nodes[n].host
    if w.layout == "per_node":
        return f"{host}/kern.log"
    return f"nodes/{host}/{'kern.log' if w.kernel_clock == 'syslog' else 'dmesg.log'}"


def slurm_path(w: World) -> str:
    return f"slurm-{w.job_id}.out"


def _route(w: World, key: Key) -> tuple[str, str]:
    """(path, prefix) for a stream."""
    kind, i = key
    lay = w.layout
    if kind == "kernel":
        return kernel_path(w, i), ""
    if kind == "slurm":
        return slurm_path(w), ""
    if kind == "fm":
        host = w.nodes[i].host
        return (f"{host}/fabricmanager.log" if lay == "per_node" else f"nodes/{host}/fabricmanager.log"), ""
    node = w.nodes[w.rank_node[i]] if kind == "rank" else w.nodes[i]
    if kind == "agent":
        where = {
            "per_rank": f"nodes/{node.host}/torchrun.log",
            "per_node": f"logs/{node.host}/launcher.log",
            "torchrun_prefixed": f"torchrun/{node.host}.log",
            "k8s": f"pods/{node.pod}.log",
        }
        return where.get(lay, slurm_path(w)), ""
    if lay == "per_rank":
        return f"rank-{i}.log", ""
    if lay == "per_node":
        return f"logs/{node.host}/rank_{i}.out", ""
    if lay == "slurm_combined":
        width = len(str(w.ranks - 1))
        return slurm_path(w), f"{i:>{width}}: "
    prefix = f"[rank{i}]:"
    if lay == "torchrun_prefixed":
        if w.prefix_style == "default":
            prefix = f"[default{w.local[i]}]:[rank{i}]:"
        return f"torchrun/{node.host}.log", prefix
    return f"pods/{node.pod}.log", prefix


def _k8s_line(w: World, line: Line, text: str) -> str:
    dt = w.at(line.t)
    stamp = f"{dt:%Y-%m-%dT%H:%M:%S}.{dt.microsecond:06d}{int(line.t * 1e6) % 1000:03d}Z"
    out = " INFO " in text or "iteration " in text or "] [INFO]" in text
    return json.dumps({"time": stamp, "stream": "stdout" if out else "stderr", "log": text + "\n"})


def assemble(s: Story) -> dict[str, list[tuple[str, Line]]]:
    """Every output file as (written text, source line) pairs, in file order."""
    w = s.world
    merged: dict[str, list[tuple[float, int, int, str, Line]]] = {}
    for prio, key in enumerate(sorted(s.streams)):
        path, prefix = _route(w, key)
        lines = sorted(s.streams[key], key=lambda ln: ln.t)
        bucket = merged.setdefault(path, [])
        for idx, line in enumerate(lines):
            bucket.append((line.t, prio, idx, prefix + line.text, line))
    files: dict[str, list[tuple[str, Line]]] = {}
    for path, items in merged.items():
        items.sort(key=lambda it: (it[0], it[1], it[2]))
        if path.startswith("pods/") and path.endswith(".log"):
            files[path] = [(_k8s_line(w, it[4], it[3]), it[4]) for it in items]
        else:
            files[path] = [(it[3], it[4]) for it in items]
    for path, doc in s.docs.items():
        files[path] = [(line.text, line) for line in doc]
    return files


def write(s: Story, out: Path) -> Written:
    """Write the bundle; record each root line's position as it is written."""
    roots: list[dict[str, object]] = []
    symptoms: set[str] = set()
    for path, lines in sorted(assemble(s).items()):
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        chunks: list[str] = []
        for number, (text, line) in enumerate(lines, start=1):
            if "\n" in text:
                raise ValueError(f"embedded newline in {path}:{number}")
            chunks.append(text + "\n")
            if line.root:
                roots.append({"file": path, "line": number})
            if line.symptom:
                symptoms.add(line.symptom)
        target.write_bytes("".join(chunks).encode("utf-8"))
        if path == "telemetry/dcgm.csv":
            dashboard.render([text for text, _ in lines], out / "dashboard" / "gpu-dashboard.png")
    return Written(roots, sorted(symptoms))
