"""Ingest helper: the per-rank and per-host prefixes of log lines, and ranks/hosts named by file paths.

Input is one line of text (or one bundle-relative path); output is a ``Prefix`` (or an int / str).
Combined logs (``srun -l``, torchrun ``--tee``, ``mpirun --tag-output``, pdsh) are demultiplexed
virtually with it, keeping original line numbers. Pure functions, no I/O.
"""

from __future__ import annotations

import functools
import json
import re
from typing import NamedTuple

__all__ = [
    "Prefix",
    "address_of",
    "host_of_path",
    "local_of_path",
    "looks_like_host",
    "may_name_address",
    "may_name_rank",
    "names_rank",
    "rank_of_path",
    "split_prefix",
]


class Prefix(NamedTuple):
    """The prefixes recognised at the start of a line, and the line without them."""

    rank: int | None  # global rank named by a prefix
    local: int | None  # local rank: N of torchrun/accelerate ``[defaultN]:``
    host: str | None  # pdsh/clush ``host: `` prefix, ``kubectl logs --prefix`` pod, Ray ``ip=``
    rest: str  # the line with the recognised prefixes removed; always ``line[length:]``
    length: int  # number of characters removed from the start


# Prefixes that may only come first (after leading whitespace).
_SRUN = re.compile(r"[ \t]*(\d{1,6}): ")  # srun -l / --label: task id, space-padded
_HOST = re.compile(r"[ \t]*([A-Za-z][A-Za-z0-9.-]{2,62}): ")  # pdsh / clush
_IP_HOST = re.compile(
    r"[ \t]*((?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}): "
)  # pdsh -w 10.0.0.1
_POD = re.compile(r"[ \t]*\[pod/([a-z0-9][a-z0-9.-]{0,252})/[a-z0-9-]+\] ")  # kubectl logs --prefix
# Ray's driver prints each forwarded worker/raylet line as "({prefix}{pid}, ip={ip}) {line}" (python/ray/worker.py 1.x,
# ray/_private/worker.py 2.x print_worker_logs: prefix "pid=" or "<actor or task name> pid=", none for "raylet" and
# "autoscaler +<time>"; log_monitor.py names gcs_server and runtime_env files by those words instead of a pid; ", ip="
# only when the line came from another node than the driver's). A task name may hold parentheses
# ("MapWorker(MapBatches(fn))").
_RAY = re.compile(
    r"[ \t]*\((?:(?:[A-Za-z_][^\s()]*(?:\((?:[^()\s]|\([^()\s]*\))*\))? )?pid=(?:\d+|gcs_server|runtime_env)"
    r"|raylet|autoscaler \+[\w.]+)(?:, ip=([0-9.]+|[0-9a-fA-F:]+))?\) "
)

# Bracketed prefixes that may repeat and nest, in any order.
_RANK = re.compile(r"[ \t]*\[rank(\d{1,7})\]: ?")  # PyTorch
_DEFAULT = re.compile(r"[ \t]*\[default(\d{1,5})\]: ?")  # torchrun --tee / accelerate
_MPI = re.compile(r"[ \t]*\[(\d{1,9}),(\d{1,7})\]<(?:stdout|stderr|stddiag)>: ?")  # Open MPI --tag-output

# Hostname-shaped tokens that are in fact programs, devices, data types or counters.
_NOT_HOST = re.compile(
    r"""(?x)
    (?:python|pypy|pip|perl|ruby|java|gcc|clang|cuda|cudnn|nccl|torch|sm|lib|bin|sbin
      |eth|ib|en[ops]|wl|mlx|hfi|bnxt|nvme|sd[a-z]|md|dm|nvidia|card|loop|bond|veth|tun|tap
      |virbr|docker|br|lo|usb|pci|port|irq|sha|fp|bf|int|uint|float|utf|iso|base|x86|aarch|arm
      |v|ver|version|rc|py|cp|epoch|step|iter|iteration|layer|layers|batch|rank|loss|lr|top|stage
      |phase|block|shard|part|chunk|process|proc|thread|task|job|slurm
    )[_-]?\d+(?:[._-]?[a-z]?\d+)*
    | (?:gpu|cpu|hpu|npu|xpu|cuda)(?:1[0-5]|\d)  # gpu0 .. gpu15 are devices; gpu46 is a host (no node has 47)
    | [a-z]+[_-]\d{5,}                        # slurm-123456, job_1234567: ids, not hosts
    | c10d?|k8s|h5py|e2e|s3|ec2|ipv[46]|x509|oauth2|l[123]|md5|sha1|p2p|mp[34]|utf8|w2v|r2d2
    """
)


