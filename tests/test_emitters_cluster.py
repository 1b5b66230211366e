"""Emitter audit: the container runtimes, orchestrators and checkpoint loaders of GPU clusters, from their own sources.

NVIDIA libnvidia-container (src/cli/configure.c, dsl.c, common.c, src/driver.c, error.c; v1.0-v1.17: every failure
is ``nvidia-container-cli: <phase> error: <message>``), the NVIDIA Container Toolkit (nvidia-container-runtime-hook,
the CDI modifier, v1.20), Docker's device-driver selection (moby daemon/errors.go), enroot (src/common.sh
``[ERROR] <msg>``, conf/hooks/98-nvidia.sh, v3-v4.1) and pyxis (pyxis_slurmstepd.c, common.c, importer.c, v0.11-v0.24,
whose slurm_error() lines reach the job as ``slurmstepd: error: pyxis: ...`` and whose enroot log is replayed as
``pyxis:     <line>``); Kubernetes kubelet back-off and kube-scheduler preemption events, the Kubeflow
training-operator's job conditions (v1.5-v1.9) and the NVIDIA k8s-device-plugin (v0.14-v0.20); PyTorch's checkpoint
reader (caffe2/serialize/inline_container.cc PyTorchStreamReader, torch/serialization.py weights_only messages of
2.4-2.6+), safetensors (<=0.5 Debug names, 0.6+ Display texts), Megatron-LM's tracker file and DeepSpeed's loader.

Expectations: a class id; NOT_ROOT for a line that reports another failure (no winner, or a cascade/teardown
winner); UNKNOWN for a failure whose cause the line does not say (no winner, or an ``unknown`` winner); QUIET for a
line a healthy run prints (no winner, or only a generic catch-all). A GPU the container cannot get on this node
(driver not loaded, NVML or the runtime hook unusable, CDI spec missing) is class 8 like ``cuda.no_gpus``; an image
that needs a newer driver is class 36; a checkpoint that cannot be read is class 18 (the incidents/torch label for a
truncated checkpoint, with class 22 acceptable), while the write side stays class 22.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashcart.settings import Settings
from tests.kit import run_files, winner
from tests.test_emitters_torch import NOT_ROOT, role_of

NO_GPU = "nccl_init_bootstrap_failure"
VERSION = "software_version_mismatch"
K8S = "k8s_pod_eviction_or_oomkilled"
POLICY = "scheduler_preemption_or_timelimit"
USER = "python_exception_rank_crash"
STORAGE = "storage_full_or_io_error"
UNKNOWN = "<unknown cause>"
QUIET = "<quiet>"

DOCKER = (
    "docker: Error response from daemon: failed to create shim: OCI runtime create failed: container_linux.go:380: "
    "starting container process caused: process_linux.go:545: container init caused: Running hook #0:: error running "
    "hook: exit status 1, stdout: , stderr: "
)
SHIM = (
    "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
    "failed: unable to start container process: error during container init: error running hook #0: error running "
    "hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'"
)
KLOG = "1130 02:14:00.123456       1"


def pyxis(message: str, log: bool = False) -> str:
    """pyxis' slurm_error() as the job's output shows it; ``log`` for a line of the enroot log it replays."""
    return f"slurmstepd: error: pyxis:     {message}" if log else f"slurmstepd: error: pyxis: {message}"


def cli(message: str) -> str:
    return f"nvidia-container-cli: {message}"


GROUPS: dict[str, list[tuple[str, str]]] = {
    # libnvidia-container configure_command: warnx("<phase> error: %s"); nvml errors are nvmlErrorString lowercased
    "nvidia-container-cli": [
        (DOCKER + cli("initialization error: nvml error: driver not loaded: unknown."), NO_GPU),
        (cli("initialization error: nvml error: driver not loaded"), NO_GPU),
        (cli("initialization error: nvml error: insufficient permissions: unknown"), NO_GPU),
        (cli("initialization error: nvml error: unknown error"), NO_GPU),
        (cli("initialization error: nvml error: driver/library version mismatch: unknown."), VERSION),
        (
            cli(
                "initialization error: load library failed: libnvidia-ml.so.1: cannot open shared object file: no "
                "such file or directory: unknown."
            ),
            NO_GPU,
        ),
        (cli("initialization error: driver rpc error: timed out: unknown."), NO_GPU),
        ("nvidia-container-cli.real: initialization error: driver error: failed to process request", NO_GPU),
        (cli("initialization error: cuda error: unknown error"), NO_GPU),
        (cli("detection error: nvml error: unknown error"), NO_GPU),
        (
            cli(
                "requirement error: unsatisfied condition: cuda>=12.4, please update your driver to a newer version, "
                "or use an earlier cuda container: unknown"
            ),
            VERSION,
        ),
        (cli("requirement error: unsatisfied condition: cuda >= 9.0"), VERSION),
        (cli("requirement error: unsatisfied condition: driver>=535"), VERSION),
        (
            cli(
                "mount error: failed to add device rules: unable to find any existing device filters attached to the "
                "cgroup: bpf_prog_query(BPF_CGROUP_DEVICE) failed: operation not permitted: unknown"
            ),
            NO_GPU,
        ),
        (
            cli(
                "mount error: file creation failed: /var/lib/docker/overlay2/3f2a/merged/run/nvidia-persistenced/"
                "socket: no such device or address: unknown"
            ),
            NO_GPU,
        ),
        (cli("ldcache error: process /sbin/ldconfig.real failed with error code: 1"), NO_GPU),
        (
            cli(
                "container error: file lookup failed: /proc/421042/root/fsx/enroot/data/user-1111/pyxis_nemo/etc/"
                "debian_version: permission denied"
            ),
            NO_GPU,
        ),
        (cli("device error: 4: unknown device"), NO_GPU),
        (cli("device error: GPU-3b1c7a2e-5d4f-4e6a-9c8b-1f2e3d4c5b6a: unknown device: unknown"), NO_GPU),
    ],
    # NVIDIA Container Toolkit (nvidia-container-runtime-hook, CDI), Docker, NVML inside a running container
    "container toolkit and docker": [
        (
            'couldn\'t find binary nvidia-container-cli in PATH: exec: "nvidia-container-cli": executable file not '
            "found in $PATH",
            NO_GPU,
        ),
        (
            "invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus flag) is not "
            "supported. Please use the NVIDIA Container Runtime (e.g. specify the --runtime=nvidia flag) instead.: "
            "unknown.",
            NO_GPU,
        ),
        (
            "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: could not "
            "apply required modification to OCI specification: error modifying OCI spec: failed to inject CDI devices: "
            "unresolvable CDI devices nvidia.com/gpu=all: unknown",
            NO_GPU,
        ),
        ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].', NO_GPU),
        ('Error response from daemon: could not select device driver "nvidia" with capabilities: [[gpu]]', NO_GPU),
        ("Failed to initialize NVML: Unknown Error", NO_GPU),  # after `systemctl daemon-reload` (cgroup devices lost)
        (f"  Warning  Failed     12s   kubelet  {SHIM}", UNKNOWN),  # the hook's own line that follows says why
        ("Auto-detected mode as 'legacy'", QUIET),
        (
            "I0418 18:12:58.648174 217303 nvc.c:376] initializing library context (version=1.9.0, "
            "build=5e135c17d6dbae861ec343e9a8d3a0d2af758a4f)",
            QUIET,
        ),
        (
            "I0418 18:12:58.648518 217303 nvc.c:395] dxcore initialization failed, continuing assuming a non-WSL environment",
            QUIET,
        ),
        ("W0418 18:12:59.164853 217306 nvc.c:273] failed to set inheritable capabilities", QUIET),
    ],
    # pyxis_slurmstepd.c / common.c memfd_print_log / importer.c; enroot src/common.sh, runtime.sh, 98-nvidia.sh
    "pyxis and enroot": [
        (pyxis("container start failed with error code: 1"), UNKNOWN),
        ("[2025-07-18T15:06:29.684] error: pyxis: container start failed with error code: 1", UNKNOWN),
        (pyxis("couldn't start container"), UNKNOWN),
        (pyxis("failed to start container"), UNKNOWN),
        (pyxis("container exited too soon"), UNKNOWN),
        (pyxis("failed to import docker image"), UNKNOWN),
        (pyxis("failed to import docker image: nvcr.io#nvidia/pytorch:24.05-py3"), UNKNOWN),
        (pyxis("failed to create container filesystem for image: nvcr.io#nvidia/pytorch:24.05-py3"), UNKNOWN),
        (pyxis("importer /usr/share/pyxis/importers/caching_importer.sh failed with exit code 1"), UNKNOWN),
        (pyxis("child 3474702 failed with error code: 1"), UNKNOWN),
        (pyxis("printing enroot log file:"), NOT_ROOT),
        (pyxis("if the image has an unusual entrypoint, try using --no-container-entrypoint"), NOT_ROOT),
        (pyxis("a previous task terminated unexpectedly during container setup"), NOT_ROOT),
        (pyxis("container was not started successfully by another task"), NOT_ROOT),
        (pyxis("[ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1", log=True), NOT_ROOT),
        ("[ERROR] /etc/enroot/hooks.d/10-shadow.sh exited with return code 1", NOT_ROOT),
        (pyxis(cli("initialization error: nvml error: driver not loaded"), log=True), NO_GPU),
        (
            "22: " + pyxis(cli("ldcache error: process /usr/sbin/ldconfig.real failed with error code: 1"), log=True),
            NO_GPU,
        ),
        (
            "May 20 07:32:44.587165 360746 slurmstepd   0x40000004af00: error: pyxis:     nvidia-container-cli: "
            "mount error: failed to add device rules: open /sys/fs/cgroup/devices/slurm/uid_28788/job_85/step_0/"
            "task_0/devices.allow: permission denied",
            NO_GPU,
        ),
        (
            pyxis(
                "[ERROR] Command not found: nvidia-container-cli, see https://github.com/NVIDIA/libnvidia-container",
                log=True,
            ),
            NO_GPU,
        ),
        (
            pyxis(
                "[ERROR] URL https://nvcr.io/proxy_auth?scope=repository:nvidia/pytorch:pull returned error code: 401 "
                "Unauthorized",
                log=True,
            ),
            UNKNOWN,
        ),
        ("[ERROR] Not enough space left in /raid/enroot (37284616 KB needed)", STORAGE),
        (pyxis("[ERROR] Failed to mount: /lustre/images/pytorch+24.05.sqsh", log=True), UNKNOWN),
        ("slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1", NOT_ROOT),
        ("slurmstepd: error: Failed to invoke spank plugin stack", NOT_ROOT),
        ("pyxis: importing docker image: nvcr.io#nvidia/pytorch:24.05-py3", QUIET),
        ("pyxis: imported docker image: nvcr.io#nvidia/pytorch:24.05-py3", QUIET),
        ("slurmstepd: info: pyxis: creating container filesystem: pyxis_881.0", QUIET),
        ("slurmstepd: info: pyxis: starting container: pyxis_881.0", QUIET),
        ("slurmstepd: info: pyxis: completed container setup in 8123 ms", QUIET),
        ("[INFO] Querying registry for permission grant", QUIET),
        ("[INFO] Extracting image layers...", QUIET),
        ("[INFO] Creating squashfs filesystem...", QUIET),
    ],
    # kubelet kuberuntime_manager.go doBackOff (v1.9-v1.35), pod_workers.go; kube-scheduler preemption events
    "kubernetes": [
        (
            "  Warning  BackOff    2m (x25 over 7m)  kubelet  Back-off restarting failed container trainer in pod "
            "trainer-worker-0_default(8a7f2c1e-4b3d-4e5f-9a8b-7c6d5e4f3a21)",
            NOT_ROOT,
        ),
        ("  Warning  BackOff  3m  kubelet, gpu-node-3  Back-off restarting failed container", NOT_ROOT),
        ("      Reason:       CrashLoopBackOff", NOT_ROOT),
        ("trainer-worker-3   0/1     CrashLoopBackOff   5 (40s ago)   9m", NOT_ROOT),
        (
            "        message: back-off 5m0s restarting failed container=trainer "
            "pod=trainer-worker-0_default(8a7f2c1e-4b3d-4e5f-9a8b-7c6d5e4f3a21)",
            NOT_ROOT,
        ),
        (
            'E1130 02:14:00.123456    2231 pod_workers.go:1298] "Error syncing pod, skipping" err="failed to '
            '\\"StartContainer\\" for \\"trainer\\" with CrashLoopBackOff: \\"back-off 40s restarting failed '
            'container=trainer pod=trainer-0_default(8a7f2c1e)\\"" pod="default/trainer-0"',
            NOT_ROOT,
        ),
        (
            "3m   Normal   Preempted   pod/trainer-worker-2   Preempted by pod 5f1c3e2a-9b7d-4c1e-8f3a-2d4b6c8e0a11 on "
            "node gpu-node-3",
            K8S,
        ),
        ("    message: Preempted by pod 5f1c3e2a-9b7d-4c1e-8f3a-2d4b6c8e0a11 on node gpu-node-3", K8S),
        ("    message: Preempted by default/high-prio-job on node gpu-node-3", K8S),
        (
            "  Warning  FailedScheduling  30s (x3 over 2m)  default-scheduler  0/16 nodes are available: 2 node(s) had "
            "untolerated taint {node.kubernetes.io/unreachable: }, 14 Insufficient nvidia.com/gpu. preemption: 0/16 "
            "nodes are available: 16 No preemption victims found for incoming pod.",
            K8S,
        ),
        (
            "  Warning  Evicted  12m  kubelet  The node was low on resource: memory. Threshold quantity: 100Mi, "
            "available: 92344Ki. Container trainer was using 60123456Ki, request is 0, has larger consumption of memory.",
            K8S,
        ),
        (
            "Message:  The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 8123456Ki. "
            "Container trainer was using 95Gi, request is 0, has larger consumption of ephemeral-storage. ",
            K8S,
        ),
        ("  Warning  EvictionThresholdMet  3m  kubelet  Attempting to reclaim ephemeral-storage", QUIET),
        (
            '  Normal   Pulled     41m   kubelet  Container image "nvcr.io/nvidia/pytorch:24.05-py3" already present on machine',
            QUIET,
        ),
        ("  Normal   Started    41m   kubelet  Started container trainer", QUIET),
    ],
    # kubeflow/training-operator v1.5-v1.9: pkg/controller.v1/{pytorch,mpi,tensorflow}/*_controller.go, common/job.go
    "kubeflow training-operator": [
        (
            "  Warning  PyTorchJobFailed  2m  pytorchjob-controller  PyTorchJob train-llm is failed because 1 Worker "
            "replica(s) failed.",
            NOT_ROOT,
        ),
        ("    message: PyTorchJob train-llm is failed because 1 Master replica(s) failed.", NOT_ROOT),
        (
            "  Warning  PyTorchJobRestarting  5m  pytorchjob-controller  PyTorchJob train-llm is restarting because 2 "
            "Worker replica(s) failed.",
            NOT_ROOT,
        ),
        ("MPIJob bert-mpi is failed because 1 Launcher replica(s) failed.", NOT_ROOT),
        ("TFJob default/mnist has failed because 1 Worker replica(s) failed.", NOT_ROOT),
        ('job "train-llm" is failing because "Worker" replica(s) failed.', NOT_ROOT),
        ("    message: Job train-llm has failed because it has reached the specified backoff limit", UNKNOWN),
        ("    message: Job train-llm has failed because it was active longer than specified deadline", POLICY),
        (
            "  Normal  PyTorchJobSucceeded  1m  pytorchjob-controller  PyTorchJob train-llm is successfully completed.",
            QUIET,
        ),
    ],
    # NVIDIA k8s-device-plugin internal/plugin/factory.go, cmd/nvidia-device-plugin/main.go (v0.14-v0.20)
    "device plugin": [
        (f"E{KLOG} factory.go:118] Incompatible strategy detected auto", NO_GPU),
        (f"I{KLOG} main.go:416] No devices found. Waiting indefinitely.", NO_GPU),
        (
            f"E{KLOG} main.go:159] error starting plugins: error creating plugin manager: unable to create plugin "
            "manager: nvml init failed: ERROR_LIBRARY_NOT_FOUND",
            NO_GPU,
        ),
        (f"W{KLOG} factory.go:107] nvml init failed: ERROR_LIBRARY_NOT_FOUND", NO_GPU),
        (f"E{KLOG} factory.go:119] If this is a GPU node, did you configure the NVIDIA Container Toolkit?", UNKNOWN),
        (f"I{KLOG} main.go:256] Retrieving plugins.", QUIET),
        (f"I{KLOG} server.go:216] Starting GRPC server for 'nvidia.com/gpu'", QUIET),
        (f"I{KLOG} server.go:154] Registered device plugin for 'nvidia.com/gpu' with Kubelet", QUIET),
    ],
    # caffe2/serialize/inline_container.cc PyTorchStreamReader::valid / init (1.6-2.x; recent 2.x append the
    # "This is an internal miniz error..." advice), torch/csrc/serialization.cpp doRead, the writer side (class 22)
    "torch checkpoint reader": [
        (
            "[rank1]: RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory. "
            "This is an internal miniz error. If you are seeing this error, there is a high likelihood that your "
            "checkpoint file is corrupted. This can happen if the checkpoint was not saved properly, was transferred "
            "incorrectly, or the file was modified after saving.",
            USER,
        ),
        ("RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory", USER),
        ("RuntimeError: PytorchStreamReader failed reading zip archive: not a ZIP archive", USER),
        ("RuntimeError: PytorchStreamReader failed reading file data/1: invalid header or archive is corrupted", USER),
        ("RuntimeError: PytorchStreamReader failed reading file data/12: CRC-32 check failed", USER),
        (
            "RuntimeError: PytorchStreamReader failed locating file constants.pkl: file not found. This is an internal "
            "miniz error.",
            USER,
        ),
        ("RuntimeError: PytorchStreamReader failed reading file .data/serialization_id: file read failed", USER),
        (
            "RuntimeError: [enforce fail at inline_container.cc:180] . file in archive is not in a subdirectory: readme.txt",
            USER,
        ),
        ("RuntimeError: unexpected EOF, expected 4014429833 more bytes. The file might be corrupted.", USER),
        (
            "RuntimeError: [enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing file data/42: "
            "file write failed",
            STORAGE,
        ),
        ("RuntimeError: [enforce fail at inline_container.cc:626] . unexpected pos 11207488 vs 11207380", STORAGE),
    ],
    # torch/serialization.py _get_wo_message: 2.4-2.5 (weights_only=True passed), 2.6+ (the new default)
    "torch weights_only": [
        (
            "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two "
            "options, do those steps only if you trust the source of the checkpoint. ",
            USER,
        ),
        (
            "\t(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument in `torch.load` from "
            "`False` to `True`. Re-running `torch.load` with `weights_only` set to `False` will likely succeed, but it "
            "can result in arbitrary code execution. Do it only if you got the file from a trusted source.",
            VERSION,
        ),
        (
            "_pickle.UnpicklingError: Weights only load failed. In PyTorch 2.6, we changed the default value of the "
            "`weights_only` argument in `torch.load` from `False` to `True`. Re-running `torch.load` with "
            "`weights_only` set to `False` will likely succeed, but it can result in arbitrary code execution. Do it "
            "only if you got the file from a trusted source.",
            VERSION,
        ),
        (
            "_pickle.UnpicklingError: Weights only load failed. Re-running `torch.load` with `weights_only` set to "
            "`False` will likely succeed, but it can result in arbitrary code execution. Do it only if you got the file "
            "from a trusted source.",
            USER,
        ),
        (
            "\tWeightsUnpickler error: Unsupported global: GLOBAL numpy.core.multiarray.scalar was not an allowed "
            "global by default. Please use `torch.serialization.add_safe_globals([scalar])` or the "
            "`torch.serialization.safe_globals([scalar])` context manager to allowlist this global if you trust this "
            "class/function.",
            USER,
        ),
    ],
    # safetensors safetensors/src/tensor.rs SafeTensorError, bindings/python/src/lib.rs (<=0.5 "{e:?}", 0.6+ "{e}")
    "safetensors": [
        ("safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer", USER),
        ("safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge", USER),
        ("[rank0]: safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooSmall", USER),
        ("safetensors_rust.SafetensorError: Error while deserializing header: InvalidHeaderDeserialization", USER),
        (
            "safetensors_rust.SafetensorError: Error while deserializing header: incomplete metadata, file not fully "
            "covered",
            USER,
        ),
        ("safetensors_rust.SafetensorError: Error while deserializing header: header too large", USER),
        (
            "safetensors_rust.SafetensorError: Error while deserializing header: invalid JSON in header: EOF while "
            "parsing a value at line 1 column 0",
            USER,
        ),
    ],
    # Megatron-LM megatron/training/checkpointing.py read_metadata / get_checkpoint_iteration; DeepSpeed loader
    "megatron and deepspeed loaders": [
        ("ERROR: Invalid metadata file /ckpt/run1/latest_checkpointed_iteration.txt. Exiting", USER),
        ("AssertionError: error parsing metadata file /ckpt/run1/latest_checkpointed_iteration.txt", USER),
        (
            "The checkpoint being loaded used a DP world size of 4 but the current world size is 1. Automatic "
            "adjustment of ZeRO's optimizer state partitioning with a new world size is not currently supported.",
            USER,
        ),
        ("WARNING: could not find the metadata file /ckpt/run1/latest_checkpointed_iteration.txt ", QUIET),
        ("    will not load any checkpoints and will start from random", QUIET),
        (
            "[2024-03-05 07:01:51,590] [WARNING] [engine.py:2720:load_checkpoint] Unable to find latest file at "
            "/ckpt/run1/latest, if trying to load latest checkpoint please ensure this file exists or pass an explicit "
            "checkpoint tag when loading a checkpoint.",
            QUIET,
        ),
    ],
}

CASES = [(group, text, want) for group, rows in GROUPS.items() for text, want in rows]


def agrees(text: str, want: str) -> bool:
    """Whether the catalogue's winner for ``text`` is what ``want`` says."""
    got = winner(text)
    if want == NOT_ROOT:
        return got is None or role_of(got[0]) in ("teardown", "cascade")
    if want == UNKNOWN:
        return got is None or got[1] == "unknown"
    if want == QUIET:
        return got is None or got[0].startswith("generic.")
    return got is not None and got[1] == want


