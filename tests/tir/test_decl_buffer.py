"""``tir.decl_buffer`` with strides and ``elem_offset`` (issue 15): bound to tensors with
``binds={A: Ab}`` in lower/build, flattened with their strides and offset, and checked
against the arrays passed (the checks of kiln/codegen/arg_checks.py, in C and in the CUDA
host); non-contiguous numpy views come in through ``kiln.nd.from_dlpack``."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.codegen.cuda_host import ArgChecker
from kiln.ir.expr import IntImm, Var
from kiln.runtime.ndarray import DLTensor


def _aligned(shape, dtype="float32") -> np.ndarray:
    """A zeroed array whose data starts on a 64-byte boundary."""
    size = int(np.prod(shape))
    raw = np.zeros(size + 64, dtype)
    skip = (-raw.ctypes.data % 64) // raw.itemsize
    return raw[skip:skip + size].reshape(shape)


def _double(binds_a=None, binds_b=None):
    """``B = A * 2`` over ``(n, m)``, built with the given buffers in ``binds``."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2, name="B")
    s = te.create_schedule(B.op)
    binds = {}
    if binds_a is not None:
        binds[A] = binds_a(n, m)
    if binds_b is not None:
        binds[B] = binds_b(n, m)
    return s, [A, B], binds


def _message(f, *args) -> str:
    with pytest.raises(kiln.TVMError) as info:
        f(*args)
    return str(info.value)


# ---------------------------------------------------------------------------------------
# the Buffer tir.decl_buffer makes
# ---------------------------------------------------------------------------------------
def test_defaults_follow_tvm():
    buf = tir.decl_buffer((4, 8), "float16", "A")
    assert (buf.name, buf.dtype, buf.scope) == ("A", "float16", "global")
    assert buf.data.name == "A" and buf.data.dtype == "handle"
    assert (buf.strides, buf.elem_offset) == ((), None)
    assert (buf.data_alignment, buf.offset_factor, buf.buffer_type) == (64, 1, "")
    assert [int(s.value) for s in buf.dense_strides()] == [8, 1]


def test_offset_factor_makes_a_symbolic_offset_and_data_is_kept():
    data = Var("ptr", "handle")
    buf = tir.decl_buffer((16,), name="A", data=data, offset_factor=4, data_alignment=16)
    assert buf.data is data and buf.offset_factor == 4 and buf.data_alignment == 16
    assert isinstance(buf.elem_offset, Var) and buf.elem_offset.name == "A_elem_offset"
    assert buf.symbolic_vars() == [buf.elem_offset]
    assert str(buf) == "buffer(A, float32, [16], elem_offset=A_elem_offset, offset_factor=4)"
    const = tir.decl_buffer((16,), name="B", elem_offset=8, offset_factor=4)
    assert isinstance(const.elem_offset, IntImm) and const.elem_offset.value == 8


def test_auto_broadcast_gives_symbolic_strides_and_bad_options_raise():
    buf = tir.decl_buffer((2, 3), name="A", buffer_type="auto_broadcast")
    assert buf.buffer_type == "auto_broadcast"
    assert [s.name for s in buf.strides] == ["A_stride0", "A_stride1"]
    with pytest.raises(NotImplementedError, match="axis_separators"):
        tir.decl_buffer((2, 3), axis_separators=[1])
    with pytest.raises(ValueError, match="buffer_type"):
        tir.decl_buffer((2, 3), buffer_type="texture")


# ---------------------------------------------------------------------------------------
# lowering
# ---------------------------------------------------------------------------------------
def test_lowered_accesses_use_the_strides_and_offset():
    s0 = te.var("s0")
    s, args, binds = _double(
        lambda n, m: tir.decl_buffer((n, m), name="A", strides=[s0, 1]),
        lambda n, m: tir.decl_buffer((n, m), name="B", offset_factor=16))
    text = str(kiln.lower(s, args, binds=binds, simple_mode=True))
    assert "A[((i*s0) + j)]" in text
    assert "B[((B_elem_offset + (i*m)) + j)]" in text


def test_a_stride_variable_not_in_the_arguments_is_bound_not_an_error():
    # s0 is neither a dimension nor a scalar argument: the array's strides define it
    s0 = te.var("s0")
    s, args, binds = _double(lambda n, m: tir.decl_buffer((n, m), name="A", strides=[s0, 1]))
    f = kiln.build(s, args, binds=binds)
    x = np.arange(12, dtype="float32").reshape(3, 4)
    b = kiln.nd.empty((3, 4))
    f(kiln.nd.array(x), b)  # a compact array: s0 is bound to its row stride, 4
    np.testing.assert_array_equal(b.numpy(), 2 * x)


