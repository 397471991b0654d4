"""NDArray: a dense, C-contiguous tensor on a device, with a DLTensor for compiled code.

On the CPU the storage is a numpy array whose data is 64-byte aligned. The one exception is a
strided CPU view of another library's memory (``from_dlpack`` of a non-contiguous numpy
view): its DLTensor has ``strides`` and, as in TVM, ``data`` rounded down to 64 bytes with the
rest in ``byte_offset``; only functions built for strided buffers (``tir.decl_buffer`` with
``strides``) take it. Other devices get
their memory from a *device allocator* registered with :func:`register_device_allocator`
(the CUDA backend does this); without one, allocating on that device raises TVMError.
"""

from __future__ import annotations

import ctypes
import math
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import TVMError
from .device import CPU, Device, cpu

__all__ = [
    "NDArray",
    "array",
    "empty",
    "DLTensor",
    "DLDevice",
    "DLDataType",
    "DeviceAllocator",
    "register_device_allocator",
    "device_allocator",
    "dtype_to_dl",
    "ALIGNMENT",
]

ALIGNMENT = 64


class DLDevice(ctypes.Structure):
    """DLPack ``DLDevice``."""

    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """DLPack ``DLDataType``."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """DLPack ``DLTensor``, laid out as in kiln_c_runtime.h."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DL_CODE = {"i": 0, "u": 1, "f": 2}


def dtype_to_dl(dtype: Any) -> tuple[int, int, int]:
    """DLPack (code, bits, lanes) of a numpy-compatible dtype; bool is (1, 1, 1)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return (1, 1, 1)
    if dt.kind not in _DL_CODE or (dt.kind == "f" and dt.itemsize not in (2, 4, 8)):
        raise TypeError(f"unsupported NDArray dtype {dt.name!r}")
    return (_DL_CODE[dt.kind], dt.itemsize * 8, 1)


class DeviceAllocator(Protocol):
    """What a backend registers to make NDArrays on its devices (memory is raw pointers)."""

    def alloc(self, nbytes: int, device: Device) -> int: ...

    def free(self, ptr: int, device: Device) -> None: ...

    def copy_from_host(self, dst: int, src: np.ndarray, device: Device) -> None: ...

    def copy_to_host(self, dst: np.ndarray, src: int, device: Device) -> None: ...


_ALLOCATORS: dict[int, DeviceAllocator] = {}


def register_device_allocator(device_type: int, allocator: DeviceAllocator | None) -> None:
    """Install (or with None remove) the allocator used for NDArrays of ``device_type``.
    It may also define ``sync(device)``, called by :meth:`Device.sync`."""
    if allocator is None:
        _ALLOCATORS.pop(device_type, None)
    else:
        _ALLOCATORS[device_type] = allocator


def device_allocator(device_type: int) -> DeviceAllocator | None:
    """The allocator registered for ``device_type``, or None."""
    alloc = _ALLOCATORS.get(device_type)
    if alloc is None and device_type == 2:
        alloc = _load_cuda_backend()
    return alloc


def _load_cuda_backend() -> DeviceAllocator | None:
    """Hook for the CUDA backend: importing kiln.runtime.cuda_driver registers its allocator
    when NVIDIA's cuda-bindings are installed (kiln[cuda])."""
    try:
        from . import cuda_driver  # noqa: F401
    except ImportError:
        return None
    return _ALLOCATORS.get(2)


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous numpy array whose data is ALIGNMENT-byte aligned."""
    nbytes = math.prod(shape) * dtype.itemsize
    buf = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = (-buf.ctypes.data) % ALIGNMENT
    return buf[offset : offset + nbytes].view(dtype).reshape(shape)


def check_copy_match(source: Any, target: Any) -> None:
    """ValueError unless the arrays ``source`` and ``target`` (NDArray-like: ``shape`` and
    ``dtype``, local or remote) have the same shape and dtype: copyfrom between two arrays
    neither casts nor reshapes."""
    if source.shape != target.shape or source.dtype != target.dtype:
        raise ValueError(f"cannot copy {source.dtype}{list(source.shape)} into "
                         f"{target.dtype}{list(target.shape)}: shape and dtype must match")


def as_copy_source(source: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``source`` (anything numpy takes) as a numpy array cast to ``dtype``, for copyfrom
    into an array of ``shape``; ValueError when its shape is another."""
    src = np.asarray(source, dtype=dtype)
    if src.shape != shape:
        raise ValueError(f"array shape {src.shape} does not match the NDArray shape {shape}")
    return src


