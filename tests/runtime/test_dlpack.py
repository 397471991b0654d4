"""DLPack exchange (kiln.runtime.dlpack): zero-copy to and from numpy and PyTorch."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import kiln
from kiln import te


def _aligned(shape, dtype="float32"):
    """A numpy array whose data is 64-byte aligned (what kiln's compiled code takes)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(n + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + n].view(dtype).reshape(shape)


def _add_one(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    return kiln.build(te.create_schedule(B.op), [A, B], target="llvm")


def test_numpy_views_kiln_memory():
    a = kiln.nd.array(np.arange(6, dtype="float32").reshape(2, 3))
    view = np.from_dlpack(a)
    np.testing.assert_array_equal(view, a.numpy())
    a.copyfrom(np.full((2, 3), 7, "float32"))
    assert (view == 7).all()  # same memory
    del a
    gc.collect()
    assert (view == 7).all()  # the capsule kept the NDArray alive


def test_kiln_views_numpy_memory_and_computes_in_place():
    x, y = _aligned((8,)), _aligned((8,))
    x[:] = np.arange(8)
    a, b = kiln.nd.from_dlpack(x), kiln.nd.from_dlpack(y)
    assert a.shape == (8,) and a.dtype == "float32" and a.device == kiln.cpu(0)
    _add_one(8)(a, b)
    np.testing.assert_array_equal(y, np.arange(8) + 1)  # written through the view


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int8", "uint8", "bool"])
def test_round_trip_dtypes(dtype):
    src = _aligned((3, 4), dtype)
    src[:] = (np.arange(12).reshape(3, 4) % 2).astype(dtype)
    back = np.from_dlpack(kiln.nd.from_dlpack(src))
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, src)


def test_from_dlpack_of_an_ndarray_is_itself():
    a = kiln.nd.array(np.zeros(3, "float32"))
    assert kiln.nd.from_dlpack(a) is a


def test_refuses_strided_unaligned_and_foreign_objects():
    base = _aligned((4, 4))
    with pytest.raises(kiln.TVMError, match="dense row-major"):
        kiln.nd.from_dlpack(base.reshape(16)[::-1])  # negative strides
    view = kiln.nd.from_dlpack(base.T)  # a strided view: only strided buffers take it
    np.testing.assert_array_equal(view.numpy(), base.T)
    with pytest.raises(kiln.TVMError, match="expected a compact"):
        _add_one(4)(kiln.nd.from_dlpack(base[:, 0]), kiln.nd.empty((4,)))
    unaligned = _aligned((17,))[1:]
    with pytest.raises(kiln.TVMError, match="not 64-byte aligned"):
        kiln.nd.from_dlpack(unaligned)
    with pytest.raises(TypeError, match="__dlpack__"):
        kiln.nd.from_dlpack([1, 2, 3])


def test_an_unconsumed_capsule_releases_the_array():
    from kiln.runtime import dlpack

    a = kiln.nd.array(np.zeros(3, "float32"))
    before = len(dlpack._EXPORTED)
    capsule = a.to_dlpack()
    assert len(dlpack._EXPORTED) == before + 1
    del capsule
    gc.collect()
    assert len(dlpack._EXPORTED) == before


def test_torch_exchange():
    torch = pytest.importorskip("torch")
    t = torch.arange(16, dtype=torch.float32)
    if t.data_ptr() % 64:
        pytest.skip("torch gave an unaligned tensor")
    out = torch.empty(16)
    if out.data_ptr() % 64:
        pytest.skip("torch gave an unaligned tensor")
    _add_one(16)(kiln.nd.from_dlpack(t), kiln.nd.from_dlpack(out))
    assert torch.equal(out, t + 1)
    a = kiln.nd.array(np.ones(5, "float32"))
    back = torch.from_dlpack(a)
    back += 1  # writes kiln's memory
    np.testing.assert_array_equal(a.numpy(), np.full(5, 2, "float32"))


@pytest.mark.gpu
def test_torch_cuda_exchange():
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and kiln.cuda(0).exist):
        pytest.skip("no CUDA GPU")
    t = torch.arange(8, dtype=torch.float32, device="cuda")
    a = kiln.nd.from_dlpack(t)
    assert a.device == kiln.cuda(0)
    np.testing.assert_array_equal(a.numpy(), np.arange(8, dtype="float32"))
    back = torch.from_dlpack(kiln.nd.array(np.ones(4, "float32"), kiln.cuda(0)))
    assert back.device.type == "cuda" and torch.equal(back.cpu(), torch.ones(4))
