"""Issue 14, emitters: CUDA. Every cudaError_t / CUresult string and name, and the status names of the CUDA math
libraries and NVML, printed in each of the carriers that print them, must land in the class its meaning gives.

The tables are the emitters' own: the runtime's cudaGetErrorString / the driver's cuGetErrorString texts and the
cudaErrorX / CUDA_ERROR_X names (driver_types.h, cuda.h; CUDA 10.1-13 numbering, with the pre-10.1 number where
PyTorch's old "cuda runtime error (N)" form printed a different one), cublas_api.h, cudnn.h / cudnn_graph.h,
curand.h, cufft.h, cusolver_common.h, cusparse.h and nvmlErrorString. The lines are built here, so the patterns
are checked against wording they were not written from.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from crashcart.catalogue import load_catalogue
from tests.kit import winner

OOM = "cuda_oom"
KERNEL = "cuda_kernel_fault"
GPU = "gpu_engine_hang_reset_required"
SOFT = "python_exception_rank_crash"
VERSION = "software_version_mismatch"
SETUP = "nccl_init_bootstrap_failure"
ECC = "gpu_memory_ecc_uncorrectable"
NVLINK = "gpu_nvlink_error"
FABRIC = "nvswitch_fabric_manager_error"
TEARDOWN = "unknown"

# code | pre-10.1 code | runtime name | driver name | class | cudaGetErrorString / cuGetErrorString text
CUDA_ERROR_TABLE = """
1   | 11 | cudaErrorInvalidValue | CUDA_ERROR_INVALID_VALUE | SOFT | invalid argument
2   | -  | cudaErrorMemoryAllocation | CUDA_ERROR_OUT_OF_MEMORY | OOM | out of memory
3   | -  | cudaErrorInitializationError | CUDA_ERROR_NOT_INITIALIZED | KERNEL | initialization error
4   | 29 | cudaErrorCudartUnloading | CUDA_ERROR_DEINITIALIZED | TEARDOWN | driver shutting down
9   | -  | cudaErrorInvalidConfiguration | - | SOFT | invalid configuration argument
12  | -  | cudaErrorInvalidPitchValue | - | SOFT | invalid pitch argument
13  | -  | cudaErrorInvalidSymbol | - | SOFT | invalid device symbol
16  | -  | cudaErrorInvalidHostPointer | - | SOFT | invalid host pointer
17  | -  | cudaErrorInvalidDevicePointer | - | SOFT | invalid device pointer
18  | -  | cudaErrorInvalidTexture | - | SOFT | invalid texture reference
20  | -  | cudaErrorInvalidChannelDescriptor | - | SOFT | invalid channel descriptor
21  | -  | cudaErrorInvalidMemcpyDirection | - | SOFT | invalid copy direction for memcpy
34  | -  | cudaErrorStubLibrary | CUDA_ERROR_STUB_LIBRARY | VERSION | CUDA driver is a stub library
35  | -  | cudaErrorInsufficientDriver | - | VERSION | CUDA driver version is insufficient for CUDA runtime version
36  | -  | cudaErrorCallRequiresNewerDriver | - | VERSION | API call is not supported in the installed CUDA driver
37  | -  | cudaErrorInvalidSurface | - | SOFT | invalid surface reference
46  | -  | cudaErrorDevicesUnavailable | CUDA_ERROR_DEVICE_UNAVAILABLE | GPU | CUDA-capable device(s) is/are busy or unavailable
46  | -  | - | - | GPU | all CUDA-capable devices are busy or unavailable
49  | -  | cudaErrorIncompatibleDriverContext | - | SOFT | incompatible driver context
52  | -  | cudaErrorMissingConfiguration | - | SOFT | __global__ function call is not configured
98  | 8  | cudaErrorInvalidDeviceFunction | - | VERSION | invalid device function
100 | 38 | cudaErrorNoDevice | CUDA_ERROR_NO_DEVICE | SETUP | no CUDA-capable device is detected
101 | 10 | cudaErrorInvalidDevice | CUDA_ERROR_INVALID_DEVICE | SETUP | invalid device ordinal
127 | -  | cudaErrorStartupFailure | - | KERNEL | startup failure in cuda runtime
200 | -  | cudaErrorInvalidKernelImage | CUDA_ERROR_INVALID_IMAGE | VERSION | device kernel image is invalid
201 | -  | cudaErrorDeviceUninitialized | CUDA_ERROR_INVALID_CONTEXT | SOFT | invalid device context
209 | 48 | cudaErrorNoKernelImageForDevice | CUDA_ERROR_NO_BINARY_FOR_GPU | VERSION | no kernel image is available for execution on the device
214 | 39 | cudaErrorECCUncorrectable | CUDA_ERROR_ECC_UNCORRECTABLE | ECC | uncorrectable ECC error encountered
215 | -  | cudaErrorUnsupportedLimit | CUDA_ERROR_UNSUPPORTED_LIMIT | SOFT | limit is not supported on this architecture
216 | -  | cudaErrorDeviceAlreadyInUse | CUDA_ERROR_CONTEXT_ALREADY_IN_USE | GPU | exclusive-thread device already in use by a different thread
217 | 64 | cudaErrorPeerAccessUnsupported | CUDA_ERROR_PEER_ACCESS_UNSUPPORTED | SETUP | peer access is not supported between these two devices
218 | -  | cudaErrorInvalidPtx | CUDA_ERROR_INVALID_PTX | VERSION | a PTX JIT compilation failed
220 | -  | cudaErrorNvlinkUncorrectable | CUDA_ERROR_NVLINK_UNCORRECTABLE | NVLINK | uncorrectable NVLink error detected during the execution
221 | -  | cudaErrorJitCompilerNotFound | CUDA_ERROR_JIT_COMPILER_NOT_FOUND | VERSION | PTX JIT compiler library not found
222 | -  | cudaErrorUnsupportedPtxVersion | CUDA_ERROR_UNSUPPORTED_PTX_VERSION | VERSION | the provided PTX was compiled with an unsupported toolchain.
223 | -  | cudaErrorJitCompilationDisabled | CUDA_ERROR_JIT_COMPILATION_DISABLED | VERSION | PTX JIT compilation was disabled
224 | -  | cudaErrorUnsupportedExecAffinity | CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY | SOFT | the provided execution affinity is not supported
225 | -  | cudaErrorUnsupportedDevSideSync | CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC | VERSION | the provided PTX contains unsupported call to cudaDeviceSynchronize
226 | -  | cudaErrorContained | CUDA_ERROR_CONTAINED | KERNEL | Invalid access of peer GPU memory over nvlink or a hardware error
300 | -  | cudaErrorInvalidSource | CUDA_ERROR_INVALID_SOURCE | VERSION | device kernel image is invalid
304 | -  | cudaErrorOperatingSystem | CUDA_ERROR_OPERATING_SYSTEM | SOFT | OS call failed or operation not supported on this OS
400 | 33 | cudaErrorInvalidResourceHandle | CUDA_ERROR_INVALID_HANDLE | SOFT | invalid resource handle
401 | -  | cudaErrorIllegalState | CUDA_ERROR_ILLEGAL_STATE | SOFT | the operation cannot be performed in the present state
402 | -  | cudaErrorLossyQuery | CUDA_ERROR_LOSSY_QUERY | SOFT | attempted introspection would be semantically lossy
500 | -  | cudaErrorSymbolNotFound | CUDA_ERROR_NOT_FOUND | VERSION | named symbol not found
600 | -  | - | - | KERNEL | device not ready
700 | 77 | cudaErrorIllegalAddress | CUDA_ERROR_ILLEGAL_ADDRESS | KERNEL | an illegal memory access was encountered
701 | 7  | cudaErrorLaunchOutOfResources | CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES | SOFT | too many resources requested for launch
702 | 6  | cudaErrorLaunchTimeout | CUDA_ERROR_LAUNCH_TIMEOUT | GPU | the launch timed out and was terminated
704 | -  | cudaErrorPeerAccessAlreadyEnabled | CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED | SOFT | peer access is already enabled
705 | -  | cudaErrorPeerAccessNotEnabled | CUDA_ERROR_PEER_ACCESS_NOT_ENABLED | SOFT | peer access has not been enabled
708 | -  | cudaErrorSetOnActiveProcess | CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE | SOFT | cannot set while device is active in this process
709 | -  | cudaErrorContextIsDestroyed | CUDA_ERROR_CONTEXT_IS_DESTROYED | SOFT | context is destroyed
710 | 59 | cudaErrorAssert | CUDA_ERROR_ASSERT | KERNEL | device-side assert triggered
711 | -  | cudaErrorTooManyPeers | CUDA_ERROR_TOO_MANY_PEERS | SETUP | peer mapping resources exhausted
712 | -  | cudaErrorHostMemoryAlreadyRegistered | CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED | SOFT | part or all of the requested memory range is already mapped
713 | -  | cudaErrorHostMemoryNotRegistered | CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED | SOFT | pointer does not correspond to a registered memory region
714 | -  | cudaErrorHardwareStackError | CUDA_ERROR_HARDWARE_STACK_ERROR | KERNEL | hardware stack error
715 | -  | cudaErrorIllegalInstruction | CUDA_ERROR_ILLEGAL_INSTRUCTION | KERNEL | an illegal instruction was encountered
716 | -  | cudaErrorMisalignedAddress | CUDA_ERROR_MISALIGNED_ADDRESS | KERNEL | misaligned address
717 | -  | cudaErrorInvalidAddressSpace | CUDA_ERROR_INVALID_ADDRESS_SPACE | KERNEL | operation not supported on global/shared address space
718 | -  | cudaErrorInvalidPc | CUDA_ERROR_INVALID_PC | KERNEL | invalid program counter
719 | 4  | cudaErrorLaunchFailure | CUDA_ERROR_LAUNCH_FAILED | KERNEL | unspecified launch failure
720 | -  | cudaErrorCooperativeLaunchTooLarge | CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE | SOFT | too many blocks in cooperative launch
721 | -  | cudaErrorTensorMemoryLeak | CUDA_ERROR_TENSOR_MEMORY_LEAK | KERNEL | tensor memory not completely freed
800 | -  | cudaErrorNotPermitted | CUDA_ERROR_NOT_PERMITTED | SOFT | operation not permitted
801 | -  | cudaErrorNotSupported | CUDA_ERROR_NOT_SUPPORTED | SOFT | operation not supported
802 | -  | cudaErrorSystemNotReady | CUDA_ERROR_SYSTEM_NOT_READY | FABRIC | system not yet initialized
803 | -  | cudaErrorSystemDriverMismatch | CUDA_ERROR_SYSTEM_DRIVER_MISMATCH | VERSION | system has unsupported display driver / cuda driver combination
804 | -  | cudaErrorCompatNotSupportedOnDevice | CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE | VERSION | forward compatibility was attempted on non supported HW
805 | -  | cudaErrorMpsConnectionFailed | CUDA_ERROR_MPS_CONNECTION_FAILED | GPU | MPS client failed to connect to the MPS control daemon or the MPS server
810 | -  | cudaErrorMpsClientTerminated | CUDA_ERROR_MPS_CLIENT_TERMINATED | GPU | the MPS client has been terminated by the server
812 | -  | cudaErrorCdpVersionMismatch | CUDA_ERROR_CDP_VERSION_MISMATCH | VERSION | unsupported interaction between different versions of CUDA Dynamic Parallelism
900 | -  | cudaErrorStreamCaptureUnsupported | CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED | SOFT | operation not permitted when stream is capturing
901 | -  | - | - | KERNEL | operation failed due to a previous error during capture
904 | -  | cudaErrorStreamCaptureUnjoined | CUDA_ERROR_STREAM_CAPTURE_UNJOINED | SOFT | capturing stream has unjoined work
909 | -  | cudaErrorTimeout | CUDA_ERROR_TIMEOUT | SOFT | wait operation timed out
912 | -  | cudaErrorInvalidClusterSize | CUDA_ERROR_INVALID_CLUSTER_SIZE | SOFT | a kernel launch error has occurred due to cluster misconfiguration
913 | -  | cudaErrorFunctionNotLoaded | CUDA_ERROR_FUNCTION_NOT_LOADED | SOFT | the function handle is not loaded when calling an API that requires a loaded function
999 | 30 | cudaErrorUnknown | CUDA_ERROR_UNKNOWN | GPU | unknown error
"""


def _row(line: str) -> tuple[int, int | None, str | None, str | None, str, str]:
    code, old, rt, drv, cls, text = (f.strip() for f in line.split("|", 5))
    return (
        int(code),
        None if old == "-" else int(old),
        None if rt == "-" else rt,
        None if drv == "-" else drv,
        text,
        globals()[cls],
    )


CUDA_ERRORS = [_row(line) for line in CUDA_ERROR_TABLE.strip().splitlines()]

# Carriers that print the string: (name, format) with {s} the string, {n} the code, {old} the pre-10.1 code.
STRING_CARRIERS: list[tuple[str, Callable[[str, int, int], str]]] = [
    ("pytorch", lambda s, n, old: f"[rank3]: RuntimeError: CUDA error: {s}"),
    (
        "pytorch-old",
        lambda s, n, old: f"RuntimeError: cuda runtime error ({old}) : {s} at /pytorch/aten/src/THC/THCGeneral.cpp:50",
    ),
    (
        "thc-check",
        lambda s, n, old: f"THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=405 error={old} : {s}",
    ),
    ("nccl-old", lambda s, n, old: f"gpu-node-07:4411:4490 [3] enqueue.cc:1556 NCCL WARN Cuda failure '{s}'"),
    ("nccl", lambda s, n, old: f"gpu-node-07:4411:4490 [3] misc/strongstream.cc:395 NCCL WARN Cuda failure {n} '{s}'"),
    ("nccl-tests", lambda s, n, old: f"gpu-node-07: Test CUDA failure common.cu:892 '{s}'"),
    ("driver-api", lambda s, n, old: f"RuntimeError: CUDA driver error: {s}"),
    ("triton", lambda s, n, old: f"RuntimeError: Triton Error [CUDA]: {s}"),
    ("user-macro", lambda s, n, old: f"CUDA Error: {s}"),
]

# Carriers that print the enum name.
RUNTIME_NAME_CARRIERS: list[tuple[str, Callable[[str], str]]] = [
    ("cuda-samples", lambda name: f'CUDA error at vectorAdd.cu:112 code=719({name}) "cudaDeviceSynchronize()"'),
    (
        "pytorch-search",
        lambda name: (
            f"[rank0]: Search for `{name}' in "
            "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information."
        ),
    ),
]
DRIVER_NAME_CARRIERS: list[tuple[str, Callable[[str, str], str]]] = [
    (
        "xla",
        lambda name, s: (
            f"jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Could not synchronize CUDA stream: {name}: {s}"
        ),
    ),
    (
        "tensorflow",
        lambda name, s: f"E tensorflow/stream_executor/cuda/cuda_driver.cc:1010] failed to synchronize: {name}: {s}",
    ),
]


def _cls(line: str) -> str | None:
    won = winner(line)
    return won[1] if won else None


def _misclassified(lines: list[str], cls: str) -> list[tuple[str, tuple[str, str] | None]]:
    return [(line, winner(line)) for line in lines if _cls(line) != cls]


@pytest.mark.parametrize(
    ("code", "old", "rt", "drv", "text", "cls"), CUDA_ERRORS, ids=[f"{e[0]}-{e[4]}" for e in CUDA_ERRORS]
)
def test_every_cuda_error_in_every_carrier(
    code: int, old: int | None, rt: str | None, drv: str | None, text: str, cls: str
) -> None:
    """One test per error: its string in every string carrier, its names in every name carrier."""
    lines = [f(text, code, old or code) for _, f in STRING_CARRIERS]
    lines += [f(rt) for _, f in RUNTIME_NAME_CARRIERS] if rt else []
    lines += [f(drv, text) for _, f in DRIVER_NAME_CARRIERS] if drv else []
    assert _misclassified(lines, cls) == []


# CUDA math libraries (status name -> class), printed by PyTorch ("CUDA error: <name> when calling `...`",
# "cuDNN error: <name>", "cuFFT error: <name>", "cusolver error: <name>, when calling `...`") and TensorFlow.
LIBRARY_STATUSES: list[tuple[str, str]] = [
    ("CUBLAS_STATUS_ALLOC_FAILED", OOM),
    ("CUBLAS_STATUS_INVALID_VALUE", SOFT),
    ("CUBLAS_STATUS_ARCH_MISMATCH", VERSION),
    ("CUBLAS_STATUS_MAPPING_ERROR", KERNEL),
    ("CUBLAS_STATUS_EXECUTION_FAILED", KERNEL),
    ("CUBLAS_STATUS_INTERNAL_ERROR", KERNEL),
    ("CUBLAS_STATUS_NOT_SUPPORTED", SOFT),
    ("CUBLAS_STATUS_LICENSE_ERROR", SOFT),
    ("CUDNN_STATUS_ALLOC_FAILED", OOM),
    ("CUDNN_STATUS_BAD_PARAM", SOFT),
    ("CUDNN_STATUS_BAD_PARAM_NULL_POINTER", SOFT),
    ("CUDNN_STATUS_INTERNAL_ERROR", KERNEL),
    ("CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED", OOM),
    ("CUDNN_STATUS_INVALID_VALUE", SOFT),
    ("CUDNN_STATUS_ARCH_MISMATCH", VERSION),
    ("CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH", VERSION),
    ("CUDNN_STATUS_MAPPING_ERROR", KERNEL),
    ("CUDNN_STATUS_EXECUTION_FAILED", KERNEL),
    ("CUDNN_STATUS_EXECUTION_FAILED_CUBLAS", KERNEL),
    ("CUDNN_STATUS_NOT_SUPPORTED", SOFT),
    ("CUDNN_STATUS_NOT_SUPPORTED_SHAPE", SOFT),
    ("CUDNN_STATUS_VERSION_MISMATCH", VERSION),
    ("CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH", VERSION),
    ("CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART", VERSION),
    ("CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING", VERSION),
    ("CURAND_STATUS_VERSION_MISMATCH", VERSION),
    ("CURAND_STATUS_NOT_INITIALIZED", SOFT),
    ("CURAND_STATUS_ALLOCATION_FAILED", OOM),
    ("CURAND_STATUS_TYPE_ERROR", SOFT),
    ("CURAND_STATUS_OUT_OF_RANGE", SOFT),
    ("CURAND_STATUS_LENGTH_NOT_MULTIPLE", SOFT),
    ("CURAND_STATUS_DOUBLE_PRECISION_REQUIRED", VERSION),
    ("CURAND_STATUS_LAUNCH_FAILURE", KERNEL),
    ("CURAND_STATUS_PREEXISTING_FAILURE", KERNEL),
    ("CURAND_STATUS_INITIALIZATION_FAILED", KERNEL),
    ("CURAND_STATUS_ARCH_MISMATCH", VERSION),
    ("CURAND_STATUS_INTERNAL_ERROR", KERNEL),
    ("CUFFT_INVALID_PLAN", SOFT),
    ("CUFFT_ALLOC_FAILED", OOM),
    ("CUFFT_INVALID_TYPE", SOFT),
    ("CUFFT_INVALID_VALUE", SOFT),
    ("CUFFT_INTERNAL_ERROR", KERNEL),
    ("CUFFT_EXEC_FAILED", KERNEL),
    ("CUFFT_INVALID_SIZE", SOFT),
    ("CUFFT_UNALIGNED_DATA", SOFT),
    ("CUFFT_INVALID_DEVICE", SOFT),
    ("CUFFT_NO_WORKSPACE", SOFT),
    ("CUFFT_NOT_SUPPORTED", SOFT),
    ("CUSOLVER_STATUS_NOT_INITIALIZED", SOFT),
    ("CUSOLVER_STATUS_ALLOC_FAILED", OOM),
    ("CUSOLVER_STATUS_INVALID_VALUE", SOFT),
    ("CUSOLVER_STATUS_ARCH_MISMATCH", VERSION),
    ("CUSOLVER_STATUS_EXECUTION_FAILED", KERNEL),
    ("CUSOLVER_STATUS_INTERNAL_ERROR", KERNEL),
    ("CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED", SOFT),
    ("CUSOLVER_STATUS_ZERO_PIVOT", SOFT),
    ("CUSPARSE_STATUS_ALLOC_FAILED", OOM),
    ("CUSPARSE_STATUS_INVALID_VALUE", SOFT),
    ("CUSPARSE_STATUS_ARCH_MISMATCH", VERSION),
    ("CUSPARSE_STATUS_EXECUTION_FAILED", KERNEL),
    ("CUSPARSE_STATUS_INTERNAL_ERROR", KERNEL),
    ("CUSPARSE_STATUS_NOT_SUPPORTED", SOFT),
    ("CUSPARSE_STATUS_INSUFFICIENT_RESOURCES", SOFT),
]
LIBRARY_CARRIERS: list[tuple[str, Callable[[str], str]]] = [
    ("pytorch-blas", lambda name: f"[rank1]: RuntimeError: CUDA error: {name} when calling `cublasLtMatmul(...)`"),
    ("pytorch-lib", lambda name: f"RuntimeError: cuDNN error: {name}"),
    ("solver", lambda name: f"torch._C._LinAlgError: cusolver error: {name}, when calling `cusolverDnCreate(handle)`"),
    ("tensorflow", lambda name: f"E tensorflow/stream_executor/cuda/cuda_dnn.cc:1] Could not create handle: {name}"),
]


@pytest.mark.parametrize(("name", "cls"), LIBRARY_STATUSES, ids=[n for n, _ in LIBRARY_STATUSES])
def test_every_library_status(name: str, cls: str) -> None:
    assert _misclassified([f(name) for _, f in LIBRARY_CARRIERS], cls) == []


# nvmlErrorString texts as nvidia-smi and NVML users print them.
NVML = [
    ("Failed to initialize NVML: Driver/library version mismatch", VERSION),
    ("Failed to initialize NVML: GPU is lost", "gpu_fallen_off_bus"),
    (
        "Unable to determine the device handle for GPU 0000:86:00.0: GPU is lost.  Reboot the system",
        "gpu_fallen_off_bus",
    ),
    ("Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error", "gpu_fallen_off_bus"),
    ("Failed to initialize NVML: Unknown Error", SETUP),
    ("Failed to initialize NVML: Driver Not Loaded", SETUP),
    ("Failed to initialize NVML: Insufficient Permissions", SETUP),
    ("Failed to initialize NVML: GPU access blocked by the operating system", SETUP),
    ("pynvml.NVMLError_LibRmVersionMismatch: NVML_ERROR_LIB_RM_VERSION_MISMATCH", VERSION),
    ("pynvml.NVMLError_GPUIsLost: NVML_ERROR_GPU_IS_LOST", "gpu_fallen_off_bus"),
    ("nvmlDeviceGetHandleByIndex failed: GPU requires reset", GPU),
    (
        "h:1:1 [0] misc/nvmlwrap.cc:181 NCCL WARN nvmlDeviceGetHandleByIndex(3) failed: GPU is lost",
        "gpu_fallen_off_bus",
    ),
]


@pytest.mark.parametrize(("line", "cls"), NVML)
def test_nvml_errors(line: str, cls: str) -> None:
    assert _cls(line) == cls, (line, winner(line))


def test_a_known_string_beats_nccls_catch_all() -> None:
    line = "gpu-node-07:4411:4490 [3] transport/shm.cc:590 NCCL WARN Cuda failure 217 'peer access is not supported between these two devices'"
    assert winner(line) == ("cuda.peer_access_unsupported", SETUP)
    # a string no table names still lands in the catch-all, capped at 0.6 in crashcart/reduce/adjust.py
    unknown = "gpu-node-07:4411:4490 [3] enqueue.cc:1 NCCL WARN Cuda failure 911 'an async error has occured in external entity outside of CUDA'"
    assert winner(unknown) == ("nccl.cuda_failure", KERNEL)


CUDA_SIGNATURES = [
    "cuda.oom_other",
    "cuda.kernel_fault",
    "cuda.kernel_fault_device",
    "cuda.device_fault",
    "cuda.device_unavailable",
    "cuda.peer_access_unsupported",
    "cuda.api_error",
    "cuda.library_failure",
    "cuda.library_api_error",
    "cuda.driver_shutting_down",
    "cuda.no_gpus",
    "cuda.invalid_device_ordinal",
    "version.cuda_driver_insufficient",
    "version.cuda_no_code_for_gpu",
    "version.driver_combination",
    "version.library_arch_mismatch",
    "nvml.gpu_lost",
    "nvml.driver_library_mismatch",
]

# Lines that carry the same words outside a CUDA carrier, or report success, retries and settings.
NOT_CUDA_ERRORS = [
    "ValueError: invalid argument 'lr' for optimizer AdamW",
    "argparse.ArgumentError: argument --device: invalid argument 'cuda:9'",
    "PermissionError: [Errno 1] Operation not permitted: '/ckpt/step_100.pt'",
    "OSError: [Errno 95] Operation not supported",
    "Unknown error while reading the config; using defaults",
    "INFO: launch timed out waiting for the dashboard, retrying",
    "gpu-node-07:4411:4411 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1",
    "gpu-node-07:4411:4490 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "torch.cuda.is_available(): True; device count 8",
    "[INFO] CUDA error checks enabled (CUDA_LAUNCH_BLOCKING=1)",
    "cudaSuccess: no error",
    "Retrying cuInit in 5 s (attempt 2/5)",
    "nvidia-smi: GPU 0000:3b:00.0 memory used 512MiB of 81920MiB",
    "the resource allocation request was granted",
    "device not ready yet, polling",
]


@pytest.mark.parametrize("line", NOT_CUDA_ERRORS)
def test_lines_that_are_not_cuda_errors(line: str) -> None:
    cat = load_catalogue()
    hits = [sid for sid in CUDA_SIGNATURES if cat.regex(cat.index[sid]).search(line)]
    assert hits == [], (line, hits)
