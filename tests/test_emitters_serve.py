"""Issue 14, capability 1: the inference servers' and trainer frameworks' own failure wordings. vLLM (the V1 engine
core, its multiprocessing executor and workers, the KV-cache sizing checks, its distributed helpers; the V0 engine),
SGLang (scheduler, detokenizer, engine launch, memory pool), TensorRT-LLM (its "[TensorRT-LLM][ERROR]" exceptions and
the CUDA / NCCL / TensorRT errors they wrap), PyTorch Lightning (loop stops, SIGTERM and SLURM requeue handling,
early stopping), accelerate and the transformers Trainer, NVIDIA resiliency-ext's rank monitor, and XLA/JAX. Each
line is written from the emitter's format string with its usual prefix and realistic values; the expectation is a
class id, or NOT_ROOT / BENIGN as in test_emitters_torch.py. A wrapper that re-raises or reports another process's
failure ("See root cause above") is never a root: the error it points at decides."""

from __future__ import annotations

import pytest

from tests.kit import winner
from tests.test_emitters_torch import BENIGN, HANG, KERNEL, NOT_ROOT, PEER, USER, case_ids, cases, check

OOM = "cuda_oom"
BOOT = "nccl_init_bootstrap_failure"
NAN = "nan_inf_loss_or_grad"


def vllm(level: str, src: str, message: str, proc: str | None = None) -> str:
    """A vLLM log line: 'LEVEL MM-DD HH:MM:SS [file.py:line] message' (0.8+; 0.4-0.7 print 'file.py:line]' with no
    bracket), behind the '(EngineCore_DP0 pid=137324) ' / '(VllmWorker rank=1 pid=24) ' process prefix of the
    processes vLLM starts."""
    line = f"{level} 12-01 20:06:18 [{src}] {message}"
    return f"({proc}) {line}" if proc else line


def sgl(message: str, tp: str | None = "TP0") -> str:
    """An SGLang server log line: '[2025-03-29 18:56:25 TP0] message' (the scheduler's DP/TP tag when it has one)."""
    return f"[2025-03-29 18:56:25 {tp}] {message}" if tp else f"[2025-03-29 18:56:25] {message}"


ENGINE = "EngineCore_DP0 pid=137324"
WORKER = "VllmWorker rank=1 pid=24"
API = "APIServer pid=215332"