# ---------------------------------------------------------------------------------------
# non-contiguous numpy views
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("view", ["rows_and_columns", "transpose", "column_block"])
def test_strided_views_run(view):
    s0, s1 = te.var("s0"), te.var("s1")
    s, args, binds = _double(
        lambda n, m: tir.decl_buffer((n, m), name="A", strides=[s0, s1]))
    f = kiln.build(s, args, binds=binds)
    base = np.arange(12 * 32, dtype="float32").reshape(12, 32)
    x = {"rows_and_columns": base[1::2, 3:20:3], "transpose": base.T[2:7],
         "column_block": base[:, 5:9]}[view]
    assert not x.flags.c_contiguous
    b = kiln.nd.empty(x.shape)
    f(kiln.nd.from_dlpack(x), b)
    np.testing.assert_array_equal(b.numpy(), 2 * x)


def test_writing_through_a_strided_output_view():
    s0 = te.var("s0")
    s, args, binds = _double(None, lambda n, m: tir.decl_buffer((n, m), name="B",
                                                                 strides=[s0, 1]))
    f = kiln.build(s, args, binds=binds)
    out = np.zeros((4, 10), "float32")
    x = np.arange(12, dtype="float32").reshape(4, 3)
    f(kiln.nd.array(x), kiln.nd.from_dlpack(out[:, 2:5]))
    np.testing.assert_array_equal(out[:, 2:5], 2 * x)
    assert not out[:, :2].any() and not out[:, 5:].any()


def test_a_compact_buffer_refuses_a_strided_view():
    s, args, _ = _double()
    f = kiln.build(s, args)
    x = np.zeros((4, 8), "float32")[:, :3]
    msg = _message(f, kiln.nd.from_dlpack(x), kiln.nd.empty((4, 3)))
    assert msg == "Argument arg0.strides (A): expected a compact (row-major contiguous) tensor"


def test_constant_and_composite_strides_are_checked():
    s, args, binds = _double(lambda n, m: tir.decl_buffer((n, m), name="A", strides=[8, 1]))
    f = kiln.build(s, args, binds=binds)
    padded = np.arange(32, dtype="float32").reshape(4, 8)
    b = kiln.nd.empty((4, 5))
    f(kiln.nd.from_dlpack(padded[:, :5]), b)
    np.testing.assert_array_equal(b.numpy(), 2 * padded[:, :5])
    assert _message(f, kiln.nd.array(np.zeros((4, 5), "float32")), b) == (
        "Assert fail: (8 == int32(arg0.strides[0])), Argument arg0.strides[0] has an "
        "unsatisfied constraint: expected 8, got 5")
    s, args, binds = _double(lambda n, m: tir.decl_buffer((n, m), name="A",
                                                          strides=[m + 2, 1]))
    f = kiln.build(s, args, binds=binds)
    f(kiln.nd.from_dlpack(padded[:, :6]), kiln.nd.empty((4, 6)))
    assert _message(f, kiln.nd.from_dlpack(padded[:, :5]), b) == (
        "Assert fail: ((m + 2) == arg0.strides[0]), Argument arg0.strides[0] has an "
        "unsatisfied constraint: expected 7, got 8")


# ---------------------------------------------------------------------------------------
# elem_offset and offset_factor
# ---------------------------------------------------------------------------------------
def _offset_func(factor):
    s0 = te.var("s0")
    s, args, binds = _double(lambda n, m: tir.decl_buffer(
        (n, m), name="A", strides=[s0, 1], offset_factor=factor))
    return kiln.build(s, args, binds=binds)


def test_symbolic_elem_offset_is_bound_from_the_byte_offset():
    f = _offset_func(4)
    base = _aligned((4, 32))
    base[...] = np.arange(128).reshape(4, 32)
    x = base[:, 8:20]  # starts 8 elements (32 bytes) after a 64-byte boundary
    a = kiln.nd.from_dlpack(x)
    dl = DLTensor.from_address(a._handle)
    assert (dl.data % 64, dl.byte_offset) == (0, 32)
    b = kiln.nd.empty(x.shape)
    f(a, b)
    np.testing.assert_array_equal(b.numpy(), 2 * x)


