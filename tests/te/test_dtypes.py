"""Every dtype end to end: build, run, compare with numpy (placeholders, casts, reductions)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
          "uint16", "uint32", "uint64"]


def data(dtype, n=64, seed=0):
    rng = np.random.default_rng(seed)
    if dtype.startswith("float"):
        return rng.standard_normal(n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100), n).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_multiply(dtype):
    n = 64
    A = te.placeholder((n,), dtype=dtype, name="A")
    B = te.placeholder((n,), dtype=dtype, name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] + A[i], name="C")
    assert C.dtype == dtype
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=16)
    s[C].vectorize(xi)
    mod = kiln.build(s, [A, B, C])
    a, b = data(dtype), data(dtype, seed=1)
    c = kiln.nd.empty((n,), dtype)
    mod(kiln.nd.array(a), kiln.nd.array(b), c)
    expect = a * b + a
    if dtype == "float16":
        np.testing.assert_allclose(c.numpy(), expect, rtol=1e-2, atol=1e-2)
    else:
        np.testing.assert_allclose(c.numpy(), expect, rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_reduction(dtype):
    n, m = 5, 7
    A = te.placeholder((n, m), dtype=dtype, name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    mod = kiln.build(s, [A, B])
    a = data(dtype, n * m).reshape(n, m)
    b = kiln.nd.empty((n,), dtype)
    mod(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), a.sum(axis=1, dtype=dtype), rtol=1e-2)


def test_bool_tensors():
    n = 33
    A = te.placeholder((n,), dtype="bool", name="A")
    B = te.placeholder((n,), dtype="float32", name="B")
    C = te.compute((n,), lambda i: te.if_then_else(A[i], B[i], -B[i]), name="C")
    D = te.compute((n,), lambda i: B[i] > 0.0, name="D")
    s = te.create_schedule([C.op, D.op])
    mod = kiln.build(s, [A, B, C, D])
    a = np.arange(n) % 3 == 0
    b = np.random.default_rng(0).standard_normal(n).astype("float32")
    c, d = kiln.nd.empty((n,)), kiln.nd.empty((n,), "bool")
    mod(kiln.nd.array(a), kiln.nd.array(b), c, d)
    np.testing.assert_array_equal(c.numpy(), np.where(a, b, -b))
    np.testing.assert_array_equal(d.numpy(), b > 0)


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int32", "float64"),
                                     ("float64", "float16"), ("uint8", "float32"),
                                     ("int64", "int8")])
def test_astype(src, dst):
    n = 16
    A = te.placeholder((n,), dtype=src, name="A")
    B = te.compute((n,), lambda i: A[i].astype(dst), name="B")
    s = te.create_schedule(B.op)
    mod = kiln.build(s, [A, B])
    a = data(src, n)
    b = kiln.nd.empty((n,), dst)
    mod(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), a.astype(dst), rtol=1e-3)


@pytest.mark.parametrize("name,ref", [("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt),
                                      ("tanh", np.tanh), ("abs", np.abs), ("floor", np.floor),
                                      ("ceil", np.ceil),
                                      ("sigmoid", lambda x: 1 / (1 + np.exp(-x)))])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_math_intrinsics(name, ref, dtype):
    n = 17
    A = te.placeholder((n,), dtype=dtype, name="A")
    fn = getattr(te, name)
    B = te.compute((n,), lambda i: fn(A[i]), name="B")
    s = te.create_schedule(B.op)
    mod = kiln.build(s, [A, B])
    a = np.linspace(0.1, 3.0, n).astype(dtype)
    b = kiln.nd.empty((n,), dtype)
    mod(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), ref(a), rtol=1e-5)


def test_power_max_min_of_expressions():
    n = 9
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.power(A[i], 2.0) + te.max(A[i], 0.5) - te.min(A[i], 0.5),
                   name="B")
    s = te.create_schedule(B.op)
    mod = kiln.build(s, [A, B])
    a = np.linspace(0, 1, n).astype("float32")
    b = kiln.nd.empty((n,))
    mod(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), a**2 + np.maximum(a, .5) - np.minimum(a, .5),
                               rtol=1e-6)


def test_floordiv_floormod_negative_operands():
    n = 11
    A = te.placeholder((n,), dtype="int32", name="A")
    B = te.compute((n,), lambda i: A[i] // 3 + A[i] % 3 * 100, name="B")
    s = te.create_schedule(B.op)
    mod = kiln.build(s, [A, B])
    a = np.arange(-5, 6, dtype="int32")
    b = kiln.nd.empty((n,), "int32")
    mod(kiln.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a // 3 + (a % 3) * 100)


def test_debug_flag_prints_every_pass(capsys):
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    kiln.lower(s, [A, B], debug=True)
    out = capsys.readouterr().out
    for name in ("schedule_ops", "storage_flatten", "simplify", "loop_partition", "vectorize"):
        assert f"after {name}" in out
