"""Devices: where an NDArray lives and where a compiled function runs (TVM's ``tvm.device``)."""

from __future__ import annotations

from typing import Any

__all__ = ["Device", "cpu", "cuda", "gpu", "ext_dev", "device", "context", "CPU", "CUDA",
           "EXT_DEV"]

CPU = 1
CUDA = 2
#: an accelerator behind a registered allocator (DLPack's kDLExtDev; VTA's simulator)
EXT_DEV = 12

_TYPE_NAMES = {CPU: "cpu", CUDA: "cuda", EXT_DEV: "ext_dev"}
_NAME_TO_TYPE = {
    "cpu": CPU,
    "llvm": CPU,
    "c": CPU,
    "cuda": CUDA,
    "gpu": CUDA,
    "nvptx": CUDA,
    "ext_dev": EXT_DEV,
}

# device_type -> number of devices found, filled lazily (see _device_count).
_DEVICE_COUNT: dict[int, int] = {}


def _cuda_device_count() -> int:
    """Number of CUDA devices the driver reports; 0 when no usable driver. Never raises."""
    try:
        try:
            from cuda.bindings import driver  # type: ignore[import-not-found]
        except ImportError:
            from cuda import cuda as driver  # type: ignore[import-not-found,no-redef]
        ok = driver.CUresult.CUDA_SUCCESS
        (err,) = driver.cuInit(0)
        if err != ok:
            return 0
        err, count = driver.cuDeviceGetCount()
        return int(count) if err == ok else 0
    except Exception:  # any import or driver failure means "no CUDA"
        return 0


def _device_count(device_type: int) -> int:
    if device_type not in _DEVICE_COUNT:
        if device_type == CPU:
            _DEVICE_COUNT[device_type] = 1
        elif device_type == CUDA:
            _DEVICE_COUNT[device_type] = _cuda_device_count()
        else:
            _DEVICE_COUNT[device_type] = 0
    return _DEVICE_COUNT[device_type]


class Device:
    """A (device_type, device_id) pair: ``cpu(0)`` is ``Device(1, 0)``, ``cuda(0)`` is
    ``Device(2, 0)``. Immutable, hashable, compared by value."""

    __slots__ = ("device_type", "device_id")

    device_type: int
    device_id: int

    def __init__(self, device_type: int, device_id: int = 0) -> None:
        object.__setattr__(self, "device_type", int(device_type))
        object.__setattr__(self, "device_id", int(device_id))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Device is immutable")

    @property
    def exist(self) -> bool:
        """True when the device is usable: always for cpu(0); for CUDA only when a driver
        with at least ``device_id + 1`` GPUs can be used; for ``ext_dev`` when its
        allocator is registered (``import vta``). Never raises."""
        if self.device_type == CPU:
            return True
        if self.device_type == EXT_DEV:
            from .ndarray import device_allocator

            return device_allocator(EXT_DEV) is not None
        return self.device_id < _device_count(self.device_type)

    def sync(self) -> None:
        """Wait for all work queued on this device (a no-op on CPU)."""
        if self.device_type == CPU:
            return
        from .ndarray import device_allocator

        alloc = device_allocator(self.device_type)
        if alloc is not None and hasattr(alloc, "sync"):
            alloc.sync(self)

    def _cuda_attr(self, name: str):
        """A limit of a CUDA device (TVM's Device attributes); None on the CPU."""
        if self.device_type == CPU:
            return None
        from .cuda_driver import device_attributes

        return device_attributes(self.device_id)[name]

    @property
    def max_threads_per_block(self):
        return self._cuda_attr("max_threads_per_block")

    @property
    def max_shared_memory_per_block(self):
        """Bytes of static shared memory a block may use (None on the CPU)."""
        return self._cuda_attr("max_shared_memory_per_block")

    @property
    def warp_size(self):
        return self._cuda_attr("warp_size")

    @property
    def compute_version(self):
        """``"8.0"`` for an sm_80 GPU (None on the CPU)."""
        return self._cuda_attr("compute_version")

    @property
    def max_thread_dimensions(self):
        return self._cuda_attr("max_thread_dimensions")

    @property
    def device_name(self) -> str:
        """The type's short name, e.g. ``"cpu"``."""
        return _TYPE_NAMES.get(self.device_type, f"device{self.device_type}")

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Device)
            and self.device_type == other.device_type
            and self.device_id == other.device_id
        )

    def __hash__(self) -> int:
        return hash((self.device_type, self.device_id))

    def __repr__(self) -> str:
        if self.device_type in _TYPE_NAMES:
            return f"{_TYPE_NAMES[self.device_type]}({self.device_id})"
        return f"Device({self.device_type}, {self.device_id})"

    def __reduce__(self):  # keep pickling working despite __setattr__
        return (Device, (self.device_type, self.device_id))


def cpu(dev_id: int = 0) -> Device:
    """The host CPU."""
    return Device(CPU, dev_id)


def cuda(dev_id: int = 0) -> Device:
    """An NVIDIA GPU."""
    return Device(CUDA, dev_id)


gpu = cuda


def ext_dev(dev_id: int = 0) -> Device:
    """An external accelerator (VTA): its arrays live in the memory of the allocator
    registered for ``EXT_DEV``."""
    return Device(EXT_DEV, dev_id)


def device(dev_type: str | int | Device, dev_id: int = 0) -> Device:
    """Make a Device from a name ("cpu", "llvm", "c", "cuda", "gpu", "nvptx"; a target
    string such as ``"llvm -mcpu=skylake"`` uses its first word) or a numeric type."""
    if isinstance(dev_type, Device):
        return dev_type
    if isinstance(dev_type, str):
        words = dev_type.split()
        key = words[0].lower() if words else ""
        if key not in _NAME_TO_TYPE:
            raise ValueError(
                f"unknown device type {dev_type!r}; expected one of {sorted(_NAME_TO_TYPE)}"
            )
        return Device(_NAME_TO_TYPE[key], dev_id)
    return Device(int(dev_type), dev_id)


context = device
