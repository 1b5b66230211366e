"""A pickle loader for hostile input: plain containers, strings and numbers only.

A bundle is untrusted, and ``pickle.loads`` runs whatever code a pickle names (``os.system`` via
``__reduce__``). Every way a pickle reaches code goes through ``find_class`` (GLOBAL, STACK_GLOBAL, INST,
OBJ and the copyreg extension codes) or ``persistent_load``; both refuse here, so what loads is built
from the opcodes that make dicts, lists, tuples, sets, strings, bytes, numbers, booleans and None.
Out-of-band buffers are never supplied. Failures are ``UnsafePickle`` (refused) or ``BadPickle``
(truncated or corrupt), each with a reason fit for the report. Pure.
"""

from __future__ import annotations

import io
import pickle
from typing import Any, NoReturn

# what a corrupt or cut pickle raises from the C unpickler (it calls no code of the pickle's)
_CORRUPT = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    AttributeError,
    OverflowError,
    MemoryError,
    RecursionError,
    UnicodeDecodeError,
)


class UnsafePickle(Exception):
    """The pickle asks for a class or function (it could run code): refused, nothing of it used."""


class BadPickle(Exception):
    """The bytes are not a complete pickle (truncated or corrupt)."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> NoReturn:
        raise UnsafePickle(
            f"refused: the pickle asks for {module}.{name}; only plain containers, strings and numbers are accepted"
        )

    def persistent_load(self, pid: Any) -> NoReturn:
        raise UnsafePickle("refused: the pickle uses a persistent id; only plain data is accepted")


def load_plain(data: bytes) -> Any:
    """The object a pickle of plain data holds. Raises ``UnsafePickle`` or ``BadPickle``; never runs its code."""
    stream = io.BytesIO(data)
    try:
        obj = _PlainUnpickler(stream).load()
    except UnsafePickle:
        raise
    except _CORRUPT as exc:
        what = "truncated" if isinstance(exc, EOFError) or "ran out" in str(exc).lower() else "corrupt"
        raise BadPickle(f"{what} pickle: {type(exc).__name__}: {str(exc)[:200]}") from exc
    if stream.tell() != len(data):
        raise BadPickle(f"corrupt pickle: {len(data) - stream.tell()} bytes after its STOP opcode")
    return obj