def looks_like_host(token: str) -> bool:
    """True when ``token`` is shaped like a cluster host name (``gpu-node-017``, ``node017``, ``h100-2``).

    Conservative: it must start with a letter, contain a digit, use only letters, digits, ``-``,
    ``_`` and ``.``, and not be a program, device, data type, counter or id (``python3``,
    ``eth0``, ``mlx5_0``, ``sha256``, ``fp16``, ``epoch10``, ``rank3``, ``gpu0``, ``slurm-123456``).
    """
    if not 3 <= len(token) <= 253 or not token.isascii() or not token[0].isalpha():
        return False
    if token[-1] in "-_." or not all(c.isalnum() or c in "-_." for c in token):
        return False
    labels = token.lower().split(".")
    first = labels[0]
    if not any(c.isdigit() for c in first):
        return False
    if any(not lab or not any(c.isalpha() for c in lab) for lab in labels[1:]):
        return False  # "python3.10", "1.2.3": the dotted parts of a host name carry letters
    return _NOT_HOST.fullmatch(first) is None


def split_prefix(line: str) -> Prefix:
    """Strip the per-rank/per-host prefixes at the start of ``line`` (possibly nested).

    Recognised: ``[rank27]:``, ``[default3]:[rank27]:``, ``27: `` (srun -l), ``[1,27]<stderr>:``
    (Open MPI), ``gpu-node-017: `` (pdsh), ``[pod/NAME/CONTAINER] `` (kubectl logs --prefix) and
    ``(Worker pid=1, ip=10.0.0.1) `` (Ray), e.g. ``0: [rank0]:``. ``rest == line[length:]``.
    A bare ``27: `` is read as the global rank unless ``[defaultN]:`` follows it (torchrun under
    srun, where the label counts nodes).
    """
    pos = 0
    rank: int | None = None
    local: int | None = None
    host: str | None = None
    srun: int | None = None
    mpi: int | None = None

    m = _POD.match(line) or _RAY.match(line) or _IP_HOST.match(line)
    if m is not None:
        host = m.group(1)
        pos = m.end()
    else:
        m = _SRUN.match(line)
        if m is not None:
            srun = int(m.group(1))
            pos = m.end()
        else:
            m = _HOST.match(line)
            if m is not None and looks_like_host(m.group(1)):
                host = m.group(1)
                pos = m.end()
                m2 = _RAY.match(line, pos)
                if m2 is not None:
                    pos = m2.end()

    while True:
        m = _RANK.match(line, pos)
        if m is not None:
            if rank is None:
                rank = int(m.group(1))
            pos = m.end()
            continue
        m = _DEFAULT.match(line, pos)
        if m is not None:
            if local is None:
                local = int(m.group(1))
            pos = m.end()
            continue
        m = _MPI.match(line, pos)
        if m is not None:
            if mpi is None:
                mpi = int(m.group(2))
            pos = m.end()
            continue
        break

    if rank is None:
        rank = mpi
    if rank is None and local is None:
        # with torchrun under srun, the srun label counts nodes, not ranks
        rank = srun
    return Prefix(rank=rank, local=local, host=host, rest=line[pos:], length=pos)


# ---------------------------------------------------------------------------------------------
# Paths

_PATH_RANK = re.compile(
    r"(?:^|(?<=[^a-z0-9]))(?<!local[-_])(?<!node[-_])(?<!group[-_])"
    r"(?:rank|rnk|process|proc)[-_.]?(\d{1,7})(?!\d)"
)
_PATH_WORKER = re.compile(r"worker[-_.]?(\d{1,7})(?![\d])(?:[._-]|$)")  # only at the start of a part
_PATH_R = re.compile(r"r(\d{1,7})(?:\.[a-z][a-z0-9]*)*")  # r12.err, r3.log: the whole part
# torchrun --log-dir (torch/distributed/elastic/multiprocessing/api.py, _setup_log_dir and DefaultLogsSpecs):
# <log_dir>/<run_id>[_<random>]/attempt_<restart>/<local_rank>/{stdout,stderr}.log and error.json
_TORCHRUN_LAYOUT = re.compile(r"(?:^|[\\/])attempt_(\d+)[\\/](\d+)[\\/][^\\/]+$")


def local_of_path(path: str) -> int | None:
    """The local rank of a torchrun ``--log-dir`` file (``.../attempt_0/3/stderr.log`` -> 3), or None."""
    m = _TORCHRUN_LAYOUT.search(path)
    return int(m.group(2)) if m else None


def _parts(path: str) -> list[str]:
    return [p for p in re.split(r"[\\/]+", path) if p and p not in (".", "..")]


