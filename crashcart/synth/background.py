"""Synth benign background: what a healthy job prints before (and around) the incident.

Input: a Story whose scenario has set fates, stop times and reach; output: more lines in its
streams (banners, NCCL INFO init, training iterations, warnings, kernel boot lines, launcher
start-up). Benign traps live here too: a harmless NCCL WARN, a caught CUDA OOM. Pure.
"""

from __future__ import annotations

from crashcart.synth import formats as fmt
from crashcart.synth.story import Line, Story

_WARNINGS = (
    (
        "/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:464: UserWarning: "
        "torch.utils.checkpoint:"
        " the use_reentrant parameter should be passed explicitly. In version 2.4 we will raise an "
        "exception if"
        " use_reentrant is not passed. use_reentrant=False is recommended, but if you need to preserve the "
        "current"
        " default behavior, you can pass use_reentrant=True. Refer to docs for more details on the "
        "differences"
        " between the two variants.",
        "  warnings.warn(",
    ),
    (
        "/usr/local/lib/python3.10/dist-packages/torch/_utils.py:831: UserWarning: TypedStorage is "
        "deprecated. It"
        " will be removed in the future and UntypedStorage will be the only storage class. This should only "
        "matter"
        " to you if you are using storages directly.  To access UntypedStorage directly, use"
        " tensor.untyped_storage() instead of tensor.storage()",
        "  return self.fget.__get__(instance, owner)()",
    ),
    (
        "/workspace/{script}:97: FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. Please "
        "use"
        " `torch.amp.GradScaler('cuda', args...)` instead.",
        "  scaler = torch.cuda.amp.GradScaler(enabled=args.fp16)",
    ),
)


def fill(s: Story) -> None:
    """Add every benign line to the story (after the scenario decided the timeline)."""
    w = s.world
    for r in range(w.ranks):
        if s.reach.get(r, "train") != "none":
            _rank(s, r)
    for n in range(len(w.nodes)):
        _kernel(s, n)
        if w.launcher == "torchrun":
            _agent(s, n)
    if s.root_last_rank is not None:
        lines = s.streams.get(("rank", s.root_last_rank), [])
        if lines:
            i = max(range(len(lines)), key=lambda k: (lines[k].t, k))
            lines[i] = Line(lines[i].t, lines[i].text, root=True)
    if w.scheduler == "slurm":
        hosts = fmt.hostlist([n.host for n in w.nodes])
        s.slurm(-2.0, f"Job {w.job_id} ({w.job_name}) on {hosts}: {len(w.nodes)} nodes, {w.ranks} GPUs")
        s.slurm(-1.9, f"MASTER_ADDR={w.nodes[0].host} MASTER_PORT=29500 WORLD_SIZE={w.ranks}")


def _rank(s: Story, r: int) -> None:
    w, rng = s.world, s.rng
    reach = s.reach.get(r, "train")
    L = w.local[r]
    t = 1.5 + 0.01 * r + rng.uniform(0, 1.5)
    if w.log_style == "megatron" and r == 0:
        s.rank(
            r,
            t,
            f"using world size: {w.ranks}, data-parallel size: {w.ranks}, tensor-model-parallel size: 1",
        )
        s.rank(r, t + 0.2, "> initializing torch distributed ...")
    elif w.log_style != "megatron":
        info = f"rank={r} local_rank={L} world_size={w.ranks} host={w.host(r)} master={w.nodes[0].host}:29500"
        s.rank(r, t, fmt.pylog(w, t, "INFO", "train", f"Initializing process group backend=nccl {info}"))
        s.rank(r, t + 0.3, fmt.pylog(w, t + 0.3, "INFO", "train", f"Using device cuda:{L} ({w.gpu_model})"))
    if reach == "banner":
        return
    t = 18.0 + rng.uniform(0, 6.0) + 0.002 * r
    _nccl_init(s, r, t, complete=reach == "train")
    if reach != "train":
        return
    if w.cpp_info and w.old_torch:
        s.rank(
            r,
            t + 1.0,
            fmt.c10d(
                w,
                t + 1.0,
                "I",
                "ProcessGroupNCCL.cpp:686",
                f"[Rank {r}] ProcessGroupNCCL "
                "initialization options:NCCL_ASYNC_ERROR_HANDLING: 1, NCCL_DESYNC_DEBUG: 0, "
                "NCCL_ENABLE_TIMING: 0, "
                f"NCCL_BLOCKING_WAIT: 0, TIMEOUT(ms): {w.timeout_ms}, USE_HIGH_PRIORITY_STREAM: 0",
            ),
        )
    elif w.cpp_info:
        opts = f"size: {w.ranks}, global rank: {r}, TIMEOUT(ms): {w.timeout_ms}, USE_HIGH_PRIORITY_STREAM: 0"
        s.rank(
            r,
            t + 1.0,
            fmt.c10d(
                w,
                t + 1.0,
                "I",
                "ProcessGroupNCCL.cpp:893",
                f"[PG 0 Rank {r}] "
                f"ProcessGroupNCCL initialization options: {opts}, SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: 0",
            ),
        )
    stop = s.stop.get(r, s.t0)
    warn = _WARNINGS[w.seed % len(_WARNINGS)]
    tw = w.t_train0 + 3.0 + rng.uniform(0, 5)
    if tw < stop:
        s.rank(r, tw, warn[0].format(script=w.script))
        s.rank(r, tw + 0.0001, warn[1])
    if (w.log_style == "megatron" and r == w.ranks - 1) or w.log_style != "megatron":
        _iterations(s, r, stop)
    elif w.log_style == "megatron":
        _megatron_quiet(s, r, stop)