GROUPS: dict[str, list[tuple[str, str]]] = {
    # vllm/v1/engine/core.py run_engine_core, utils.py wait_for_engine_startup, core_client.py, exceptions.py
    # (0.8-0.11): the engine's reports that another process failed; the root is the traceback above them
    "vllm engine core": [
        (vllm("ERROR", "core.py:586", "EngineCore failed to start.", ENGINE), NOT_ROOT),
        (vllm("ERROR", "core.py:700", "EngineCore encountered a fatal error.", ENGINE), NOT_ROOT),
        (
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
            "{'EngineCore_0': 1}",
            NOT_ROOT,
        ),
        ("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}", NOT_ROOT),
        (
            f"({API}) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{}}",
            NOT_ROOT,
        ),
        (
            vllm(
                "ERROR",
                "core_client.py:562",
                "Engine core proc EngineCore_0 died unexpectedly, shutting down client.",
                API,
            ),
            NOT_ROOT,
        ),
        (
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
            "the root cause.",
            NOT_ROOT,
        ),
    ],
    # vllm/engine/async_llm_engine.py, vllm/engine/multiprocessing/client.py (V0 engine, 0.4-0.10)
    "vllm v0 engine": [
        ("vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.", NOT_ROOT),
        (
            "vllm.engine.async_llm_engine.AsyncEngineDeadError: Task finished unexpectedly. This should never happen! "
            "Please open an issue on Github. See stack trace above for the actual cause.",
            NOT_ROOT,
        ),
        ("RuntimeError: Engine process failed to start. See stack trace for the root cause.", NOT_ROOT),
    ],
    # vllm/v1/executor/multiproc_executor.py (0.8-0.11) and vllm/executor/multiproc_worker_utils.py (V0)
    "vllm executor and workers": [
        (
            vllm(
                "ERROR",
                "multiproc_executor.py:154",
                "Worker proc VllmWorker-0 died unexpectedly, shutting down executor.",
                ENGINE,
            ),
            NOT_ROOT,
        ),
        (vllm("ERROR", "multiproc_executor.py:470", "WorkerProc failed to start.", WORKER), NOT_ROOT),
        (vllm("ERROR", "multiproc_executor.py:527", "WorkerProc hit an exception.", WORKER), NOT_ROOT),
        (vllm("ERROR", "multiproc_executor.py:530", "WorkerProc failed.", "Worker_TP1 pid=1912"), NOT_ROOT),
        (vllm("WARNING", "multiproc_executor.py:884", "WorkerProc was terminated", "Worker_TP3 pid=1914"), NOT_ROOT),
        (
            "RuntimeError: Worker failed with error 'expected scalar type Long but found Int', please check the stack "
            "trace above for the root cause",
            NOT_ROOT,
        ),
        (
            f"({ENGINE}) ERROR 12-01 20:06:18 [core.py:708] RuntimeError: Worker failed with error '', please check "
            "the stack trace above for the root cause",
            NOT_ROOT,
        ),
        (
            "Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace "
            "for root cause.",
            NOT_ROOT,
        ),
        ("RuntimeError: Executor failed.", NOT_ROOT),
        (
            vllm("ERROR", "multiproc_worker_utils.py:120", "Worker VllmWorkerProcess pid 4015790 died, exit code: -15"),
            NOT_ROOT,
        ),
        (
            "ERROR 07-11 06:11:25 multiproc_worker_utils.py:123] Worker VllmWorkerProcess pid 812 died, exit code: -15",
            NOT_ROOT,
        ),
        (
            "ERROR 07-11 06:11:25 multiproc_worker_utils.py:123] Worker VllmWorkerProcess pid 812 died, exit code: -9",
            "unknown",
        ),
        (vllm("INFO", "multiproc_worker_utils.py:124", "Killing local vLLM worker processes"), NOT_ROOT),
        # the execute_model RPC gave up waiting on a worker (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS): a worker hangs
        ("TimeoutError: RPC call to execute_model timed out.", HANG),
        (f"({ENGINE}) ERROR 12-01 20:06:18 [core.py:708] TimeoutError: RPC call to sample_tokens timed out.", HANG),
    ],
    # vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.8-0.11), vllm/worker/worker.py and
    # cache_engine.py (V0), vllm/v1/worker/gpu_worker.py (free-memory check at start, 0.9-0.11),
    # vllm/v1/worker/gpu_model_runner.py (sampler warm-up)
    "vllm gpu memory": [
        (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine.",
            OOM,
        ),
        (
            f"({ENGINE}) ERROR 12-01 20:06:18 [core.py:700] ValueError: No available memory for the cache blocks. "
            "Try increasing `gpu_memory_utilization` when initializing the engine.",
            OOM,
        ),
        (
            "ValueError: Free memory on device (13.54/79.19 GiB) on startup is less than desired GPU memory "
            "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
            "processes.",
            OOM,
        ),
        (
            f"({ENGINE}) ValueError: Free memory on device cuda:0 (12.18/23.56 GiB) on startup is less than desired "
            "GPU memory utilization (0.92, 21.67 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
            "other processes.",
            OOM,
        ),
        (
            vllm(
                "ERROR",
                "multiproc_executor.py:470",
                "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please "
                "try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
                WORKER,
            ),
            OOM,
        ),
        (
            vllm(
                "ERROR",
                "multiproc_executor.py:527",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity "
                "of 79.19 GiB of which 1.02 GiB is free. Process 31337 has 78.16 GiB memory in use.",
                WORKER,
            ),
            OOM,
        ),
    ],
    # the same files: a max_model_len too long for the KV cache the memory left is a configuration error (the
    # engine refuses to start; no allocation failed): lower max_model_len or give the cache more memory
    "vllm kv cache vs max_model_len": [
        (
            "ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is "
            "needed, which is larger than the available KV cache memory (2.51 GiB). Based on the available memory, "
            "the estimated maximum model length is 20528. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine.",
            USER,
        ),
        (
            f"({ENGINE}) ERROR 12-01 20:06:18 [core.py:700] ValueError: To serve at least one request with the "
            "models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV "
            "cache memory (9.47 GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine.",
            USER,
        ),
        (
            "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
            "stored in KV cache (20624). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine.",
            USER,
        ),
    ],
    # vllm/config.py and engine/arg_utils.py validation (0.4-0.11): configuration errors raised at start
    "vllm config": [
        ("ValueError: Total number of attention heads (32) must be divisible by tensor parallel size (3).", USER),
        (
            "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla "
            "V100-SXM2-32GB GPU has compute capability 7.0. You can use float16 instead by explicitly setting the "
            "`dtype` flag in CLI, for example: --dtype=half.",
            USER,
        ),
    ],
    # vllm/distributed/device_communicators/shm_broadcast.py, custom_all_reduce.py, pynccl_wrapper.py,
    # csrc/custom_all_reduce.cuh CUDACHECK (0.4-0.11)
    "vllm distributed": [
        (
            vllm(
                "INFO",
                "shm_broadcast.py:466",
                "No available shared memory broadcast block found in 60 seconds. This typically happens when some "
                "processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache "
                "quantization).",
                ENGINE,
            ),
            NOT_ROOT,
        ),
        (
            "WARNING 12-01 20:06:18 shm_broadcast.py:386] No available block found in 60 second. ",
            NOT_ROOT,
        ),
        (
            vllm(
                "WARNING",
                "custom_all_reduce.py:137",
                "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence "
                "this warning, specify disable_custom_all_reduce=True explicitly.",
                WORKER,
            ),
            BENIGN,
        ),
        (
            vllm(
                "WARNING",
                "custom_all_reduce.py:146",
                "Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed. To "
                "silence this warning, specify disable_custom_all_reduce=True explicitly.",
                WORKER,
            ),
            BENIGN,
        ),
        (
            vllm(
                "ERROR",
                "multiproc_executor.py:527",
                "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                WORKER,
            ),
            KERNEL,
        ),
        ("RuntimeError: NCCL error: remote process exited or there was a network error", PEER),
        ("RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)", BOOT),
        (
            "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'peer access is not supported between these "
            "two devices'",
            BOOT,
        ),
    ],
}

