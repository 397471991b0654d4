"""int8 conv2d / dense of ``topi.x86.int8`` against an int64 / float64 numpy reference:
exact int32 accumulation, requantization rounding half to even, saturation, relu clamp,
padding with the input zero point; the instruction GCC picks for the dot product."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.topi.x86 import int8 as I
from kiln.topi.x86 import int8_intrin as intrin


def _requantize_ref(acc: np.ndarray, mult: np.ndarray, zp: int, dtype: str, relu: bool):
    lo, hi = I.INT8_RANGE[dtype]
    y = np.rint((acc.astype(np.float32) * mult.astype(np.float32)).astype(np.float32))
    q = y.astype(np.int64) + zp
    return np.clip(q, max(lo, zp) if relu else lo, hi).astype(dtype)


def _conv_ref(x, w_oihw, bias, mult, strides, pads, dil, zx, zy, dtype, relu):
    n, c, h, wd = x.shape
    o, _, kh, kw = w_oihw.shape
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
            acc += np.einsum("nchw,oc->nohw", win, w_oihw[:, :, ky, kx].astype(np.int64))
    acc += bias[None, :, None, None]
    return _requantize_ref(acc, mult[None, :, None, None], zy, dtype, relu)


def _blocked(v: np.ndarray, block: int) -> np.ndarray:
    """NCHW ``v`` as ``NCHW{block}c`` (itself for block 0)."""
    if not block:
        return v
    n, c, h, w = v.shape
    return np.ascontiguousarray(v.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def _check_conv(xdt, odt, shape, strides, pads, dil, relu, target="llvm", layout_target=None,
                in_block=0, out_block=0):
    """The kernel (built for ``target``; its compute, hence the input layout, declared for
    ``layout_target``, the same by default; data and output NCHW or in blocks of
    ``in_block`` / ``out_block`` channels) against the int64 reference, bit for bit; the
    caller's bias carries the input zero point's shift for int8 data."""
    n, c, h, w, o, k = shape
    rng = np.random.default_rng(0)
    lo, hi = I.INT8_RANGE[xdt]
    ref_x = rng.integers(lo, hi + 1, (n, c, h, w)).astype(xdt)
    x = ref_x
    wt = rng.integers(-128, 128, (o, c, k, k)).astype("int8")
    bias = rng.integers(-5000, 5000, o).astype("int32")
    mult = rng.uniform(1e-4, 3e-3, o).astype("float32")
    zx, zy = (7, 3) if xdt == "uint8" else (-2, 1)
    shift = I.unsigned_zero_point(xdt, zx) - zx
    bias_k = (bias - shift * wt.reshape(o, -1).astype(np.int64).sum(1)).astype("int32")
    packed = I.pack_conv2d_weight(wt)
    x = _blocked(x, in_block)
    X = te.placeholder(x.shape, xdt, name="x")
    W = te.placeholder(packed.shape, "int8", name="w")
    B = te.placeholder((o,), "int32", name="b")
    M = te.placeholder((o,), "float32", name="m")
    with kiln.target.Target(layout_target or target):
        out = I.conv2d_NCHWc_int8(X, W, B, M, o, strides, pads, dil, zx, zy, odt, relu,
                                  out_block)
    with kiln.target.Target(target):
        f = kiln.build(I.schedule_conv2d_int8(out), [X, W, B, M, out], target=target)
    ref = _blocked(_conv_ref(ref_x, wt, bias, mult, strides, pads, dil, zx, zy, odt, relu),
                   out_block)
    got = kiln.nd.empty(ref.shape, odt)
    f(*(kiln.nd.array(a) for a in (x, packed, bias_k, mult)), got)
    np.testing.assert_array_equal(got.numpy(), ref)
    return f


@pytest.mark.parametrize("xdt,odt,shape,strides,pads,dil,relu", [
    # odd channel counts: a partial block of 16 outputs (plain loops), of 4 inputs
    ("uint8", "uint8", (1, 5, 9, 8, 6, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),
    ("int8", "int8", (1, 5, 9, 8, 6, 3), (2, 2), (0, 1, 2, 0), (1, 1), False),
    ("uint8", "int8", (2, 7, 9, 11, 19, 3), (1, 2), (2, 2, 2, 2), (2, 1), False),
    # blocks of 16 outputs: the micro-kernel
    ("int8", "uint8", (1, 6, 11, 13, 32, 3), (2, 2), (1, 2, 0, 1), (2, 1), True),
    ("uint8", "int8", (2, 3, 20, 20, 16, 7), (2, 2), (3, 3, 3, 3), (1, 1), False),
    ("uint8", "uint8", (1, 17, 7, 7, 48, 3), (1, 1), (1, 1, 1, 1), (1, 2), True),
    # 64 input channels: AMX tiles where the host has them (one, two partial tiles)
    ("uint8", "uint8", (1, 64, 6, 6, 32, 1), (1, 1), (0, 0, 0, 0), (1, 1), False),
    ("int8", "int8", (1, 128, 9, 40, 16, 3), (1, 2), (1, 1, 1, 1), (2, 1), True),
])
def test_conv2d_int8_matches_reference(xdt, odt, shape, strides, pads, dil, relu):
    _check_conv(xdt, odt, shape, strides, pads, dil, relu)


@pytest.mark.parametrize("mcpu,kind", [("alderlake", "avxvnni"), ("haswell", "avx2"),
                                       ("sandybridge", "generic")])
def test_conv2d_int8_micro_kernels_of_pinned_targets(mcpu, kind):
    """Each micro-kernel (VNNI on ymm, AVX2's vpmaddwd, portable C) is exact; the host
    runs them all (they use a subset of its instructions)."""
    target = f"llvm -mcpu={mcpu}"
    with kiln.target.Target(target):
        assert intrin.kernel_kind() == kind
    f = _check_conv("int8", "uint8", (1, 6, 9, 9, 32, 3), (1, 1), (1, 1, 1, 1), (1, 1), True,
                    target)
    assert intrin.kernel_name(intrin.row_block(9, kind), 2, (3, 3), 1, (1, 1), 4, kind) \
        in f.get_source()


@pytest.mark.parametrize("xdt,shape,strides,pads,in_block,out_block", [
    # blocked uint8 input without padding: read in place (1x1, strided 1x1)
    ("uint8", (1, 64, 6, 6, 32, 1), (1, 1), (0, 0, 0, 0), 64, 16),
    ("uint8", (1, 64, 8, 8, 128, 1), (2, 2), (0, 0, 0, 0), 16, 64),
    # padded: the blocked copy (int8 data shifted to uint8 in it)
    ("uint8", (1, 32, 9, 9, 64, 3), (1, 1), (1, 1, 1, 1), 16, 64),
    ("int8", (1, 128, 9, 12, 16, 3), (1, 2), (1, 1, 1, 1), 64, 16),
    # the stem: NCHW 3-channel data into a blocked output
    ("uint8", (1, 3, 20, 20, 64, 7), (2, 2), (3, 3, 3, 3), 0, 64),
])
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=alderlake", "llvm -mcpu=haswell"])
def test_conv2d_int8_blocked_layouts(xdt, shape, strides, pads, in_block, out_block, target):
    """``NCHW{b}c`` data and outputs (the layout int8 activations keep between layers),
    on the host's kernel (AMX where it has it) and the AVX-VNNI and AVX2 kernels."""
    _check_conv(xdt, "uint8", shape, strides, pads, (1, 1), True, target=target,
                in_block=in_block, out_block=out_block)


def test_conv2d_int8_vector_kernel_reads_the_amx_layout():
    """The AVX-512 VNNI kernel on the 64-channel blocks of the AMX layout: what runs where
    the OS denies the tiles (here: the compute declared for an AMX CPU, built for one
    without)."""
    if "avx512vnni" not in kiln.target.current_cpu().features:
        pytest.skip("the host has no AVX-512 VNNI")
    amx, vnni = "llvm -mcpu=sapphirerapids", "llvm -mcpu=icelake-server"
    assert intrin.channel_block(64, kiln.target.Target(amx).cpu) == 64
    f = _check_conv("uint8", "uint8", (1, 64, 7, 9, 16, 3), (1, 1), (1, 1, 1, 1), (1, 1),
                    False, target=vnni, layout_target=amx)
    assert "avx512vnni_9x16x64x3x3" in f.get_source()


def test_packed_weight_layout():
    w = np.arange(20 * 5 * 2 * 3).reshape(20, 5, 2, 3).astype("int8")
    p = I.pack_conv2d_weight(w)
    assert p.shape == (2, 2, 2, 3, 16, 4)
    assert p[1, 1, 0, 2, 3, 0] == w[19, 4, 0, 2] and p[1, 1, 0, 2, 3, 1] == 0
    assert not p[1, :, :, :, 4:].any()


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


@pytest.mark.parametrize("zp,dtype", [(3, "uint8"), (-5, "int8")])
def test_saturating_round_in_vector_lanes_is_nearbyint(zp, dtype):
    """The requantization's rounding as 16 vector lanes: half to even, saturation of values
    far beyond the 8-bit range (the +-2**22 guard) and of infinities, bit for bit as
    ``nearbyintf`` and a clamp."""
    halves = np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)
    edges = np.array([2.0**22, -2.0**22, 2.0**22 + 3, 1e9, -1e9, 3e38, -3e38, np.inf,
                      -np.inf, 0.49999997, -0.49999997, 127.5, 128.5, -128.5, 254.5],
                     np.float32)
    y = np.concatenate([halves, edges, np.random.default_rng(2).normal(0, 200, 41)
                        .astype(np.float32)])
    y = np.resize(y, -(-y.size // 16) * 16)
    lo, hi = I.INT8_RANGE[dtype]
    Y = te.placeholder(y.shape, "float32", name="y")
    out = te.compute(y.shape, lambda i: I.saturating_round(Y[i], zp, lo, hi), name="q")
    s = te.create_schedule(out.op)
    _, lanes = s[out].split(out.op.axis[0], factor=16)
    s[out].vectorize(lanes)
    f = kiln.build(s, [Y, out])
    assert "float32x16" in f.get_source()  # vector lanes, no nearbyintf call
    got = kiln.nd.empty(y.shape, "int32")
    f(kiln.nd.array(y), got)
    ref = np.clip(np.clip(np.rint(y), -2.0**40, 2.0**40).astype(np.int64) + zp, lo, hi)
    np.testing.assert_array_equal(got.numpy(), ref)


@pytest.mark.parametrize("target,block,relu", [
    ("llvm", 16, True),
    # two kernels compiled for each pinned target
    pytest.param("llvm -mcpu=alderlake", 64, False, marks=pytest.mark.slow),
    pytest.param("llvm -mcpu=haswell", 16, False, marks=pytest.mark.slow),
])
def test_conv2d_int8_with_fused_qnn_add_epilogue(target, block, relu):
    """A convolution with a residual ``qnn.add`` fused into its vectorized epilogue: the
    requantized uint8 value feeds the add without the ``int32(uint8(...))`` round trip,
    and the result is bit for bit the ``qnn.add`` kernel's (compiled alone, scalar) of the
    int64 reference convolution. (The C compiler contracts ``qnn.add``'s float32
    products and sum into a fused multiply-add in both, so numpy's ``np_add`` may differ
    by one in rare halfway cases.)"""
    from kiln.relay import quantize_ops

    c, hw, o = 32, 7, 64
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, c, hw, hw)).astype("uint8")
    res = rng.integers(0, 256, (1, o, hw, hw)).astype("uint8")
    wt = rng.integers(-128, 128, (o, c, 3, 3)).astype("int8")
    bias = rng.integers(-5000, 5000, o).astype("int32")
    mult = rng.uniform(1e-4, 3e-3, o).astype("float32")
    zx, zy = 7, 3
    attrs = {"lhs_scale": 0.05, "lhs_zero_point": zy, "rhs_scale": 0.125,
             "rhs_zero_point": 2, "output_scale": 0.1, "output_zero_point": 5,
             "out_dtype": "uint8", "relu": relu}
    packed = I.pack_conv2d_weight(wt)
    X = te.placeholder((1, c // 16, hw, hw, 16), "uint8", name="x")
    W = te.placeholder(packed.shape, "int8", name="w")
    B = te.placeholder((o,), "int32", name="b")
    M = te.placeholder((o,), "float32", name="m")
    R = te.placeholder((1, o // block, hw, hw, block), "uint8", name="r")
    with kiln.target.Target(target):
        conv = I.conv2d_NCHWc_int8(X, W, B, M, o, (1, 1), (1, 1, 1, 1), (1, 1), zx, zy,
                                   "uint8", False, block)
        out = quantize_ops.add([conv, R], attrs)
        s = I.schedule_conv2d_int8(out)
        assert "int32(uint8(" not in str(kiln.lower(s, [X, W, B, M, R, out]))
        f = kiln.build(s, [X, W, B, M, R, out], target=target)
    assert "uint8x16" in f.get_source()
    conv_ref = _conv_ref(x, wt, bias, mult, (1, 1), (1, 1, 1, 1), (1, 1), zx, zy, "uint8",
                         False)
    lhs, rhs = (_blocked(v, block) for v in (conv_ref, res))
    L = te.placeholder(lhs.shape, "uint8", name="lhs")
    alone = quantize_ops.add([L, R], attrs)
    add = kiln.build(te.create_schedule(alone.op), [L, R, alone], target=target)
    ref, got = (kiln.nd.empty(lhs.shape, "uint8") for _ in range(2))
    add(kiln.nd.array(lhs), kiln.nd.array(rhs), ref)
    f(*(kiln.nd.array(a) for a in (_blocked(x, 16), packed, bias, mult, rhs)), got)
    np.testing.assert_array_equal(got.numpy(), ref.numpy())


def test_unsupported_types_are_clear_errors():
    x = te.placeholder((2, 4), "float32", name="x")
    w = te.placeholder((3, 4), "int8", name="w")
    b = te.placeholder((3,), "int32", name="b")
    m = te.placeholder((3,), "float32", name="m")
    with pytest.raises(NotImplementedError, match="data must be int8 or uint8"):
        I.dense_int8(x, w, b, m, 0, "int8")
    with pytest.raises(NotImplementedError, match="output type must be"):
        I.dense_int8(te.placeholder((2, 4), "uint8"), w, b, m, 0, "int32")


@pytest.mark.slow  # three kernels compiled and assembled
def test_dot_product_uses_the_targets_multiply_add():
    """uint8 x int8 dot products compile to VNNI's ``vpdpbusd`` where the host has it,
    else to AVX2's ``vpmaddwd``/``vpmaddubsw`` multiply-adds; convolutions of 64-channel
    blocks to AMX's ``tdpbusd`` where it has AMX-INT8."""
    from kiln.runtime.compiler import compile_asm

    a = te.placeholder((4, 64), "uint8", name="a")
    w = te.placeholder((8, 64), "int8", name="w")
    b = te.placeholder((8,), "int32", name="b")
    m = te.placeholder((8,), "float32", name="m")
    out = I.dense_int8(a, w, b, m, 0, "uint8")
    asm = compile_asm(kiln.build(I.schedule_dense_int8(out), [a, w, b, m, out])
                      .get_source())
    conv = compile_asm(_check_conv("uint8", "uint8", (1, 8, 6, 6, 16, 3), (1, 1),
                                   (1, 1, 1, 1), (1, 1), False).get_source())
    features = kiln.target.current_cpu().features
    if intrin.uses_amx(64):
        amx = compile_asm(_check_conv("uint8", "uint8", (1, 64, 4, 4, 16, 1), (1, 1),
                                      (0, 0, 0, 0), (1, 1), False).get_source())
        assert "tdpbusd" in amx and "vpdpbusd" in amx  # the tiles, and the fallback
    if {"avx512vnni", "avxvnni"} & features:
        assert "vpdpbusd" in asm and "vpdpbusd" in conv
    elif "avx2" in features:
        assert "vpmaddwd" in asm or "vpmaddubsw" in asm
        assert "vpmaddwd" in conv
