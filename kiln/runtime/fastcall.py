"""Calling compiled packed functions from Python.

Two implementations of ``call(func_ptr, error_ptr, args)`` share one behaviour:

* ``c``: the CPython extension in ``_fastcall.c``, compiled on first use with the kiln
  compiler driver (cached on disk like any library) and imported from the cache;
* ``ctypes``: a pure-Python fallback, used when the extension cannot be built (no Python
  headers, no compiler) or when ``KILN_NO_FASTCALL=1`` is set.

``CALL`` is the implementation in use; it resolves itself on the first call.

Only a local :class:`NDArray` is passed as a tensor: its ``_handle`` is the address of a
DLTensor in this process. Any other object, including one with a ``_handle`` of its own (an
RPC session's remote array, whose handle is a number in the server's table), is rejected
before the call by :func:`reject_argument` (TVMError for such foreign arrays, TypeError for
other types), so compiled code never dereferences a foreign address.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import logging
import os
import sys
import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import numpy as np

from ..errors import CompileError, TVMError
from .compiler import compile_shared
from .ndarray import NDArray

__all__ = ["CALL", "ctypes_call", "load_extension", "use_backend", "backend", "reject_argument"]

_log = logging.getLogger("kiln.runtime")
_EXT_NAME = "_kiln_fastcall"
KILN_INT, KILN_FLOAT, KILN_DLTENSOR = 0, 2, 7

CallFn = Callable[[int, int, tuple], None]


class KilnValue(ctypes.Union):
    """The ``KilnValue`` union of kiln_c_runtime.h."""

    _fields_ = [
        ("v_int64", ctypes.c_int64),
        ("v_float64", ctypes.c_double),
        ("v_handle", ctypes.c_void_p),
    ]


_PACKED_T = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.POINTER(KilnValue), ctypes.POINTER(ctypes.c_int32), ctypes.c_int32
)
_ERROR_T = ctypes.CFUNCTYPE(ctypes.c_char_p)
_PROTOS: dict[int, Any] = {}


def reject_argument(i: int, a: Any) -> NoReturn:
    """Raise the error for argument ``i``, which compiled code cannot take: TVMError for an
    array that is not a local NDArray (a remote array of an RPC session, another library's
    object with a ``_handle``), TypeError for any other type."""
    device = getattr(a, "device", None)
    if getattr(device, "_rpc_session", None) is not None:
        raise TVMError(f"arg{i}: a remote array on {device!r} cannot be passed to a local "
                       "function; copy it here with tvm.nd.array(x.numpy()), or call the "
                       "function of the remote module")
    if hasattr(a, "_handle"):
        raise TVMError(f"arg{i}: a {type(a).__name__} is not a kiln NDArray of this process; "
                       "convert it with tvm.nd.array(...) or tvm.nd.from_dlpack(...)")
    raise TypeError(
        f"argument {i} has unsupported type '{type(a).__name__}'; "
        "expected an NDArray, int or float"
    )


def _convert(i: int, a: Any, vals: Any, codes: Any) -> None:
    if isinstance(a, float):
        vals[i].v_float64, codes[i] = a, KILN_FLOAT
    elif isinstance(a, int):
        if not -(2**63) <= a < 2**63:
            raise OverflowError(f"argument {i}: integer does not fit in int64")
        vals[i].v_int64, codes[i] = a, KILN_INT
    elif isinstance(a, NDArray):
        vals[i].v_handle, codes[i] = a._handle, KILN_DLTENSOR
    elif isinstance(a, (np.bool_, np.integer)):
        _convert(i, int(a), vals, codes)
    elif isinstance(a, np.floating):
        vals[i].v_float64, codes[i] = float(a), KILN_FLOAT
    else:
        reject_argument(i, a)


def ctypes_call(func_ptr: int, error_ptr: int, args: tuple) -> None:
    """Call a packed function through ctypes (the slow, always-available path)."""
    n = len(args)
    vals = (KilnValue * max(n, 1))()
    codes = (ctypes.c_int32 * max(n, 1))()
    for i, a in enumerate(args):
        _convert(i, a, vals, codes)
    fn = _PROTOS.get(func_ptr)
    if fn is None:
        fn = _PROTOS[func_ptr] = _PACKED_T(func_ptr)
    ret = fn(vals, codes, n)  # ctypes releases the GIL around the call
    if ret != 0:
        msg = _ERROR_T(error_ptr)() if error_ptr else None
        text = msg.decode("utf-8", "replace") if msg else ""
        raise TVMError(text or f"compiled function failed with status {ret}")


_ext: ModuleType | None = None
_ext_error: str | None = None
_lock = threading.Lock()


def load_extension() -> ModuleType | None:
    """Build (or find in the cache) and import the C extension; None if that fails."""
    global _ext, _ext_error
    with _lock:
        if _ext is not None or _ext_error is not None:
            return _ext
        try:
            _ext = _build_and_import()
        except (CompileError, ImportError, OSError) as e:
            _ext_error = str(e)
            _log.warning("kiln: fast call extension unavailable, using ctypes (slower): %s", e)
        return _ext


def _build_and_import() -> ModuleType:
    include = sysconfig.get_paths().get("include")
    if not include or not (Path(include) / "Python.h").exists():
        raise ImportError(f"Python headers not found (no Python.h in {include})")
    source = (Path(__file__).with_name("_fastcall.c")).read_text(encoding="utf-8")
    flags = [
        "-fno-openmp",
        f"-I{include}",
        f"-DKILN_PYTAG={sys.implementation.cache_tag}",
        f"-DKILN_PYVER={sys.hexversion}",
    ]
    path = compile_shared(source, flags=flags, name=_EXT_NAME)
    loader = importlib.machinery.ExtensionFileLoader(_EXT_NAME, path)
    spec = importlib.util.spec_from_loader(_EXT_NAME, loader, origin=path)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    mod.init(TVMError, np.bool_, np.integer, np.floating, NDArray, reject_argument)
    return mod


def _resolve(name: str) -> CallFn:
    if name == "ctypes":
        return ctypes_call
    ext = load_extension()
    if ext is None:
        if name == "c":
            raise TVMError(f"the fast call extension is unavailable: {_ext_error}")
        return ctypes_call
    return ext.call


def use_backend(name: str = "auto") -> CallFn:
    """Select the implementation: ``"c"``, ``"ctypes"`` or ``"auto"`` (C if it builds,
    unless ``KILN_NO_FASTCALL=1``). Returns it."""
    global CALL
    if name == "auto":
        name = "ctypes" if os.environ.get("KILN_NO_FASTCALL") == "1" else "auto-c"
    if name not in ("c", "ctypes", "auto-c"):
        raise ValueError(f"unknown fast call backend {name!r}")
    CALL = _resolve(name)
    return CALL


def backend() -> str:
    """Name of the implementation in use (resolving it if needed)."""
    if CALL is _bootstrap:
        use_backend()
    return "ctypes" if CALL is ctypes_call else "c"


def _bootstrap(func_ptr: int, error_ptr: int, args: tuple) -> None:
    return use_backend()(func_ptr, error_ptr, args)


CALL: CallFn = _bootstrap
