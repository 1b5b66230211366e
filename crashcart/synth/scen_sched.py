"""Synth scenarios where the record sits with the scheduler or launcher: Slurm node failure, time
limit / preemption / SIGHUP, Kubernetes eviction or OOMKilled, rendezvous store failure, and
``unknown`` (nothing in the bundle decides the root).

Input/output: a Story (one function per class). Pure, no I/O.
"""

from __future__ import annotations

from crashcart.synth import cascade, docs, k8sdocs, kit, scen_comm
from crashcart.synth import formats as fmt
from crashcart.synth.story import Fate, K8sEvent, Story

_DIST = "/usr/local/lib/python3.10/dist-packages/torch/distributed"


def slurm_node_failure(s: Story) -> None:
    w, rng = s.world, s.rng
    n = rng.randrange(1, len(w.nodes))
    node = w.nodes[n]
    s.set_culprit(n, None, None)
    s.kernel_stop[n] = s.t0
    s.agent_ok[n] = False
    t_nf = s.t0 + rng.uniform(120.0, 300.0)
    for r in node.ranks:
        s.fate[r] = Fate("exit", t_nf, -9)
        s.stop[r] = s.t0
    stamp = fmt.iso(w.at(t_nf))
    s.slurm(t_nf, f"srun: error: Node failure on {node.host}", root=True)
    s.slurm(
        t_nf + 0.1,
        f"slurmstepd: error: *** STEP {w.job_id}.0 ON {w.nodes[0].host} CANCELLED AT {stamp} DUE TO "
        "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
        root=True,
    )
    s.slurm(t_nf + 0.2, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    survivors = [r for r in range(w.ranks) if w.rank_node[r] != n]
    if rng.random() < 0.5:
        for r in survivors:
            peer = node.ranks[min(w.local[r], len(node.ranks) - 1)]
            scen_comm.ib_fail(s, r, peer, s.t0 + rng.uniform(15.0, 60.0), 12, 129, "Send", root=False)
    else:
        for r in survivors:
            s.fate[r] = Fate("exit", t_nf + rng.uniform(0.3, 2.0), -15)
            s.stop[r] = s.t0
        for m in range(len(w.nodes)):
            if m != n:
                s.agent_signal[m] = (t_nf + 0.25, 15, False)
    s.mode, s.xid45 = "none", False
    s.sacct_state, s.sacct_exit, s.sacct_root = "NODE_FAIL", "0:0", True
    s.scontrol_down = n


def scheduler_preemption_or_timelimit(s: Story) -> None:
    w, rng = s.world, s.rng
    s.set_culprit(None, None, None)
    s.xid45 = False
    if w.scheduler == "slurm":
        reason = kit.pick(s, ("TIME LIMIT", "TIME LIMIT", "PREEMPTION"))
        if reason == "TIME LIMIT":
            s.t0 = (int(s.t0 // 1800) + 1) * 1800.0
            s.time_limit = docs.elapsed(s.t0)
            s.sacct_state = "TIMEOUT"
        else:
            s.sacct_state = "PREEMPTED"
        s.sacct_exit, s.sacct_root = "0:0", True
        stamp = fmt.iso(w.at(s.t0))
        s.slurm(
            s.t0,
            f"slurmstepd: error: *** JOB {w.job_id} ON {w.nodes[0].host} CANCELLED AT {stamp} DUE TO {reason} ***",
            root=True,
        )
        for node in w.nodes:
            s.slurm(
                s.t0 + 0.01 * (node.index + 1),
                f"slurmstepd: error: *** STEP {w.job_id}.0 ON {node.host} CANCELLED AT {stamp} DUE TO {reason} ***",
                root=True,
            )
        if w.launcher == "srun":
            s.slurm(s.t0 + 0.3, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
        sig, root = 15, False
    else:
        sig, root = 1, True
    for node in w.nodes:
        if w.launcher == "torchrun":
            s.agent_signal[node.index] = (s.t0 + rng.uniform(0.01, 0.2), sig, root)
    second = set(rng.sample(range(w.ranks), k=min(2, w.ranks - 1)))
    for r in range(w.ranks):
        s.stop[r] = s.t0
        if r in second:
            t = cascade.remote_error(s, r, s.t0 + rng.uniform(0.4, 1.5), (r + 1) % w.ranks)
            s.fate[r] = Fate("exit", t, -6)
        else:
            s.fate[r] = Fate("exit", s.t0 + rng.uniform(0.3, 1.2), -15)
    s.mode = "none"


def k8s_pod_eviction_or_oomkilled(s: Story) -> None:
    w, rng = s.world, s.rng
    n = rng.randrange(len(w.nodes))
    node = w.nodes[n]
    s.set_culprit(n, None, None)
    start = w.at(-30.0 + n)
    end = w.at(s.t0)
    when = [
        f"      Started:      {start:%a, %d %b %Y %H:%M:%S} +0000",
        f"      Finished:     {end:%a, %d %b %Y %H:%M:%S} +0000",
    ]
    r0 = node.ranks[0]
    if rng.random() < 0.5:
        for r in node.ranks:
            s.fate[r] = Fate("exit", s.t0 + 0.01, -9)
            s.stop[r] = s.t0
        s.agent_ok[n] = False
        state = [
            "    State:          Terminated",
            "      Reason:       OOMKilled",
            "      Exit Code:    137",
            *when,
            "    Ready:          False",
            "    Restart Count:  0",
        ]
        k8sdocs.describe_pod(s, n, state, {1}, in_container=True)
        kb = rng.randrange(1_500_000_000, 1_670_000_000)
        oom = (
            f"Memory cgroup out of memory: Killed process {w.pid[r0]} (pt_main_thread) "
            f"total-vm:{kb + 9_000_000}kB, "
            f"anon-rss:{kb}kB, file-rss:90112kB, shmem-rss:16384kB, UID:0 pgtables:{kb // 500}kB "
            "oom_score_adj:-997"
        )
        if rng.random() < 0.5:
            s.kernel(n, s.t0 - 0.01, oom, symptom="host_oom_kill")
        if rng.random() < 0.5:
            s.k8s_events.append(
                K8sEvent(
                    s.t0 + 1.0,
                    "OOMKilling",
                    oom,
                    "Node",
                    node.host,
                    node.host,
                    component="kernel-monitor",
                    root=True,
                )
            )
    else:
        res = kit.pick(s, ("memory", "ephemeral-storage"))
        if res == "memory":
            used = rng.randrange(1_500_000_000, 1_690_000_000)
            msg = (
                f"The node was low on resource: memory. Threshold quantity: 100Mi, available: "
                f"{rng.randrange(20000, 99000)}Ki. Container pytorch was using {used}Ki, request is 0, has "
                "larger "
                "consumption of memory. "
            )
        else:
            msg = (
                f"The node was low on resource: ephemeral-storage. Threshold quantity: 10%, available: "
                f"{rng.randrange(1000, 9000)}Mi. Container pytorch was using {rng.randrange(300, 900)}Gi, "
                "request is "
                "0, has larger consumption of ephemeral-storage. "
            )
        s.k8s_events.append(
            K8sEvent(
                s.t0 - 2.0,
                "EvictionThresholdMet",
                f"Attempting to reclaim {res}",
                "Node",
                node.host,
                node.host,
            )
        )
        s.k8s_events.append(K8sEvent(s.t0, "Evicted", msg, "Pod", node.pod, node.host, root=True))
        s.k8s_events.append(
            K8sEvent(s.t0 + 0.2, "Killing", "Stopping container pytorch", "Pod", node.pod, node.host, type="Normal")
        )
        state = ["Reason:           Evicted", f"Message:          {msg.rstrip()}"]
        k8sdocs.describe_pod(s, n, state, {0, 1}, in_container=False)
        s.agent_signal[n] = (s.t0 + 0.3, 15, False)
        for r in node.ranks:
            s.fate[r] = Fate("exit", s.t0 + rng.uniform(0.4, 1.5), -15)
            s.stop[r] = s.t0
    s.mode, s.xid45 = "timeout", False


def launcher_rendezvous_store_failure(s: Story) -> None:
    w, rng = s.world, s.rng
    err = (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
        "address. "
        "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
    )
    master = w.nodes[0].host
    if w.launcher == "srun":
        kit.startup(s, rng.uniform(3.0, 6.0), "banner")
        s.set_culprit(0, 0, None)
        frames = [
            (f"/workspace/{w.script}", 412, "<module>", "main()"),
            (f"/workspace/{w.script}", 367, "main", 'dist.init_process_group(backend="nccl")'),
            (f"{_DIST}/rendezvous.py", 176, "_create_c10d_store", "return TCPStore("),
        ]
        kit.crash(s, 0, s.t0, [err], frames=frames)
        s.mode = "store"
        return
    kit.startup(s, rng.uniform(0.6, 1.5), "none")
    s.set_culprit(0, None, None)
    s.agent_ok[0] = False
    s.mode = "none"
    run = [
        ("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
        (f"{_DIST}/run.py", 803, "run", "elastic_launch("),
        (
            f"{_DIST}/launcher/api.py",
            241,
            "launch_agent",
            "rdzv_handler=rdzv_registry.get_rendezvous_handler(rdzv_parameters),",
        ),
    ]
    frames = [
        *run,
        (
            f"{_DIST}/elastic/rendezvous/c10d_rendezvous_backend.py",
            250,
            "create_backend",
            "store = _create_tcp_store(params)",
        ),
        (
            f"{_DIST}/elastic/rendezvous/c10d_rendezvous_backend.py",
            158,
            "_create_tcp_store",
            "store = TCPStore(",
        ),
    ]
    s.block(("agent", 0), s.t0 + 0.2, fmt.traceback(frames, [err]), roots=(len(frames) * 2 + 1,))
    join = 600.0
    for node in w.nodes[1:]:
        t = s.t0 + join + rng.uniform(1.0, 5.0)
        agent_api = f"{_DIST}/elastic/agent/server/api.py"
        dyn = f"{_DIST}/elastic/rendezvous/dynamic_rendezvous.py"
        waits = [
            *run[:2],
            (f"{_DIST}/launcher/api.py", 255, "launch_agent", "result = agent.run()"),
            (agent_api, 680, "run", "result = self._invoke_run(role)"),
            (agent_api, 829, "_invoke_run", "self._initialize_workers(self._worker_group)"),
            (agent_api, 652, "_rendezvous", "rdzv_info = spec.rdzv_handler.next_rendezvous()"),
            (dyn, 1135, "next_rendezvous", "self._op_executor.run(join_op, deadline, self._get_deadline)"),
            (dyn, 658, "run", "raise RendezvousTimeoutError"),
        ]
        s.block(
            ("agent", node.index),
            t,
            fmt.traceback(waits, ["torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"]),
            symptom="launcher_rendezvous_store_failure",
        )
    if w.scheduler == "slurm":
        s.slurm(s.t0 + 1.0, f"srun: error: {master}: task 0: Exited with exit code 1")
        for node in w.nodes[1:]:
            s.slurm(s.t0 + join + 8.0, f"srun: error: {node.host}: task {node.index}: Exited with exit code 1")


def unknown(s: Story) -> None:
    w, rng = s.world, s.rng
    s.set_culprit(None, None, None)
    s.xid45, s.caught_oom, s.mode = False, False, "timeout"
    if rng.random() < 0.5:
        return
    r = s.pick_rank()
    s.fate[r] = Fate("exit", s.t0, -9)
    s.stop[r] = s.t0
    if rng.random() < 0.5:
        s.rank(
            r,
            s.t0 + 0.01,
            f'/workspace/run.sh: line 14: {w.pid[r]} Killed                  python -u /workspace/{w.script} "$@"',
        )
