"""Index types chosen from the extents (TVM's int64 rule, docs/codegen.md "Index types").

A loop or axis whose values may not fit in int32 counts in int64: the axes of a tensor of
2^31 or more elements, the loops split from them, a fused loop whose extent overflows int32,
and every loop over a ``te.var("n", "int64")``; a buffer of 2^31 or more elements is indexed
in int64 even with int32 indices. Everything that fits stays int32. The big programs are only
lowered and compiled (their C is checked); the run over 2 GiB is marked slow.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.ir.op import index_dtype

BIG = 2**31 + 5


def _compute_source(mod) -> str:
    """The C of the compute function (the loop program, not the argument checks)."""
    src = mod.get_source()
    start = src.index("static int32_t default_function_compute(")
    return src[start:src.index("\n}\n", start)]


def _loop_types(src: str) -> dict[str, str]:
    return dict((v, t) for t, v in re.findall(r"for \((\w+) (\w+) = ", src))


def _split_parallel_vectorize(n: int):
    """The vector add of book chapter 4.3 split by 8, parallel and vectorized."""
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].parallel(xo)
    s[C].vectorize(xi)
    return s, [A, B, C]


def test_index_dtype_rule():
    assert index_dtype(2**31 - 1) == "int32"
    assert index_dtype(2**31) == "int64"
    assert index_dtype(70000, 70000) == "int64" and index_dtype(40000, 40000) == "int32"
    assert index_dtype(te.var("n", "int64")) == "int64"
    assert index_dtype(te.var("n"), 70000) == "int32"
    # a small constant counts by its value: numpy int64 shapes keep int32 indices
    assert index_dtype(kiln.tir.const(30, "int64")) == "int32"


def test_openmp_vector_add_beyond_int32_compiles_with_int64_counters():
    s, args = _split_parallel_vectorize(BIG)
    assert args[2].op.axis[0].var.dtype == "int64"
    src = _compute_source(kiln.build(s, args))  # the build runs the C compiler
    assert re.search(r"#pragma omp parallel for[^\n]*\n\s*for \(int64_t i_outer = 0;", src)
    assert set(_loop_types(src).values()) == {"int64_t"}
    # the last 5 elements are the loop partition's tail
    assert "INT64_C(2147483648)" in src


def test_small_vector_add_keeps_int32_counters():
    s, args = _split_parallel_vectorize(1000)
    assert set(_loop_types(_compute_source(kiln.build(s, args))).values()) == {"int32_t"}


def test_fused_70000_by_70000_is_int64():
    n = 70000
    A = te.placeholder((n, n), "int8", name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] * kiln.tir.const(2, "int8"), name="B")
    s = te.create_schedule(B.op)
    fused = s[B].fuse(*B.op.axis)
    fo, fi = s[B].split(fused, factor=16)
    s[B].parallel(fo)
    s[B].vectorize(fi)
    assert fused.var.dtype == "int64"
    src = _compute_source(kiln.build(s, [A, B]))
    assert _loop_types(src) == {"i_j_fused_outer": "int64_t"}
    assert "*(int8x16_u*)(B + (i_j_fused_outer * INT64_C(16)))" in src


def test_fused_reduction_axes_overflowing_int32_are_int64():
    """Two int32 reduce axes whose fused extent overflows: an int64 loop; the flat index
    ``k1 * n + k2`` of the int32 axis values folds back into the fused loop variable."""
    n = 70000
    A = te.placeholder((n, n), "int8", name="A")
    k1 = te.reduce_axis((0, n), "k1")
    k2 = te.reduce_axis((0, n), "k2")
    C = te.compute((1,), lambda i: te.max(A[k1, k2], axis=[k1, k2]), name="C")
    s = te.create_schedule(C.op)
    assert k1.var.dtype == k2.var.dtype == "int32"
    fused = s[C].fuse(k1, k2)
    assert fused.var.dtype == "int64"
    src = _compute_source(kiln.build(s, [A, C]))
    assert _loop_types(src)["k1_k2_fused"] == "int64_t"
    assert "A[k1_k2_fused]" in src


def test_int32_fuse_stays_int32():
    A = te.placeholder((300, 400), name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j] + 1, name="B")
    s = te.create_schedule(B.op)
    assert s[B].fuse(*B.op.axis).var.dtype == "int32"


def test_int32_indices_into_a_big_buffer_are_widened():
    n = 70000
    A = te.placeholder((n, n), "int8", name="A")
    B = te.compute((64,), lambda i: A[n - 1, i], name="B")
    assert B.op.axis[0].var.dtype == "int32"
    s = te.create_schedule(B.op)
    src = _compute_source(kiln.build(s, [A, B]))
    assert _loop_types(src) == {"i": "int32_t"}
    assert "B[i] = A[(((int64_t)(i)) + INT64_C(4899930000))];" in src


def test_reduce_axis_beyond_int32_is_int64():
    A = te.placeholder((BIG,), "int8", name="A")
    k = te.reduce_axis((0, BIG), "k")
    C = te.compute((1,), lambda i: te.max(A[k], axis=k), name="C")
    assert k.var.dtype == "int64"
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=64)
    CF = s.rfactor(C, ki)
    assert CF.op.axis[0].var.dtype == "int64"
    src = _compute_source(kiln.build(s, [A, C]))
    assert _loop_types(src)["k_outer"] == "int64_t"


def _int64_var_program(primitive: str):
    n = te.var("n", "int64")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    (x,) = C.op.axis
    if primitive == "split_unroll":
        xo, xi = s[C].split(x, factor=4)
        s[C].unroll(xi)
    elif primitive == "parallel_vectorize":
        xo, xi = s[C].split(x, factor=8)
        s[C].parallel(xo)
        s[C].vectorize(xi)
    elif primitive == "compute_at":
        xo, xi = s[C].split(x, factor=8)
        s[B].compute_at(s[C], xo)
    elif primitive == "cache_write":
        CL = s.cache_write(C, "local")
        xo, xi = s[C].split(x, factor=8)
        s[CL].compute_at(s[C], xo)
    elif primitive == "nparts_fuse":
        xo, xi = s[C].split(x, nparts=3)
        s[C].fuse(xo, xi)
    return s, [A, C, n]


@pytest.mark.parametrize("primitive", ["split_unroll", "parallel_vectorize", "compute_at",
                                       "cache_write", "nparts_fuse"])
def test_int64_shape_variable_gives_int64_loops(primitive):
    s, args = _int64_var_program(primitive)
    mod = kiln.build(s, args)
    assert set(_loop_types(_compute_source(mod)).values()) == {"int64_t"}
    for size in (1, 37):
        a = np.arange(size, dtype="float32")
        c = kiln.nd.empty((size,))
        mod(kiln.nd.array(a), c, size)
        np.testing.assert_allclose(c.numpy(), a * 2 + 1)


def _aligned_zeros(n: int) -> np.ndarray:
    """int8 zeros kiln can take without a copy (64-byte aligned); pages are mapped on use."""
    buf = np.zeros(n + 64, "int8")
    start = -buf.ctypes.data % 64
    return buf[start:start + n]


@pytest.mark.slow
def test_run_over_two_gib_reaches_the_far_end():
    """An int8 array of 2^31 + 64 elements (2 GiB; numpy maps the untouched pages lazily):
    the elementwise OpenMP loop and a reduction both reach the elements past 2^31."""
    n = 2**31 + 64
    A = te.placeholder((n,), "int8", name="A")
    B = te.compute((n,), lambda i: A[i] + kiln.tir.const(1, "int8"), name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=64)
    s[B].parallel(xo)
    s[B].vectorize(xi)
    add = kiln.build(s, [A, B])
    assert set(_loop_types(_compute_source(add)).values()) == {"int64_t"}
    k = te.reduce_axis((0, n), "k")
    M = te.compute((1,), lambda _: te.max(A[k], axis=k), name="M")
    largest = kiln.build(te.create_schedule(M.op), [A, M])
    assert _loop_types(_compute_source(largest))["k"] == "int64_t"

    a = _aligned_zeros(n)
    a[[0, 2**31 - 1, 2**31, n - 1]] = [3, 4, 5, 9]
    m = kiln.nd.empty((1,), "int8")
    largest(kiln.nd.from_dlpack(a), m)
    assert m.numpy()[0] == 9
    b = _aligned_zeros(n)
    add(kiln.nd.from_dlpack(a), kiln.nd.from_dlpack(b))
    assert b[[0, 1, 2**31 - 1, 2**31, n - 1]].tolist() == [4, 1, 5, 6, 10]