def _compact_strides(shape: tuple[int, ...]) -> list[int]:
    """Row-major strides, in elements, of ``shape``."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out[::-1]


def _as_shape(shape: int | Sequence[Any]) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    out = tuple(int(s) for s in shape)
    if any(s < 0 for s in out):
        raise ValueError(f"negative dimension in shape {out}")
    return out


class NDArray:
    """A tensor on a device. Create with :func:`array` or :func:`empty`.

    ``_handle`` is the address of the array's DLTensor, passed to compiled functions.
    """

    __slots__ = ("_data", "_ptr", "_shape", "_dtype", "_device", "_dl", "_shape_arr",
                 "_strides_arr", "_handle", "__weakref__")

    def __init__(self, shape: int | Sequence[Any], dtype: Any, device: Device) -> None:
        self._shape = _as_shape(shape)
        self._dtype = np.dtype(dtype)
        dtype_to_dl(self._dtype)  # rejects dtypes compiled code cannot take
        self._device = device
        if device.device_type == CPU:
            self._data: np.ndarray | None = _aligned_empty(self._shape, self._dtype)
            self._ptr = int(self._data.ctypes.data)
        else:
            alloc = device_allocator(device.device_type)
            if alloc is None:
                what = "CUDA" if device.device_type == 2 else f"device type {device.device_type}"
                hint = ("import vta (kiln.vta) first: its simulator is ext_dev's memory"
                        if device.device_type == 12 else
                        "is the backend installed and a device present?")
                raise TVMError(
                    f"cannot allocate an NDArray on {device}: {what} support is not available "
                    f"(no device allocator is registered; {hint})"
                )
            nbytes = math.prod(self._shape) * self._dtype.itemsize
            self._data = None
            self._ptr = int(alloc.alloc(max(nbytes, 1), device))
            weakref.finalize(self, alloc.free, self._ptr, device)
        self._init_dl()

    @classmethod
    def _view(cls, ptr: int, shape: Sequence[int], dtype: Any, device: Device,
              release: Any, strides: Sequence[int] | None = None) -> NDArray:
        """An NDArray over memory someone else owns (a DLPack producer): ``release()`` runs
        when the NDArray is collected. ``strides`` (in elements, non-negative; CPU only)
        make it a strided view."""
        self = cls.__new__(cls)
        self._shape = _as_shape(shape)
        self._dtype = np.dtype(dtype)
        self._device = device
        self._ptr = int(ptr)
        self._data = None
        if device.device_type == CPU:
            steps = strides if strides is not None else _compact_strides(self._shape)
            span = 1 + sum((n - 1) * st for n, st in zip(self._shape, steps, strict=True))
            nbytes = span * self._dtype.itemsize if math.prod(self._shape) else 0
            raw = (ctypes.c_uint8 * nbytes).from_address(self._ptr) if nbytes else bytearray()
            flat = np.frombuffer(raw, dtype=self._dtype)
            self._data = np.lib.stride_tricks.as_strided(
                flat, self._shape, [st * self._dtype.itemsize for st in steps])
        weakref.finalize(self, release)
        self._init_dl(strides)
        return self

    def _init_dl(self, strides: Sequence[int] | None = None) -> None:
        code, bits, lanes = dtype_to_dl(self._dtype)
        self._shape_arr = (ctypes.c_int64 * max(len(self._shape), 1))(*self._shape)
        dl = DLTensor()
        dl.data = self._ptr
        dl.device = DLDevice(self._device.device_type, self._device.device_id)
        dl.ndim = len(self._shape)
        dl.dtype = DLDataType(code, bits, lanes)
        dl.shape = ctypes.cast(self._shape_arr, ctypes.POINTER(ctypes.c_int64))
        dl.strides = None
        dl.byte_offset = 0
        self._strides_arr = None
        if strides is not None:
            self._strides_arr = (ctypes.c_int64 * max(len(strides), 1))(*strides)
            dl.strides = ctypes.cast(self._strides_arr, ctypes.POINTER(ctypes.c_int64))
            dl.data = self._ptr - self._ptr % ALIGNMENT
            dl.byte_offset = self._ptr % ALIGNMENT
        self._dl = dl
        self._handle = ctypes.addressof(dl)

    # ---- DLPack -----------------------------------------------------------------------
    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """A DLPack capsule sharing this array's memory (``np.from_dlpack``,
        ``torch.from_dlpack``, CuPy ...); kiln's CUDA work runs on the default stream."""
        from .dlpack import to_capsule

        return to_capsule(self)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self._device.device_type, self._device.device_id)

    def to_dlpack(self) -> Any:
        """TVM's name for :meth:`__dlpack__`: a ``dltensor`` PyCapsule."""
        return self.__dlpack__()

    # ---- properties -------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The shape, a tuple of ints."""
        return self._shape

    @property
    def dtype(self) -> str:
        """The element type's name, e.g. ``'float32'`` or ``'bool'``."""
        return self._dtype.name

    @property
    def device(self) -> Device:
        """The device holding the data."""
        return self._device

    ctx = device

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._shape)

    @property
    def handle(self) -> ctypes.c_void_p:
        """The DLTensor address as a ctypes pointer."""
        return ctypes.c_void_p(self._handle)

    # ---- data movement ----------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A numpy copy of the contents."""
        if self._data is not None:
            return self._data.copy()
        out = np.empty(self._shape, dtype=self._dtype)
        _ALLOCATORS[self._device.device_type].copy_to_host(out, self._ptr, self._device)
        return out

    asnumpy = numpy

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def copyfrom(self, source: Any) -> NDArray:
        """Fill this array from a numpy array (cast to this dtype) or an NDArray of the same
        shape and dtype. Returns self."""
        if isinstance(source, NDArray):
            check_copy_match(source, self)
            src = source._data if source._data is not None else source.numpy()
        else:
            src = as_copy_source(source, self._shape, self._dtype)
        if self._data is not None:
            np.copyto(self._data, src)
        else:
            host = np.ascontiguousarray(src)
            _ALLOCATORS[self._device.device_type].copy_from_host(self._ptr, host, self._device)
        return self

    def copyto(self, target: NDArray | Device) -> NDArray:
        """Copy into ``target`` (an NDArray, returned) or a new array on a Device."""
        if isinstance(target, Device):
            if _rpc_session(target) is not None:
                return _rpc_session(target).array(self.numpy(), target)
            target = NDArray(self._shape, self._dtype, target)
        elif not isinstance(target, NDArray):
            raise TypeError(f"copyto expects an NDArray or a Device, got {type(target).__name__}")
        return target.copyfrom(self)

    def __setitem__(self, key: Any, value: Any) -> None:
        if not (isinstance(key, slice) and key == slice(None)):
            raise ValueError("NDArray only supports assignment to the whole array: a[:] = value")
        if isinstance(value, NDArray):
            self.copyfrom(value)
        else:
            self.copyfrom(np.broadcast_to(np.asarray(value, dtype=self._dtype), self._shape))

    def __repr__(self) -> str:
        return f"<tvm.nd.NDArray shape={self._shape}, {self._device}>\n{self.numpy()!r}"

    def __str__(self) -> str:
        return str(self.numpy())


