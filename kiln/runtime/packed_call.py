"""Calls from compiled code into the global function registry (``tvm.tir.call_packed``).

When the runtime loads a library that makes packed calls (it exports
``kiln_packed_callback``, see kiln_c_runtime.h), :func:`install` stores one C callback there.
The callback finds the function registered under the call's name (``tvm.register_func``),
converts the arguments and calls it:

* a DLTensor becomes an :class:`NDArray` viewing the same memory (no copy; valid during the
  call): the function may read it with ``.numpy()`` and write it with ``copyfrom`` or
  ``tvm.nd.array(...).copyto(out)``;
* ints and floats become Python numbers, strings ``str``, handles their address (an int).

Guarantee: nothing the Python function does unwinds through C. Its exception, or a name
that nothing is registered under, becomes the compiled function's error: the caller gets a
TVMError naming the registered function, whose ``__cause__`` is the original exception
(:func:`take_error` hands it to the caller's side).
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from ..errors import TVMError
from .device import CPU, cpu
from .fastcall import KilnValue
from .ndarray import DLTensor, NDArray
from .registry import get_global_func

__all__ = ["install", "take_error"]

#: the library symbol the callback is stored in
CALLBACK_SYMBOL = "kiln_packed_callback"
KILN_INT, KILN_FLOAT, KILN_HANDLE, KILN_DLTENSOR, KILN_STR = 0, 2, 3, 7, 11
_DL_KINDS = {0: "int", 1: "uint", 2: "float"}

_pending = threading.local()


def _numpy_dtype(dl: DLTensor) -> np.dtype:
    code, bits, lanes = dl.dtype.code, dl.dtype.bits, dl.dtype.lanes
    if lanes == 1 and code == 1 and bits == 1:
        return np.dtype("bool")
    if lanes != 1 or code not in _DL_KINDS:
        raise TVMError(f"a DLTensor of dtype code {code}, {bits} bits x {lanes} lanes has no "
                       f"NDArray dtype")
    return np.dtype(f"{_DL_KINDS[code]}{bits}")


def _no_release() -> None:
    """The memory of a viewed DLTensor belongs to the compiled function."""


def _ndarray_view(address: int) -> NDArray:
    """An NDArray viewing the dense CPU DLTensor at ``address``."""
    dl = ctypes.cast(address, ctypes.POINTER(DLTensor)).contents
    if dl.device.device_type != CPU:
        raise TVMError("call_packed passes CPU tensors only")
    shape = tuple(dl.shape[d] for d in range(dl.ndim))
    dense = [int(np.prod(shape[d + 1:])) for d in range(dl.ndim)]
    if dl.strides and any(dl.strides[d] != dense[d] for d in range(dl.ndim) if shape[d] != 1):
        raise TVMError(f"call_packed: a tensor with strides "
                       f"{[dl.strides[d] for d in range(dl.ndim)]} is not dense; an NDArray "
                       f"cannot view it")
    data = (dl.data or 0) + dl.byte_offset
    return NDArray._view(data, shape, _numpy_dtype(dl), cpu(dl.device.device_id), _no_release)


def _python_value(value: KilnValue, code: int) -> Any:
    if code == KILN_DLTENSOR:
        return _ndarray_view(value.v_handle)
    if code == KILN_INT:
        return int(value.v_int64)
    if code == KILN_FLOAT:
        return float(value.v_float64)
    if code == KILN_STR:
        return ctypes.cast(value.v_handle, ctypes.c_char_p).value.decode("utf-8", "replace")
    if code == KILN_HANDLE:
        return value.v_handle or 0
    raise TVMError(f"call_packed: argument of unknown type code {code}")


def _write_error(error: int, size: int, text: str) -> None:
    raw = text.encode("utf-8", "replace")[: max(size - 1, 0)] + b"\0"
    ctypes.memmove(error, raw, len(raw))


def _call_registered(name: bytes, args, codes, num_args: int, error: int, size: int) -> int:
    """The callback: call the registered function; 0, or -1 with ``error`` written."""
    fname = name.decode("utf-8", "replace")
    try:
        fn = get_global_func(fname, allow_missing=True)
        if fn is None:
            raise TVMError(f"no function is registered as '{fname}' (tvm.register_func)")
        fn(*(_python_value(args[k], codes[k]) for k in range(num_args)))
    except BaseException as e:  # noqa: BLE001 - an exception must not unwind through C
        _pending.error = e
        _write_error(error, size, f"call_packed('{fname}') failed: {type(e).__name__}: {e}")
        return -1
    return 0


_CALLBACK_T = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_char_p, ctypes.POINTER(KilnValue),
                               ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.c_void_p,
                               ctypes.c_int32)
_CALLBACK = _CALLBACK_T(_call_registered)
_CALLBACK_ADDRESS = ctypes.cast(_CALLBACK, ctypes.c_void_p).value


def install(lib: ctypes.CDLL) -> None:
    """Store the registry callback in ``lib`` if it makes packed calls."""
    try:
        slot = ctypes.c_void_p.in_dll(lib, CALLBACK_SYMBOL)
    except ValueError:  # the library makes no packed calls
        return
    slot.value = _CALLBACK_ADDRESS


def take_error() -> BaseException | None:
    """The exception of the last registered function that failed on this thread, once."""
    error = getattr(_pending, "error", None)
    _pending.error = None
    return error
