"""Synth scenarios for communication classes: watchdog and heartbeat, remote-peer errors, desync,
hangs, InfiniBand completion errors and link flaps, NCCL init failures and version drift.

Input/output: a Story (one function per TAXONOMY class). Pure, no I/O.
"""

from __future__ import annotations

import dataclasses

from crashcart.synth import formats as fmt
from crashcart.synth import kit
from crashcart.synth.story import Story

_CUDA_OF = {"520.61.05": 11080, "525.85.12": 12000, "530.30.02": 12010}  # driver -> CUDA driver API version


def _nccl_code(version: str) -> str:
    """NCCL's integer version spelling: 2.19.3 -> 21903."""
    major, minor, patch = version.split(".")
    return f"{major}{int(minor):02d}{int(patch):02d}"


def nccl_watchdog_timeout(s: Story) -> None:
    """Root: a PG timeout set far too short for a legitimate long step (rank 0 alone runs validation)."""
    w, rng = s.world, s.rng
    s.world = w = dataclasses.replace(w, timeout_ms=kit.pick(s, (60000, 120000, 180000)))
    s.set_culprit(None, None, None)
    it = s.step_before(s.t0).step
    samples = kit.pick(s, (1024, 2048, 4096))
    msg = f"running validation on rank 0 at iteration {it}: {samples} samples, other ranks wait"
    s.rank(0, s.t0 - 0.5, fmt.pylog(w, s.t0 - 0.5, "INFO", "eval", msg))
    kit.hang(s, 0, s.t0)
    seq = s.seq_at(s.t0) + 1
    for r in range(1, w.ranks):
        s.wd_override[r] = (seq, "ALLREDUCE", 1, seq, seq - 1)
        s.wd_root.add(r)
    s.mode = "timeout"
    s.xid45 = False
    s.caught_oom = rng.random() < 0.3


def nccl_watchdog_stuck_heartbeat(s: Story) -> None:
    kit.new_torch(s)
    r = s.pick_rank()
    s.set_culprit(s.node_of(r), r, None)
    kit.hang(s, r, s.t0)
    kit.heartbeat(s, r, s.t0, root=True)
    s.mode = "timeout"


def nccl_remote_peer_failure(s: Story) -> None:
    """Root: NCCL on one rank reports a remote/network error although no peer died first."""
    w, rng = s.world, s.rng
    r = s.pick_rank()
    s.set_culprit(s.node_of(r), r, None)
    peer = (r + len(w.node_of(r).ranks)) % w.ranks
    ip = w.node_of(peer).ip
    if rng.random() < 0.5:
        req = f"0x7f{rng.getrandbits(40):010x}"
        payload = f"NET/OFI Request {req} completed with error. RC: 113. Error: 2 (UNDELIVERABLE)."
        payload += " Completed length: 0"
        s.nccl(
            r,
            s.t0,
            f"{payload}, Request: {{ dev: 0, size: 0, state: CREATED, type: SEND }}",
            level="WARN",
            src="nccl_ofi_rdma.c:1530",
            tid=3,
            root=True,
        )
    else:
        port = rng.randrange(30000, 60000)
        payload = f"NET/Socket : Call to recv from {ip}<{port}> failed : Connection reset by peer"
        s.nccl(r, s.t0, payload, level="WARN", src="transport/net_socket.cc:512", tid=3, root=True)
    kit.nccl_error(s, r, s.t0 + 0.01, "remote", payload, roots=(1, 3), code=-6)
    s.mode = "timeout"


def collective_mismatch_desync(s: Story) -> None:
    w, rng = s.world, s.rng
    c = s.pick_rank()
    s.set_culprit(s.node_of(c), c, None)
    seq = s.seq_at(s.t0) + 1
    m = rng.choice((4, 8192, 1048576))
    v = rng.randrange(3)
    if v == 0:
        opts = (
            "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), "
            "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))"
        )

        def fp(op: str, shape: int, dtype: str) -> str:
            return (
                f"CollectiveFingerPrint(SequenceNumber={seq}, OpType={op}, TensorShape=[{shape}], "
                f"TensorDtypes={dtype}, {opts})"
            )

        good, bad = fp("ALLREDUCE", w.numel, "BFloat16"), fp("_ALLGATHER_BASE", m, "Float")
        frames = fmt.train_frames(
            w,
            (
                "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py",
                2288,
                "all_reduce",
                "work = group.allreduce([tensor], opts)",
            ),
        )
        for r in range(w.ranks):
            mine, other, theirs = (bad, 0 if c != 0 else 1, good) if r == c else (good, c, bad)
            text = (
                f"RuntimeError: Detected mismatch between collectives on ranks. Rank {r} is running "
                "collective: "
                f"{mine}, but Rank {other} is running collective: {theirs}."
            )
            kit.crash(s, r, s.t0 + 0.003 * r, [text], frames=frames)
        s.mode = "none"
        return
    kit.new_torch(s)
    cseq = seq - rng.randrange(1, 4)
    s.wd_override[c] = (cseq, "_ALLGATHER_BASE", m, cseq, cseq - 1)
    s.wd_root.add(c)
    if v == 2:
        s.desync = (c, cseq)
    s.mode = "timeout"