def _nccl_init(s: Story, r: int, t: float, *, complete: bool) -> None:
    w = s.world
    n = w.rank_node[r]
    ifname, ip = s.ifname_override.get(n, (w.ifname, w.nodes[n].ip))
    nccl = s.nccl_override.get(n, f"{w.stack.nccl}+cuda{w.stack.cuda}")
    bus = fmt.nccl_busid(w.bus(r))
    dev = w.local[r]
    comm = f"comm {w.comm_addr[r]} rank {r} nranks {w.ranks} cudaDev {dev} nvmlDev {dev} busId {bus}"
    lines: list[tuple[int, str, str, str | None]] = [(0, f"Bootstrap : Using {ifname}:{ip}<0>", "INFO", None)]
    if w.plugin_warn:
        lines.append(
            (
                0,
                "NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file: "
                "No such file or directory.",
                "WARN",
                "net.cc:63",
            )
        )
    else:
        lines.append((0, "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation", "INFO", None))
    lines += [
        (0, f"cudaDriverVersion {w.stack.cuda_driver}", "INFO", None),
        (0, f"NCCL version {nccl}", "INFO", None),
    ]
    hcas = " ".join(f"[{i}]mlx5_{i}:1/{w.net}" for i in range(min(8, max(1, len(w.nodes[n].ranks)))))
    lines += [
        (1, f"NET/IB : Using {hcas} [RO]; OOB {ifname}:{ip}<0>", "INFO", None),
        (1, "Using network IB", "INFO", None),
        (1, f"{comm} commId {w.comm_id} - Init START", "INFO", None),
        (1, f"Setting affinity for GPU {w.local[r]} to ffffffff,ffff0000,00000000", "INFO", None),
    ]
    if complete:
        lines += [
            (1, "Connected all rings", "INFO", None),
            (1, "Connected all trees", "INFO", None),
            (1, "threadThresholds 8/8/64 | 128/8/64 | 512 | 512", "INFO", None),
            (
                1,
                "32 coll channels, 0 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer",
                "INFO",
                None,
            ),
            (1, f"{comm} commId {w.comm_id} - Init COMPLETE", "INFO", None),
        ]
    for i, (tid, msg, level, src) in enumerate(lines):
        root = n in s.root_nccl_nodes and msg.startswith("NCCL version")
        s.nccl(r, t + i * 0.013, msg, level=level, src=src, tid=tid, root=root)


