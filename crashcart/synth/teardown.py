"""Synth teardown: how the launcher and scheduler wind a failed job down, and the noise it makes.

Input: a Story plus every rank's resolved end (time, exit code); output: torchrun SIGTERM and
ChildFailedError blocks (the "Root Cause" is local to each node), srun exit lines, user/scheduler
cancellation, teardown Xid 45, DataLoader "killed by signal" and closed-socket lines. Pure.
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
SUMMARY = "torchelastic_childfailed_summary"
REMOTE = "nccl_remote_peer_failure"


def external_kill(s: Story, final: dict[int, tuple[float, int]]) -> None:
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


def agents(s: Story, final: dict[int, tuple[float, int]], killed_at: dict[int, float]) -> None:
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


def srun(s: Story, final: dict[int, tuple[float, int]]) -> None:
    """srun's per-task exit lines (direct launch) or per-node torchrun exits."""
    w = s.world
    if w.scheduler != "slurm":
        return
    if w.launcher == "torchrun":
        for node in w.nodes:
            ends = [final[r][0] for r in node.ranks if r in final and final[r][0] < INF]
            if ends and s.agent_ok.get(node.index, True):
                s.slurm(max(ends) + 2.5, f"srun: error: {node.host}: task {node.index}: Exited with exit code 1")
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


def noise(s: Story, final: dict[int, tuple[float, int]], base: dict[int, tuple[float, int]]) -> None:
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
                    "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f2c1d3b5e10>",
                    "Traceback (most recent call last):",
                    f'  File "{dl}/dataloader.py", line 1479, in __del__',
                    "    self._shutdown_workers()",
                    f'  File "{dl}/dataloader.py", line 1443, in _shutdown_workers',
                    "    w.join(timeout=_utils.MP_STATUS_CHECK_INTERVAL)",
                    f'  File "{dl}/_utils/signal_handling.py", line 66, in handler',
                    "    _error_if_any_worker_fails()",
                    f"RuntimeError: DataLoader worker (pid {w.pid[r] + 211}) is killed by signal: Terminated.",
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
