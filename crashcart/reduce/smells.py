"""Configuration smells that only INFO lines and launch lines show (issue 14, capability 9).

Input: findings (the ``nccl.interface_in_use`` and ``launch.master_addr`` facts and the failure findings), topology.
Output: ``Smell``s — a context finding and why it explains a connection failure — which the offline reduce attaches
to the connection-failure candidate they explain:

- NCCL chose the loopback or a container bridge interface (NCCL src/misc/socket.cc falls back to docker*, then lo,
  when nothing else is up or NCCL_SOCKET_IFNAME says so) in a job whose ranks span hosts: peers cannot reach it;
- NCCL's bootstrap or IB out-of-band socket runs over IPoIB (``ib*``, socket.cc's first choice) while the failure is
  a socket or bootstrap error: IPoIB is often not routed between the nodes;
- the launch's MASTER_ADDR differs from the address the failing connection went to.
Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crashcart.models import Finding, Topology

CONNECT_CLASSES = frozenset(
    {"nccl_init_bootstrap_failure", "nccl_remote_peer_failure", "launcher_rendezvous_store_failure"}
)
_CONTAINER_IF = re.compile(r"^(?:docker|veth|br-|virbr|cni|podman)", re.I)
_SOCKET_ERROR = re.compile(r"socket|bootstrap|connect|refused|unreachable|reset by peer|errno", re.I)
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_ENDPOINT_HOST = re.compile(r"^\(?\[?(?P<host>[\w.:-]+?)\]?(?:[:,]\s*\d+\)?)?$")


@dataclass(frozen=True)
class Smell:
    finding: Finding
    why: str
    kind: str  # "loopback", "container", "ipoib", "master_addr"


def _multi_node(findings: list[Finding], topo: Topology) -> bool:
    hosts = {f.fields["host"] for f in findings if f.signature == "nccl.interface_in_use" and f.fields.get("host")}
    addresses = {f.fields.get("address") for f in findings if f.signature == "nccl.interface_in_use"}
    nranks = [int(v) for f in findings if (v := f.fields.get("nranks", "")).isdigit()]
    devices = [int(v) for f in findings if (v := f.fields.get("device", "")).isdigit()]
    many_ranks = bool(nranks and devices) and max(nranks) > max(devices) + 1 and max(nranks) > 8
    return len(hosts) >= 2 or len(topo.nodes) >= 2 or len(addresses - {None}) >= 2 or many_ranks


def interface_smells(findings: list[Finding], topo: Topology, failure_text: str) -> list[Smell]:
    """Interfaces NCCL used that cannot carry a multi-node job (loopback, container bridge), or IPoIB under a
    socket or bootstrap error."""
    uses = [f for f in findings if f.signature == "nccl.interface_in_use" and f.fields.get("interface")]
    if not uses:
        return []
    multi = _multi_node(findings, topo)
    out: list[Smell] = []
    seen: set[str] = set()
    for f in uses:
        name, addr, via = f.fields["interface"], f.fields.get("address", ""), f.fields.get("via", "")
        if name in seen:
            continue
        if multi and (name == "lo" or addr.startswith("127.") or addr == "::1"):
            kind, why = "loopback", f"NCCL {via} uses the loopback interface {name} ({addr}) in a multi-node job"
        elif multi and _CONTAINER_IF.match(name):
            kind = "container"
            why = f"NCCL {via} uses the container bridge {name} ({addr}), an address other nodes cannot reach"
        elif name.lower().startswith("ib") and via in {"Bootstrap", "NET/IB"} and _SOCKET_ERROR.search(failure_text):
            kind = "ipoib"
            sock = "bootstrap" if via == "Bootstrap" else "out-of-band"
            why = f"NCCL's {sock} socket runs over IPoIB ({name}, {addr}), which is often not routed between nodes"
        else:
            continue
        seen.add(name)
        out.append(Smell(f, why + "; set NCCL_SOCKET_IFNAME to the interface the nodes share", kind))
    return out


def _endpoint_host(value: str) -> str | None:
    m = _ENDPOINT_HOST.match(value.strip().rstrip("."))
    return m.group("host") if m else None


def _is_ip(value: str) -> bool:
    return _IPV4.fullmatch(value) is not None or ":" in value


def master_addr_smell(findings: list[Finding], failures: list[Finding]) -> Smell | None:
    """The launch's MASTER_ADDR is not the address the failing store or bootstrap connection went to."""
    launched = [f for f in findings if f.signature == "launch.master_addr" and f.fields.get("master_addr")]
    if not launched:
        return None
    addrs = {f.fields["master_addr"] for f in launched}
    if len(addrs) != 1:
        return None  # several launch lines disagree among themselves: not one configuration to compare with
    master = addrs.pop()
    for f in failures:
        host = _endpoint_host(f.fields.get("endpoint", ""))
        if host and host != master and _is_ip(host) == _is_ip(master):  # a name and an address may be one host
            why = f"the job was launched with MASTER_ADDR={master}, but the failing connection went to {host}"
            return Smell(launched[0], why, "master_addr")
    return None


SMELL_SCORE = 45.0  # a connection failure and the interface that explains it, when no candidate names the failure
_PROGRESS = frozenset({"training.step_loss", "megatron.iteration", "training.hf_log", "progress.iteration_time"})


def interface_failure(findings: list[Finding], topo: Topology) -> tuple[Finding, list[Smell]] | None:
    """A job that never trained and failed to connect (a symptom-level socket, bootstrap or peer error) over an
    interface that cannot carry it: the configuration is the root (TAXONOMY class 8, network/config)."""
    if any(f.signature in _PROGRESS for f in findings):
        return None  # it trained: the interface carried it, and a later connection error has another story
    failures = [
        f
        for f in findings
        if f.class_id in CONNECT_CLASSES and f.role != "context" and _SOCKET_ERROR.search(f.evidence[0].text)
    ]
    if not failures:
        return None
    timed = [f for f in failures if f.time is not None]
    if timed:
        first = min(timed, key=lambda f: (f.time, f.evidence[0].file, f.evidence[0].line))
    else:
        first = min(failures, key=lambda f: (f.evidence[0].file, f.evidence[0].line))
    smells = [s for s in interface_smells(findings, topo, first.evidence[0].text) if s.kind != "master_addr"]
    return (first, smells) if smells else None
