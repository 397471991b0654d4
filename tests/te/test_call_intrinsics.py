"""``tvm.tir.call_pure_extern`` and ``tvm.tir.call_intrin`` in te.compute bodies, built for
the CPU (and the CUDA source where NVRTC is installed), checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te

from ..codegen.cuda_workloads import build_cuda

N = 16
RNG = np.random.default_rng(0)


def _run_cpu(s, A, B, a):
    f = tvm.build(s, [A, B])
    b = tvm.nd.array(np.zeros(N, "float32"))
    f(tvm.nd.array(a), b)
    return f, b.numpy()


def test_call_pure_extern_c():
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: tvm.tir.call_pure_extern("float32", "expf", A[i]) + 1.0,
                   name="B")
    assert B.op.body[0].a.op == "call_pure_extern"
    s = te.create_schedule(B.op)
    assert 'call_pure_extern("expf", A[i])' in str(tvm.lower(s, [A, B], simple_mode=True))
    a = RNG.random(N).astype("float32")
    f, b = _run_cpu(s, A, B, a)
    assert "expf(" in f.get_source()
    np.testing.assert_allclose(b, np.exp(a) + 1, rtol=1e-6)


def test_call_pure_extern_cuda_source():
    """TVM's idiom for CUDA's fast math: ``__expf`` in the kernel."""
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: tvm.tir.call_pure_extern("float32", "__expf", A[i]),
                   name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    mod = build_cuda(s, [A, B], name="fast_exp")
    assert "__expf(A[((int)threadIdx.x)])" in mod.imported_modules[0].get_source()


def test_call_pure_extern_checks_name():
    with pytest.raises(TypeError, match="call_pure_extern: the function name must be a str"):
        tvm.tir.call_pure_extern("float32", 3, 1.0)


@pytest.mark.parametrize("name", ["tir.exp", "exp"])
def test_call_intrin_tvm_and_kiln_names(name):
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: tvm.tir.call_intrin("float32", name, A[i]), name="B")
    s = te.create_schedule(B.op)
    a = RNG.random(N).astype("float32")
    _, b = _run_cpu(s, A, B, a)
    np.testing.assert_allclose(b, np.exp(a), rtol=1e-6)


def test_call_intrin_if_then_else():
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: tvm.tir.call_intrin(
        "float32", "tir.if_then_else", A[i] > 0.5, A[i], tvm.tir.const(0.0, "float32")),
        name="B")
    s = te.create_schedule(B.op)
    a = RNG.random(N).astype("float32")
    _, b = _run_cpu(s, A, B, a)
    np.testing.assert_allclose(b, np.where(a > 0.5, a, 0))
