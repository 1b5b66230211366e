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
            f"{new} Process {rng.randrange(2000, 99999)} has {rng.uniform(8, 20):.2f} GiB memory in use. {tail}",
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
        src = "/opt/pytorch/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [{b},0,0], thread:"
        cond = 'Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.'
        pre = [f"{src.format(b=rng.randrange(9000))} [{t},0,0] {cond}" for t in (32, 33, 34)]
        kit.crash(s, r, s.t0, kit.cuda_error("device-side assert triggered"), pre=pre, pre_roots=(0,), frames=frames)
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


def torchelastic_childfailed_summary(s: Story) -> None:
    r = _rank_culprit(s)
    s.summary_root = r
    s.fate[r] = Fate("exit", s.t0, 1)
    s.stop[r] = s.t0