@pytest.mark.parametrize(("group", "text", "want"), CASES, ids=[f"{g}-{i}" for i, (g, _, _) in enumerate(CASES)])
def test_each_cluster_wording_gets_the_class_it_means(group: str, text: str, want: str) -> None:
    assert agrees(text, want), (group, text, winner(text))


# Whole bundles: the wrapper lines (pyxis, spank, the OCI runtime, kubelet back-off, the training operator) never
# stand in for the reason printed with them.
PYXIS_LOG = [
    pyxis("container start failed with error code: 1"),
    pyxis("printing enroot log file:"),
    pyxis(
        cli(
            "container error: file lookup failed: /proc/421042/root/fsx/enroot/data/user-1111/pyxis_nemo/etc/debian_version: permission denied"
        ),
        log=True,
    ),
    pyxis("[ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1", log=True),
    pyxis("couldn't start container"),
    "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1",
    "slurmstepd: error: Failed to invoke spank plugin stack",
    "srun: error: gpu07: task 0: Exited with exit code 1",
]
WEIGHTS_ONLY_26 = [
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/workspace/train.py", line 88, in <module>',
    '[rank0]:     state = torch.load(args.resume, map_location="cpu")',
    '[rank0]:   File "/usr/local/lib/python3.12/dist-packages/torch/serialization.py", line 1470, in load',
    "[rank0]:     raise pickle.UnpicklingError(_get_wo_message(str(e))) from None",
    "[rank0]: _pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two "
    "options, do those steps only if you trust the source of the checkpoint. ",
    "[rank0]: \t(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument in `torch.load` from "
    "`False` to `True`. Re-running `torch.load` with `weights_only` set to `False` will likely succeed, but it can "
    "result in arbitrary code execution. Do it only if you got the file from a trusted source.",
    "[rank0]: \t(2) Alternatively, to load with `weights_only=True` please check the recommended steps in the "
    "following error message.",
    "[rank0]: \tWeightsUnpickler error: Unsupported global: GLOBAL argparse.Namespace was not an allowed global by "
    "default. Please use `torch.serialization.add_safe_globals([Namespace])` or the "
    "`torch.serialization.safe_globals([Namespace])` context manager to allowlist this global if you trust this "
    "class/function.",
]
K8S_EVENTS = [
    "LAST SEEN   TYPE      REASON                 OBJECT                         MESSAGE",
    "9m          Normal    Started                pod/llama-sft-worker-1         Started container pytorch",
    "7m30s       Warning   OOMKilling             node/gpu-node-3                Memory cgroup out of memory: Killed "
    "process 4411 (pt_main_thread)",
    "7m28s       Warning   BackOff                pod/llama-sft-worker-1         Back-off restarting failed container "
    "pytorch in pod llama-sft-worker-1_ml-team(6f1c2a9e)",
    "7m20s       Warning   PyTorchJobRestarting   pytorchjob/llama-sft           PyTorchJob llama-sft is restarting "
    "because 1 Worker replica(s) failed.",
]
BUNDLES = {
    "pyxis-nvidia-hook": ("slurm-881.out", PYXIS_LOG, NO_GPU, "nvidia-container-cli: container error"),
    "pyxis-no-reason": ("slurm-882.out", [PYXIS_LOG[0], *PYXIS_LOG[3:]], "unknown", "container start failed"),
    "weights-only-2.6": ("rank0.log", WEIGHTS_ONLY_26, VERSION, "In PyTorch 2.6"),
    "docker-requirement": (
        "docker.log",
        [
            f"{SHIM.replace('Error: failed to create containerd task', 'docker: Error response from daemon')}",
            cli(
                "requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a newer version, "
                "or use an earlier cuda container: unknown"
            ),
        ],
        VERSION,
        "unsatisfied condition: cuda>=12.8",
    ),
    "k8s-backoff-after-oom": ("kubectl_get_events.txt", K8S_EVENTS, "host_oom_kill", "OOMKilling"),
}


@pytest.mark.parametrize("name", list(BUNDLES))
def test_a_bundle_is_diagnosed_by_the_reason_not_the_wrapper(name: str, tmp_path: Path, settings: Settings) -> None:
    file, lines, cls, cited = BUNDLES[name]
    rc = run_files(tmp_path / "b", {file: "\n".join(lines) + "\n"}, settings).document.root_cause
    assert rc.class_ == cls, (name, rc.class_, rc.summary)
    assert cited in rc.citations[0].text, (name, rc.citations[0].text)
