"""Synth scenarios for process-level classes: one rank's traceback or signal (OOM, CUDA fault, Python
exception, segfault, DataLoader, storage), host memory and filesystems, numerics, torchrun summary.

Input/output: a Story (one function per TAXONOMY class). Pure, no I/O.
"""

from __future__ import annotations

from crashcart.synth import formats as fmt
from crashcart.synth import kit
from crashcart.synth.story import Fate, Story

_DIST = "/usr/local/lib/python3.10/dist-packages"
_MODULE = (
    f"{_DIST}/torch/nn/modules/module.py",
    1532,
    "_wrapped_call_impl",
    "return self._call_impl(*args, **kwargs)",
)


def _forward(s: Story) -> list[tuple[str, int, str, str]]:
    w = s.world
    return fmt.train_frames(
        w,
        (f"/workspace/{w.script}", 242, "train_step", "logits = model(input_ids, attention_mask=mask)"),
        _MODULE,
        ("/workspace/model.py", 211, "forward", "attn = torch.softmax(scores.float(), dim=-1).to(q.dtype)"),
    )


def _rank_culprit(s: Story, *, avoid_zero: bool = False) -> int:
    r = s.pick_rank(avoid_zero=avoid_zero)
    s.set_culprit(s.node_of(r), r, None)
    return r


