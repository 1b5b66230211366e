"""Synth cascade: what follows the root event on the other ranks, the launcher and the scheduler.

Input: a Story whose scenario set root lines and fates; output: NCCL watchdog timeouts (or remote
peer errors), torchrun SIGTERM / ChildFailedError teardown (local "Root Cause" per node), srun
error lines, teardown Xid 45 and DataLoader noise, each tagged with its TAXONOMY class. Pure.
"""

from __future__ import annotations

from crashcart.synth import formats as fmt
from crashcart.synth import teardown
from crashcart.synth.story import Story

INF = float("inf")
_FRAMES = (
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f3b1c5a1897 in "
    "/usr/local/lib/python3.10/dist-packages/torch/lib/libc10.so)",
    "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
    "std::ratio<1l,"
    " 1000l> > >) + 0x1d2 (0x7f3b1d87ac62 in "
    "/usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so)",
    "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7f3b1d881a83 in "
    "/usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so)",
    "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c (0x7f3b1d882dfc in "
    "/usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so)",
    "frame #4: <unknown function> + 0xdc253 (0x7f3b695b0253 in /lib/x86_64-linux-gnu/libstdc++.so.6)",
    "frame #5: <unknown function> + 0x94ac3 (0x7f3b6ab24ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
)
WD = "nccl_watchdog_timeout"
REMOTE = "nccl_remote_peer_failure"


