"""NDArray storage, dtypes, copies and the DLTensor seen by compiled code."""

import numpy as np
import pytest

import kiln.nd as nd
from kiln.errors import TVMError
from kiln.runtime import cpu, cuda
from kiln.runtime.ndarray import (
    DLTensor,
    NDArray,
    device_allocator,
    dtype_to_dl,
    register_device_allocator,
)

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool"]


def sample(dtype, shape=(3, 5)):
    rng = np.random.default_rng(0)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip(dtype):
    x = sample(dtype)
    a = nd.array(x)
    assert a.dtype == dtype
    assert a.shape == (3, 5) and a.ndim == 2
    assert a.device == cpu(0) and a.ctx == cpu(0)
    np.testing.assert_array_equal(a.numpy(), x)
    np.testing.assert_array_equal(a.asnumpy(), x)
    assert a.numpy().dtype == np.dtype(dtype)
    assert a._data.ctypes.data % 64 == 0
    assert a._data.flags.c_contiguous


@pytest.mark.parametrize("dtype", DTYPES)
def test_dlpack_dtype_codes(dtype, test_module):
    a = nd.array(sample(dtype, (2, 3, 4)))
    out = nd.empty((16,), "int64")
    test_module["describe"](a, out)
    o = out.numpy()
    assert tuple(o[:9]) == (1, 0, 3, *dtype_to_dl(dtype), 0, 1, 0)
    assert tuple(o[9:12]) == (2, 3, 4)
    if dtype == "bool":
        assert tuple(o[3:6]) == (1, 1, 1)


def test_dtype_mapping():
    assert dtype_to_dl("int8") == (0, 8, 1)
    assert dtype_to_dl("uint64") == (1, 64, 1)
    assert dtype_to_dl("float16") == (2, 16, 1)
    assert dtype_to_dl("bool") == (1, 1, 1)
    with pytest.raises(TypeError, match="unsupported"):
        nd.empty((2,), "complex64")


def test_array_copies_and_keeps_dtype():
    x = np.arange(6, dtype="int16").reshape(2, 3)
    a = nd.array(x)
    x[0, 0] = 99
    assert a.numpy()[0, 0] == 0
    out = a.numpy()
    out[0, 1] = 77
    assert a.numpy()[0, 1] == 1
    assert nd.array([1.5, 2.5]).dtype == "float64"
    assert nd.array(np.arange(12, dtype=">i4")[::2]).numpy().tolist() == list(range(0, 12, 2))
    b = nd.array(a)
    assert b.dtype == "int16" and b._handle != a._handle


def test_empty_and_shapes():
    a = nd.empty((2, 3))
    assert a.dtype == "float32" and a.shape == (2, 3)
    assert nd.empty(5, "int32").shape == (5,)
    assert nd.empty((np.int64(2), 3), ctx=cpu(0)).shape == (2, 3)
    z = nd.empty((0, 4))
    assert z.numpy().shape == (0, 4)
    s = nd.array(np.float32(3.0))
    assert s.shape == () and s.ndim == 0 and s.numpy() == 3.0
    with pytest.raises(ValueError):
        nd.empty((-1,))


def test_dltensor_struct():
    a = nd.array(np.zeros((4, 7), "float32"))
    dl = DLTensor.from_address(a._handle)
    assert dl.ndim == 2 and dl.shape[0] == 4 and dl.shape[1] == 7
    assert not dl.strides and dl.byte_offset == 0
    assert dl.data == a._data.ctypes.data
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (2, 32, 1)
    assert (dl.device.device_type, dl.device.device_id) == (1, 0)


def test_copyfrom_copyto():
    a = nd.empty((2, 2), "float32")
    assert a.copyfrom(np.array([[1, 2], [3, 4]])) is a  # cast to float32
    np.testing.assert_array_equal(a.numpy(), [[1, 2], [3, 4]])
    b = nd.empty((2, 2), "float32")
    assert a.copyto(b) is b
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    c = a.copyto(cpu(0))
    assert isinstance(c, NDArray) and c._handle != a._handle
    np.testing.assert_array_equal(c.numpy(), a.numpy())
    b.copyfrom(nd.array(np.full((2, 2), 5, "float32")))
    assert (b.numpy() == 5).all()
    with pytest.raises(ValueError, match="shape"):
        a.copyfrom(np.zeros(3))
    with pytest.raises(ValueError, match="dtype"):
        a.copyfrom(nd.empty((2, 2), "float64"))
    with pytest.raises(TypeError):
        a.copyto("cpu")
    a[:] = 7
    assert (a.numpy() == 7).all()
    a[:] = np.ones((2, 2))
    assert (np.asarray(a) == 1).all()
    with pytest.raises(ValueError):
        a[0] = 1


def test_repr():
    a = nd.array(np.arange(12, dtype="float32").reshape(3, 4))
    text = repr(a)
    assert text.startswith("<tvm.nd.NDArray shape=(3, 4), cpu(0)>\narray(")
    assert "dtype=float32" in text


def test_cuda_without_backend():
    if device_allocator(2) is not None:
        pytest.skip("a CUDA allocator is registered")
    with pytest.raises(TVMError, match="CUDA.*not available"):
        nd.empty((4,), "float32", cuda(0))
    with pytest.raises(TVMError, match="CUDA"):
        nd.array(np.zeros(3), cuda(0))


class FakeAllocator:
    """A host-memory 'device' used to exercise the allocator hook."""

    def __init__(self):
        self.buffers, self.freed, self.synced = {}, [], 0

    def alloc(self, nbytes, device):
        buf = np.zeros(nbytes, np.uint8)
        self.buffers[buf.ctypes.data] = buf
        return buf.ctypes.data

    def free(self, ptr, device):
        self.freed.append(self.buffers.pop(ptr))

    def copy_from_host(self, dst, src, device):
        self.buffers[dst][: src.nbytes] = src.view(np.uint8).reshape(-1)

    def copy_to_host(self, dst, src, device):
        dst.view(np.uint8).reshape(-1)[:] = self.buffers[src][: dst.nbytes]

    def sync(self, device):
        self.synced += 1


def test_device_allocator_hook():
    fake = FakeAllocator()
    register_device_allocator(7, fake)
    try:
        from kiln.runtime import Device

        dev = Device(7, 0)
        a = nd.array(np.arange(5, dtype="int32"), dev)
        assert a.device == dev
        np.testing.assert_array_equal(a.numpy(), np.arange(5))
        b = a.copyto(cpu(0))
        np.testing.assert_array_equal(b.numpy(), np.arange(5))
        dev.sync()
        assert fake.synced == 1
        del a
        import gc

        gc.collect()
        assert len(fake.freed) == 1
    finally:
        register_device_allocator(7, None)
