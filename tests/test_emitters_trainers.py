"""Issue 14, capability 1, continued from test_emitters_serve.py (vLLM): SGLang's scheduler, detokenizer, launch and
memory-pool wordings, TensorRT-LLM's "[TensorRT-LLM][ERROR]" exceptions (the CUDA, NCCL and TensorRT errors they
wrap), PyTorch Lightning (loop stops, SIGTERM and SLURM requeue handling, early stopping, its own checks), accelerate
launch and the transformers Trainer, NVIDIA resiliency-ext's rank monitor and JAX's runtime errors. Each line is
written from the emitter's format string with its usual prefix; expectations as in test_emitters_torch.py."""

from __future__ import annotations

import pytest

from tests.kit import assert_benign, winner
from tests.test_emitters_serve import BOOT, NAN, OOM, sgl
from tests.test_emitters_torch import BENIGN, HANG, KERNEL, NOT_ROOT, PEER, POLICY, USER, case_ids, cases, check

TLLM = "[TensorRT-LLM][ERROR]"


def lightning(message: str, style: str = "bare") -> str:
    """A Lightning rank-zero line: bare (2.x default handler) or as Python's basicConfig prints it."""
    if style == "basic":
        return f"INFO:lightning.pytorch.utilities.rank_zero:{message}"
    return message


def rankmon(message: str) -> str:
    """nvidia_resiliency_ext/fault_tolerance/rank_monitor_server.py: '[%(asctime)s] [%(levelname)s] [<name><pid>@<host>:<rank>]'."""
    return f"[2026-12-01 20:06:17,281] [WARNING] [RankMonServer4015698@gpu-node-017:3] {message}"