def watchdog(
    s: Story,
    r: int,
    t: float,
    *,
    seq: int,
    op: str = "ALLREDUCE",
    numel: int | None = None,
    enq: int | None = None,
    done: int | None = None,
    ran_ms: int | None = None,
    root: bool = False,
    symptom: str | None = WD,
) -> float:
    """The watchdog timeout block a rank prints; ``root`` marks its first line. Returns the abort time."""
    w = s.world
    ran = ran_ms if ran_ms is not None else w.timeout_ms + s.rng.randrange(18, 190)
    n = w.numel if numel is None else numel
    sizes = "" if w.old_torch else f", NumelIn={n}, NumelOut={n}"
    work = f"WorkNCCL(SeqNum={seq}, OpType={op}{sizes}, Timeout(ms)={w.timeout_ms})"
    caught = f"[Rank {r}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before"
    caught += " timing out."
    pg = f"[PG 0 (default_pg) Rank {r}]" if not w.old_torch else f"[Rank {r}]"
    enq = seq if enq is None else enq
    done = seq - 1 if done is None else done
    lines: list[tuple[str, str]] = [("ProcessGroupNCCL.cpp:632", caught)]
    if not w.old_torch:
        lines.append(
            (
                "ProcessGroupNCCL.cpp:1664",
                f"{pg} Exception (either an error or timeout) detected by watchdog "
                f"at work: {seq}, last enqueued NCCL work: {enq}, last completed NCCL work: {done}.",
            )
        )
    lines += [
        (
            "ProcessGroupNCCL.cpp:621",
            f"[Rank {r}] Some NCCL operations have failed or timed out. Due to the asynchronous"
            " nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        ),
        (
            "ProcessGroupNCCL.cpp:627",
            f"[Rank {r}] To avoid data inconsistency, we are taking the entire process down.",
        ),
    ]
    name = "Process group watchdog" if not w.old_torch else "NCCL watchdog"
    term = f"{pg} {name} thread terminated with exception: {caught}"
    lines.append(("ProcessGroupNCCL.cpp:1515", term))
    root = root or r in s.wd_root
    for i, (src, msg) in enumerate(lines):
        tt = t + i * 0.0004
        s.rank(
            r,
            tt,
            fmt.c10d(w, tt, "E", src, msg),
            root=root and i == 0,
            symptom=None if root and i == 0 else symptom,
        )
    _reports(s, r, t + 0.002, seq, op)
    exc = "std::runtime_error" if w.old_torch else "c10::DistBackendError"
    tail = [f"terminate called after throwing an instance of '{exc}'", f"  what():  {term}"]
    if not w.old_torch:
        tail.append(
            "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 "
            "(most recent call first):"
        )
        tail += list(_FRAMES)
    s.block(("rank", r), t + 0.003, tail, symptom=symptom)
    return t + 0.02 + s.rng.uniform(0.0, 0.2)


def _reports(s: Story, r: int, t: float, seq: int, op: str) -> None:
    """TORCH_NCCL_DESYNC_DEBUG=1 report printed after the timeout, naming the lagging/mismatched rank."""
    w = s.world
    if s.desync is not None and r != s.desync[0]:
        c, cseq = s.desync
        others = ", ".join(str(x) for x in range(w.ranks) if x != c)
        lines = [
            f"\t - [{r}] Timeout at collective: {op}, #{seq}",
            "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
            f"\t   - [{c}] joined but didn't finish collective #{cseq} (count from 1)",
            "\t - Snapshot of ranks' latest states:",
            f"\t   #{cseq} started ranks:",
            f"\t     [{c}]",
            f"\t   #{seq} started ranks:",
            f"\t     [{others}]",
        ]
        head = fmt.c10d(w, t, "E", "ProcessGroupNCCL.cpp:1297", f"[PG 0 (default_pg) Rank {r}] ")
        s.block(("rank", r), t, [head, *lines], roots=(3,), symptom=WD)
    if s.lagging is not None and r != s.lagging:
        head = fmt.c10d(w, t, "E", "ProcessGroupNCCL.cpp:1297", f"[PG 0 (default_pg) Rank {r}] ")
        s.block(
            ("rank", r),
            t,
            [
                head,
                f"\t - [{r}] Timeout at collective: {op}, #{seq}",
                f"\t - To our best knowledge, ranks [{s.lagging}] are the lagging ranks that caused this "
                "timeout. They never"
                " joined any collectives",
            ],
            roots=(2,),
            symptom=WD,
        )


def remote_error(s: Story, r: int, t: float, peer: int, *, symptom: str | None = REMOTE) -> float:
    """A survivor notices its peer's socket closing; NCCL reports ncclRemoteError. Returns abort time."""
    w = s.world
    port = 40000 + (w.pid[peer] % 20000)
    where = f"{w.node_of(peer).ip}<{port}>"
    s.nccl(
        r,
        t,
        f"Net : Connection closed by remote peer {where}",
        level="WARN",
        src="misc/socket.cc:538",
        tid=3,
        symptom=symptom,
    )
    for i, src in enumerate(("transport/net_socket.cc:493", "transport/net.cc:1302", "proxy.cc:698")):
        s.nccl(r, t + 0.0001 * (i + 1), f"{src} -> 6", tid=3, symptom=symptom)
    pg = f"[PG 0 (default_pg) Rank {r}]"
    err = f"NCCL error: remote process exited or there was a network error, NCCL version {w.stack.nccl}"
    msg = f"{pg} Process group watchdog thread terminated with exception: {err}"
    s.rank(r, t + 0.001, fmt.c10d(w, t + 0.001, "E", "ProcessGroupNCCL.cpp:1515", msg), symptom=symptom)
    s.block(
        ("rank", r),
        t + 0.0012,
        [
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
            "Last error:",
            f"Net : Connection closed by remote peer {where}",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            f"  what():  {msg}",
        ],
        symptom=symptom,
    )
    return t + 0.05


def store_timeout(s: Story, r: int, t: float, joined: int) -> float:
    """Init barrier timeout seen by ranks whose peers never reached ``init_process_group``."""
    w = s.world
    mins = w.timeout_ms // 60000
    frames = [
        (f"/workspace/{w.script}", 412, "<module>", "main()"),
        (f"/workspace/{w.script}", 367, "main", 'dist.init_process_group(backend="nccl", timeout=timeout)'),
        (
            "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py",
            1154,
            "init_process_group",
            "_store_based_barrier(rank, store, group_name, world_size, timeout)",
        ),
    ]
    last = [
        f"RuntimeError: Timed out initializing process group in store based barrier on rank: {r}, for key: "
        f"store_based_barrier_key:1 (world_size={w.ranks}, worker_count={joined}, timeout=0:{mins:02d}:00)"
    ]
    s.block(("rank", r), t, fmt.traceback(frames, last), symptom="launcher_rendezvous_store_failure")
    return t + 0.3


def init_remote(s: Story, r: int, t: float, peer: int) -> float:
    """Communicator init fails on a survivor because a peer died during bootstrap."""
    w = s.world
    where = f"{w.node_of(peer).ip}<{40000 + w.pid[peer] % 20000}>"
    s.nccl(
        r,
        t,
        f"socketProgress: Connection closed by remote peer {where}",
        level="WARN",
        src="misc/socket.cc:538",
        symptom=REMOTE,
    )
    for i, src in enumerate(("misc/socket.cc:752", "bootstrap.cc:78", "init.cc:1365")):
        s.nccl(r, t + 0.0001 * (i + 1), f"{src} -> 6", symptom=REMOTE)
    frames = [
        *fmt.train_frames(w)[:3],
        (
            "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py",
            2291,
            "broadcast",
            "work = group.broadcast([tensor], opts)",
        ),
    ]
    last = [
        "torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote "
        f"process exited or there was a network error, NCCL version {w.stack.nccl}",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "Last error:",
        f"socketProgress: Connection closed by remote peer {where}",
    ]
    s.block(("rank", r), t + 0.001, fmt.traceback(frames, last), symptom=REMOTE)
    return t + 0.2


def _reaction(s: Story, first_exit: float) -> tuple[float, int, int]:
    """(when a healthy rank starts printing its abort, exit code, ran_ms) without printing; INF: never."""
    w = s.world
    if s.mode == "timeout":
        ran = w.timeout_ms + s.rng.randrange(18, 190)
        return s.t0 + s.rng.uniform(0.0, 0.4) * w.step_time + ran / 1000.0, -6, ran
    if s.mode == "remote":
        return first_exit + s.rng.uniform(0.4, 6.0), -6, 0
    if s.mode == "store":
        return s.t0 + w.timeout_ms / 1000.0 + s.rng.uniform(0.5, 2.0), 1, 0
    if s.mode == "initremote":
        return first_exit + s.rng.uniform(0.05, 1.5), 1, 0
    return INF, 0, 0


def finish(s: Story) -> None:
    """Resolve every rank's end, then print reactions, launcher teardown and scheduler lines."""
    w, rng = s.world, s.rng
    seq = s.seq_at(s.t0) + 1
    exits = [f.t for f in s.fate.values() if f.kind == "exit"]
    first_exit = min(exits, default=INF)
    first_rank = min((r for r, f in s.fate.items() if f.kind == "exit"), key=lambda r: s.fate[r].t, default=0)
    if s.mode in ("remote", "initremote") and first_exit == INF:
        s.mode = "timeout"
    started = [r for r in range(w.ranks) if s.reach.get(r, "train") != "none" or r in s.fate]
    planned = {r: _reaction(s, first_exit) for r in s.alive() if r in started}
    base: dict[int, tuple[float, int]] = {r: (f.t if f.kind == "exit" else INF, f.code) for r, f in s.fate.items()}
    base.update({r: (tp + 0.05 if tp < INF else INF, code) for r, (tp, code, _) in planned.items()})
    final: dict[int, tuple[float, int]] = dict(base)
    killed_at: dict[int, float] = {}
    if w.launcher == "torchrun":
        for node in w.nodes:
            first = min((base[r][0] for r in node.ranks if r in base), default=INF)
            if first == INF or not s.agent_ok.get(node.index, True):
                continue
            tk = first + rng.uniform(0.1, 2.5)
            killed_at[node.index] = tk
            for r in node.ranks:
                if r in base and base[r][0] > tk + 0.3:
                    final[r] = (tk + rng.uniform(0.2, 1.5), -15)
    joined = sum(1 for r in range(w.ranks) if r not in s.fate)
    for r, (tp, _, ran) in sorted(planned.items()):
        if tp == INF or final[r] != base[r]:
            continue
        if s.mode == "timeout":
            ov = s.wd_override.get(r)
            if ov:
                watchdog(s, r, tp, seq=ov[0], op=ov[1], numel=ov[2], enq=ov[3], done=ov[4], ran_ms=ran)
            else:
                watchdog(s, r, tp, seq=seq, ran_ms=ran)
        elif s.mode == "remote":
            remote_error(s, r, tp, first_rank)
        elif s.mode == "store":
            store_timeout(s, r, tp, joined)
        elif s.mode == "initremote":
            init_remote(s, r, tp, first_rank)
    teardown.external_kill(s, final)
    s.ended = {r: t for r, (t, _) in final.items()}
    teardown.agents(s, final, killed_at)
    teardown.srun(s, final)
    teardown.noise(s, final, base)
    s.t_end = max(line.t for lines in s.streams.values() for line in lines) + rng.uniform(30.0, 300.0)
