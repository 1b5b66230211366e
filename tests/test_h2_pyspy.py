"""py-spy dumps of hung jobs (issue 14, capabilities 5-6): the rank that is not where the others are.

Every dump here is written in the format py-spy's own source prints (benfred/py-spy): src/dump.rs of v0.2-v0.4
(``Process <pid>: <cmdline>``, ``Python v<ver> (<exe>)``, ``Parent Process ...`` for ``--subprocesses``, threads
``Thread <tid> (<idle|active|active+gil>): "<name>"``, frames ``    <func> (<file>:<line>)`` or, for a native frame
without a line (``--native``), ``    <func> (<shared object>)``; ``--locals`` adds ``Arguments:``/``Locals:`` lines),
src/coredump.rs (v0.3.12+: ``Thread <tid> (gil): "<name>"`` or no state) and src/main.rs of v0.1.11 (``<exe>``,
``Python version <ver>``, ``Thread 0x<id>/0x<os id> (<state>)``, frames after a tab and a space). The frames are
those of torch/utils/data/dataloader.py, threading.py, queue.py, torch/distributed/distributed_c10d.py,
deepspeed/comm/torch.py, torch/distributed/elastic/agent/server/api.py and torch/utils/data/_utils/worker.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.ingest.bundle import open_bundle
from crashcart.ingest.hang_kinds import stack_tool
from crashcart.scan.findings import IdSource
from crashcart.scan.hang_evidence import frames, scan_hang_evidence, stacks
from crashcart.scan.hang_evidence.stacks import Frame
from crashcart.settings import Settings
from crashcart.verify import check
from tests.kit import run_files

WAIT = [
    ("wait", "torch/distributed/distributed_c10d.py", 1402),
    ("all_reduce", "torch/distributed/distributed_c10d.py", 2050),
    ("all_reduce", "deepspeed/comm/torch.py", 117),
    ("train_step", "pretrain.py", 88),
    ("<module>", "pretrain.py", 120),
]
FETCH = [
    ("wait", "threading.py", 324),
    ("get", "queue.py", 180),
    ("_try_get_data", "torch/utils/data/dataloader.py", 1133),
    ("_get_data", "torch/utils/data/dataloader.py", 1294),
    ("_next_data", "torch/utils/data/dataloader.py", 1332),
    ("__next__", "torch/utils/data/dataloader.py", 628),
    ("train_step", "pretrain.py", 80),
    ("<module>", "pretrain.py", 120),
]


def dump(pid: int, main: list[tuple[str, str, int]], state: str = "idle", cmd: str = "", parent: int = 0) -> str:
    """One ``py-spy dump --pid`` (src/dump.rs, v0.2-v0.4)."""
    out = [f"Process {pid}: /usr/bin/python3 -u pretrain.py {cmd}".rstrip(), "Python v3.10.12 (/usr/bin/python3.10)"]
    if parent:
        out.append(f"Parent Process {parent}: /usr/bin/python3 /usr/local/bin/torchrun --nproc_per_node 2 pretrain.py")
    out += ["", f'Thread {pid} ({state}): "MainThread"']
    out += [f"    {func} ({file}:{line})" for func, file, line in main]
    out += [f'Thread {pid + 80} (idle): "Thread-2 (_pin_memory_loop)"', "    wait (threading.py:320)"]
    return "\n".join(out) + "\n"


def findings(tmp_path: Path, files: dict[str, str]):  # type: ignore[no-untyped-def]
    root = tmp_path / "b"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    settings = Settings(_env_file=None)
    b = open_bundle(root, tmp_path / "w", settings.bundle_limits)
    try:
        found = scan_hang_evidence(b, IdSource()).findings
        for f in found:
            assert all(check(e.id, {e.id: e}, b).status == "ok" for e in f.evidence)
        return found
    finally:
        b.close()


def test_a_main_thread_holding_the_gil_in_a_dataloader_fetch_on_one_node(tmp_path: Path) -> None:
    # py-spy 0.4: two nodes' dump files, two processes each; the stuck one holds the GIL ("active+gil")
    files = {
        "node1/py-spy.txt": dump(4100, WAIT, cmd="--local_rank=0")
        + "\n"
        + dump(4101, FETCH, "active+gil", "--local_rank=1"),
        "node2/py-spy.txt": dump(5100, WAIT, cmd="--local_rank=0") + "\n" + dump(5101, WAIT, cmd="--local_rank=1"),
    }
    (f,) = findings(tmp_path, files)
    assert f.class_id == "rank_hang_or_missing_rank" and f.node == "node1" and f.fields["pid"] == "4101"
    assert f.fields["local_rank"] == "1"
    assert "DataLoader fetch" in f.summary and "from train_step (pretrain.py:80)" in f.summary
    assert "3 other processes wait in all_reduce" in f.summary
    span = f.evidence[0]
    assert span.text.startswith('Thread 4101 (active+gil): "MainThread"')
    assert "    train_step (pretrain.py:80)" in span.text.splitlines()  # the program's own frame is cited


def test_the_diagnosis_names_the_node_and_cites_the_stuck_frames(tmp_path: Path, settings: Settings) -> None:
    files = {
        "node1/py-spy.txt": dump(4100, WAIT) + "\n" + dump(4101, FETCH, "active+gil"),
        "node2/py-spy.txt": dump(5100, WAIT) + "\n" + dump(5101, WAIT),
    }
    out = run_files(tmp_path / "b", files, settings)
    rc = out.document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.node == "node1"
    assert any(c.file == "node1/py-spy.txt" and c.verified and "_try_get_data" in c.text for c in rc.citations)


def test_py_spy_0_1_format(tmp_path: Path) -> None:
    # py-spy v0.1.11 src/main.rs: println!("{}\nPython version {}", exe, version); "Thread {:#X}/{:#X} ({})";
    # frames "\t {} ({}:{})"; no process id, no thread names
    def old(tid: str, main: list[tuple[str, str, int]], state: str) -> str:
        body = "\n".join(f"\t {func} ({file}:{line})" for func, file, line in main)
        return f"/usr/bin/python3.6\nPython version 3.6.9\nThread {tid} ({state})\n{body}\n"

    text = old("0x7F3A2E1B4740/0x1A2B", WAIT, "idle") + old("0x7F3A2E1B4741/0x1A2C", FETCH, "active")
    text += old("0x7F3A2E1B4742/0x1A2D", WAIT, "idle")
    assert stack_tool(text) == "py-spy"
    procs = stacks.parse("dump.txt", text.splitlines(), None)
    assert len(procs) == 3 and all(p.main() is not None for p in procs)
    odd = stacks.odd_ones(procs)
    assert odd is not None and len(odd.culprits) == 1
    assert odd.culprits[0].threads[0].name == "0x7F3A2E1B4741/0x1A2C"


def test_native_frames_without_lines(tmp_path: Path) -> None:
    # py-spy --native: a frame without a line is printed "    <func> (<file or shared object>)" (dump.rs)
    native_wait = [
        ("__futex_abstimed_wait_common64", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0),
        ("c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal", "/opt/torch/lib/libtorch_cuda.so", 0),
        *WAIT,
    ]
    native_recv = [
        ("__libc_recv", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0),
        ("0x7f3a2e1b4740", "/usr/lib/python3.10/lib-dynload/_multiprocessing.so", 0),
        ("_recv", "multiprocessing/connection.py", 384),
        ("_recv_bytes", "multiprocessing/connection.py", 419),
        ("recv", "multiprocessing/connection.py", 250),
        ("evaluate", "pretrain.py", 51),
        ("<module>", "pretrain.py", 120),
    ]

    def nat(pid: int, main: list[tuple[str, str, int]]) -> str:
        rows = [f"    {fn} ({fl}:{ln})" if ln else f"    {fn} ({fl})" for fn, fl, ln in main]
        return (
            "\n".join(
                [
                    f"Process {pid}: python pretrain.py",
                    "Python v3.10.12 (/usr/bin/python3.10)",
                    "",
                    f'Thread {pid} (idle): "MainThread"',
                    *rows,
                ]
            )
            + "\n"
        )

    text = nat(1, native_wait) + nat(2, native_recv) + nat(3, native_wait)
    procs = stacks.parse("dump.txt", text.splitlines(), None)
    assert [len(p.threads[0].frames) for p in procs] == [7, 7, 7]
    odd = stacks.odd_ones(procs)
    assert odd is not None and [p.pid for p in odd.culprits] == ["2"]
    assert odd.culprit_place.where.startswith(
        "waiting on another process (multiprocessing) at _recv (connection.py:384)"
    )
    assert odd.culprit_place.where.endswith("from evaluate (pretrain.py:51)")


def test_launchers_and_dataloader_workers_are_not_compared(tmp_path: Path) -> None:
    # py-spy dump --subprocesses --pid <torchrun>: the elastic agent, its workers, and their DataLoader workers
    agent = [
        ("_invoke_run", "torch/distributed/elastic/agent/server/api.py", 835),
        ("run", "torch/distributed/elastic/agent/server/api.py", 680),
        ("main", "torch/distributed/run.py", 806),
        ("<module>", "torchrun", 8),
    ]
    worker = [
        ("get", "multiprocessing/queues.py", 113),
        ("_worker_loop", "torch/utils/data/_utils/worker.py", 275),
        ("run", "multiprocessing/process.py", 108),
        ("_bootstrap", "multiprocessing/process.py", 314),
    ]
    sep = "\n" + "-" * 80 + "\n"
    text = dump(100, agent).replace("pretrain.py", "/usr/local/bin/torchrun --nproc_per_node 3 pretrain.py", 1)
    text += sep + dump(101, WAIT, parent=100) + sep + dump(102, FETCH, parent=100) + sep + dump(103, WAIT, parent=100)
    for w in range(4):
        text += sep + dump(200 + w, worker, parent=101 + w % 3)
    procs = stacks.parse("py-spy.txt", text.splitlines(), None)
    assert [p.role() for p in procs].count("rank") == 3
    assert procs[0].role() == "launcher" and procs[-1].role() == "dataloader_worker" and procs[1].parent == "100"
    odd = stacks.odd_ones(procs)
    assert odd is not None and [p.pid for p in odd.culprits] == ["102"] and len(odd.others) == 2


@pytest.mark.parametrize(
    ("frame", "waits"),
    [
        (Frame("Condition.wait", "threading.py", 1), False),  # queue.get's wait, not a collective's
        (Frame("recv", "multiprocessing/connection.py", 1), False),
        (Frame("wait", "torch/distributed/distributed_c10d.py", 1), True),
        (Frame("barrier", "torch/distributed/distributed_c10d.py", 1), True),
        (Frame("all_reduce", "deepspeed/comm/comm.py", 1), True),
        (Frame("_communicate", "megatron/core/pipeline_parallel/p2p_communication.py", 1), True),
        (Frame("synchronize", "horovod/torch/mpi_ops.py", 1), True),
        (Frame("synchronize", "torch/cuda/__init__.py", 1), True),
        (Frame("ncclGroupEnd", "/usr/lib/x86_64-linux-gnu/libnccl.so.2", 1), True),
        (Frame("_write_files_from_queue", "torch/distributed/checkpoint/filesystem.py", 1), False),  # file I/O
        (
            Frame(
                "record.<locals>.wrap.<locals>.wrapper",
                "torch/distributed/elastic/multiprocessing/errors/__init__.py",
                1,
            ),
            False,
        ),
    ],
    ids=lambda v: v.func if isinstance(v, Frame) else str(v),
)
def test_what_waits_on_the_peers(frame: Frame, waits: bool) -> None:
    assert frames.is_wait(frame) is waits


def test_locals_core_dump_states_and_a_repeated_dump(tmp_path: Path) -> None:
    # --locals (dump.rs): "        Arguments:" / "            <name>: <repr>" under a frame; a core dump (coredump.rs)
    # prints "(gil)" or no state; the same pid dumped twice counts once (its last dump)
    with_locals = dump(7, WAIT).replace(
        "    train_step (pretrain.py:88)\n",
        "    train_step (pretrain.py:88)\n        Arguments:\n            batch: <dict at 0x7f00>\n"
        "        Locals:\n            loss (x.py:1): <Tensor at 0x7f01>\n",
    )
    core = dump(8, FETCH).replace("Thread 8 (idle)", "Thread 8 (gil)")
    bare = dump(9, WAIT).replace("Thread 9 (idle)", "Thread 9")
    again = dump(8, FETCH)
    procs = stacks.parse("dumps.txt", (with_locals + core + bare + again).splitlines(), None)
    assert len(procs[0].main().frames) == len(WAIT)  # type: ignore[union-attr]
    ranks = stacks.ranks_only(procs)
    assert [p.pid for p in ranks] == ["7", "9", "8"]
    odd = stacks.odd_ones(procs)
    assert odd is not None and [p.pid for p in odd.culprits] == ["8"]


def test_a_shell_prompt_names_the_node_of_a_pasted_dump(tmp_path: Path) -> None:
    text = "user@gpu46:~$ py-spy dump --pid 4101\n" + dump(4101, FETCH, "active+gil")
    text += "user@gpu47:~$ sudo py-spy dump --pid 5100\n" + dump(5100, WAIT)
    text += "user@gpu47:~$ sudo py-spy dump --pid 5101\n" + dump(5101, WAIT)
    (f,) = findings(tmp_path, {"issue-comment.txt": text})
    assert f.node == "gpu46"
    assert any(e.text == "user@gpu46:~$ py-spy dump --pid 4101" for e in f.evidence)


def test_when_most_are_elsewhere_or_all_wait_nobody_is_named() -> None:
    busy = stacks.parse("a.txt", (dump(1, FETCH) + dump(2, FETCH) + dump(3, WAIT)).splitlines(), None)
    assert stacks.odd_ones(busy) is None
    same = stacks.parse("b.txt", (dump(1, WAIT) + dump(2, WAIT) + dump(3, WAIT)).splitlines(), None)
    assert stacks.odd_ones(same) is None
    other = [("broadcast", "torch/distributed/distributed_c10d.py", 1900), *WAIT[3:]]
    desync = stacks.parse("c.txt", (dump(1, WAIT) + dump(2, other) + dump(3, WAIT)).splitlines(), None)
    odd = stacks.odd_ones(desync)
    assert odd is not None and odd.mismatch and [p.pid for p in odd.culprits] == ["2"]


def test_every_rank_blocked_in_a_dataloader_fetch_is_where_the_job_hangs(tmp_path: Path, settings: Settings) -> None:
    # no rank waits in a collective: all four wait on their DataLoader's queue (dataloader.py _try_get_data)
    files = {f"stacks/py-spy-rank{r}.txt": dump(300 + r, FETCH) for r in range(4)}
    (f,) = findings(tmp_path, files)
    assert f.signature == "hang.stack.all_stuck" and f.rank is None
    assert "ranks 0-3" in f.summary and "DataLoader fetch" in f.summary
    out = run_files(tmp_path / "c", files, settings)
    assert out.document.root_cause.class_ == "rank_hang_or_missing_rank"
    # ... but ranks that compute (no blocking wait) say nothing
    busy = [("forward", "model.py", 40), ("train_step", "pretrain.py", 77), ("<module>", "pretrain.py", 120)]
    procs = stacks.parse("d.txt", (dump(1, busy) + dump(2, busy)).splitlines(), None)
    assert stacks.all_stuck(procs) is None


def test_a_dumped_pid_is_the_rank_nccl_s_init_line_gives_it(tmp_path: Path, settings: Settings) -> None:
    # NCCL init.cc "<host>:<pid>:<tid> [<cudaDev>] NCCL INFO comm <ptr> rank <r> nranks <n> cudaDev <d> busId <id>
    # - Init COMPLETE" ties the dumped process id to its global rank on that node
    def init(host: str, pid: int, rank: int, dev: int) -> str:
        return (
            f"{host}:{pid}:{pid} [{dev}] NCCL INFO comm 0x55d0{dev} rank {rank} nranks 4 cudaDev {dev} busId "
            f"1{dev}000 - Init COMPLETE\n"
        )

    files = {
        "node1/py-spy.txt": dump(4100, WAIT) + "\n" + dump(4101, FETCH, "active+gil"),
        "node2/py-spy.txt": dump(5100, WAIT) + "\n" + dump(5101, WAIT),
        "node1/stdout.log": init("node1", 4100, 0, 0) + init("node1", 4101, 1, 1),
        "node2/stdout.log": init("node2", 5100, 2, 0) + init("node2", 5101, 3, 1),
    }
    rc = run_files(tmp_path / "b", files, settings).document.root_cause
    assert (rc.class_, rc.culprit.node, rc.culprit.rank) == ("rank_hang_or_missing_rank", "node1", 1)


def test_a_rank_log_with_its_own_dump_stays_a_log_and_the_dump_says_where_it_hung(
    tmp_path: Path, settings: Settings
) -> None:
    # ranks 0, 2, 3 time out in c10d's watchdog (ProcessGroupNCCL.cpp); rank 1's log ends in a py-spy dump of itself
    log1 = "[rank1]: step 300 | loss 1.91\n$ py-spy dump --pid 4101\n" + dump(4101, FETCH, "active+gil")
    assert stack_tool(log1) is None  # a log holding a dump: scanned as a log, the dump read from it as well
    assert stack_tool("$ py-spy dump --pid 4101\n" + dump(4101, FETCH)) == "py-spy"
    files = {"rank1.log": log1}
    for r in (0, 2, 3):
        files[f"rank{r}.log"] = (
            f"[rank{r}]: step 300 | loss 1.91\n[rank{r}]:[E1130 02:30:00.123456789 ProcessGroupNCCL.cpp:632] [Rank {r}] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=601, OpType=ALLREDUCE, NumelIn=1, "
            "NumelOut=1, Timeout(ms)=600000) ran for 600094 milliseconds before timing out.\n"
        )
    rc = run_files(tmp_path / "b", files, settings).document.root_cause
    assert rc.class_ == "rank_hang_or_missing_rank" and rc.culprit.rank == 1
    assert "DataLoader fetch" in rc.summary
    assert any(c.file == "rank1.log" and c.line == 6 and "_try_get_data" in c.text for c in rc.citations)


def test_a_rank_waiting_for_its_dataloader_cites_the_worker_that_is_stuck_loading(tmp_path: Path) -> None:
    # py-spy dump --subprocesses: each rank and its DataLoader workers (torch/utils/data/_utils/worker.py
    # _worker_loop -> _utils/fetch.py fetch -> the dataset's __getitem__); one worker waits for indices (idle),
    # the other is stuck on a lock inside the dataset
    idle = [
        ("poll", "multiprocessing/connection.py", 257),
        ("get", "multiprocessing/queues.py", 113),
        ("_worker_loop", "torch/utils/data/_utils/worker.py", 275),
        ("_bootstrap", "multiprocessing/process.py", 314),
    ]
    stuck = [
        ("acquire", "threading.py", 164),
        ("__getitem__", "webdata/shards.py", 88),
        ("<listcomp>", "torch/utils/data/_utils/fetch.py", 51),
        ("fetch", "torch/utils/data/_utils/fetch.py", 51),
        ("_worker_loop", "torch/utils/data/_utils/worker.py", 308),
        ("_bootstrap", "multiprocessing/process.py", 314),
    ]
    text = dump(10, FETCH) + dump(11, WAIT) + dump(12, WAIT)
    text += dump(20, idle, parent=10) + dump(21, stuck, parent=10) + dump(22, stuck, parent=11)
    (f,) = findings(tmp_path, {"py-spy.txt": text})
    assert f.fields["pid"] == "10" and "its DataLoader worker 21 is in lock or condition wait" in f.summary
    assert "worker 22" not in f.summary  # rank 11's worker, not this rank's
    assert any("    __getitem__ (webdata/shards.py:88)" in e.text.splitlines() for e in f.evidence)


def test_an_odd_rank_in_ordinary_code_is_a_weaker_lead_than_one_blocked_in_a_wait(tmp_path: Path) -> None:
    from crashcart.models import Topology
    from crashcart.reduce.hang_files import add_file_candidates

    compute = [("forward", "model.py", 40), ("train_step", "pretrain.py", 77), ("<module>", "pretrain.py", 120)]
    scores = []
    for odd in (FETCH, compute):
        found = findings(tmp_path / str(len(scores)), {"d.txt": dump(1, WAIT) + dump(2, odd) + dump(3, WAIT)})
        cands: list = []  # type: ignore[type-arg]
        add_file_candidates(cands, found, Topology())
        scores.append(cands[0].score)
    assert scores[1] < scores[0]  # one dump cannot tell a rank stuck in its forward from a slow one


def test_pipeline_stages_waiting_in_p2p_beside_data_parallel_all_reduce_is_no_mismatch() -> None:
    # Megatron core/pipeline_parallel/p2p_communication.py: a stage waits in _communicate (batch_isend_irecv) for
    # the previous stage while its data-parallel peers wait in all_reduce: both wait; nobody is elsewhere
    p2p = [
        ("batch_isend_irecv", "torch/distributed/distributed_c10d.py", 2150),
        ("_communicate", "megatron/core/pipeline_parallel/p2p_communication.py", 330),
        ("recv_forward", "megatron/core/pipeline_parallel/p2p_communication.py", 402),
        *WAIT[3:],
    ]
    procs = stacks.parse("d.txt", (dump(1, WAIT) + dump(2, WAIT) + dump(3, p2p)).splitlines(), None)
    assert stacks.odd_ones(procs) is None


def test_py_spy_json_dumps(tmp_path: Path) -> None:
    # py-spy dump --json (src/dump.rs serde_json::to_string_pretty of src/stack_trace.rs StackTrace, fields in
    # declaration order; Python's json.dumps(indent=2) prints the same layout)
    import json

    def trace(pid: int, main: list[tuple[str, str, int]]) -> dict:  # type: ignore[type-arg]
        return {
            "pid": pid,
            "thread_id": 139887,
            "thread_name": "MainThread",
            "os_thread_id": pid,
            "active": False,
            "owns_gil": False,
            "frames": [
                {
                    "name": func,
                    "filename": f"/usr/lib/python3.10/site-packages/{file}",
                    "module": None,
                    "short_filename": file,
                    "line": line,
                    "locals": None,
                    "is_entry": True,
                    "is_shim_entry": True,
                }
                for func, file, line in main
            ],
            "process_info": {"pid": pid, "command_line": "python -u pretrain.py", "parent": None},
        }

    text = json.dumps([trace(7, WAIT), trace(8, FETCH), trace(9, WAIT)], indent=2) + "\n"
    assert stack_tool(text) == "py-spy"
    (f,) = findings(tmp_path, {"stacks.json": text})
    assert (
        f.fields["pid"] == "8" and "DataLoader fetch" in f.summary and "from train_step (pretrain.py:80)" in f.summary
    )
    assert f.evidence[0].text.startswith('    "thread_name": "MainThread",')
    assert '        "name": "_try_get_data",' in f.evidence[0].text.splitlines()


def test_a_faulthandler_dump_right_after_a_py_spy_dump_is_read_too() -> None:
    text = dump(1, WAIT).rstrip("\n").rsplit("\n", 2)[0] + "\n"  # no pin-memory thread: the dump ends on a frame
    text += 'Current thread 0x00007f3a2e1b4740 (most recent call first):\n  File "/job/train.py", line 131 in load\n'
    procs = stacks.parse("mixed.log", text.splitlines(), None)
    assert [p.tool for p in procs] == ["py-spy", "faulthandler"]


def test_a_rank_writing_a_distributed_checkpoint_is_in_file_io_not_a_collective() -> None:
    # torch/distributed/checkpoint/filesystem.py (DCP's writer) under dcp.save: the rank writes, the others wait
    save = [
        ("write", "<frozen io>", 0),
        ("_write_item", "torch/distributed/checkpoint/filesystem.py", 165),
        ("_write_files_from_queue", "torch/distributed/checkpoint/filesystem.py", 303),
        ("save", "torch/distributed/checkpoint/state_dict_saver.py", 144),
        ("save_ckpt", "pretrain.py", 99),
        ("<module>", "pretrain.py", 120),
    ]
    procs = stacks.parse("d.txt", (dump(1, WAIT) + dump(2, save) + dump(3, WAIT)).splitlines(), None)
    odd = stacks.odd_ones(procs)
    assert odd is not None and [p.pid for p in odd.culprits] == ["2"]
    assert odd.culprit_place.where.startswith("file I/O at ") and odd.culprit_place.known
