"""``tir.Buffer`` element access for tensor intrinsics: ``access_ptr``, ``vload``, ``vstore``,
``offset_of`` — their printed form (TVM's), their flat indices with symbolic strides and
``elem_offset``, and the C they become (run through ``te.extern`` bodies, against numpy)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te


def _strided(name: str = "A"):
    s0 = te.var("s0")
    return tvm.tir.decl_buffer((4, 8), "float32", name, strides=[s0, 1], offset_factor=1), s0


def test_access_ptr_prints_as_tvm():
    buf, _ = _strided()
    assert str(buf.access_ptr("r")) == \
        "tvm_access_ptr(type_annotation(), A, A_elem_offset, (s0*4), 1)"
    assert str(buf.access_ptr("w", offset=3)) == \
        "tvm_access_ptr(type_annotation(), A, (A_elem_offset + 3), ((s0*4) - 3), 2)"
    dense = tvm.tir.decl_buffer((4, 8), "float32", "C")
    assert str(dense.access_ptr("rw")) == "tvm_access_ptr(type_annotation(), C, 0, 32, 3)"
    assert str(dense.access_ptr(tvm.tir.Buffer.READ, extent=5)) == \
        "tvm_access_ptr(type_annotation(), C, 0, 5, 1)"
    ptr = dense.access_ptr("r", content_lanes=4)
    assert ptr.args[0].dtype == "float32x4" and str(ptr.args[3]) == "8"


def test_access_ptr_rejects_unknown_mask():
    with pytest.raises(ValueError, match="'r' and 'w'"):
        tvm.tir.decl_buffer((4,), "float32", "A").access_ptr("x")


def test_offset_of_vload_vstore():
    buf, s0 = _strided()
    assert str(buf.offset_of([1, 2])) == "(A_elem_offset + (s0 + 2))"
    assert str(buf.vload([1, 2])) == "A[(A_elem_offset + (s0 + 2))]"
    assert str(buf.vload([0, 0], "float32x4")) == "A[ramp(A_elem_offset, 1, 4)]"
    assert str(buf.vstore([1, 1], tvm.tir.const(2.0))) == "A[(A_elem_offset + (s0 + 1))] = 2f"
    dense = tvm.tir.decl_buffer((4, 8), "float32", "C")
    assert str(dense.offset_of([2, 3])) == "19"
    with pytest.raises(TypeError, match="cannot vload int32"):
        dense.vload([0, 0], "int32")
    with pytest.raises(ValueError, match="2 indices for a 1-d buffer"):
        tvm.tir.decl_buffer((4,), "float32", "D").offset_of([0, 0])


def test_access_ptr_in_c_calls_memcpy():
    """``access_ptr`` with an offset, passed to a C function (memcpy), moves the right
    elements: ``B[i, :] = A[i, 2:6]``."""
    A = te.placeholder((4, 8), name="A")

    def body(ins, outs):
        ib = tvm.tir.ir_builder.create()
        with ib.for_range(0, 4, name="i") as i:
            ib.emit(tvm.tir.call_extern(
                "handle", "memcpy", outs[0].access_ptr("w", offset=i * 4),
                ins[0].access_ptr("r", offset=i * 8 + 2), 16))
        return ib.get()

    B = te.extern((4, 4), [A], body, name="B")
    f = tvm.build(te.create_schedule(B.op), [A, B])
    assert "memcpy(((float*)B + (i * 4)), ((float*)A + ((i * 8) + 2)), 16)" in f.get_source()
    a = np.arange(32, dtype="float32").reshape(4, 8)
    b = tvm.nd.empty((4, 4))
    f(tvm.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a[:, 2:6])


def test_vload_vstore_in_an_extern_body():
    """Scalar and vector ``vload``/``vstore`` lower to loads and stores of the bound
    tensors."""
    A = te.placeholder((4, 8), name="A")

    def body(ins, outs):
        ib = tvm.tir.ir_builder.create()
        with ib.for_range(0, 4, name="i") as i:
            ib.emit(outs[0].vstore([i, 0], ins[0].vload([i, 0], "float32x8") * 2.0))
            ib.emit(outs[0].vstore([i, 1], ins[0].vload([i, 0]) + ins[0].vload([i, 7])))
        return ib.get()

    B = te.extern((4, 8), [A], body, name="B")
    f = tvm.build(te.create_schedule(B.op), [A, B])
    a = np.random.uniform(size=(4, 8)).astype("float32")
    b = tvm.nd.empty((4, 8))
    f(tvm.nd.array(a), b)
    want = a * 2
    want[:, 1] = a[:, 0] + a[:, 7]
    np.testing.assert_allclose(b.numpy(), want, rtol=1e-6)