def _iterations(s: Story, r: int, stop: float) -> None:
    w, rng = s.world, s.rng
    oom_step = -1
    steps = s.steps(stop)
    trap_rank = w.ranks - 1 if w.log_style == "megatron" else (w.seed * 7 + 3) % w.ranks
    if s.caught_oom and r == trap_rank and len(steps) > 40:
        oom_step = steps[len(steps) // 4].step
    for st in steps:
        t = st.t + 0.004 * r + rng.uniform(0, 0.01)
        if t > stop:
            break
        tflops = 390.0 / max(st.dt / w.step_time, 0.05) * rng.uniform(0.97, 1.02)
        loss = "nan" if st.loss != st.loss else f"{st.loss:.4f}"
        if w.log_style == "megatron":
            mloss = "nan" if st.loss != st.loss else f"{st.loss:.6E}"
            msg = (
                f"iteration {st.step:>8d}/{w.total_steps:>8d} | consumed samples: {st.step * 512:>12d} | "
                "elapsed time"
                f" per iteration (ms): {st.dt * 1000:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops:.1f} | "
                "learning"
                f" rate: {st.lr:.6E} | global batch size:   512 | lm loss: {mloss} | loss scale: 1.0 | grad "
                "norm:"
                f" {st.gnorm:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |"
            )
            s.rank(r, t, fmt.megatron(w, t, msg), root=st.step in s.root_steps)
        else:
            msg = (
                f"[rank{r}] step {st.step}/{w.total_steps} | loss {loss} | lr {st.lr:.3e} | grad_norm "
                f"{st.gnorm:.3f}"
                f" | {st.dt:.3f} s/step | {tflops:.1f} TFLOP/s/GPU"
            )
            s.rank(r, t, fmt.pylog(w, t, "INFO", "train", msg), root=st.step in s.root_steps)
        if st.step == oom_step:
            _caught_oom(s, r, t + st.dt * 0.5)
        if r == 0 and st.step % (w.log_every * 40) == 0:
            path = f"/checkpoints/{w.job_name}/iter_{st.step:07d}"
            s.rank(
                r,
                t + 0.5,
                fmt.pylog(w, t + 0.5, "INFO", "checkpoint", f"saving checkpoint at iteration {st.step} to {path}"),
            )
            s.rank(
                r,
                t + 41.0,
                fmt.pylog(
                    w,
                    t + 41.0,
                    "INFO",
                    "checkpoint",
                    f"successfully saved checkpoint at iteration {st.step} to {path} (40.5s)",
                ),
            )


def _megatron_quiet(s: Story, r: int, stop: float) -> None:
    w = s.world
    steps = s.steps(stop)
    if len(steps) > 2:
        t = steps[1].t + 0.01 * r
        s.rank(
            r,
            t,
            f"[Rank {r}] (after {steps[1].step} iterations) memory (MB) | allocated: 41234.5 | max allocated:"
            f" 61877.2 | reserved: 65432.0 | max reserved: 65432.0",
        )
    for st in steps:
        if r == 0 and st.step % (w.log_every * 40) == 0:
            path = f"/checkpoints/{w.job_name}"
            s.rank(r, st.t + 0.5, f"saving checkpoint at iteration {st.step:>7d} to {path} in torch_dist format")
            s.rank(
                r,
                st.t + 40.0,
                f"  successfully saved checkpoint from iteration {st.step:>7d} to {path} [ t 1/1, p 1/1 ]",
            )


def _caught_oom(s: Story, r: int, t: float) -> None:
    """Trap: an OOM the training loop catches; it recovers and keeps going."""
    w = s.world
    msg = (
        "CUDA OOM on micro-batch (seq_len=8192); emptying cache and retrying with 2 micro-batches: CUDA out "
        "of memory."
        f" Tried to allocate 2.50 GiB. GPU {w.local[r]} has a total capacity of {w.mem_gib:.2f} GiB of which "
        "1.13 GiB"
        " is free."
    )
    s.rank(r, t, fmt.pylog(w, t, "WARNING", "train", msg))
    s.rank(r, t + 0.8, fmt.pylog(w, t + 0.8, "INFO", "train", "recovered from OOM, continuing"))


def _kernel(s: Story, n: int) -> None:
    w, rng = s.world, s.rng
    node = w.nodes[n]
    tb = node.boot
    kver = rng.choice(("5.15.0-1053-nvidia", "5.15.0-105-generic", "6.8.0-1012-nvidia"))
    driver = s.driver_override.get(n, w.stack.driver)
    board = (
        "NVIDIA DGXH100/DGXH100, BIOS 1.5.2 01/19/2024"
        if w.gpu_kind == "h100"
        else "NVIDIA DGXA100 920-23687-2530-000/DGXA100, BIOS 1.25 05/23/2023"
    )
    boot = [
        f"Linux version {kver} (buildd@lcy02-amd64-047) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld "
        "(GNU "
        "Binutils for Ubuntu) 2.38) #54-Ubuntu SMP Fri Mar 22 15:13:49 UTC 2024",
        f"Command line: BOOT_IMAGE=/boot/vmlinuz-{kver} root=UUID=3f1c2a9e-8d2b-4b61-9b0e-2f6c1a7d9e10 ro "
        "console=tty0 console=ttyS0,115200n8 iommu=pt pci=realloc=off",
        f"DMI: {board}",
    ]
    boot += [f"pci {b}.0: [{w.pci_id}] type 00 class 0x030200" for b in node.buses]
    boot += [
        "mlx5_core 0000:0c:00.0: firmware version: 28.39.2048",
        "mlx5_core 0000:0c:00.0: Rate limit: 127 rates are supported, range: 0Mbps to 97656Mbps",
        "mlx5_core 0000:0c:00.0 ibp12s0: renamed from ib0",
        "nvidia: loading out-of-tree module taints kernel.",
        "nvidia: module license 'NVIDIA' taints kernel.",
        "Disabling lock debugging due to kernel taint",
        "nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
        f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Tue Mar  5 22:42:15 UTC 2024",
        f"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  {driver}  Tue Mar  5 "
        "22:22:58 UTC 2024",
        "nvidia_uvm: module uses symbols from proprietary module nvidia, inheriting taint.",
        "nvidia-uvm: Loaded the UVM driver, major device number 510.",
        "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Opts: (null). Quota mode: none.",
        "IPv6: ADDRCONF(NETDEV_CHANGE): ibp12s0: link becomes ready",
    ]
    for i, msg in enumerate(boot):
        root = n in s.root_driver_nodes and msg.startswith("NVRM: loading")
        s.kernel(n, tb + 0.8 + i * 0.37, msg, root=root)
    if n == 0:
        s.kernel(
            n,
            14.0 + rng.uniform(0, 3),
            "TCP: request_sock_TCP: Possible SYN flooding on port 29500. Sending cookies.  Check SNMP counters.",
        )
    if rng.random() < 0.35:
        for k in range(rng.randrange(1, 4)):
            s.kernel(
                n,
                rng.uniform(300.0, max(400.0, s.t0 - 60)) + k,
                "mlx5_core 0000:0c:00.0: mlx5_cmd_out_err:838:"
                f"(pid {rng.randrange(1000, 99999)}): ACCESS_REG(0x805) op_mod(0x1) failed, status bad "
                "resource"
                "(0x5), syndrome (0x305684), err(-22)",
            )
    if rng.random() < 0.5:
        s.kernel(
            n,
            rng.uniform(600.0, max(700.0, s.t0 - 30)),
            "perf: interrupt took too long (3136 > 3127), lowering kernel.perf_event_max_sample_rate to 63750",
        )


def _agent(s: Story, n: int) -> None:
    w = s.world
    t = 0.3 + 0.05 * n
    run = "torch/distributed/run.py:757"
    stars = "*****************************************"
    s.agent(n, t, "W", run, "")
    s.agent(n, t + 0.001, "W", run, stars)
    s.agent(
        n,
        t + 0.002,
        "W",
        run,
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
        "to avoid your system being overloaded, please further tune the variable for optimal performance in "
        "your "
        "application as needed. ",
    )
    s.agent(n, t + 0.003, "W", run, stars)
    api = "torch/distributed/launcher/api.py:188"
    s.agent(n, t + 0.1, "I", api, "Starting elastic_operator with launch configs:")
    s.agent(n, t + 0.101, "I", api, f"  entrypoint       : {w.script}")
    s.agent(n, t + 0.102, "I", api, f"  min_nodes        : {len(w.nodes)}")
    s.agent(n, t + 0.103, "I", api, f"  nproc_per_node   : {len(w.nodes[n].ranks)}")
    s.agent(n, t + 0.104, "I", api, "  rdzv_backend     : c10d")
    s.agent(n, t + 0.105, "I", api, f"  rdzv_endpoint    : {w.nodes[0].host}:29500")
    s.agent(n, t + 0.106, "I", api, "  max_restarts     : 0")
