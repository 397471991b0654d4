"""DLPack exchange: NDArrays to and from numpy, PyTorch, CuPy ... without copying.

* :func:`to_capsule` (``NDArray.__dlpack__`` / ``to_dlpack``) wraps an NDArray in a
  ``"dltensor"`` PyCapsule holding a ``DLManagedTensor``; the NDArray stays alive until the
  consumer calls the tensor's deleter (or, if nobody consumes the capsule, until the capsule
  is collected).
* :func:`from_dlpack` (``kiln.nd.from_dlpack``) takes any object with ``__dlpack__`` (or a
  bare capsule, as ``torch.utils.dlpack.to_dlpack`` returns) and gives an NDArray viewing the
  producer's memory; the producer's deleter runs when that NDArray is collected.

kiln's compiled code takes dense row-major tensors whose data is 64-byte aligned on the CPU,
so an unaligned dense CPU buffer or a strided CUDA tensor is refused with a TVMError (copy it
first: ``kiln.nd.array(x)``). A strided CPU tensor (a non-contiguous numpy view) becomes a
strided NDArray view, which functions built for strided buffers take (``tir.decl_buffer``
with ``strides``, docs/buffers.md) and the others refuse at the call.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from ..errors import TVMError
from .device import CPU, CUDA, Device
from .ndarray import ALIGNMENT, DLTensor, NDArray

__all__ = ["from_dlpack", "to_capsule"]

_NAME = b"dltensor"
_USED = b"used_dltensor"
_BOOL = 6  # kDLBool


class DLManagedTensor(ctypes.Structure):
    """DLPack ``DLManagedTensor``: the tensor, its producer's context and deleter."""


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _Deleter)]

_api = ctypes.pythonapi
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]

#: exported tensors not yet released by their consumer: address -> (managed tensor, NDArray)
_EXPORTED: dict[int, tuple[DLManagedTensor, NDArray]] = {}


@_Deleter
def _release(managed) -> None:
    _EXPORTED.pop(ctypes.addressof(managed.contents), None)


@_CapsuleDestructor
def _capsule_destructor(capsule: int) -> None:
    # a capsule still named "dltensor" was never consumed: release the tensor ourselves
    obj = ctypes.cast(capsule, ctypes.py_object)
    if _api.PyCapsule_IsValid(obj, _NAME):
        ptr = _api.PyCapsule_GetPointer(obj, _NAME)
        _EXPORTED.pop(ptr, None)


def to_capsule(arr: NDArray) -> Any:
    """A ``"dltensor"`` capsule sharing ``arr``'s memory."""
    managed = DLManagedTensor()
    managed.dl_tensor = arr._dl
    if arr._dtype.kind == "b":
        managed.dl_tensor.dtype.code, managed.dl_tensor.dtype.bits = _BOOL, 8
    managed.manager_ctx = None
    managed.deleter = _release
    address = ctypes.addressof(managed)
    _EXPORTED[address] = (managed, arr)
    return _api.PyCapsule_New(address, _NAME, _capsule_destructor)


def _numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    if lanes != 1:
        raise TVMError(f"from_dlpack: vector element types (lanes={lanes}) are not supported")
    if code == _BOOL or (code == 1 and bits == 1):
        return np.dtype("bool")
    kinds = {0: "int", 1: "uint", 2: "float"}
    if code not in kinds or (code == 2 and bits not in (16, 32, 64)) or bits not in (8, 16, 32,
                                                                                    64):
        raise TVMError(f"from_dlpack: unsupported DLPack dtype (code {code}, {bits} bits)")
    return np.dtype(f"{kinds[code]}{bits}")


def _capsule_of(obj: Any) -> Any:
    if hasattr(obj, "__dlpack__"):
        device = getattr(obj, "__dlpack_device__", lambda: (CPU, 0))()
        if int(device[0]) not in (CPU, CUDA):
            raise TVMError(f"from_dlpack: kiln supports CPU and CUDA tensors, not DLPack "
                           f"device type {int(device[0])}")
        return obj.__dlpack__()
    if type(obj).__name__ == "PyCapsule":
        return obj
    raise TypeError(f"from_dlpack expects an object with __dlpack__ (numpy, PyTorch, CuPy, "
                    f"a kiln NDArray) or a DLPack capsule, got {type(obj).__name__}")


def from_dlpack(obj: Any) -> NDArray:
    """An NDArray sharing the memory of ``obj`` (zero copy)."""
    if isinstance(obj, NDArray):
        return obj
    capsule = _capsule_of(obj)
    if not _api.PyCapsule_IsValid(capsule, _NAME):
        raise TVMError("from_dlpack: the capsule is not a DLPack tensor, or was already "
                       "consumed")
    address = _api.PyCapsule_GetPointer(capsule, _NAME)
    managed = DLManagedTensor.from_address(address)
    t = managed.dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    dtype = _numpy_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    device = Device(t.device.device_type, t.device.device_id)
    if device.device_type not in (CPU, CUDA):
        raise TVMError(f"from_dlpack: unsupported device type {device.device_type}")
    strides = _strides(t, shape, device)
    ptr = (t.data or 0) + t.byte_offset
    if strides is None and device.device_type == CPU and ptr % ALIGNMENT and math.prod(shape):
        raise TVMError(f"from_dlpack: the data at {ptr:#x} is not {ALIGNMENT}-byte aligned as "
                       "kiln's compiled code requires; copy it with kiln.nd.array(x)")
    _api.PyCapsule_SetName(capsule, _USED)
    deleter = managed.deleter

    def release(address=address, deleter=deleter) -> None:
        if deleter:
            deleter(ctypes.cast(address, ctypes.POINTER(DLManagedTensor)))

    return NDArray._view(ptr, shape, dtype, device, release, strides)


def _strides(t: DLTensor, shape: tuple[int, ...], device: Device) -> list[int] | None:
    """The strides of a non-compact tensor (None for a compact one); only CPU tensors with
    non-negative strides may be strided."""
    if not t.strides or math.prod(shape) <= 1:
        return None
    expected, step = [], 1
    for n in reversed(shape):
        expected.append(step)
        step *= n
    actual = [t.strides[i] for i in range(t.ndim)]
    if all(a == e for a, e, n in zip(actual, reversed(expected), shape, strict=True) if n != 1):
        return None
    if device.device_type != CPU or min(actual) < 0:
        raise TVMError(f"from_dlpack: kiln needs a dense row-major tensor on {device!r} (or a "
                       f"CPU view with non-negative strides), got strides {actual} for shape "
                       f"{list(shape)}; make it contiguous first")
    return actual
