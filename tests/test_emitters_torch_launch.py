"""Issue 14, emitters: PyTorch distributed (v1.10 to 2.x), second half: socket.cpp and TCPStore, torchelastic's
rendezvous handlers, agent and ChildFailedError summary, launch.py/run.py, and the DataLoader (dataloader.py, its
signal handlers, the shared-memory allocator), distributed_c10d.py and DDP's own errors, plus the warnings healthy runs print. Expectations as in
test_emitters_torch.py: a class id, NOT_ROOT (teardown and symptoms) or BENIGN."""

from __future__ import annotations

import pytest

from tests.test_emitters_torch import (
    BENIGN,
    DESYNC,
    LOADER,
    NATIVE,
    NOT_ROOT,
    PG,
    POLICY,
    STORE,
    SUMMARY,
    UNKNOWN,
    USER,
    VERSION,
    case_ids,
    cases,
    check,
    elastic,
    glog,
    py,
)

GROUPS: dict[str, list[tuple[str, str]]] = {
    # socket.cpp / TCPStore: the store could not be reached, bound or answered
    "store connect": [
        (
            glog(
                "E",
                "socket.cpp:860",
                "[c10d] The client socket has timed out after 60s while trying to connect to (node-0, 29500).",
                old=True,
            ),
            STORE,
        ),
        (
            "torch.distributed.DistNetworkError: The client socket has timed out after 1800000ms while trying to "
            "connect to (node-0, 29500).",
            STORE,
        ),
        (
            "RuntimeError: The client socket has failed to connect to any network address of (node-0, 29500). The "
            "client socket has failed to connect to [node-0]:29500 (errno: 113 - No route to host).",
            STORE,
        ),
        (
            glog(
                "W",
                "socket.cpp:601",
                "[c10d] The IPv4 network addresses of (node-0, 29500) cannot be retrieved (gai error: -2 - Name or "
                "service not known).",
            ),
            STORE,
        ),
        ("RuntimeError: connect() timed out. Original timeout was 60000 ms.", STORE),
        (
            glog(
                "W",
                "socket.cpp:464",
                "[c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
                old=True,
            ),
            STORE,
        ),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use). The "
            "server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in use).",
            STORE,
        ),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
            STORE,
        ),
        ("RuntimeError: Address already in use", STORE),
    ],
    "store waits": [
        ("RuntimeError: Socket Timeout", STORE),
        (
            "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
            STORE,
        ),
        (
            "torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /default_pg//0//cuda//0",
            STORE,
        ),
        (
            "RuntimeError: [3] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d "
            "key-value store by key '0', but store->get('0') got error: Socket Timeout",
            STORE,
        ),
        (
            py(
                "torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId "
                "from [0] via c10d key-value store by key '0', but store->get('0') got error: wait timeout after "
                "600000ms, keys: /default_pg//0//cuda//0"
            ),
            STORE,
        ),
        (
            "RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for key: "
            "store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)",
            STORE,
        ),
        (
            "torch.distributed.DistStoreError: Timed out initializing process group in store based barrier on rank "
            "3, for key: store_based_barrier_key:1 (world_size=8, num_workers_joined=4, timeout=0:30:00 error=)",
            STORE,
        ),
    ],
    # the store's server went away mid-run (the process hosting it exited): a symptom of that exit
    "store lost": [
        (
            glog(
                "W",
                "TCPStore.cpp:125",
                "[c10d] recvValue failed on SocketImpl(fd=77, addr=[::ffff:10.1.0.7]:39732, "
                "remote=[::ffff:10.1.0.2]:29500): failed to recv, got 0 bytes",
                rank=3,
            ),
            NOT_ROOT,
        ),
        (
            py(
                "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did "
                "the remote server shutdown or crash?"
            ),
            NOT_ROOT,
        ),
        (
            glog(
                "W",
                "TCPStore.cpp:106",
                "[c10d] sendBytes failed on SocketImpl(fd=12, addr=[node-3]:52114, remote=[node-0]:29500): Broken pipe",
                rank=3,
            ),
            NOT_ROOT,
        ),
    ],
    # torchelastic rendezvous handlers
    "rendezvous": [
        (
            "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store "
            "has failed. See inner exception for details.",
            STORE,
        ),
        ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", STORE),
        ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError", STORE),
        (
            elastic(
                "INFO",
                "rendezvous.etcd_rendezvous",
                "Rendezvous timeout occured in EtcdRendezvousHandler",
                style="basic",
            ),
            STORE,
        ),
        (
            elastic("INFO", "rendezvous.etcd_rendezvous", "Rendezvous for run_id=job-17 was observed to be closed"),
            STORE,
        ),
        (
            "torch.distributed.elastic.rendezvous.api.RendezvousStateError: The state object is corrupt. See inner "
            "exception for details.",
            STORE,
        ),
        (
            elastic(
                "ERROR",
                "agent.server.api",
                "Error waiting on exit barrier. Elapsed: 300.10335206985474 seconds",
            ),
            STORE,
        ),
        (
            elastic(
                "WARNING",
                "rendezvous.dynamic_rendezvous",
                "The node 'node-3_4015698_0' has failed to send a keep-alive heartbeat to the rendezvous 'job-17' due "
                "to an error of type RendezvousTimeoutError.",
            ),
            NOT_ROOT,
        ),
    ],
    # torchelastic's agent stopping workers and its summary: teardown, never a confident root
    "elastic teardown": [
        (
            elastic("WARNING", "multiprocessing.api", "Sending process 4015788 closing signal SIGTERM"),
            NOT_ROOT,
        ),
        (
            elastic("WARNING", "multiprocessing.api", "Sending process 4015788 closing signal SIGTERM", style="basic"),
            NOT_ROOT,
        ),
        (
            elastic("WARNING", "multiprocessing.api", "Closing process 4015788 via signal SIGTERM", style="basic"),
            NOT_ROOT,
        ),
        (
            elastic(
                "WARNING",
                "multiprocessing.api",
                "Unable to shutdown process 4015788 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL",
            ),
            NOT_ROOT,
        ),
        (
            elastic(
                "ERROR",
                "multiprocessing.api",
                "failed (exitcode: 1) local_rank: 0 (pid: 4015788) of binary: /usr/bin/python3",
                style="bracket",
            ),
            SUMMARY,
        ),
        (
            elastic(
                "ERROR",
                "multiprocessing.api",
                "failed (exitcode: -15) local_rank: 3 (pid: 4015791) of binary: /usr/bin/python3",
            ),
            SUMMARY,
        ),
        ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", SUMMARY),
        ("Root Cause (first observed failure):", SUMMARY),
        (
            elastic(
                "WARNING",
                "agent.server.api",
                "[default] Worker group FAILED. 3/3 attempts left; will restart worker group",
                style="bracket",
            ),
            SUMMARY,
        ),
        ("  exitcode  : -15 (pid: 4015791)", NOT_ROOT),
        ("  traceback : Signal 15 (SIGTERM) received by PID 4015791", NOT_ROOT),
        ("  exitcode  : 1 (pid: 4015788)", NOT_ROOT),
        ("  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html", NOT_ROOT),
        ("  <NO_OTHER_FAILURES>", NOT_ROOT),
        ("  exitcode  : -6 (pid: 4015788)", NOT_ROOT),
        (
            "W0408 12:01:02.579000 140 torch/multiprocessing/spawn.py:165] Terminating process 96 via signal SIGTERM",
            NOT_ROOT,
        ),
        (
            elastic(
                "INFO",
                "agent.server.api",
                "[default] Detected 1 new nodes from group_rank=0; will restart worker group",
            ),
            NOT_ROOT,
        ),
    ],
    # the summary's exit code of a worker killed by a fatal signal
    "elastic exit codes": [
        ("  exitcode  : -11 (pid: 4015788)", NATIVE),
        ("  traceback : Signal 11 (SIGSEGV) received by PID 4015788", NATIVE),
        ("  traceback : Signal 7 (SIGBUS) received by PID 4015788", NATIVE),
        ("  exitcode  : -9 (pid: 4015788)", UNKNOWN),
        # torch/multiprocessing/spawn.py (mp.spawn launcher, 1.x-2.x): a child that died by a fatal signal
        ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGSEGV", NATIVE),
    ],
    # the agent itself was signalled from outside (scheduler, user, closed terminal)
    "elastic death signal": [
        (
            elastic(
                "WARNING",
                "agent.server.api",
                "Received 15 death signal, shutting down workers",
                style="bracket",
            ),
            POLICY,
        ),
        (
            elastic("WARNING", "agent.server.api", "Received Signals.SIGTERM death signal, shutting down workers"),
            POLICY,
        ),
        (elastic("WARNING", "agent.server.api", "Received Signals.SIGHUP death signal, shutting down workers"), POLICY),
        ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 4015698 got signal: 15", POLICY),
    ],
    # launch.py passes --local_rank=N (to 1.13) or --local-rank=N (2.0+): a script that declares no such argument
    # fails in argparse (a program error), one written for the old spelling fails under a newer launcher (a
    # version mismatch, as the catalogue's launch.local_rank_argument has it)
    "launcher arguments": [
        (py("train.py: error: unrecognized arguments: --local-rank=3"), VERSION),
        ("train.py: error: unrecognized arguments: --local_rank=3", USER),
    ],
    # the DataLoader: workers killed, crashed or out of shared memory
    "dataloader": [
        ("RuntimeError: DataLoader worker (pid 1285) is killed by signal: Killed. ", LOADER),
        (py("RuntimeError: DataLoader worker (pid 41234) is killed by signal: Segmentation fault. "), LOADER),
        (
            "RuntimeError: DataLoader worker (pid 41234) is killed by signal: Bus error. It is possible that "
            "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",
            LOADER,
        ),
        (py("RuntimeError: DataLoader worker (pid 41234) is killed by signal: Aborted. "), LOADER),
        ("RuntimeError: DataLoader worker (pid(s) 1234, 1235) exited unexpectedly", LOADER),
        (
            "RuntimeError: DataLoader worker (pid 109) exited unexpectedly with exit code 1. Details are lost due "
            "to multiprocessing. Rerunning with num_workers=0 may give better error trace.",
            LOADER,
        ),
        ("RuntimeError: DataLoader timed out after 1800 seconds", LOADER),
        (
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
            LOADER,
        ),
        ("ERROR: Unexpected segmentation fault encountered in worker.", LOADER),
        ("ERROR: Unexpected floating-point exception encountered in worker.", LOADER),
        ("RuntimeError: Pin memory thread exited unexpectedly", LOADER),
        (
            "RuntimeError: Too many open files. Communication with the workers is no longer possible. Please "
            "increase the limit using `ulimit -n` in the shell or change the sharing strategy by calling "
            "`torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning of your code",
            LOADER,
        ),
        (
            "RuntimeError: unable to write to file </torch_28041_1546596096_0>: No space left on device (28)",
            LOADER,
        ),
        (
            py(
                "RuntimeError: unable to open shared memory object </torch_28041_1546596096_0> in read-write mode: "
                "Too many open files (24)"
            ),
            LOADER,
        ),
        (
            "RuntimeError: unable to allocate shared memory(shm) for file </torch_28041_1546596096_0>: Resource "
            "temporarily unavailable (11)",
            LOADER,
        ),
        (
            "RuntimeError: unable to mmap 1048576 bytes from file </torch_28041_1546596096_0>: Cannot allocate "
            "memory (12)",
            LOADER,
        ),
        (
            "RuntimeError: unable to resize file </torch_28041_1546596096_0> to the right size: Invalid argument (22)",
            LOADER,
        ),
        ("RuntimeError: Caught RuntimeError in DataLoader worker process 0.", USER),
        ("RuntimeError: Caught KeyError in pin memory thread for device 0.", USER),
        ("RuntimeError: DataLoader worker (pid 261166) is killed by signal: Terminated. ", NOT_ROOT),
        (
            "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f1c2b7fe700>",
            NOT_ROOT,
        ),
    ],
    # warnings and information healthy runs print
    "benign": [
        (
            "Setting OMP_NUM_THREADS environment variable for each "
            "process to be 1 in default, to avoid your system being overloaded, please further tune the variable "
            "for optimal performance in your application as needed. ",
            BENIGN,
        ),
        (
            elastic(
                "WARNING",
                "run",
                "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
                "system being overloaded, please further tune the variable for optimal performance in your "
                "application as needed. ",
                style="basic",
            ),
            BENIGN,
        ),
        (
            "/usr/lib/python3/dist-packages/torch/distributed/launch.py:181: FutureWarning: The module "
            "torch.distributed.launch is deprecated and will be removed in future. Use torchrun.",
            BENIGN,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:1250",
                "Warning: WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL. On normal "
                "program exit, the application should call destroy_process_group to ensure that any pending NCCL "
                "operations have finished in this process. In rare cases this process can exit before this point and "
                "block the progress of another member of the process group. This constraint has always been "
                "present,  but this warning has only been added since PyTorch 2.4 (function operator())",
                rank=3,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:4115",
                f"{PG}  using GPU 3 to perform barrier as devices used by this process are currently unknown. This "
                "can potentially cause a hang if this rank to GPU mapping is incorrect.Specify device_ids in "
                "barrier() to force use of a particular device,or call init_process_group() with a device_id.",
                rank=3,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:2302",
                "Rank 3 using GPU 3 to perform barrier as devices used by this process are currently unknown. This can "
                "potentially cause a hang if this rank to GPU mapping is incorrect.Specify device_ids in barrier() to "
                "force use of a particular device.",
                old=True,
            ),
            BENIGN,
        ),
        (glog("I", "ProcessGroupNCCL.cpp:1132", "[Rank 3] NCCL watchdog thread terminated normally", old=True), BENIGN),
        (
            glog(
                "I",
                "ProcessGroupNCCL.cpp:1332",
                f"{PG} Process group watchdog thread terminated normally",
                rank=3,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "socket.cpp:697",
                "[c10d] The client socket cannot be initialized to connect to [localhost]:29500 (errno: 97 - Address "
                "family not supported by protocol).",
                old=True,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "socket.cpp:426",
                "[c10d] The server socket cannot be initialized on [::]:29500 (errno: 97 - Address family not "
                "supported by protocol).",
                old=True,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "reducer.cpp:1300",
                "Warning: find_unused_parameters=True was specified in DDP constructor, but did not find any unused "
                "parameters in the forward pass. This flag results in an extra traversal of the autograd graph "
                "every iteration,  which can adversely affect performance. If your model indeed never has any unused "
                "parameters in the forward pass, consider turning this flag off. (function operator())",
                old=True,
            ),
            BENIGN,
        ),
        (
            glog(
                "W",
                "reducer.cpp:1346",
                "Warning: Grad strides do not match bucket view strides. This may indicate grad was not created "
                "according to the gradient layout contract, or that the param's strides changed since DDP was "
                "constructed.  This is not an error, but may impair performance.",
                rank=3,
            ),
            BENIGN,
        ),
        (
            glog("I", "reducer.cpp:1305", "Reducer buckets have been rebuilt in this iteration.", old=True),
            BENIGN,
        ),
        (
            "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will "
            "create 16 worker processes in total. Our suggested max number of worker in current system is 8, which "
            "is smaller than what this DataLoader is going to create. Please be aware that excessive worker "
            "creation might get DataLoader running slow or even freeze, lower the worker number to avoid potential "
            "slowness/freeze if necessary.",
            BENIGN,
        ),
        (
            glog(
                "W",
                "ProcessGroupNCCL.cpp:1002",
                "[PG 0 Rank 3] NCCL_ASYNC_ERROR_HANDLING is deprecated, use TORCH_NCCL_ASYNC_ERROR_HANDLING instead",
                rank=3,
            ),
            BENIGN,
        ),
        (
            elastic(
                "INFO",
                "agent.server.api",
                "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.",
            ),
            BENIGN,
        ),
        (elastic("INFO", "agent.server.api", "Done waiting for other agents. Elapsed: 0.0012 seconds"), BENIGN),
        (
            glog("I", "socket.cpp:787", "[c10d] The server socket has started to listen on [::]:29500.", old=True),
            BENIGN,
        ),
        (glog("I", "socket.cpp:787", "[c10d] No socket on (node-0, 29500) is listening yet, will retry."), BENIGN),
        (
            glog(
                "W",
                "socket.cpp:460",
                "[c10d] waitForInput: poll for socket SocketImpl(fd=12, addr=[node-3]:52114, remote=[node-0]:29500) "
                "returned 0, likely a timeout",
            ),
            BENIGN,
        ),
        (
            glog(
                "I",
                "socket.cpp:855",
                "[c10d] The client socket has connected to [node-0]:29500 on [node-3]:52114.",
                old=True,
            ),
            BENIGN,
        ),
        (
            elastic(
                "INFO",
                "agent.server.api",
                "[default] Rendezvous complete for workers. Result:\n  restart_count=0\n  master_addr=node-0",
            ),
            BENIGN,
        ),
        (elastic("INFO", "agent.server.api", "[default] Starting worker group"), BENIGN),
        (
            "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:700: UserWarning: Length of IterableDataset "
            "<data.Stream object at 0x7f00> was reported to be 100 (when accessing len(dataloader)), but 101 samples "
            "have been fetched. ",
            BENIGN,
        ),
    ],
    # distributed_c10d.py and the DDP reducer: the program's own mistakes
    "user errors": [
        (
            "RuntimeError: Default process group has not been initialized, please make sure to call "
            "init_process_group.",
            USER,
        ),
        (
            py(
                "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new "
                "one. This error indicates that your module has parameters that were not used in producing loss. "
                "You can enable unused parameter detection by passing the keyword argument "
                "`find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`, and by "
            ),
            USER,
        ),
        (
            py(
                "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the "
                "following reasons: 1) Use of a module parameter outside the `forward` function. Please make sure "
                "model parameters are not shared across multiple concurrent forward-backward passes. or try to use "
                "_set_static_graph() as a workaround if this module graph does not change during training loop."
            ),
            USER,
        ),
        (
            py(
                "RuntimeError: Your training graph has changed in this iteration, e.g., one parameter is used in "
                "first iteration, but then got unused in the second iteration. this is not compatible with "
                "static_graph set to True."
            ),
            USER,
        ),
        (
            "RuntimeError: DDP expects same model across all ranks, but Rank 0 has 4 params, while rank 1 has "
            "inconsistent 3 params.",
            DESYNC,
        ),
        ("RuntimeError: Tensors must be CUDA and dense", USER),
    ],
}

CASES = cases(GROUPS)


@pytest.mark.parametrize(("group", "text", "want"), CASES, ids=case_ids(CASES))
def test_each_wording_gets_the_class_it_means(group: str, text: str, want: str) -> None:
    check(group, text, want)