def rank_of_path(path: str) -> int | None:
    """The global rank named by a file path, or None.

    ``rank-3.log``, ``rank3/stderr.log``, ``rank_27.out``, ``stdout_rank12.txt``, ``proc5.log``,
    ``worker-5.log``, ``r12.err``. The file name wins over directories. Not ``node-017``,
    ``slurm-123456.out``, ``local_rank3`` or ``node_rank1``.
    """
    if _TORCHRUN_LAYOUT.search(path):
        return None  # <log_dir>/<run_id>/attempt_N/<local_rank>/: a local rank, and the run id names no rank
    for part in reversed(_parts(path)):
        low = part.lower()
        m = _PATH_RANK.search(low)
        if m is None:
            m = _PATH_WORKER.match(low) or _PATH_R.fullmatch(low)
        if m is not None:
            return int(m.group(1))
    return None


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_LOG_WORDS = _words(
    "dmesg kern kernel journal journalctl syslog messages log logs out err stdout stderr txt gz "
    "json jsonl csv yaml yml toml xz bz2 zst smi nvidia-smi nvidia dcgm ibstat ibdiag bug report "
    "nvidia-bug-report sacct scontrol squeue sinfo events"
)
_DENY_STEM = _LOG_WORDS | _words(
    "slurm job jobs step steps run runs attempt trial exp experiment test tests case incident bundle "
    "crash core dump dumps trace tmp backup output outputs result results checkpoint ckpt ckpts "
    "epoch iter iteration day week month year date time version release build commit ray torch "
    "nccl cuda python telemetry prometheus metrics config configs hosts world rank ranks task tasks "
    "array pod pods srun sbatch salloc lib bin"
)
_WORDS_RE = "|".join(sorted(_LOG_WORDS, key=len, reverse=True))
_HEAD_WORDS = re.compile(rf"(?:(?:{_WORDS_RE})[-_])+")  # dmesg-gpu-node-017
_TAIL_WORDS = re.compile(rf"(?:[-_](?:{_WORDS_RE}))+$")  # node017_kern


def _host_candidate(token: str) -> str | None:
    if not token or rank_of_path(token) is not None or "rank" in token.lower():
        return None
    if re.split(r"[-_.]", token.lower(), maxsplit=1)[0] in _DENY_STEM:
        return None
    return token if looks_like_host(token) else None


def host_of_path(path: str) -> str | None:
    """A host name named by a path part, or None; the file name first, then directories inward-out.

    ``nodes/gpu-node-017/dmesg.log``, ``gpu-node-017/kern.log``, ``node017.dmesg``,
    ``dmesg-gpu-node-017.log``, ``logs/node-017/rank_27.out``. Conservative: never ``logs``,
    ``rank3``, ``slurm-123456.out``, ``kernel`` or ``telemetry``. Returned as spelled in the path.
    """
    parts = _parts(path)
    run_id = len(parts) - 4 if _TORCHRUN_LAYOUT.search(path) else -1  # <run_id>/attempt_N/<local>/<file>
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        if i == run_id:
            continue  # torchrun's run id (rdzv id) names the job, not a host
        if i < len(parts) - 1:
            found = _host_candidate(part)  # a directory: gpu-node-017, node017.cluster.local
            if found is not None:
                return found
            continue
        for piece in part.split("."):  # a file: node017.dmesg, dmesg-gpu-node-017.log
            found = _host_candidate(_strip_words(piece))
            if found is not None:
                return found
    return None


def _strip_words(piece: str) -> str:
    """``dmesg-gpu-node-017`` -> ``gpu-node-017``; ``node017_kern`` -> ``node017`` (case kept)."""
    low = piece.lower()
    head = _HEAD_WORDS.match(low)
    start = head.end() if head is not None else 0
    tail = _TAIL_WORDS.search(low, start)
    return piece[start : tail.start() if tail is not None else len(piece)]


def may_name_rank(line: str) -> bool:
    """False for a line in which ``view`` finds no rank: it names one only in ``[rankN]:``, Open MPI's
    ``[J,N]<stdout>:`` or a leading srun label ``N: ``, or inside a JSON record (its text may be escaped)."""
    return "[rank" in line or "]<std" in line or line.lstrip(" \t")[:1].isdigit() or line.startswith("{")


def may_name_address(line: str) -> bool:
    """False for a line in which ``view`` finds no host that starts with a digit (an IP address): only Ray's
    ``(pid=N, ip=A)``, kubectl's ``[pod/NAME/...]`` and pdsh's ``10.0.0.7: `` give one, each first on the line
    (after blanks), or a JSON record's message."""
    rest = line.lstrip(" \t")
    return rest.startswith(("[pod/", "(")) or rest[:1].isdigit() or line.startswith("{")


def names_rank(line: str) -> bool:
    """Whether a prefix of the line names its global rank (``view(line).rank``), asking ``view`` only when it may."""
    return may_name_rank(line) and view(line).rank is not None


_IPV4 = re.compile(r"(?:\d{1,3}\.){3}\d{1,3}")


def address_of(line: str) -> str | None:
    """The IPv4 address a prefix names the line's host by (pdsh ``10.0.0.7: ``, Ray's ``ip=``), if any."""
    if not may_name_address(line):
        return None
    host = view(line).host
    return host if host and _IPV4.fullmatch(host) else None


_JSON_KEYS = ("log", "message", "msg")


def unwrap_json(line: str) -> str:
    """The message inside a JSON-lines log record (k8s/containerd ``{"log": ...}``), else ``line``."""
    if not line.startswith("{") or not any(f'"{k}"' in line for k in _JSON_KEYS):
        return line
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    if isinstance(obj, dict):
        for key in _JSON_KEYS:
            value = obj.get(key)
            if isinstance(value, str):
                return value.rstrip("\n")
    return line


@functools.lru_cache(maxsize=1024)
def view(line: str) -> Prefix:
    """``split_prefix`` of the line's message, looking inside JSON-lines records first. Remembered for the
    last lines asked about: the stages after the scan ask about one finding's line several times in a row."""
    return split_prefix(unwrap_json(line))