CASES = cases(GROUPS)


@pytest.mark.parametrize(("group", "text", "want"), CASES, ids=case_ids(CASES))
def test_each_serving_wording_gets_the_class_it_means(group: str, text: str, want: str) -> None:
    check(group, text, want)


def test_serve_fields() -> None:
    """The lines that name a failed process or a length carry it into the finding's fields."""
    from crashcart.catalogue import load_catalogue

    cat = load_catalogue()

    def fields(text: str) -> dict[str, str]:
        got = winner(text)
        assert got is not None, text
        out = cat.extract(cat.index[got[0]], text)
        assert out is not None, text
        return {k: v for k, v in out.items() if v}

    assert (
        fields(
            "ERROR 07-11 06:11:25 multiproc_worker_utils.py:123] Worker VllmWorkerProcess pid 812 died, exit code: -9"
        )["pid"]
        == "812"
    )
    got = fields(
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored "
        "in KV cache (20624). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
        "the engine."
    )
    assert (got["max_seq_len"], got["kv_tokens"]) == ("32768", "20624")
    assert (
        fields(
            "(VllmWorker rank=1 pid=24) ValueError: Free memory on device cuda:0 (12.18/23.56 GiB) on startup is less "
            "than desired GPU memory utilization (0.92, 21.67 GiB)."
        )["free"]
        == "12.18"
    )
    assert fields("TimeoutError: RPC call to execute_model timed out.")["method"] == "execute_model"
