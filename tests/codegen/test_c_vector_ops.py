"""C code for vector expressions: branch-free lane selects (min/max, select, if_then_else)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te


def _c_body(mod) -> str:
    src = mod.get_source()
    return src[:src.index("KILN_DLL int32_t")]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int8", "uint8"])
@pytest.mark.parametrize("which", ["max", "min"])
def test_vector_min_max_is_a_branch_free_blend(dtype, which):
    n = 64
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.placeholder((n,), name="B", dtype=dtype)
    fn = te.max if which == "max" else te.min
    C = te.compute((n,), lambda i: fn(A[i], B[i]), name="C")
    s = te.create_schedule(C.op)
    _, xi = s[C].split(C.op.axis[0], factor=16)
    s[C].vectorize(xi)
    mod = kiln.build(s, [A, B, C])
    helper = [ln for ln in _c_body(mod).splitlines() if f"kiln_{which}_" in ln
              and "static inline" in ln][0]
    assert "for (" not in helper and "?" not in helper
    rng = np.random.default_rng(0)
    a = rng.integers(0, 100, n).astype(dtype)
    b = rng.integers(0, 100, n).astype(dtype)
    c = kiln.nd.empty((n,), dtype)
    mod(kiln.nd.array(a), kiln.nd.array(b), c)
    np.testing.assert_array_equal(c.numpy(), np.maximum(a, b) if which == "max"
                                  else np.minimum(a, b))


def test_vector_max_keeps_scalar_nan_semantics():
    # max(a, b) is a > b ? a : b lane by lane, as the scalar code: a NaN in a gives b
    n = 16
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: te.max(A[i], B[i]), name="C")
    s = te.create_schedule(C.op)
    s[C].vectorize(C.op.axis[0])
    mod = kiln.build(s, [A, B, C])
    a = np.full(n, np.nan, dtype="float32")
    a[::2] = 5
    b = np.arange(n, dtype="float32")
    c = kiln.nd.empty((n,))
    mod(kiln.nd.array(a), kiln.nd.array(b), c)
    np.testing.assert_array_equal(c.numpy(), np.where(a > b, a, b))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64"])
def test_vector_cast_to_bool_is_not_zero(dtype):
    """A vector cast to bool is ``x != 0`` lane by lane, as the scalar cast: 0.5 is true
    (a vector conversion truncated it to 0; found by the ONNX importer fuzz, a Cast to BOOL
    after a Relu)."""
    n = 64
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute((n,), lambda i: A[i].astype("bool"), name="B")
    s = te.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(xi)
    mod = kiln.build(s, [A, B])
    assert "__builtin_convertvector" in _c_body(mod)
    a = np.linspace(-3, 3, n).astype(dtype)
    a[::7] = 0
    b = kiln.nd.empty((n,), "bool")
    mod(kiln.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a != 0)
