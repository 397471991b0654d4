"""Random argument mismatches of compiled functions (issue 25): wrong counts, types, dtypes,
ranks, shapes, devices, strided and unaligned views, outputs aliasing inputs. Each call
either raises a TVM-worded error (``TVMError``; ``TypeError`` for a Python type compiled
code cannot take, ``OverflowError`` for an int beyond int64) naming the argument, or runs
and gives numpy's result; never a crash, a wrong result or another exception. Both call
paths (the C extension and ctypes) are fuzzed.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.runtime import fastcall, ndarray
from kiln.runtime.device import CUDA

TRIALS = 300


@dataclass
class Kernel:
    """A compiled function, a valid argument list maker and the numpy reference."""

    func: object
    args: Callable[[np.random.Generator], list]
    reference: Callable[[list], np.ndarray]


def _kernels() -> list[Kernel]:
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    add = kiln.build(te.create_schedule(C.op), [A, B, C])

    T = te.placeholder((4, 6), name="T")
    U = te.compute((6, 4), lambda i, j: T[j, i], name="U")
    transpose = kiln.build(te.create_schedule(U.op), [T, U])

    s = te.var("s", "float32")
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: X[i] * s, name="Y")
    scale = kiln.build(te.create_schedule(Y.op), [X, s, Y])

    def vec(rng, size):
        return kiln.nd.array(rng.standard_normal(size).astype("float32"))

    return [
        Kernel(add, lambda r: [vec(r, 8), vec(r, 8), kiln.nd.empty((8,))],
               lambda a: a[0].numpy() + a[1].numpy()),
        Kernel(transpose, lambda r: [kiln.nd.array(r.standard_normal((4, 6)).astype(
            "float32")), kiln.nd.empty((6, 4))], lambda a: a[0].numpy().T),
        Kernel(scale, lambda r: [vec(r, 8), 1.5, kiln.nd.empty((8,))],
               lambda a: a[0].numpy() * np.float32(a[1])),
    ]


class _HostMemoryAsGPU:
    """A device allocator handing out host memory: arrays that claim to live on a GPU."""

    def __init__(self) -> None:
        self.blocks: dict[int, ctypes.Array] = {}

    def alloc(self, nbytes, device):
        block = (ctypes.c_uint8 * max(nbytes, 1))()
        self.blocks[ctypes.addressof(block)] = block
        return ctypes.addressof(block)

    def free(self, ptr, device):
        self.blocks.pop(ptr, None)

    def copy_from_host(self, dst, src, device):
        ctypes.memmove(dst, src.ctypes.data, src.nbytes)

    def copy_to_host(self, dst, src, device):
        ctypes.memmove(dst.ctypes.data, src, dst.nbytes)


def _strided(x: np.ndarray) -> kiln.nd.NDArray:
    """A non-contiguous view of the values of ``x`` (every other element of a buffer)."""
    base = np.zeros((x.size * 2,), x.dtype)
    view = base[::2].reshape(x.shape) if x.ndim == 1 else np.zeros(
        x.shape[:-1] + (x.shape[-1] * 2,), x.dtype)[..., ::2]
    view[...] = x
    return kiln.nd.from_dlpack(view)


def _unaligned(x: np.ndarray) -> np.ndarray:
    base = np.zeros(x.size + 1, x.dtype)
    view = base[1:].reshape(x.shape)
    view[...] = x
    return view


def _mutate(rng: np.random.Generator, args: list) -> tuple[list, str]:
    """``args`` with one random mismatch, and its description."""
    args = list(args)
    k = int(rng.integers(len(args)))
    a = args[k]
    kind = str(rng.choice(["drop", "extra", "type", "dtype", "rank", "shape", "strided",
                           "unaligned", "device", "alias", "none"]))
    if kind == "drop":
        del args[k]
    elif kind == "extra":
        args.append(args[k])
    elif kind == "type":
        args[k] = [1, 2.5, None, "x", [1.0, 2.0], np.zeros(3, "float32"), object(),
                   2**70][int(rng.integers(8))]
    elif isinstance(a, kiln.nd.NDArray):
        x = a.numpy()
        if kind == "dtype":
            args[k] = kiln.nd.array(x.astype(str(rng.choice(["float64", "int32", "float16",
                                                             "int64", "uint8"]))))
        elif kind == "rank":
            args[k] = kiln.nd.array(x.reshape(x.shape + (1,)) if rng.random() < 0.5
                                    else x.reshape(-1)[None])
        elif kind == "shape":
            shape = list(x.shape)
            d = int(rng.integers(len(shape)))
            shape[d] = int(rng.choice([0, 1, shape[d] - 1, shape[d] + 1, shape[d] * 3]))
            args[k] = kiln.nd.empty(tuple(max(s, 0) for s in shape))
        elif kind == "strided":
            args[k] = _strided(x)
        elif kind == "unaligned":
            try:
                args[k] = kiln.nd.from_dlpack(_unaligned(x))
            except kiln.TVMError as e:  # refused before any call: also a clear error
                return [], f"from_dlpack refused: {e}"
        elif kind == "device":
            args[k] = kiln.nd.array(x, device=kiln.cuda(0))
        elif kind == "alias":
            tensors = [i for i, v in enumerate(args) if isinstance(v, kiln.nd.NDArray)]
            args[k] = args[int(rng.choice([i for i in tensors if i != k] or tensors))]
    return args, kind


@pytest.fixture
def fake_gpu():
    previous = ndarray.device_allocator(CUDA)
    ndarray.register_device_allocator(CUDA, _HostMemoryAsGPU())
    yield
    ndarray.register_device_allocator(CUDA, previous)


@pytest.mark.parametrize("path", ["c", "ctypes"])
def test_random_argument_mismatches(path, fake_gpu):
    if path == "c" and fastcall.load_extension() is None:
        pytest.skip("the C fast call extension cannot be built here")
    kernels = _kernels()
    rng = np.random.default_rng(25)
    outcomes: dict[str, int] = {}
    fastcall.use_backend(path)
    try:
        for trial in range(TRIALS):
            kernel = kernels[trial % len(kernels)]
            args, kind = _mutate(rng, kernel.args(rng))
            if not args:
                outcomes["refused by from_dlpack"] = outcomes.get("refused by from_dlpack",
                                                                  0) + 1
                continue
            what = f"trial {trial}, {kind}: {[type(a).__name__ for a in args]}"
            try:
                kernel.func(*args)
            except (kiln.TVMError, TypeError, OverflowError) as e:
                message = str(e)
                assert "arg" in message.lower() or "expected" in message, (what, message)
                outcomes["error"] = outcomes.get("error", 0) + 1
                continue
            out = args[-1].numpy()
            np.testing.assert_allclose(out, kernel.reference(args), rtol=1e-6, err_msg=what)
            outcomes["ran"] = outcomes.get("ran", 0) + 1
    finally:
        fastcall.use_backend("auto")
    assert outcomes.get("error", 0) > TRIALS // 2 and outcomes.get("ran", 0) > 10, outcomes
