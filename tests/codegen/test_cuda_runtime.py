"""CUDA memory, copies, timing and device checks on a real GPU (skipped without one)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te

from .cuda_workloads import NVRTC_MISSING, have_nvrtc, vector_add

pytestmark = pytest.mark.gpu


@pytest.fixture
def dev():
    if not have_nvrtc():
        pytest.skip(NVRTC_MISSING)
    d = kiln.cuda(0)
    if not d.exist:
        pytest.skip("no CUDA GPU")
    return d


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "int8", "bool"])
def test_roundtrip(dev, dtype):
    x = (np.arange(60).reshape(3, 4, 5) % 7).astype(dtype)
    a = kiln.nd.array(x, dev)
    assert a.device == dev and a.shape == x.shape and a.dtype == np.dtype(dtype).name
    np.testing.assert_array_equal(a.numpy(), x)
    b = a.copyto(kiln.cpu(0))
    np.testing.assert_array_equal(b.numpy(), x)
    c = kiln.nd.empty(x.shape, dtype, dev)
    c.copyfrom(a)  # device to device through the host
    np.testing.assert_array_equal(c.numpy(), x)
    dev.sync()


def test_time_evaluator_uses_events(dev):
    w = vector_add(1 << 20)
    mod = kiln.build(w.sched, w.args, target="cuda")
    args = [kiln.nd.array(x, dev) for x in w.inputs]
    timer = mod.time_evaluator(mod.entry_name, dev, number=20, repeat=3)
    res = timer(*args)
    assert len(res.results) == 3 and 0 < res.mean < 0.1
    np.testing.assert_allclose(args[2].numpy(), w.expected[2], rtol=1e-6)


def test_cuda_array_to_cpu_function(dev):
    n = 64
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    f = kiln.build(s, [A, B], target="llvm")
    a = kiln.nd.array(np.zeros(n, "float32"), dev)
    b = kiln.nd.array(np.zeros(n, "float32"), dev)
    with pytest.raises(kiln.TVMError, match="device_type"):
        f(a, b)


def test_mixed_devices_rejected(dev):
    w = vector_add(256)
    mod = kiln.build(w.sched, w.args, target="cuda")
    a = kiln.nd.array(w.inputs[0], dev)
    b = kiln.nd.array(w.inputs[1])  # on the CPU
    c = kiln.nd.array(w.inputs[2], dev)
    with pytest.raises(kiln.TVMError, match=r"arg1\.device_type \(B\).*got device type 1"):
        mod(a, b, c)