GROUPS: dict[str, list[tuple[str, str]]] = {
    # python/sglang/srt/managers/scheduler.py, detokenizer_manager.py, tp_worker_overlap_thread.py (0.3-0.5):
    # get_exception_traceback() puts the whole traceback after the colon, so the line opens the real traceback
    "sglang processes": [
        (sgl("Scheduler hit an exception: Traceback (most recent call last):"), USER),
        (sgl("DetokenizerManager hit an exception: Traceback (most recent call last):", tp=None), USER),
        # entrypoints/engine.py (0.4-0.5), srt/server.py (0.3): the launcher's reports that a child failed
        (sgl("Received sigquit from a child process. It usually means the child failed.", tp=None), NOT_ROOT),
        ("[07-01 15:20:44] Rank 0 scheduler is dead. Please check if there are relevant logs.", NOT_ROOT),
        (sgl("Rank 3 scheduler is dead. Please check if there are relevant logs.", tp=None), NOT_ROOT),
        ("RuntimeError: Initialization failed. Please see the error messages above.", NOT_ROOT),
        # managers/scheduler.py watchdog_thread (0.3-0.4) and the watchdog helper (0.5): no forward progress
        (sgl("Watchdog timeout (self.watchdog_timeout=300)", tp="TP3"), HANG),
        (sgl("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", tp="TP14 EP14"), HANG),
        # distributed/device_communicators/shm_broadcast.py, the copy of vLLM's queue
        (sgl("No available block found in 60 second. ", tp="TP1"), NOT_ROOT),
    ],
    # python/sglang/srt/model_executor/model_runner.py profile_max_num_token / init_memory_pool (0.2-0.5),
    # mem_cache/pool_configurator.py (0.5, with the current value), cuda_graph_runner.py
    "sglang memory": [
        ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", OOM),
        (
            sgl(
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
                "mem_fraction_static=0.25"
            ),
            OOM,
        ),
        (
            sgl(
                "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                "total capacity of 79.10 GiB of which 1.50 GiB is free."
            ),
            OOM,
        ),
    ],
    # cpp/include/tensorrt_llm/common/cudaUtils.h check() ("[TensorRT-LLM][ERROR] CUDA runtime error in %s: %s"),
    # common/assert.h and tllmException.cpp ("%s (%s:%zu)"), runtime/utils/multiDeviceUtils.h TLLM_NCCL_CHECK
    # ("Failed, NCCL error %s:%d '%s'"), batch_manager / executor.cpp ("Encountered an error in forwardAsync
    # function: "), TensorRT's own allocator ("Error Code 1: Cuda Runtime (out of memory)")
    "tensorrt-llm": [
        (
            f"{TLLM} tensorrt_llm::common::TllmException: {TLLM} CUDA runtime error in ::cudaMallocAsync(ptr, n, "
            "mMemPool->getPool(), mCudaStream->get()): out of memory (/src/cpp/tensorrt_llm/runtime/tllmBuffers.h:125)",
            OOM,
        ),
        (
            f"RuntimeError: {TLLM} CUDA runtime error in cudaMemcpyAsync(dst, src.data(), src.getSizeInBytes(), "
            "cudaMemcpyDefault, stream.get()): an illegal memory access was encountered "
            "(/src/cpp/tensorrt_llm/runtime/bufferManager.cpp:143)",
            KERNEL,
        ),
        (
            f"{TLLM} Encountered an error in forwardAsync function: {TLLM} CUDA runtime error in "
            "cudaStreamSynchronize(mStream): an illegal memory access was encountered "
            "(/src/cpp/tensorrt_llm/runtime/cudaStream.h:84)",
            KERNEL,
        ),
        (
            f"{TLLM} Encountered an error in forwardAsync function: {TLLM} Assertion failed: Failed, NCCL error "
            "/src/cpp/tensorrt_llm/plugins/ncclPlugin/allreducePlugin.cpp:395 'unhandled system error (run with "
            "NCCL_DEBUG=INFO for details)' (/src/cpp/tensorrt_llm/plugins/ncclPlugin/allreducePlugin.cpp:395)",
            BOOT,
        ),
        (
            f"{TLLM} Assertion failed: Failed, NCCL error /src/cpp/tensorrt_llm/plugins/ncclPlugin/allreducePlugin.cpp"
            ":395 'remote process exited or there was a network error' (/src/cpp/tensorrt_llm/plugins/ncclPlugin/"
            "allreducePlugin.cpp:395)",
            PEER,
        ),
        (f"{TLLM} 1: [defaultAllocator.cpp::allocate::31] Error Code 1: Cuda Runtime (out of memory)", OOM),
        ("[TRT] [E] 1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime (out of memory)", OOM),
        (
            "[TRT] [E] 2: [executionContext.cpp::ExecutionContext::410] Error Code 2: OutOfMemory (no further "
            "information)",
            OOM,
        ),
    ],
    # src/lightning/pytorch/loops/fit_loop.py (1.6-2.5), callbacks/early_stopping.py and timer.py: ends of a run
    "lightning stops": [
        (lightning("`Trainer.fit` stopped: `max_epochs=10` reached."), BENIGN),
        (lightning("`Trainer.fit` stopped: `max_steps=100000` reached.", style="basic"), BENIGN),
        (lightning("`Trainer.fit` stopped: No training batches."), BENIGN),
        (
            "Monitored metric val_loss did not improve in the last 3 records. Best score: 0.512. Signaling Trainer to "
            "stop.",
            BENIGN,
        ),
        (
            "Monitored metric val_loss = nan is not finite. Previous best value was 0.512. Signaling Trainer to stop.",
            NAN,
        ),
        ("ValueError: The loss returned in `training_step` is nan.", NAN),
        ("Time limit reached. Elapsed time is 1 day, 0:00:01. Signaling Trainer to stop.", POLICY),
        (lightning("All distributed processes registered. Starting with 8 processes"), BENIGN),
    ],
    # src/lightning/pytorch/trainer/connectors/signal_connector.py (1.6-2.5): a signal from outside the job (the
    # scheduler's warning before its time limit, a preemption, a cancel); SLURM auto-requeue
    "lightning signals": [
        ("[rank: 0] Received SIGTERM: 15", POLICY),
        ("[rank: 3] Received SIGTERM: 15", POLICY),
        ("Bypassing SIGTERM: 15", POLICY),
        (lightning("Handling auto-requeue signal: 10"), POLICY),
        ("requeing job 4242...", POLICY),
        ("Requeued SLURM job: 4242", POLICY),
        ("Requeuing SLURM job 4242 failed with error code 1", POLICY),
        ("SLURM auto-requeueing enabled. Setting signal handlers.", BENIGN),
        # trainer/call.py _call_and_handle_interrupt
        (lightning("Detected KeyboardInterrupt, attempting graceful shutdown ..."), POLICY),
    ],
    # src/lightning/pytorch/callbacks/early_stopping.py, fabric/utilities/exceptions.py: the user's configuration
    "lightning checks": [
        (
            "RuntimeError: Early stopping conditioned on metric `val_los` which is not available. Pass in or modify "
            "your `EarlyStopping` callback to use any of the following: `train_loss`, `val_loss`",
            USER,
        ),
        (
            "lightning.fabric.utilities.exceptions.MisconfigurationException: `mode` can be min, max, got minimum",
            USER,
        ),
    ],
    # src/accelerate/commands/launch.py (0.20-1.x) and the transformers Trainer (trainer.py 4.30-4.5x, with the
    # examples' '[%(levelname)s|%(filename)s:%(lineno)s] %(asctime)s >> ' format)
    "accelerate and transformers": [
        (
            "The following values were not passed to `accelerate launch` and had defaults used instead:",
            BENIGN,
        ),
        (
            "Using RTX 4000 series which doesn't support faster communication speedups. Ensuring P2P and IB "
            "communications are disabled.",
            BENIGN,
        ),
        (
            "subprocess.CalledProcessError: Command '['/usr/bin/python3', 'train.py', '--bf16']' returned non-zero "
            "exit status 1.",
            NOT_ROOT,
        ),
        ("ValueError: You need to use at least 2 processes to use `--multi_gpu`.", USER),
        ("ValueError: Can't find a valid checkpoint at /ckpt/run7/checkpoint-5000", USER),
        (
            "[WARNING|trainer.py:2433] 2024-11-30 02:00:00,123 >> There seems not to be a single sample in your "
            "epoch_iterator, stopping training at step 1200! This is expected if you're using an IterableDataset and "
            "set num_steps (5000) higher than the number of available samples.",
            BENIGN,
        ),
    ],
    # nvidia_resiliency_ext/fault_tolerance/rank_monitor_server.py (0.1-0.5; "[Cycle N] " since 2025): the rank
    # monitor's hang detection before it terminates the rank
    "nvrx rank monitor": [
        (rankmon("[Cycle 0] Did not get subsequent heartbeat. Waited 1800.00 seconds."), HANG),
        (rankmon("Did not get initial heartbeat. Waited 3600.00 seconds."), HANG),
        (rankmon("[Cycle 2] Section 'step' has been open for 1201.37 seconds. Timeout is 900.00 seconds."), HANG),
        (rankmon("[Cycle 1] Was out of section for 610.00 seconds. Timeout is 600.00 seconds."), HANG),
    ],
    # jax/errors.py (JaxRuntimeError since 0.4.36; jaxlib.xla_extension.XlaRuntimeError before) around XLA statuses
    "jax": [
        (
            "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8589934592 bytes.",
            OOM,
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Could not synchronize CUDA stream: "
            "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered",
            KERNEL,
        ),
    ],
}

