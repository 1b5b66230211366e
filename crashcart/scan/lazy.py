"""Scan stage: modules the scan can start without and take up once they are loaded (numpy, about 0.1 s to import,
most of it holding the GIL). Pure apart from importing."""

from __future__ import annotations

import threading
from types import ModuleType

_NUMPY: list[ModuleType | None] = []  # numpy (or None: not installed), once imported
_NUMPY_LOCK = threading.Lock()


def numpy_module(*, wait: bool = True) -> ModuleType | None:
    """numpy, imported on first use; None where it is not installed (it comes with matplotlib; the scanner
    works without it, slower). ``wait=False``: None at once while another thread is importing it (about 0.1 s,
    most of it holding the GIL), so that a scan starts without it and takes it up from a later buffer on."""
    if _NUMPY:
        return _NUMPY[0]
    if not _NUMPY_LOCK.acquire(blocking=wait):
        return None
    try:
        if not _NUMPY:
            try:
                import numpy
            except ImportError:
                _NUMPY.append(None)
            else:
                _NUMPY.append(numpy)
        return _NUMPY[0]
    finally:
        _NUMPY_LOCK.release()
