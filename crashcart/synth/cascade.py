"""Synth cascade: what follows the root event on the other ranks, the launcher and the scheduler.

Input: a Story whose scenario set root lines and fates; output: NCCL watchdog timeouts (or remote
peer errors), torchrun SIGTERM / ChildFailedError teardown (local "Root Cause" per node), srun
error lines, teardown Xid 45 and DataLoader noise, each tagged with its TAXONOMY class. Pure.
"""

from __future__ import annotations

from crashcart.synth import formats as fmt
from crashcart.synth.story import Story

INF = float("inf")
SIGNALS = {-6: "SIGABRT", -7: "SIGBUS", -9: "SIGKILL", -11: "SIGSEGV", -15: "SIGTERM"}
SRUN_STATUS = {
    -6: "Aborted (core dumped)",
    -7: "Bus error (core dumped)",
    -9: "Killed",
    -11: "Segmentation fault (core dumped)",
    -15: "Terminated",
}
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
SUMMARY = "torchelastic_childfailed_summary"


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
    caught = (
        f"[Rank {r}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before"
    )
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
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
            "prematurely.",
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
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
        "prematurely.",
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
    base: dict[int, tuple[float, int]] = {
        r: (f.t if f.kind == "exit" else INF, f.code) for r, f in s.fate.items()
    }
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
    _external_kill(s, final)
    s.ended = {r: t for r, (t, _) in final.items()}
    _agents(s, final, killed_at)
    _srun(s, final)
    _noise(s, final, base)
    s.t_end = max(line.t for lines in s.streams.values() for line in lines) + rng.uniform(30.0, 300.0)


def _external_kill(s: Story, final: dict[int, tuple[float, int]]) -> None:
    """Ranks still hung after everyone else ended are cancelled by the user or scheduler."""
    w = s.world
    stuck = sorted(r for r, (t, _) in final.items() if t == INF)
    if not stuck:
        return
    ended = [t for t, _ in final.values() if t < INF] or [s.t0]
    tc = max(ended) + s.rng.uniform(300.0, 1200.0)
    if w.scheduler == "slurm":
        stamp = fmt.iso(w.at(tc))
        s.slurm(
            tc,
            f"slurmstepd: error: *** STEP {w.job_id}.0 ON {w.nodes[0].host} CANCELLED AT {stamp} ***",
            symptom="scheduler_preemption_or_timelimit",
        )
        s.sacct_state, s.sacct_exit = f"CANCELLED by {w.uid}", "0:15"
    for n in sorted({w.rank_node[r] for r in stuck}):
        if w.launcher == "torchrun":
            s.agent(
                n,
                tc + 0.2,
                "W",
                "torch/distributed/elastic/agent/server/api.py:719",
                "Received Signals.SIGTERM death signal, shutting down workers",
            )
    for r in stuck:
        final[r] = (tc + s.rng.uniform(0.5, 3.0), -15)


def _agents(s: Story, final: dict[int, tuple[float, int]], killed_at: dict[int, float]) -> None:
    w = s.world
    if w.launcher != "torchrun":
        return
    for node in w.nodes:
        ends = sorted((final[r][0], r) for r in node.ranks if r in final and final[r][0] < INF)
        if not ends or not s.agent_ok.get(node.index, True):
            continue
        first_t, first_r = ends[0]
        tk = killed_at.get(node.index, first_t + 0.5)
        api = "torch/distributed/elastic/multiprocessing/api.py"
        if node.index in s.agent_signal:
            _signalled(s, node.index, [r for _, r in ends])
            continue
        for _, r in ends[1:]:
            if final[r][1] == -15:
                s.agent(
                    node.index,
                    tk + 0.001 * w.local[r],
                    "W",
                    f"{api}:897",
                    f"Sending process {w.pid[r]} closing signal SIGTERM",
                    symptom=SUMMARY,
                )
        code = final[first_r][1]
        s.agent(
            node.index,
            tk + 0.05,
            "E",
            f"{api}:869",
            f"failed (exitcode: {code}) local_rank: {w.local[first_r]} "
            f"(pid: {w.pid[first_r]}) of binary: /usr/bin/python3",
            symptom=SUMMARY,
        )
        t_sum = max(t for t, _ in ends) + s.rng.uniform(0.3, 2.0)
        _summary(s, node.index, t_sum, [r for _, r in ends], final)