CASES = cases(GROUPS)


@pytest.mark.parametrize(("group", "text", "want"), CASES, ids=case_ids(CASES))
def test_each_trainer_wording_gets_the_class_it_means(group: str, text: str, want: str) -> None:
    check(group, text, want)


def test_trainer_fields() -> None:
    """The signal, the job and the waited time come out of the lines that carry them."""
    from crashcart.catalogue import load_catalogue

    cat = load_catalogue()

    def fields(text: str) -> dict[str, str]:
        got = winner(text)
        assert got is not None, text
        out = cat.extract(cat.index[got[0]], text)
        assert out is not None, text
        return {k: v for k, v in out.items() if v}

    assert fields("[rank: 3] Received SIGTERM: 15")["signal"] == "15"
    assert fields("Requeued SLURM job: 4242")["job_id"] == "4242"
    assert (
        fields(rankmon("[Cycle 0] Did not get subsequent heartbeat. Waited 1800.00 seconds."))["seconds"] == "1800.00"
    )


@pytest.mark.parametrize(
    "text",
    [
        "`Trainer.fit` stopped: `max_epochs=10` reached.",
        "INFO:lightning.pytorch.utilities.rank_zero:`Trainer.fit` stopped: `max_steps=100000` reached.",
        "Monitored metric val_loss did not improve in the last 3 records. Best score: 0.512. Signaling Trainer to stop.",
    ],
)
def test_lightning_configured_stops_are_known_benign(text: str) -> None:
    """Lightning's planned ends of fit are information the catalogue itself calls benign, never a failure."""
    assert_benign(text)