def cuda_oom(s: Story) -> None:
    w, rng = s.world, s.rng
    r = _rank_culprit(s)
    s.caught_oom = False
    L, mem = w.local[r], w.mem_gib
    req, free = rng.uniform(1.0, 12.0), rng.uniform(80.0, 900.0)
    alloc = mem - rng.uniform(4.0, 9.0)
    new = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req:.2f} GiB. GPU {L} has a total "
        "capacity"
        f" of {mem:.2f} GiB of which {free:.2f} MiB is free."
    )
    tail = (
        f"Including non-PyTorch memory, this process has {mem - 0.4:.2f} GiB memory in use. Of the allocated "
        "memory"
        f" {alloc:.2f} GiB is allocated by PyTorch, and {rng.uniform(100, 900):.2f} MiB is reserved by "
        "PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
        "expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    last = kit.pick(
        s,
        (
            f"{new} {tail}",
            f"{new} Process {rng.randrange(2000, 99999)} has {rng.uniform(8, 20):.2f} GiB memory in use. "
            f"{tail}",
            f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate {req:.2f} GiB (GPU {L}; "
            f"{mem:.2f} GiB "
            f"total capacity; {alloc:.2f} GiB already allocated; {free:.2f} MiB free; {alloc + 1.2:.2f} GiB "
            "reserved in "
            "total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to "
            "avoid "
            "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        ),
    )
    kit.crash(s, r, s.t0, [last], frames=_forward(s))


_CUBLAS = (
    "CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, "
    "CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, "
    "CUBLAS_GEMM_DEFAULT_TENSOR_OP)`"
)


def cuda_kernel_fault(s: Story) -> None:
    w, rng = s.world, s.rng
    r = _rank_culprit(s)
    v = rng.randrange(5)
    if v == 0 and rng.random() < 0.6:
        addr = f"0x{rng.randrange(0x7F00, 0x7FFF):x}_{rng.getrandbits(28):07x}000"
        s.kernel(
            s.node_of(r),
            s.t0 - 0.2,
            fmt.xid(
                w.bus(r),
                31,
                f"Ch 00000010, intr 00000000. MMU Fault: ENGINE "
                f"GRAPHICS GPC3 GPCCLIENT_T1_5 faulted @ {addr}. Fault is of type FAULT_PDE "
                "ACCESS_TYPE_VIRT_READ",
                pid=w.pid[r],
            ),
            symptom="gpu_app_fault_xid",
        )
    if v == 2:
        kit.watchdog_exception(s, r, s.t0, "an illegal memory access was encountered", root=True)
        return
    frames = _forward(s)
    if v == 1:
        src = (
            "/opt/pytorch/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [{b},0,0], "
            "thread:"
        )
        cond = 'Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.'
        pre = [f"{src.format(b=rng.randrange(9000))} [{t},0,0] {cond}" for t in (32, 33, 34)]
        kit.crash(
            s, r, s.t0, kit.cuda_error("device-side assert triggered"), pre=pre, pre_roots=(0,), frames=frames
        )
        return
    msg = {
        0: "an illegal memory access was encountered",
        3: _CUBLAS,
        4: "misaligned address",
    }[v]
    kit.crash(s, r, s.t0, kit.cuda_error(msg), frames=frames)


_PY_ERRORS = (
    (
        True,
        (
            "/workspace/data/indexed_dataset.py",
            188,
            "__getitem__",
            'with open(self._bin_path(idx), "rb") as f:',
        ),
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/tokenized/{job}/shard-0{k}.bin'",
    ),
    (
        False,
        ("/workspace/model.py", 148, "forward", "q = q.view(bsz, seqlen, self.n_heads, self.head_dim)"),
        "RuntimeError: shape '[1, 8192, 64, 128]' is invalid for input of size {size}",
    ),
    (
        True,
        ("/workspace/data/jsonl_dataset.py", 61, "__getitem__", 'text = raw.decode("utf-8")'),
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0x8b in position 1: invalid start byte",
    ),
    (
        True,
        (
            "/workspace/data/packing.py",
            97,
            "__getitem__",
            'assert len(ids) <= self.max_len, f"sequence length '
            '{len(ids)} exceeds max_position_embeddings {self.max_len}"',
        ),
        "AssertionError: sequence length 8{k} exceeds max_position_embeddings 8192",
    ),
    (
        False,
        ("/workspace/losses.py", 44, "masked_mean", "return (loss * mask).sum() / mask.sum().item()"),
        "ZeroDivisionError: division by zero",
    ),
    (
        True,
        ("/workspace/data/collate.py", 33, "__call__", 'masks = [ex["attention_mask"] for ex in batch]'),
        "KeyError: 'attention_mask'",
    ),
)


def python_exception_rank_crash(s: Story) -> None:
    w, rng = s.world, s.rng
    r = _rank_culprit(s)
    via_data, frame, text = _PY_ERRORS[rng.randrange(len(_PY_ERRORS))]
    last = text.format(job=w.job_name, k=rng.randrange(100, 999), size=rng.randrange(10**8, 10**9))
    if via_data:
        frames = fmt.data_frames(w, frame)
    else:
        frames = fmt.train_frames(
            w, (f"/workspace/{w.script}", 242, "train_step", "loss = loss_fn(model(batch))"), frame
        )
    kit.crash(s, r, s.t0, [last], frames=frames)


def native_crash_segfault_abort(s: Story) -> None:
    w, rng = s.world, s.rng
    r = s.pick_rank()
    n = s.node_of(r)
    cur = [
        "",
        f"Thread 0x00007f3b{rng.getrandbits(16):04x}e640 (most recent call first):",
        "  <no Python frame>",
        "",
        f"Current thread 0x00007f3b6a9f{rng.getrandbits(12):03x}0 (most recent call first):",
        f'  File "{_DIST}/torch/distributed/distributed_c10d.py", line 2288 in all_reduce',
        f'  File "/workspace/{w.script}", line 301 in train',
        f'  File "/workspace/{w.script}", line 412 in <module>',
    ]
    v = rng.randrange(3)
    if v < 2:
        lib = kit.pick(
            s,
            (
                "libnccl.so.2[7f7c7ac00000+d3d3000]",
                "libc.so.6[7f9a1c428000+195000]",
                "libtorch_cuda.so[7f3b1c000000+4d5a000]",
            ),
        )
        seg = (
            f"pt_main_thread[{w.pid[r]}]: segfault at {rng.getrandbits(44):x} ip "
            f"00007f7c7ac{rng.getrandbits(20):05x}"
            f" sp 00007f7c12fd7c30 error 4 in {lib}"
        )
        s.kernel(n, s.t0 + 0.001, seg, root=True)
        s.kernel(
            n,
            s.t0 + 0.002,
            "Code: 48 8b 47 08 48 85 c0 74 0a 48 8b 40 10 c3 0f 1f 44 00 00 <8b> 07 c3 66 0f 1f 44 "
            "00 00 f3 0f 1e fa 48 83 ec 08",
        )
        if v == 0:
            s.set_culprit(n, r, None)
            s.block(("rank", r), s.t0, ["Fatal Python error: Segmentation fault", *cur], roots=(0,))
        else:
            s.set_culprit(n, None, None)
        code = -11
    else:
        s.set_culprit(n, r, None)
        first = kit.pick(
            s,
            ("free(): invalid pointer", "double free or corruption (!prev)", "corrupted size vs. prev_size"),
        )
        s.block(("rank", r), s.t0, [first, "Fatal Python error: Aborted", *cur], roots=(0, 1))
        code = -6
    s.srun_status[r] = "Segmentation fault (core dumped)" if code == -11 else "Aborted (core dumped)"
    s.fate[r] = Fate("exit", s.t0 + 0.05, code)
    s.stop[r] = s.t0


def host_oom_kill(s: Story) -> None:
    w, rng = s.world, s.rng
    r = s.pick_rank()
    n = s.node_of(r)
    s.set_culprit(n, None, None)
    worker = rng.random() < 0.4
    pid = w.pid[r] + 97 if worker else w.pid[r]
    comm = "pt_data_worker" if worker else kit.pick(s, ("python", "pt_main_thread"))
    memcg = rng.random() < 0.4
    task = f"/slurm/uid_{w.uid}/job_{w.job_id}/step_0" if w.scheduler == "slurm" else "/user.slice"
    kb = rng.randrange(400_000_000, 1_900_000_000)
    constraint = "CONSTRAINT_MEMCG" if memcg else "CONSTRAINT_NONE"
    kill = "Memory cgroup out of memory" if memcg else "Out of memory"
    t = s.t0
    kit.kernel_lines(
        s,
        n,
        t,
        [
            f"{comm} invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
            "oom_score_adj=0",
            f"CPU: {rng.randrange(224)} PID: {pid} Comm: {comm} Tainted: P           OE     "
            "5.15.0-1053-nvidia #54-Ubuntu",
            "Mem-Info:",
            "Tasks state (memory values in pages):",
            "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
            f"[{pid:>7d}]  {w.uid:>4d} {pid:>5d} {kb // 4 + 9000:>8d} {kb // 4:>8d} {kb // 500:>14d}        "
            "0             0 "
            f"{comm}",
            f"oom-kill:constraint={constraint},nodemask=(null),cpuset=/,mems_allowed=0-1,oom_memcg={task},task_memcg="
            f"{task},task={comm},pid={pid},uid={w.uid}",
            f"{kill}: Killed process {pid} ({comm}) total-vm:{kb + 36_000_000}kB, anon-rss:{kb}kB, "
            "file-rss:81920kB, "
            f"shmem-rss:12288kB, UID:{w.uid} pgtables:{kb // 500}kB oom_score_adj:0",
            f"oom_reaper: reaped process {pid} ({comm}), now anon-rss:0kB, file-rss:0kB, shmem-rss:12288kB",
        ],
        roots=(6, 7),
    )
    if w.scheduler == "slurm":
        s.slurm(
            t + 2.0,
            f"slurmstepd: error: Detected 1 oom_kill event in StepId={w.job_id}.0. Some of the step tasks"
            " have been OOM Killed.",
            root=True,
        )
        s.sacct_state, s.sacct_exit, s.sacct_root = "OUT_OF_MEMORY", "0:125", True
    if worker:
        frames = fmt.train_frames(
            w,
            (
                f"{_DIST}/torch/utils/data/dataloader.py",
                1133,
                "_try_get_data",
                "raise RuntimeError(f'DataLoader worker (pid(s) {pids_str}) exited unexpectedly')",
            ),
            call="batch = next(data_iter)",
            line=297,
        )
        last = [f"RuntimeError: DataLoader worker (pid {pid}) is killed by signal: Killed."]
        kit.crash(
            s,
            r,
            t + rng.uniform(0.5, 4.0),
            last,
            roots=(),
            frames=frames,
            symptom="dataloader_worker_failure",
        )
    else:
        s.fate[r] = Fate("exit", t + 0.01, -9)
        s.stop[r] = t
        s.srun_status[r] = "Out Of Memory"


def storage_full_or_io_error(s: Story) -> None:
    w, rng = s.world, s.rng
    r = 0 if rng.random() < 0.6 else s.pick_rank()
    n = s.node_of(r)
    s.set_culprit(n, r, None)
    it = s.step_before(s.t0).step
    path = f"/checkpoints/{w.job_name}/iter_{it:07d}"
    s.rank(
        r,
        s.t0 - 3.0,
        fmt.pylog(w, s.t0 - 3.0, "INFO", "checkpoint", f"saving checkpoint at iteration {it} to {path}"),
    )
    frames = fmt.train_frames(
        w,
        ("/workspace/checkpointing.py", 77, "save_checkpoint", "torch.save(state, f)"),
        (
            f"{_DIST}/torch/serialization.py",
            628,
            "save",
            "_save(obj, opened_zipfile, pickle_module, pickle_protocol, _disable_byteorder_record)",
        ),
        call="save_checkpoint(model, optimizer, it)",
        line=318,
    )
    v = rng.randrange(4)
    if v == 0:
        last = [
            f"RuntimeError: [enforce fail at inline_container.cc:{kit.pick(s, (445, 778))}] . "
            "PytorchStreamWriter "
            f"failed writing file data/{rng.randrange(40, 400)}: file write failed"
        ]
    elif v == 1:
        last = [f"OSError: [Errno 28] No space left on device: '{path}/mp_rank_{r:02d}_model_states.pt'"]
    elif v == 2:
        dev = kit.pick(s, ("nvme0n1p1", "md0"))
        kit.kernel_lines(
            s,
            n,
            s.t0 - 1.5,
            [
                f"EXT4-fs error (device {dev}): ext4_journal_check_start:83: comm pt_main_thread: Detected "
                "aborted journal",
                f"EXT4-fs ({dev}): Remounting filesystem read-only",
            ],
            roots=(0, 1),
        )
        last = [f"OSError: [Errno 30] Read-only file system: '{path}/model_optim_rng.pt'"]
    else:
        kit.kernel_lines(
            s,
            n,
            s.t0 - 1.5,
            [
                f"nvme nvme1: I/O {rng.randrange(1, 999)} QID {rng.randrange(1, 64)} timeout, aborting",
                f"blk_update_request: I/O error, dev nvme1n1, sector {rng.randrange(10**6, 10**9)} op "
                "0x1:(WRITE) flags "
                "0x800 phys_seg 1 prio class 0",
                f"Buffer I/O error on dev nvme1n1, logical block {rng.randrange(10**5, 10**8)}, lost async "
                "page write",
            ],
            roots=(1, 2),
        )
        last = ["OSError: [Errno 5] Input/output error"]
    kit.crash(s, r, s.t0, last, frames=frames)


def network_filesystem_hang(s: Story) -> None:
    w, rng = s.world, s.rng
    r = s.pick_rank()
    n = s.node_of(r)
    s.set_culprit(n, None, None)
    if rng.random() < 0.5:
        first = f"nfs: server 10.{rng.randrange(250)}.0.{rng.randrange(2, 250)} not responding, still trying"
    else:
        fs = kit.pick(s, ("lustre1", "scratch", "f2"))
        first = (
            f"Lustre: {fs}-OST00{rng.randrange(10, 99)}-osc-ffff9a0c4e7d8000: Connection to {fs}-OST00"
            f"{rng.randrange(10, 99)} (at 10.20.33.{rng.randrange(2, 250)}@o2ib2) was lost; in progress "
            "operations "
            "using this service will wait for recovery to complete"
        )
    kit.kernel_lines(s, n, s.t0, [first])
    for k, secs in enumerate((122, 245)):
        kit.kernel_lines(
            s,
            n,
            s.t0 + secs + 1.0,
            [
                f"INFO: task pt_main_thread:{w.pid[r]} blocked for more than {secs} seconds.",
                "      Tainted: P           OE     5.15.0-1053-nvidia #54-Ubuntu",
                '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
                f"task:pt_main_thread  state:D stack:0     pid:{w.pid[r]} ppid:{w.pid[r] - 1} "
                "flags:0x00004002",
                "Call Trace:",
                " <TASK>",
                " __schedule+0x2ee/0x900",
                " schedule+0x69/0x110",
                " io_schedule+0x46/0x80",
                " nfs_wait_on_request+0x2e/0x40 [nfs]"
                if "nfs" in first
                else " cl_sync_io_wait+0x1c1/0x2e0 [obdclass]",
                " </TASK>",
            ],
            roots=(0,) if k == 0 else (),
        )
    kit.hang(s, r, s.t0 - rng.uniform(0.0, 20.0))


def dataloader_worker_failure(s: Story) -> None:
    w, rng = s.world, s.rng
    r = _rank_culprit(s)
    wpid = w.pid[r] + rng.randrange(50, 400)
    frames = fmt.train_frames(
        w,
        (f"{_DIST}/torch/utils/data/dataloader.py", 631, "__next__", "data = self._next_data()"),
        (f"{_DIST}/torch/utils/data/dataloader.py", 1329, "_next_data", "idx, data = self._get_data()"),
        (
            f"{_DIST}/torch/utils/data/dataloader.py",
            1295,
            "_get_data",
            "success, data = self._try_get_data()",
        ),
        call="batch = next(data_iter)",
        line=297,
    )
    if rng.random() < 0.6:
        pre = [
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared "
            "memory "
            "(shm)."
        ]
        last = [
            f"RuntimeError: DataLoader worker (pid {wpid}) is killed by signal: Bus error. It is possible "
            "that "
            "dataloader's workers are out of shared memory. Please try to raise your shared memory limit."
        ]
        kit.crash(s, r, s.t0, last, pre=pre, pre_roots=(0,), frames=frames)
    else:
        kit.crash(
            s,
            r,
            s.t0,
            [f"RuntimeError: DataLoader worker (pid(s) {wpid}) exited unexpectedly"],
            frames=frames,
        )


def nan_inf_loss_or_grad(s: Story) -> None:
    w, rng = s.world, s.rng
    v = rng.randrange(3)
    if v < 2:
        r = _rank_culprit(s)
        it = s.step_before(s.t0).step + 1
        text = (
            (
                f"RuntimeError: Rank {r}, node {w.host(r)}, device {w.local[r]}, iteration {it}: Unexpected "
                "result nan "
                "(message='found NaN in local grad norm for bucket #0 in backward pass before data-parallel "
                "communication collective')"
            )
            if v == 0
            else (
                f"AssertionError: Rank {r}: found NaN in local grad norm in backward pass before "
                "data-parallel "
                f"communication collective. Device: {w.local[r]}, node: {w.host(r)}"
            )
        )
        frames = fmt.train_frames(
            w,
            (
                "/workspace/megatron/core/distributed/param_and_grad_buffer.py",
                257,
                "start_grad_sync",
                "rerun_state_machine.validate_result(",
            ),
        )
        kit.crash(s, r, s.t0, [text], frames=frames)
        return
    s.set_culprit(None, None, None)
    steps = s.steps(s.t0)
    first = steps[-3]
    for st in steps[-3:]:
        s.force_loss(st.step, float("nan"))
    s.root_steps = {first.step}
    for r in range(w.ranks):
        kit.crash(
            s, r, s.t0 + 0.01 * r, [f"FloatingPointError: loss is nan at step {steps[-1].step}; stopping run"]
        )
    s.mode = "none"


def fp16_loss_scale_overflow(s: Story) -> None:
    w, rng = s.world, s.rng
    s.set_culprit(None, None, None)

    def ds(t: float, msg: str) -> None:
        dt = w.at(t)
        s.rank(
            0,
            t,
            f"[{dt:%Y-%m-%d %H:%M:%S},{dt.microsecond // 1000:03d}] [INFO] [loss_scaler.py:183:update_scale]"
            f" [deepspeed] {msg}",
        )

    steps = s.steps(s.t0)
    for st in (steps[len(steps) // 5], steps[len(steps) // 3]):
        ds(st.t + 0.3, "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768")
    scale = 2 ** rng.randrange(12, 17)
    t = s.t0 - 20 * w.step_time
    while scale > 1:
        ds(t, f"OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {scale}, reducing to {scale // 2}")
        scale //= 2
        t += w.step_time
    frames = fmt.train_frames(
        w,
        (f"{_DIST}/deepspeed/runtime/engine.py", 2169, "step", "self._take_model_step(lr_kwargs)"),
        (
            f"{_DIST}/deepspeed/runtime/fp16/fused_optimizer.py",
            253,
            "step",
            "self._update_scale(self.overflow)",
        ),
        (f"{_DIST}/deepspeed/runtime/fp16/loss_scaler.py", 174, "update_scale", "raise Exception("),
    )
    last = ["Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."]
    for r in range(w.ranks):
        kit.crash(s, r, s.t0 + 0.005 * r, last, frames=frames)
    s.mode = "none"


def loss_spike_divergence(s: Story) -> None:
    w, rng = s.world, s.rng
    s.set_culprit(None, None, None)
    steps = s.steps(s.t0)
    i = len(steps) - rng.randrange(4, 10)
    spike = steps[i]
    value = spike.loss * rng.uniform(9.0, 16.0)
    s.force_loss(spike.step, value)
    s.root_steps = {spike.step}
    if rng.random() < 0.5:
        s.t0 = spike.t + 0.3
        for r in range(w.ranks):
            text = (
                f"RuntimeError: Rank {r}, node {w.host(r)}, device {w.local[r]}, iteration {spike.step}: "
                "Unexpected "
                f"result {value:.4f} (message='Spiky loss')"
            )
            kit.crash(s, r, s.t0 + 0.004 * r, [text])
    else:
        cur = value
        for st in steps[i + 1 :]:
            cur = cur * rng.uniform(0.55, 0.8) if cur > spike.loss * 3 else cur * rng.uniform(1.1, 1.4)
            s.force_loss(st.step, cur)
        s.t0 = steps[-1].t + 0.3
        for r in range(w.ranks):
            text = (
                f"ValueError: training diverged at step {steps[-1].step}: loss {cur:.3f} is more than 3x the "
                "running"
                f" mean {spike.loss:.3f}; stopping"
            )
            kit.crash(s, r, s.t0 + 0.004 * r, [text])
    for r in range(w.ranks):
        s.stop[r] = s.t0
    s.mode = "none"


def torchelastic_childfailed_summary(s: Story) -> None:
    r = _rank_culprit(s)
    s.summary_root = r
    s.fate[r] = Fate("exit", s.t0, 1)
    s.stop[r] = s.t0