def _signalled(s: Story, n: int, ranks: list[int]) -> None:
    """torchrun itself got a signal (scheduler, kubelet, closed terminal): it stops workers, no summary."""
    w = s.world
    t, sig, root = s.agent_signal[n]
    name = {1: "SIGHUP", 15: "SIGTERM", 2: "SIGINT"}.get(sig, "SIGTERM")
    s.agent(
        n,
        t,
        "W",
        "torch/distributed/elastic/agent/server/api.py:719",
        f"Received Signals.{name} death signal, shutting down workers",
        root=root,
    )
    for r in ranks:
        s.agent(
            n,
            t + 0.001 + 0.001 * w.local[r],
            "W",
            "torch/distributed/elastic/multiprocessing/api.py:897",
            f"Sending process {w.pid[r]} closing signal SIGTERM",
        )
    dist = "/usr/local/lib/python3.10/dist-packages/torch/distributed"
    frames = [
        ("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
        (f"{dist}/launcher/api.py", 255, "launch_agent", "result = agent.run()"),
        (f"{dist}/elastic/agent/server/api.py", 680, "run", "result = self._invoke_run(role)"),
        (
            f"{dist}/elastic/multiprocessing/api.py",
            82,
            "_terminate_process_handler",
            'raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
        ),
    ]
    last = [
        f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {w.nodes[n].agent_pid} got "
        "signal:"
        f" {sig}"
    ]
    s.block(("agent", n), t + 2.0, fmt.traceback(frames, last), roots=(len(frames) * 2 + 1,) if root else ())


def _summary(s: Story, n: int, t: float, order: list[int], final: dict[int, tuple[float, int]]) -> None:
    """torchrun's ChildFailedError block; its "Root Cause" is the earliest failure on this node only."""
    w = s.world
    dist = "/usr/local/lib/python3.10/dist-packages/torch/distributed"
    frames = [
        ("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
        (f"{dist}/elastic/multiprocessing/errors/__init__.py", 347, "wrapper", "return f(*args, **kwargs)"),
        (f"{dist}/run.py", 812, "main", "run(args)"),
        (f"{dist}/run.py", 803, "run", "elastic_launch("),
        (
            f"{dist}/launcher/api.py",
            135,
            "__call__",
            "return launch_agent(self._config, self._entrypoint, list(args))",
        ),
        (f"{dist}/launcher/api.py", 268, "launch_agent", "raise ChildFailedError("),
    ]
    lines = fmt.traceback(frames, ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "])
    roots: list[int] = []

    def entry(r: int) -> list[str]:
        ft, code = final[r]
        stamp = w.at(ft).strftime("%Y-%m-%d_%H:%M:%S")
        if code < 0:
            tb = f"Signal {-code} ({SIGNALS.get(code, 'SIG')}) received by PID {w.pid[r]}"
        else:
            tb = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        return [
            f"[{w.local[r]}]:",
            f"  time      : {stamp}",
            f"  host      : {w.nodes[n].fqdn}",
            f"  rank      : {r} (local_rank: {w.local[r]})",
            f"  exitcode  : {code} (pid: {w.pid[r]})",
            "  error_file: <N/A>",
            f"  traceback : {tb}",
        ]

    eq, dash = "=" * 60, "-" * 60
    lines += [eq, f"{w.script} FAILED", dash, "Failures:"]
    others = sorted(order[1:], key=lambda r: w.local[r])
    for r in others:
        lines += entry(r)
    if not others:
        lines.append("  <NO_OTHER_FAILURES>")
    lines += [dash, "Root Cause (first observed failure):"]
    if s.summary_root == order[0]:
        roots = [len(lines) + 3, len(lines) + 4]
    lines += entry(order[0])
    lines.append(eq)
    s.block(("agent", n), t, lines, roots=roots, symptom=SUMMARY)


def _srun(s: Story, final: dict[int, tuple[float, int]]) -> None:
    """srun's per-task exit lines (direct launch) or per-node torchrun exits."""
    w = s.world
    if w.scheduler != "slurm":
        return
    if w.launcher == "torchrun":
        for node in w.nodes:
            ends = [final[r][0] for r in node.ranks if r in final and final[r][0] < INF]
            if ends and s.agent_ok.get(node.index, True):
                s.slurm(
                    max(ends) + 2.5, f"srun: error: {node.host}: task {node.index}: Exited with exit code 1"
                )
        return
    groups: dict[tuple[int, int], list[tuple[float, int]]] = {}
    for r, (t, code) in final.items():
        if t < INF and s.agent_ok.get(w.rank_node[r], True):
            groups.setdefault((w.rank_node[r], code), []).append((t, r))
    for (n, code), items in sorted(groups.items()):
        status = SRUN_STATUS.get(code, f"Exited with exit code {code}")
        status = s.srun_status.get(items[0][1], status)
        ids = [r for _, r in items]
        what = f"task {ids[0]}" if len(ids) == 1 else f"tasks {fmt.tasklist(ids)}"
        s.slurm(max(t for t, _ in items) + 0.8, f"srun: error: {w.nodes[n].host}: {what}: {status}")


def _noise(s: Story, final: dict[int, tuple[float, int]], base: dict[int, tuple[float, int]]) -> None:
    """Teardown noise: DataLoader workers killed by SIGTERM, Xid 45 on the culprit node, closed sockets."""
    w, rng = s.world, s.rng
    killed = sorted(r for r, (t, code) in final.items() if code == -15 and t < INF)
    if s.dataloader_noise:
        for r in killed[: max(1, len(killed) // 3)]:
            t = final[r][0] - 0.01
            dl = "/usr/local/lib/python3.10/dist-packages/torch/utils/data"
            s.block(
                ("rank", r),
                t,
                [
                    "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at "
                    "0x7f2c1d3b5e10>",
                    "Traceback (most recent call last):",
                    f'  File "{dl}/dataloader.py", line 1479, in __del__',
                    "    self._shutdown_workers()",
                    f'  File "{dl}/dataloader.py", line 1443, in _shutdown_workers',
                    "    w.join(timeout=_utils.MP_STATUS_CHECK_INTERVAL)",
                    f'  File "{dl}/_utils/signal_handling.py", line 66, in handler',
                    "    _error_if_any_worker_fails()",
                    f"RuntimeError: DataLoader worker (pid {w.pid[r] + 211}) is killed by signal: "
                    "Terminated.",
                ],
                symptom="dataloader_worker_failure",
            )
    node = s.culprit_node
    if node is None and s.culprit_rank is not None:
        node = w.rank_node[s.culprit_rank]
    if s.xid45 and node is not None:
        for r in w.nodes[node].ranks:
            t, code = final.get(r, (INF, 0))
            if t < INF and code < 0:
                s.kernel(
                    node,
                    t + rng.uniform(0.2, 1.5),
                    fmt.xid(w.bus(r), 45, f"Ch {rng.randrange(1, 40):08x}", pid=w.pid[r]),
                    symptom="gpu_app_fault_xid",
                )
    if s.mode == "timeout":
        aborts = sorted((t, r) for r, (t, code) in final.items() if code == -6 and base[r] == final[r])
        if len(aborts) > 2:
            t_a, r_a = aborts[0]
            for t, r in aborts[1:]:
                if t > t_a + 0.02 and w.rank_node[r] != w.rank_node[r_a] and rng.random() < 0.5:
                    where = f"{w.node_of(r_a).ip}<{40000 + w.pid[r_a] % 20000}>"
                    s.nccl(
                        r,
                        t - 0.01,
                        f"Net : Connection closed by remote peer {where}",
                        level="WARN",
                        src="misc/socket.cc:538",
                        tid=3,
                        symptom=REMOTE,
                    )
                    break
