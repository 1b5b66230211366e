"""Synth scenarios for host-side classes: the kernel/cgroup OOM killer, storage full or failing, and a
hung network filesystem; the clue is the node's kernel log (and Slurm's OOM record), the victim
rank shows a bare exit, a write error or simply stops.

Input/output: a Story (one function per TAXONOMY class). Pure, no I/O.
"""

from __future__ import annotations

from crashcart.synth import formats as fmt
from crashcart.synth import kit
from crashcart.synth.story import Fate, Story

_DIST = "/usr/local/lib/python3.10/dist-packages"


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
            f"{comm} invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
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
                f"Buffer I/O error on dev nvme1n1, logical block {rng.randrange(10**5, 10**8)}, lost async page write",
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
        ost = rng.randrange(10, 99)
        first = (
            f"Lustre: {fs}-OST00{ost}-osc-ffff9a0c4e7d8000: Connection to {fs}-OST00{ost} (at 10.20.33."
            f"{rng.randrange(2, 250)}@o2ib2) was lost; in progress operations using this service will wait "
            "for recovery to complete"
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
                f"task:pt_main_thread  state:D stack:0     pid:{w.pid[r]} ppid:{w.pid[r] - 1} flags:0x00004002",
                "Call Trace:",
                " <TASK>",
                " __schedule+0x2ee/0x900",
                " schedule+0x69/0x110",
                " io_schedule+0x46/0x80",
                " nfs_wait_on_request+0x2e/0x40 [nfs]" if "nfs" in first else " cl_sync_io_wait+0x1c1/0x2e0 [obdclass]",
                " </TASK>",
            ],
            roots=(0,) if k == 0 else (),
        )
    kit.hang(s, r, s.t0 - rng.uniform(0.0, 20.0))