def rank_hang_or_missing_rank(s: Story) -> None:
    w = s.world
    r = w.ranks - 1 if w.log_style == "megatron" else s.pick_rank()
    s.set_culprit(s.node_of(r), r, None)
    kit.hang(s, r, s.t0 - s.rng.uniform(0.05, 0.5) * w.step_time)
    if not w.old_torch and s.rng.random() < 0.5:
        s.lagging = r
    else:
        s.root_last_rank = r
    s.mode = "timeout"
    s.xid45 = False


def _ib_line(s: Story, r: int, peer: int, status: int, vendor: int, direction: str) -> str:
    w = s.world
    ip, port = w.node_of(peer).ip, 40000 + w.pid[peer] % 20000
    if w.net == "RoCE":
        return (
            f"NET/IB : Got completion from peer {ip}<{port}> with status={status} opcode=0 len=0 vendor err "
            f"{vendor} ({direction}) localGid ::ffff:{w.node_of(r).ip} remoteGids::ffff:{ip}"
        )
    return (
        f"NET/IB : Got completion from peer {ip}<{port}> with error {status}, opcode 0, len 0, vendor err "
        f"{vendor} "
        f"({direction})"
    )


def ib_fail(s: Story, r: int, peer: int, t: float, status: int, vendor: int, direction: str, *, root: bool) -> None:
    line = _ib_line(s, r, peer, status, vendor, direction)
    s.nccl(
        r,
        t,
        line,
        level="WARN",
        src="transport/net_ib.cc:1295",
        tid=3,
        root=root,
        symptom=None if root else "ib_completion_error",
    )
    for i, src in enumerate(("transport/net.cc:1302", "proxy.cc:698", "proxy.cc:878")):
        s.nccl(r, t + 0.0001 * (i + 1), f"{src} -> 6" + (" [Progress Thread]" if i == 2 else ""), tid=3)
    kit.nccl_error(s, r, t + 0.01, "remote", line, symptom="nccl_remote_peer_failure", code=-6)


def ib_completion_error(s: Story) -> None:
    w, rng = s.world, s.rng
    n = rng.randrange(len(w.nodes))
    s.set_culprit(n, None, None)
    m = (n + 1) % len(w.nodes)
    ours = list(w.nodes[n].ranks)[: max(1, min(2, len(w.nodes[n].ranks)))]
    for k, r in enumerate(ours):
        peer = w.nodes[m].ranks[min(w.local[r], len(w.nodes[m].ranks) - 1)]
        t = s.t0 + 0.4 * k
        ib_fail(s, r, peer, t, 12, 129, "Send", root=True)
        ib_fail(s, peer, r, t + rng.uniform(0.05, 0.5), 5, 249, "Recv", root=False)
    s.mode = "timeout"


def ib_port_error_link_flap(s: Story) -> None:
    w, rng = s.world, s.rng
    n = rng.randrange(len(w.nodes))
    s.set_culprit(n, None, None)
    node = w.nodes[n]
    r = node.ranks[rng.randrange(len(node.ranks))]
    nic = f"0000:{('0c', '0d', '3f', '40')[w.local[r] % 4]}:00.0"
    ifc = f"ibp{int(nic[5:7], 16)}s0" if w.net == "IB" else f"enp{int(nic[5:7], 16)}s0np0"
    t = s.t0 - rng.uniform(20.0, 90.0)
    if rng.random() < 0.5:
        msgs = [
            f"mlx5_core {nic}: mlx5_port_module_event:1131:(pid 0): Port module event[error]: module 0, "
            "Cable "
            "error, High Temperature"
        ]
    else:
        msgs = [f"mlx5_core {nic} {ifc}: Link down"]
    kit.kernel_lines(s, n, t, msgs)
    for k in range(rng.randrange(2, 4)):
        tt = t + 4.0 + 9.0 * k
        s.kernel(n, tt, f"mlx5_core {nic} {ifc}: Link up")
        s.kernel(n, tt + 3.5, f"mlx5_core {nic} {ifc}: Link down", root=True)
        s.nccl(
            r,
            tt + 3.6,
            f"NET/IB : mlx5_{w.local[r] % 4}:1 Got async event : port error",
            level="WARN",
            src="transport/net_ib.cc:101",
            tid=4,
            root=True,
        )
    others = [q for q in range(w.ranks) if w.rank_node[q] != n]
    peer = others[0] if others else r
    ib_fail(s, r, peer, s.t0, 12, 129, "Send", root=False)
    s.mode = "timeout"