def _rpc_session(dev: Device):
    """The RPC session of a remote device (``remote.cpu()``, see kiln.rpc), else None:
    arrays on such a device are made by the session, in the server's memory."""
    return getattr(dev, "_rpc_session", None)


def _resolve_device(device: Device | None, ctx: Device | None) -> Device:
    dev = device if device is not None else ctx
    if dev is None:
        return cpu(0)
    if not isinstance(dev, Device):
        raise TypeError(f"expected a Device, got {type(dev).__name__}")
    return dev


def array(arr: Any, device: Device | None = None, *, ctx: Device | None = None) -> NDArray:
    """Copy ``arr`` (a numpy array, an NDArray, or anything ``np.asarray`` accepts) into a
    new NDArray on ``device`` (default ``cpu(0)``), keeping its dtype."""
    if isinstance(arr, NDArray):
        src = arr.numpy()
    else:
        src = np.asarray(arr)
    if not src.dtype.isnative:
        src = src.astype(src.dtype.newbyteorder("="))
    dev = _resolve_device(device, ctx)
    if _rpc_session(dev) is not None:
        return _rpc_session(dev).array(src, dev)
    out = NDArray(src.shape, src.dtype, dev)
    return out.copyfrom(src)


def empty(
    shape: int | Sequence[Any],
    dtype: Any = "float32",
    device: Device | None = None,
    *,
    ctx: Device | None = None,
) -> NDArray:
    """A new uninitialised NDArray."""
    dev = _resolve_device(device, ctx)
    if _rpc_session(dev) is not None:
        return _rpc_session(dev).empty(shape, dtype, dev)
    return NDArray(shape, dtype, dev)