def test_offset_factor_is_checked():
    f = _offset_func(4)
    x = _aligned((4, 32))[:, 1:9]
    assert _message(f, kiln.nd.from_dlpack(x), kiln.nd.empty((4, 8))) == (
        "Argument arg0.elem_offset has an unsatisfied constraint: "
        "((A_elem_offset % 4) == 0), got elem_offset 1")


def test_constant_elem_offset_is_checked():
    s, args, binds = _double(lambda n, m: tir.decl_buffer((n, m), name="A", elem_offset=3))
    f = kiln.build(s, args, binds=binds)
    assert "A[(((i*m) + j) + 3)]" in str(kiln.lower(s, args, binds=binds, simple_mode=True))
    assert _message(f, kiln.nd.array(np.zeros((2, 2), "float32")), kiln.nd.empty((2, 2))) == (
        "Assert fail: (3 == int32(arg0.elem_offset)), Argument arg0.elem_offset has an "
        "unsatisfied constraint: expected 3, got 0")


# ---------------------------------------------------------------------------------------
# auto_broadcast (TVM's test_buffer_broadcast)
# ---------------------------------------------------------------------------------------
def test_auto_broadcast_buffers_broadcast_extent_one_dimensions():
    m0, m1, m2 = te.size_var("m0"), te.size_var("m1"), te.size_var("m2")
    n0, n1, n2 = te.size_var("n0"), te.size_var("n1"), te.size_var("n2")
    o0, o1, o2 = te.size_var("o0"), te.size_var("o1"), te.size_var("o2")
    A = te.placeholder((m0, m1, m2), name="A")
    B = te.placeholder((n0, n1, n2), name="B")
    C = te.compute((o0, o1, o2), lambda i, j, k: A[i, j, k] + B[i, j, k], name="C")
    Ab = tir.decl_buffer(A.shape, A.dtype, name="Ab", buffer_type="auto_broadcast")
    Bb = tir.decl_buffer(B.shape, B.dtype, name="Bb", buffer_type="auto_broadcast")
    s = te.create_schedule(C.op)
    fadd = kiln.build(s, [A, B, C], target="llvm", name="bcast_add", binds={A: Ab, B: Bb})
    rng = np.random.default_rng(0)
    a_np = rng.uniform(size=(2, 4, 3)).astype("float32")
    b_np = rng.uniform(size=(2, 1, 1)).astype("float32")
    c = kiln.nd.empty((2, 4, 3))
    fadd(kiln.nd.array(a_np), kiln.nd.array(b_np), c)
    np.testing.assert_allclose(c.numpy(), a_np + b_np, rtol=1e-6)


# ---------------------------------------------------------------------------------------
# the CUDA host checks the same
# ---------------------------------------------------------------------------------------
def test_cuda_host_binds_strides_and_says_the_same():
    s, args, binds = _double(lambda n, m: tir.decl_buffer((n, m), name="A", strides=[8, 1]))
    func = kiln.lower(s, args, binds=binds)["main"]
    checker = ArgChecker(func)
    a, b = kiln.nd.array(np.zeros((4, 5), "float32")), kiln.nd.empty((4, 5))
    c_msg = _message(kiln.build(s, args, binds=binds), a, b)
    for arr in (a, b):
        DLTensor.from_address(arr._handle).device.device_type = 2
    try:
        assert _message(checker, (a, b)) == c_msg
    finally:
        for arr in (a, b):
            DLTensor.from_address(arr._handle).device.device_type = 1


def test_cuda_build_with_symbolic_strides_and_offset():
    s0 = te.var("s0")
    s, args, binds = _double(lambda n, m: tir.decl_buffer((n, m), name="A", strides=[s0, 1],
                                                          offset_factor=4))
    B = args[1]
    bx, tx = s[B].split(s[B].fuse(*s[B].op.axis), factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    func = kiln.lower(s, args, binds=binds)["main"]
    a, b = kiln.nd.array(np.zeros((3, 5), "float32")), kiln.nd.empty((3, 5))
    for arr in (a, b):
        DLTensor.from_address(arr._handle).device.device_type = 2
    try:
        env = ArgChecker(func)((a, b))
    finally:
        for arr in (a, b):
            DLTensor.from_address(arr._handle).device.device_type = 1
    names = {k.name: v for k, v in env.items() if isinstance(k, Var)}
    assert names["s0"] == 5 and names["A_elem_offset"] == 0 and names["n"] == 3
