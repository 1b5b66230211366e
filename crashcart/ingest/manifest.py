"""The optional ``manifest.json`` / ``crashcart.yaml`` at a bundle's root (DESIGN §4.3): job id, scheduler, nodes
with boot times and kernel logs, rank map. Unknown fields are ignored; a malformed manifest is ignored too."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from crashcart.text import clock


@dataclass(frozen=True)
class NodeInfo:
    host: str
    boot_time: datetime | None = None
    kernel_log: str | None = None


@dataclass(frozen=True)
class Manifest:
    """The optional ``manifest.json`` / ``crashcart.yaml`` (DESIGN §4.3); unknown fields ignored."""

    job_id: str | None = None
    cluster: str | None = None
    scheduler: str | None = None
    collected_at: datetime | None = None
    nodes: tuple[NodeInfo, ...] = ()
    rank_map: dict[int, str] = field(default_factory=dict)


def _parse_dt(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    parsed = clock.parse_time(value)
    return parsed.time if parsed is not None else None


def _parse_manifest(path: Path) -> Manifest | None:
    """Read the optional manifest; a malformed one is ignored (the logs carry the same facts)."""
    try:
        raw = path.read_text("utf-8", "replace")
        data: Any = json.loads(raw) if path.suffix == ".json" else _load_yaml(raw)
    except (ValueError, OSError):
        return None
    if not isinstance(data, dict):
        return None
    nodes: list[NodeInfo] = []
    for n in data.get("nodes") or []:
        if isinstance(n, dict) and isinstance(n.get("host"), str):
            kl = n.get("kernel_log")
            nodes.append(NodeInfo(n["host"], _parse_dt(n.get("boot_time")), kl if isinstance(kl, str) else None))
    rank_map: dict[int, str] = {}
    rm = data.get("rank_map")
    if isinstance(rm, dict):
        for k, v in rm.items():
            if str(k).lstrip("-").isdigit() and isinstance(v, str):
                rank_map[int(k)] = v
    job = data.get("job_id")
    return Manifest(
        job_id=str(job) if isinstance(job, str | int) else None,
        cluster=data.get("cluster") if isinstance(data.get("cluster"), str) else None,
        scheduler=data.get("scheduler") if isinstance(data.get("scheduler"), str) else None,
        collected_at=_parse_dt(data.get("collected_at")),
        nodes=tuple(nodes),
        rank_map=rank_map,
    )


def _load_yaml(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from exc


def _is_manifest(path: str) -> bool:
    return path in {"manifest.json", "crashcart.yaml", "crashcart.yml"}