def nccl_init_bootstrap_failure(s: Story) -> None:
    w, rng = s.world, s.rng
    n = rng.randrange(len(w.nodes))
    kit.startup(s, 26.0 + rng.uniform(0.0, 3.0), "nccl")
    s.mode = "initremote"
    node = w.nodes[n]
    if rng.random() < 0.5:
        r = node.ranks[rng.randrange(len(node.ranks))]
        s.set_culprit(n, r, None)
        warn = "nvmlDeviceGetHandleByPciBusId() failed: Not Found"
        s.nccl(r, s.t0, warn, level="WARN", src="misc/nvmlwrap.cc:181", root=True)
        kit.nccl_error(s, r, s.t0 + 0.01, "system", warn, roots=(3,))
        return
    s.set_culprit(n, None, None)
    kit.kernel_lines(
        s,
        n,
        s.t0 - 0.2,
        ["nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing"],
    )
    warn = "NET/IB : ibv_reg_mr_iova2 failed: Invalid argument"
    for r in node.ranks:
        t = s.t0 + 0.002 * w.local[r]
        s.nccl(r, t, warn, level="WARN", src="transport/net_ib.cc:652", tid=1, root=True)
        kit.nccl_error(s, r, t + 0.01, "system", warn)


def software_version_mismatch(s: Story) -> None:
    w, rng = s.world, s.rng
    n = rng.randrange(len(w.nodes))
    s.set_culprit(n, None, None)
    node = w.nodes[n]
    old = kit.pick(s, ("525.85.12", "530.30.02", "520.61.05"))
    v = rng.randrange(4)
    if v == 3 and len(w.nodes) > 1:
        kit.startup(s, 27.0 + rng.uniform(0.0, 3.0), "nccl")
        odd = kit.pick(s, ("2.18.1", "2.17.1", "2.16.2"))
        s.nccl_override[n] = f"{odd}+cuda12.1"
        s.root_nccl_nodes.add(n)
        r_odd = node.ranks[0]
        chk = 0 if r_odd != 0 else w.nodes[(n + 1) % len(w.nodes)].ranks[0]
        s.nccl(
            chk,
            s.t0,
            f"Mismatched NCCL version detected : rank {chk} version {_nccl_code(w.stack.nccl)} rank {r_odd} "
            f"version {_nccl_code(odd)}",
            level="WARN",
            src="bootstrap.cc:423",
            root=True,
        )
        for r in range(w.ranks):
            kit.nccl_error(s, r, s.t0 + 0.02 + 0.002 * r, "usage", "Mismatched NCCL version detected")
        s.mode = "none"
        return
    kit.startup(s, rng.uniform(4.0, 9.0), "banner")
    s.mode = "store"
    frames = [
        (f"/workspace/{w.script}", 412, "<module>", "main()"),
        (f"/workspace/{w.script}", 361, "main", "torch.cuda.set_device(local_rank)"),
        (
            "/usr/local/lib/python3.10/dist-packages/torch/cuda/__init__.py",
            293,
            "_lazy_init",
            "torch._C._cuda_init()",
        ),
    ]
    for r in node.ranks:
        t = s.t0 + 0.01 * w.local[r]
        if v == 0:
            s.driver_override[n] = old
            s.root_driver_nodes.add(n)
            last = [
                f"RuntimeError: The NVIDIA driver on your system is too old (found version {_CUDA_OF[old]}). "
                "Please "
                "update your GPU driver by downloading and installing a new version from the URL: "
                "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to "
                "install a "
                "PyTorch version that has been compiled with your version of the CUDA driver."
            ]
            kit.crash(s, r, t, last, frames=frames)
        elif v == 1:
            s.driver_override[n] = old
            last = [
                "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
                "before "
                "calling NumCudaDevices() that might have already set an error? Error 803: system has "
                "unsupported "
                "display driver / cuda driver combination"
            ]
            kit.crash(
                s,
                r,
                t,
                last,
                pre=["Failed to initialize NVML: Driver/library version mismatch"],
                pre_roots=(0,),
                frames=frames,
            )
        else:
            s.reach[r] = "none"
            frames2 = [
                (f"/workspace/{w.script}", 7, "<module>", "import torch"),
                (
                    "/usr/local/lib/python3.10/dist-packages/torch/__init__.py",
                    237,
                    "<module>",
                    "from torch._C import *  # noqa: F403",
                ),
            ]
            last = [
                "ImportError: /usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so: undefined "
                "symbol: ncclCommRegister"
            ]
            env = f"[launch.sh] host={node.host} LD_LIBRARY_PATH=/opt/nccl-2.16.2/lib:/usr/local/cuda/lib64"
            kit.crash(s, r, t, last, frames=frames2, pre=[env], pre_roots=(0,))
    if v == 1:
        kit.kernel_lines(
            s,
            n,
            s.t0 - 0.5,
            [
                f"NVRM: API mismatch: the client has the version {w.stack.driver}, but",
                f"NVRM: this kernel module has the version {old}.  Please",
                "NVRM: make sure that this kernel module and all NVIDIA driver",
                "NVRM: components have the same version.",
            ],
        )
