"""DataLoader stalls and failures from torch/utils/data/dataloader.py, and Horovod's shutdown error (issue 14, H2).

Lines as the emitters raise them: dataloader.py ``_MultiProcessingDataLoaderIter._get_data`` (torch 1.0-2.x)
``RuntimeError('Pin memory thread exited unexpectedly')``, ``_try_get_data`` on EMFILE ``RuntimeError("Too many open
files. Communication with the workers is no longer possible. ...")`` and on its timeout ``RuntimeError(f'DataLoader
timed out after {self._timeout} seconds')``; horovod/common/common.h ``SHUT_DOWN_ERROR`` (v0.13-v0.28).
"""

from __future__ import annotations

from pathlib import Path

from crashcart.settings import Settings
from tests.kit import run_files, winner

FD = (
    "RuntimeError: Too many open files. Communication with the workers is no longer possible. Please increase the "
    "limit using `ulimit -n` in the shell or change the sharing strategy by calling "
    "`torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning of your code"
)
SHUT = (
    "horovod.common.exceptions.HorovodInternalError: Horovod has been shut down. This was caused by an exception on "
    "one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished "
    "execution. If the shutdown was caused by an exception, you should see the exception in the log before the first "
    "shutdown message."
)


def test_each_line_is_known_for_what_it_means() -> None:
    assert winner("[rank3]: RuntimeError: Pin memory thread exited unexpectedly") == (
        "dataloader.pin_memory_exited",
        "dataloader_worker_failure",
    )
    assert winner(FD) == ("dataloader.too_many_open_files", "dataloader_worker_failure")
    assert winner(SHUT) == ("horovod.shut_down", "nccl_remote_peer_failure")


def _watchdog(r: int) -> str:
    return (
        f"[rank{r}]:[E1130 02:30:00.123456789 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=601, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600094 milliseconds before timing out.\n"
    )


def test_the_rank_whose_data_pipeline_failed_is_the_culprit_of_the_others_timeouts(
    tmp_path: Path, settings: Settings
) -> None:
    files = {f"rank{r}.log": f"[rank{r}]: step 300 | loss 1.91\n" + _watchdog(r) for r in (0, 2, 3)}
    files["rank1.log"] = "[rank1]: step 300 | loss 1.91\n[rank1]: RuntimeError: Pin memory thread exited unexpectedly\n"
    rc = run_files(tmp_path / "b", files, settings).document.root_cause
    assert rc.class_ == "dataloader_worker_failure" and rc.culprit.rank == 1


def test_horovod_s_shutdown_is_explained_by_the_exception_before_it(tmp_path: Path, settings: Settings) -> None:
    files = {
        "worker-1.log": "[1,1]<stderr>:KeyError: 'label'\n",
        "worker-0.log": f"[1,0]<stderr>:{SHUT}\n",
    }
    out = run_files(tmp_path / "b", files, settings)
    assert [f.role for f in out.findings if f.signature == "horovod.shut_down"] == ["cascade"]
    assert out.document.root_cause.class_ == "python_exception_rank_crash"


def test_a_worker_s_own_crash_message_is_a_dataloader_failure() -> None:
    # torch/csrc/DataLoader.cpp SIGNAL_HANDLER(SIGSEGV / SIGFPE) text, written by the worker before it dies
    for text, what in (
        ("ERROR: Unexpected segmentation fault encountered in worker.", "dataloader.worker_signal"),
        ("ERROR: Unexpected floating-point exception encountered in worker.", "dataloader.worker_signal"),
    ):
        assert winner(text) == (what, "dataloader_worker_failure")
