"""te.extern: external tensor functions as schedule stages (TVM's "External Tensor Functions").

The programs call numpy routines registered with ``tvm.register_func`` through
``tvm.tir.call_packed``, and a C function through ``tvm.tir.call_extern``; every result is
compared with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.errors import ScheduleError


def test_tutorial_program_addone_then_compute(register_global):
    """The tutorial's ``my_tvm_addone`` (``tvm.nd.array(x.numpy() + 1).copyto(y)``), with a
    te.compute consumer scheduled freely."""
    seen = []

    def my_tvm_addone(x, y):
        seen.append((type(x), type(y)))
        tvm.nd.array(x.numpy() + 1).copyto(y)

    register_global("tvm.contrib.my_tvm_addone", my_tvm_addone)
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tvm.tir.call_packed(
        "tvm.contrib.my_tvm_addone", ins[0], outs[0]), name="C")
    D = te.compute(B.shape, lambda i: B[i] * 2, name="D")
    s = te.create_schedule(D.op)
    xo, xi = s[D].split(D.op.axis[0], factor=4)
    s[D].vectorize(xi)
    f = tvm.build(s, [A, D], "llvm")
    a = np.random.uniform(size=10).astype("float32")
    d = tvm.nd.array(np.zeros(10, "float32"))
    f(tvm.nd.array(a), d)
    np.testing.assert_allclose(d.numpy(), (a + 1) * 2, rtol=1e-6)
    assert seen == [(tvm.nd.NDArray, tvm.nd.NDArray)]


def test_extern_as_the_output(register_global):
    register_global("test.extern.sort", lambda x, y: y.copyfrom(np.sort(x.numpy())))
    A = te.placeholder((16,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tvm.tir.call_packed(
        "test.extern.sort", ins[0], outs[0]), name="B")
    s = te.create_schedule(B.op)
    f = tvm.build(s, [A, B])
    a = np.random.uniform(size=16).astype("float32")
    b = tvm.nd.empty((16,))
    f(tvm.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), np.sort(a))


def test_extern_reads_a_computed_tensor_whole(register_global):
    """A producer read by an extern op is computed over its whole shape, even when a
    compute consumer reads only part of it."""
    register_global("test.extern.cumsum", lambda x, y: y.copyfrom(np.cumsum(x.numpy())))
    A = te.placeholder((12,), name="A")
    B = te.compute((12,), lambda i: A[i] + 1, name="B")
    C = te.extern((12,), [B], lambda ins, outs: tvm.tir.call_packed(
        "test.extern.cumsum", ins[0], outs[0]), name="C")
    D = te.compute((6,), lambda i: B[i] + C[i * 2], name="D")
    s = te.create_schedule(D.op)
    f = tvm.build(s, [A, D])
    a = np.random.uniform(size=12).astype("float32")
    d = tvm.nd.empty((6,))
    f(tvm.nd.array(a), d)
    b = a + 1
    np.testing.assert_allclose(d.numpy(), b[:6] + np.cumsum(b)[::2], rtol=1e-5)


def test_two_outputs_and_scalar_arguments(register_global):
    def split_scale(x, lo, hi, scale, tag):
        assert (scale, tag) == (3, "half")
        v = x.numpy()
        lo.copyfrom(v[: v.shape[0] // 2] * scale)
        hi.copyfrom(v[v.shape[0] // 2:] * scale)

    register_global("test.extern.split_scale", split_scale)
    A = te.placeholder((8,), name="A")
    lo, hi = te.extern([(4,), (4,)], [A], lambda ins, outs: tvm.tir.call_packed(
        "test.extern.split_scale", ins[0], outs[0], outs[1], 3, "half"), name="S")
    assert isinstance(lo.op, te.ExternOp) and lo.op is hi.op
    C = te.compute((4,), lambda i: lo[i] - hi[i], name="C")
    s = te.create_schedule(C.op)
    f = tvm.build(s, [A, lo, C])
    a = np.arange(8, dtype="float32")
    out_lo, out_c = tvm.nd.empty((4,)), tvm.nd.empty((4,))
    f(tvm.nd.array(a), out_lo, out_c)
    np.testing.assert_allclose(out_lo.numpy(), a[:4] * 3)
    np.testing.assert_allclose(out_c.numpy(), a[:4] * 3 - a[4:] * 3)


def test_cache_read_of_an_input_redirects_the_extern_op(register_global):
    register_global("test.extern.neg", lambda x, y: y.copyfrom(-x.numpy()))
    A = te.placeholder((8,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tvm.tir.call_packed(
        "test.extern.neg", ins[0], outs[0]), name="B")
    s = te.create_schedule(B.op)
    s.cache_read(A, "global", [B])
    assert [t.op.name for t in s[B].op.input_tensors] == ["A.global"]
    f = tvm.build(s, [A, B])
    a = np.arange(8, dtype="float32")
    b = tvm.nd.empty((8,))
    f(tvm.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), -a)


def test_extern_op_fields():
    A = te.placeholder((4, 5), name="A", dtype="int32")
    B = te.extern((4, 5), [A], lambda ins, outs: tvm.tir.call_packed("f", ins[0], outs[0]),
                  name="B", tag="my_tag", attrs={"k": 1})
    op = B.op
    assert B.dtype == "int32" and [int(x) for x in B.shape] == [4, 5]
    assert op.input_tensors == [A] and op.inputs == [A]
    assert [b.name for b in op.input_placeholders] == ["A"]
    assert [b.name for b in op.output_placeholders] == ["B"]
    assert isinstance(op.body, tvm.tir.Evaluate)
    assert op.tag == "my_tag" and op.attrs == {"k": 1}


def test_lower_prints_the_packed_call_like_tvm():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tvm.tir.call_packed(
        "tvm.contrib.my_tvm_addone", ins[0], outs[0]), name="C")
    s = te.create_schedule(B.op)
    text = str(tvm.lower(s, [A, B], simple_mode=True))
    assert text == (
        "produce C {\n"
        '  tvm_call_packed("tvm.contrib.my_tvm_addone", '
        "tvm_stack_make_array(A, tvm_stack_make_shape(n), 0, 1, 0f, 0), "
        "tvm_stack_make_array(C, tvm_stack_make_shape(n), 0, 1, 0f, 0))\n"
        "}")


def test_buffers_are_bound_to_the_tensors_storage():
    """After lowering, the call reads the arguments' own data pointers, not the placeholder
    buffers'."""
    A = te.placeholder((8,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tvm.tir.call_packed("f", ins[0], outs[0]),
                  name="B")
    func = tvm.lower(te.create_schedule(B.op), [A, B])["main"]
    call = func.body.body.value if isinstance(func.body, tvm.tir.AttrStmt) else func.body.value
    data = [arg.args[0] for arg in call.args[1:]]
    assert data == list(func.params)
    assert data[0] is not B.op.input_placeholders[0].data


C_ADD_ONE = """
static int32_t add_one_c(float* x, float* y, int32_t n) {
  for (int32_t i = 0; i < n; ++i) y[i] = x[i] + 1.0f;
  return 0;
}
"""


def test_call_extern_to_c_source_imported_with_pragma():
    """A C function compiled into the module (``pragma import_c`` on a consumer's loop, as
    TVM's C backend pastes the source) and called with ``tir.call_extern``."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tvm.tir.call_extern(
        "int32", "add_one_c", ins[0], outs[0], n), name="B")
    C = te.compute(B.shape, lambda i: B[i] * 2, name="C")
    s = te.create_schedule(C.op)
    s[C].pragma(C.op.axis[0], "import_c", C_ADD_ONE)
    f = tvm.build(s, [A, C])
    a = np.random.uniform(size=9).astype("float32")
    c = tvm.nd.empty((9,))
    f(tvm.nd.array(a), c)
    np.testing.assert_allclose(c.numpy(), (a + 1) * 2, rtol=1e-6)


def test_call_extern_with_the_source_in_the_extern_body():
    def fcompute(ins, outs):
        ib = tvm.tir.ir_builder.create()
        ib.scope_attr(tvm.tir.const(0), "pragma_import_c", C_ADD_ONE)
        ib.emit(tvm.tir.call_extern("int32", "add_one_c", ins[0], outs[0], 7))
        return ib.get()

    A = te.placeholder((7,), name="A")
    B = te.extern(A.shape, [A], fcompute, name="B")
    f = tvm.build(te.create_schedule(B.op), [A, B])
    a = np.arange(7, dtype="float32")
    b = tvm.nd.empty((7,))
    f(tvm.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a + 1)


# ---- errors -------------------------------------------------------------------------------
def _extern():
    A = te.placeholder((8,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tvm.tir.call_packed("f", ins[0], outs[0]),
                  name="B")
    C = te.compute(B.shape, lambda i: B[i] + 1, name="C")
    return B, C, te.create_schedule(C.op)


@pytest.mark.parametrize("primitive", ["compute_inline", "split", "compute_at", "parallel"])
def test_loop_primitives_on_an_extern_stage_raise(primitive):
    B, C, s = _extern()
    call = {"compute_inline": lambda: s[B].compute_inline(),
            "split": lambda: s[B].split(C.op.axis[0], factor=2),
            "compute_at": lambda: s[B].compute_at(s[C], C.op.axis[0]),
            "parallel": lambda: s[B].parallel(C.op.axis[0])}[primitive]
    with pytest.raises(ScheduleError, match=f"{primitive}: stage 'B' is a te.extern operation"):
        call()
    s[B].compute_root()  # the one primitive that applies


def test_fcompute_must_return_a_statement_or_expression():
    A = te.placeholder((8,), name="A")
    with pytest.raises(TypeError, match="te.extern 'B': fcompute must return a Stmt or a "
                                        "PrimExpr"):
        te.extern(A.shape, [A], lambda ins, outs: None, name="B")


def test_output_dtype_cannot_be_inferred_from_mixed_inputs():
    A = te.placeholder((8,), name="A")
    B = te.placeholder((8,), name="B", dtype="int32")

    def body(ins, outs):
        return tvm.tir.call_packed("f", *ins, outs[0])

    with pytest.raises(ValueError, match="cannot infer the output dtype"):
        te.extern((8,), [A, B], body)
    assert te.extern((8,), [A, B], body, dtype="float64").dtype == "float64"


def test_call_packed_in_cuda_device_code_is_not_implemented():
    def fcompute(ins, outs):
        ib = tvm.tir.ir_builder.create()
        ib.scope_attr(te.thread_axis("threadIdx.x"), "thread_extent", 8)
        ib.emit(tvm.tir.call_packed("f", ins[0], outs[0]))
        return ib.get()

    A = te.placeholder((8,), name="A")
    B = te.extern(A.shape, [A], fcompute, name="B")
    with pytest.raises(NotImplementedError, match="call_packed.*CUDA device code"):
        tvm.build(te.create_schedule(B.op), [A, B], "cuda")
