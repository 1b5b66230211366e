"""Hang evidence: the files on-call engineers collect when a job hangs, read for who did not arrive and why.

- ``fr``: PyTorch Flight Recorder dumps (JSON, or pickle through ``safe_pickle``'s plain loader), and
  ``collectives`` for the reasoning across ranks, per process group (missing rank, mismatch, straggler);
- ``stacks``: ``py-spy dump``, ``faulthandler`` all-thread dumps (own files, or inside a rank's log), gdb
  ``thread apply all bt``: the minority stack across ranks, with ``frames`` for what a frame and a process are and
  ``build`` for the findings;
- ``horovod``: Horovod's stall inspector in a rank's log (the ranks that never submitted a tensor);
- ``ras``: NCCL RAS (``ncclras``) reports: dead processes, missing ranks, ranks behind in operation counts.

``crashcart.ingest.hang_kinds`` recognises the files by content (ingest's classification hook);
``scan_hang_evidence`` turns the files into Findings whose Evidence ``verify`` re-checks (``reread`` for a Flight
Recorder entry's locator); bad files (truncated, huge, hostile) become ``SkippedFile`` reasons, never exceptions.
"""

from crashcart.scan.hang_evidence.analyse import HangScan, reread, scan_hang_evidence

__all__ = ["HangScan", "reread", "scan_hang_evidence"]
