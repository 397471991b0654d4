"""int8 conv2d / dense of ``topi.x86.int8`` against an int64 / float64 numpy reference:
exact int32 accumulation, requantization rounding half to even, saturation, relu clamp,
padding with the input zero point; the instruction GCC picks for the dot product."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.topi.x86 import int8 as I


def _requantize_ref(acc: np.ndarray, mult: np.ndarray, zp: int, dtype: str, relu: bool):
    lo, hi = I.INT8_RANGE[dtype]
    y = np.rint((acc.astype(np.float32) * mult.astype(np.float32)).astype(np.float32))
    q = y.astype(np.int64) + zp
    return np.clip(q, max(lo, zp) if relu else lo, hi).astype(dtype)


def _conv_ref(x, w_ohwi, bias, mult, strides, pads, dil, zx, zy, dtype, relu):
    n, c, h, wd = x.shape
    o, kh, kw, _ = w_ohwi.shape
    t, l, b, r = pads
    xp = np.full((n, c, h + t + b, wd + l + r), zx, np.int64)
    xp[:, :, t:t + h, l:l + wd] = x
    oh = (h + t + b - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (wd + l + r - (kw - 1) * dil[1] - 1) // strides[1] + 1
    acc = np.zeros((n, o, oh, ow), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            win = xp[:, :, ky * dil[0]:ky * dil[0] + (oh - 1) * strides[0] + 1:strides[0],
                     kx * dil[1]:kx * dil[1] + (ow - 1) * strides[1] + 1:strides[1]]
            acc += np.einsum("nchw,oc->nohw", win, w_ohwi[:, ky, kx, :].astype(np.int64))
    acc += bias[None, :, None, None]
    return _requantize_ref(acc, mult[None, :, None, None], zy, dtype, relu)


@pytest.mark.parametrize("xdt,odt,strides,pads,dil,relu", [
    ("uint8", "uint8", (1, 1), (1, 1, 1, 1), (1, 1), True),
    ("int8", "int8", (2, 2), (0, 1, 2, 0), (1, 1), False),
    ("uint8", "int8", (1, 2), (2, 2, 2, 2), (2, 1), False),
])
def test_conv2d_int8_matches_reference(xdt, odt, strides, pads, dil, relu):
    rng = np.random.default_rng(0)
    lo, hi = I.INT8_RANGE[xdt]
    n, c, h, w, o, k = 1, 5, 9, 8, 6, 3
    x = rng.integers(lo, hi + 1, (n, c, h, w)).astype(xdt)
    wt = rng.integers(-128, 128, (o, k, k, c)).astype("int8")
    bias = rng.integers(-5000, 5000, o).astype("int32")
    mult = rng.uniform(1e-4, 3e-3, o).astype("float32")
    zx, zy = (7, 3) if xdt == "uint8" else (-2, 1)
    X = te.placeholder(x.shape, xdt, name="x")
    W = te.placeholder(wt.shape, "int8", name="w")
    B = te.placeholder((o,), "int32", name="b")
    M = te.placeholder((o,), "float32", name="m")
    out = I.conv2d_int8_nchw(X, W, B, M, strides, pads, dil, zx, zy, odt, relu)
    f = kiln.build(I.schedule_conv2d_int8(out), [X, W, B, M, out])
    ref = _conv_ref(x, wt, bias, mult, strides, pads, dil, zx, zy, odt, relu)
    got = kiln.nd.empty(ref.shape, odt)
    f(*(kiln.nd.array(a) for a in (x, wt, bias, mult)), got)
    np.testing.assert_array_equal(got.numpy(), ref)


@pytest.mark.parametrize("xdt,odt,relu", [("uint8", "uint8", False), ("int8", "int8", True)])
def test_dense_int8_matches_reference(xdt, odt, relu):
    rng = np.random.default_rng(1)
    lo, hi = I.INT8_RANGE[xdt]
    m, kk, n = 3, 70, 11
    a = rng.integers(lo, hi + 1, (m, kk)).astype(xdt)
    wt = rng.integers(-128, 128, (n, kk)).astype("int8")
    bias = rng.integers(-3000, 3000, n).astype("int32")
    mult = rng.uniform(1e-4, 2e-3, n).astype("float32")
    A = te.placeholder(a.shape, xdt, name="a")
    W = te.placeholder(wt.shape, "int8", name="w")
    B = te.placeholder((n,), "int32", name="b")
    M = te.placeholder((n,), "float32", name="m")
    out = I.dense_int8(A, W, B, M, 5, odt, relu)
    f = kiln.build(I.schedule_dense_int8(out), [A, W, B, M, out])
    acc = a.astype(np.int64) @ wt.astype(np.int64).T + bias
    ref = _requantize_ref(acc, mult[None, :], 5, odt, relu)
    got = kiln.nd.empty(ref.shape, odt)
    f(*(kiln.nd.array(v) for v in (a, wt, bias, mult)), got)
    np.testing.assert_array_equal(got.numpy(), ref)


def test_requantize_rounds_half_to_even():
    acc = te.placeholder((4,), "int32", name="acc")
    mult = te.placeholder((4,), "float32", name="m")
    out = I.requantize(acc, mult, 0, 0, "int8")
    f = kiln.build(te.create_schedule(out.op), [acc, mult, out])
    got = kiln.nd.empty((4,), "int8")
    f(kiln.nd.array(np.array([1, 3, -5, 1000], "int32")),
      kiln.nd.array(np.array([0.5, 0.5, 0.5, 1.0], "float32")), got)
    np.testing.assert_array_equal(got.numpy(), [0, 2, -2, 127])


def test_unsupported_types_are_clear_errors():
    x = te.placeholder((2, 4), "float32", name="x")
    w = te.placeholder((3, 4), "int8", name="w")
    b = te.placeholder((3,), "int32", name="b")
    m = te.placeholder((3,), "float32", name="m")
    with pytest.raises(NotImplementedError, match="data must be int8 or uint8"):
        I.dense_int8(x, w, b, m, 0, "int8")
    with pytest.raises(NotImplementedError, match="output type must be"):
        I.dense_int8(te.placeholder((2, 4), "uint8"), w, b, m, 0, "int32")


def test_dot_product_uses_the_targets_multiply_add():
    """uint8 x int8 dot products compile to VNNI's ``vpdpbusd`` where the host has it,
    else to AVX2's ``vpmaddwd``/``vpmaddubsw`` multiply-adds."""
    from kiln.runtime.compiler import compile_asm

    a = te.placeholder((4, 64), "uint8", name="a")
    w = te.placeholder((8, 64), "int8", name="w")
    b = te.placeholder((8,), "int32", name="b")
    m = te.placeholder((8,), "float32", name="m")
    out = I.dense_int8(a, w, b, m, 0, "uint8")
    asm = compile_asm(kiln.build(I.schedule_dense_int8(out), [a, w, b, m, out])
                      .get_source())
    features = kiln.target.current_cpu().features
    if {"avx512vnni", "avxvnni"} & features:
        assert "vpdpbusd" in asm
    elif "avx2" in features:
        assert "vpmaddwd" in asm or "vpmaddubsw" in asm
