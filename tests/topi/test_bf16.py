"""bf16 conv2d of ``topi.x86.bf16`` against float64 numpy references (dense:
test_dense_bf16.py).

Tolerances, stated per check:

* against float64 on the bf16-rounded operands (what the kernels compute: exact products,
  float32 sums): ``|y - ref| <= 1e-5 * (|x| @ |w|) + 1e-6``, float32 summation error of up
  to a few hundred terms;
* against float64 on the unrounded float32 operands: ``|y - ref| <= 2**-7 * (|x| @ |w|)``
  (each operand rounded to 8 significant bits: a relative error of at most ``2**-9`` each);
* the rounding itself (``np_to_bf16_bits`` and the C helpers of the runtime header) bit for
  bit: to nearest even, NaN kept NaN, infinities kept.

Both micro-kernel paths run where the host has them: AMX-BF16 tiles, and AVX-512 BF16
vectors (forced on an AMX host by hiding the AMX features).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.target import current_cpu
from kiln.topi.x86 import bf16 as B
from kiln.topi.x86 import bf16_intrin

requires_bf16 = pytest.mark.skipif(bf16_intrin.BF16_FEATURE not in current_cpu().features,
                                   reason="this CPU has no AVX-512 BF16")
PATHS = ["amx", "avx512"]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """The micro-kernel path under test; AMX skipped where the host lacks it, AVX-512
    forced by hiding the AMX features."""
    if request.param == "amx" and not bf16_intrin.uses_amx():
        pytest.skip("this CPU has no AMX-BF16")
    if request.param == "avx512":
        monkeypatch.setattr(bf16_intrin, "AMX_FEATURES", frozenset({"no-amx-here"}))
    return request.param


def refuse_amx_tiles(monkeypatch) -> None:
    """Make the generated code behave as in a process Linux denies the AMX tile state (its
    request fails), so AMX blocks run in AVX-512 pieces; skips without AMX-BF16."""
    if not bf16_intrin.uses_amx():
        pytest.skip("this CPU has no AMX-BF16")
    granted = "syscall(SYS_arch_prctl, 0x1023, 18) == 0"
    assert granted in bf16_intrin.AMX_COMMON
    monkeypatch.setattr(bf16_intrin, "AMX_COMMON",
                        bf16_intrin.AMX_COMMON.replace(granted, "0"))


def _rounded(x: np.ndarray) -> np.ndarray:
    return B.np_from_bf16_bits(B.np_to_bf16_bits(x)).astype(np.float64)


def _check(y: np.ndarray, x_w_product, x: np.ndarray, w: np.ndarray, bias: np.ndarray):
    """``y`` against both references (module doc); ``x_w_product(a, b)`` is the operator."""
    exact = x_w_product(_rounded(x), _rounded(w)) + bias
    scale = x_w_product(np.abs(x).astype(np.float64), np.abs(w).astype(np.float64))
    assert np.all(np.abs(y - exact) <= 1e-5 * scale + 1e-6)
    unrounded = x_w_product(x.astype(np.float64), w.astype(np.float64)) + bias
    assert np.all(np.abs(y - unrounded) <= 2.0 ** -7 * scale)


def test_rounding_to_bf16_is_nearest_even_in_numpy_and_c():
    one = np.float32(1.0)
    ulp = np.float32(2.0 ** -7)  # bf16's spacing at 1.0
    cases = np.array([one, one + ulp / 2, one + 3 * ulp / 2, one + ulp / 2 + 2.0 ** -20,
                      -2.5, 3.0e38, np.inf, -np.inf, np.nan, 1e-40, 0.0, -0.0], np.float32)
    bits = B.np_to_bf16_bits(cases)
    assert [hex(b) for b in bits[:4]] == ["0x3f80", "0x3f80", "0x3f82", "0x3f81"]
    back = B.np_from_bf16_bits(bits)
    assert np.isnan(back[8]) and back[6] == np.inf and back[7] == -np.inf
    assert np.array_equal(back[[0, 4, 10]], cases[[0, 4, 10]])
    values = np.concatenate([cases, np.random.default_rng(0).standard_normal(500)
                             .astype(np.float32) * 1e3])
    X = te.placeholder(values.shape, name="x")
    R = te.compute(X.shape, lambda i: bf16_intrin.round_to_bf16(X[i]), name="r")
    F = te.compute(X.shape, lambda i: bf16_intrin.to_float32(R[i]), name="f")
    s = te.create_schedule([R.op, F.op])
    f = kiln.build(s, [X, R, F])
    r, back_c = kiln.nd.empty(values.shape, "uint16"), kiln.nd.empty(values.shape)
    f(kiln.nd.array(values), r, back_c)
    assert np.array_equal(r.numpy(), B.np_to_bf16_bits(values))
    assert np.array_equal(back_c.numpy(), B.np_from_bf16_bits(r.numpy()), equal_nan=True)


def test_rounding_to_bf16_vectorizes_bit_for_bit():
    """``round_to_bf16`` is lane-wise integer arithmetic: a ``vectorize``d loop of roundings
    (a kernel's tail writing bf16) is vector code with no call, and gives the same bits,
    ties to even, NaNs of either sign and payload quiet, infinities and denormals too."""
    special = np.array([0x7F800001, 0xFFFFFFFF, 0xFF800001, 0x7FC00000, 0x7F800000,
                        0xFF800000, 0x00000001, 0x80000000, 0x3F808000, 0x3F818000,
                        0x7F7FFFFF, 0xBF7FFFFF, 0x0007FFFF, 0x807F8000, 0x00000000,
                        0x3F800000], np.uint32).view(np.float32)
    rng = np.random.default_rng(1)
    values = np.concatenate([special, rng.integers(0, 2 ** 32, 4080, dtype=np.uint64)
                             .astype(np.uint32).view(np.float32)])
    X = te.placeholder(values.shape, name="x")
    R = te.compute(X.shape, lambda i: bf16_intrin.round_to_bf16(X[i]), name="r")
    s = te.create_schedule(R.op)
    s[R].vectorize(s[R].split(R.op.axis[0], factor=16)[1])
    f = kiln.build(s, [X, R])
    assert "kiln_bf16_from_f32(x" not in f.get_source() and "uint16x16" in f.get_source()
    r = kiln.nd.empty(values.shape, "uint16")
    f(kiln.nd.array(values), r)
    assert np.array_equal(r.numpy(), B.np_to_bf16_bits(values))


def test_block_shapes():
    assert B.block_shape(64, 56, amx=True) == (32, 56)  # AMX: any columns, in chunks of 32
    assert B.block_shape(512, 49, amx=True) == (32, 49)
    assert B.block_shape(256, 196, amx=True) == (32, 28)  # 1 chunk per 28 columns, not 4 per 98
    assert B.block_shape(1000, 1, amx=True) == (25, 1)
    assert B.block_shape(64, 56, amx=False) == (8, 28)  # 8 rows x 2 vectors: 16 accumulators
    assert B.block_shape(20, 81, amx=False) == (10, 27)
    assert B.aligned_reduction(196) == 224 and B.aligned_reduction(576) == 576


def test_conv_tiling_of_resnet18_layers_on_two_threads():
    """(rows per tile, channel groups, mr, nr): tiles of at least as many pixels as
    channels that pack at most half again their input rows, cut to make 4 tasks where
    tiles keep 32 pixels; channel groups only for the 7x7 layers."""
    assert B.conv_tiling(64, 112, 112, 2, True, halo=5, stride=2) == (7, 1, 32, 112)  # stem
    assert B.conv_tiling(64, 112, 112, 2, True) == (1, 1, 32, 112)  # no halo: a row a tile
    assert B.conv_tiling(64, 56, 56, 2, True, halo=2) == (4, 1, 32, 32)
    assert B.conv_tiling(128, 28, 28, 2, True, halo=2) == (7, 1, 32, 28)
    assert B.conv_tiling(256, 14, 14, 2, True, halo=2) == (7, 1, 32, 98)
    assert B.conv_tiling(512, 7, 7, 2, True, halo=2) == (7, 2, 32, 49)
    assert B.conv_tiling(512, 7, 7, 1, True, halo=2) == (7, 1, 32, 49)
    assert B.conv_tiling(512, 7, 7, 2, False, halo=2) == (7, 2, 16, 7)  # AVX-512 blocks
    # direct: the micro-kernel takes the tile's pixels whole, 32 channels at a time
    assert B.conv_tiling(64, 56, 56, 2, True, halo=2, block=32) == (4, 1, 32, 224)
    assert B.conv_tiling(512, 7, 7, 2, False, halo=2, block=32) == (7, 2, 32, 49)


def test_packed_weight_layout():
    c = B.pack_conv2d_weight(np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2))
    assert c.shape == (2, 32)  # k = (ry * KW + rx) * 4 + c, channels padded from 3 to 4
    assert B.np_from_bf16_bits(c[1, [0, 1, 2, 3, 4]]).tolist() == [12, 16, 20, 0, 13]


def _conv64(x: np.ndarray, w: np.ndarray, strides, pads, dil) -> np.ndarray:
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    t, l, bo, r = pads
    xp = np.zeros((n, c, h + t + bo, wd + l + r))
    xp[:, :, t:t + h, l:l + wd] = x
    oh = (h + t + bo - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (wd + l + r - (kw - 1) * dil[1] - 1) // strides[1] + 1
    y = np.zeros((n, o, oh, ow))
    for ky in range(kh):
        for kx in range(kw):
            win = xp[:, :, ky * dil[0]:ky * dil[0] + (oh - 1) * strides[0] + 1:strides[0],
                     kx * dil[1]:kx * dil[1] + (ow - 1) * strides[1] + 1:strides[1]]
            y += np.einsum("nchw,oc->nohw", win, w[:, :, ky, kx])
    return y


@requires_bf16
@pytest.mark.parametrize("shape,o,k,strides,pads,dil", [
    ((1, 3, 17, 17), 20, 3, (2, 2), (1, 1, 1, 1), (1, 1)),    # odd channels, stride 2
    ((2, 8, 9, 9), 64, 3, (1, 1), (1, 1, 1, 1), (1, 1)),      # batch 2, whole-image mode
    ((1, 5, 36, 36), 16, 1, (1, 1), (0, 0, 0, 0), (1, 1)),    # 1x1, per-row mode
    ((1, 4, 12, 12), 24, 3, (1, 2), (2, 0, 1, 2), (2, 1)),    # dilation, uneven padding
    ((1, 7, 10, 10), 33, 3, (1, 1), (1, 1, 1, 1), (1, 1)),    # odd channels in and out
    ((1, 64, 7, 7), 64, 3, (1, 1), (1, 1, 1, 1), (1, 1)),     # channel groups, 49 pixels
])
def test_conv2d_bf16_matches_float64(path, shape, o, k, strides, pads, dil):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((o, shape[1], k, k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    _check_conv(x, w, b, strides, pads, dil)


def _check_conv(x, w, b, strides, pads, dil, target: str = "llvm"):
    """Build the bf16 convolution for ``target``, run it and check it (module doc); returns
    the built function."""
    o, _, k, _ = w.shape
    packed = B.pack_conv2d_weight(w, strides)
    X = te.placeholder(x.shape, name="x")
    W = te.placeholder(packed.shape, "uint16", name="w")
    Bb = te.placeholder((o,), name="b")
    with kiln.target.Target(target):
        out = B.conv2d_bf16_nchw(X, W, Bb, (k, k), o, strides, pads, dil)
        f = kiln.build(B.schedule_conv2d_bf16(out), [X, W, Bb, out], target=target)
    y = kiln.nd.empty(out.shape)
    f(kiln.nd.array(x), kiln.nd.array(packed), kiln.nd.array(b), y)
    _check(y.numpy(), lambda a, c: _conv64(a, c, strides, pads, dil), x, w,
           b[None, :, None, None])
    return f


#: the targets of the direct convolution's two micro-kernels
DIRECT_TARGETS = {"amx": "llvm -mcpu=sapphirerapids", "avx512": "llvm -mcpu=cooperlake"}


def test_direct_convolutions_and_their_weight_layout():
    assert B.is_direct((64, 64, 3, 3), (1, 1)) and B.is_direct((48, 32, 5, 5), (1, 1))
    assert B.is_direct((64, 64, 3, 3), (2, 2))  # strided: the input split into planes
    assert B.is_direct((64, 64, 1, 1), (1, 1)) and B.is_direct((64, 64, 1, 1), (2, 2))
    assert not B.is_direct((20, 64, 3, 3), (1, 1)) and not B.is_direct((64, 48, 3, 3), (1, 1))
    # a stem's 3 channels: its 7 columns folded into the channel block (21 of 32)
    assert B.is_direct((64, 3, 7, 7), (2, 2)) and B.folds_columns((64, 3, 7, 7))
    assert not B.folds_columns((64, 64, 3, 3)) and not B.folds_columns((64, 12, 3, 3))
    stem = B.pack_conv2d_weight(np.arange(64 * 3 * 7 * 7, dtype=np.float32)
                                .reshape(64, 3, 7, 7) / 64, (2, 2))
    assert stem.shape == (2, 7, 1, 1, 16, 32, 2)  # a 7 x 1 kernel over 32 channels
    # output channel 1, tap (ry, rx) = (2, 4), input channel 2: folded channel 4 * 3 + 2
    assert B.np_from_bf16_bits(stem[0, 2, 0, 0, 7, 1, 0]) == \
        B.np_from_bf16_bits(B.np_to_bf16_bits(np.float32((((1 * 3 + 2) * 7 + 2) * 7 + 4) / 64)))
    assert not stem[:, :, 0, 0, 11:].any()  # channels 22 to 31: zeros
    w = np.random.default_rng(5).standard_normal((48, 64, 3, 3)).astype(np.float32)
    p = B.pack_conv2d_weight(w)  # [O/16, KH, KW, C/32, 16 pairs, 16, 2]
    assert p.shape == (3, 3, 3, 2, 16, 16, 2)
    assert p[1, 2, 0, 1, 5, 7, 1] == B.np_to_bf16_bits(w[16 + 7, 32 + 2 * 5 + 1, 2, 0])
    assert B.pack_conv2d_weight(w, (2, 2)).shape == p.shape  # the same panels, any stride
    assert B.pack_conv2d_weight(w[:, :48], (2, 2)).shape == (48, 448)  # im2col: [O, K']
    block = bf16_intrin.ConvBlock(32, 4, 56, (3, 3), (1, 1), 2)
    assert (block.width, block.in_rows, block.pixels, block.phases) == (58, 6, 230, (1, 1))
    # (a, b) offsets of taps (ry, rx, channel block) = (0, 0, 1), (0, 1, 0)
    assert block.taps[1:3] == ((6 * 58 * 32, 32 * 32), (32, 2 * 32 * 32))
    # stride 2: four planes of 3 x 29 pixels per block of 32 channels (rows 2y + py, columns
    # 2x + px of the padded input); tap (ry, rx) = (1, 2) reads plane (1, 0) one column on
    strided = bf16_intrin.ConvBlock(32, 2, 28, (3, 3), (1, 1), 2, strides=(2, 2))
    assert (strided.width, strided.in_rows, strided.phases) == (29, 3, (2, 2))
    plane = 3 * 29 * 32
    assert strided.taps[(1 * 3 + 2) * 2] == (2 * plane + 32, (1 * 3 + 2) * 2 * 32 * 32)
    assert strided.taps[(1 * 3 + 2) * 2 + 1][0] == (4 + 2) * plane + 32  # channel block 1
    # a 1x1 stride-2 kernel reads one plane, the even rows and columns; a dilation of 2 at
    # stride 2 too
    assert bf16_intrin.ConvBlock(16, 7, 7, (1, 1), (1, 1), 1, strides=(2, 2)).phases == (1, 1)
    assert bf16_intrin.ConvBlock(16, 7, 7, (3, 3), (2, 2), 1, strides=(2, 2)).width == 9


@requires_bf16
@pytest.mark.parametrize("kind", DIRECT_TARGETS)
@pytest.mark.parametrize("shape,o,k,pads,dil", [
    ((1, 32, 9, 9), 64, 3, (1, 1, 1, 1), (1, 1)),      # two blocks of 32 channels
    ((2, 64, 10, 12), 48, 3, (2, 0, 1, 2), (2, 1)),   # batch 2, blocks of 16, dilation
    ((1, 64, 7, 7), 64, 3, (1, 1, 1, 1), (1, 1)),     # channel groups; 61 = 32 + 29 pixels
])
def test_direct_conv2d_bf16_matches_float64(kind, shape, o, k, pads, dil):
    """Stride-1 convolutions read the blocked input without im2col, on AMX tiles
    (``tdpbf16ps``) and on AVX-512 BF16 alone (``vdpbf16ps``), each target pinned."""
    _check_direct(kind, shape, o, k, (1, 1), pads, dil)


@requires_bf16
@pytest.mark.parametrize("kind", DIRECT_TARGETS)
@pytest.mark.parametrize("shape,o,k,strides,pads,dil", [
    ((1, 64, 12, 11), 32, 3, (2, 2), (1, 1, 1, 1), (1, 1)),   # ResNet's 3x3 stride 2, odd W
    pytest.param((1, 64, 9, 9), 48, 1, (2, 2), (0, 0, 0, 0), (1, 1),  # 1x1 stride 2: a plane
                 marks=pytest.mark.slow),
    pytest.param((1, 32, 10, 13), 48, 3, (2, 1), (2, 0, 1, 2), (2, 1),  # mixed strides,
                 marks=pytest.mark.slow),                                 # dilation
])
def test_strided_and_pointwise_direct_conv2d_bf16_match_float64(kind, shape, o, k, strides,
                                                                pads, dil):
    """Strided convolutions read their input split into planes (one per residue of the
    taps: stride 2 and 3x3, four) and pointwise ones their input as it is, each tap a
    stride-1 read of one plane, on both micro-kernels."""
    _check_direct(kind, shape, o, k, strides, pads, dil)


@requires_bf16
@pytest.mark.parametrize("kind", DIRECT_TARGETS)
@pytest.mark.parametrize("shape,o,k,strides,pads,dil", [
    ((1, 8, 9, 9), 16, 3, (1, 1), (1, 1, 1, 1), (1, 1)),        # 8 channels x 3 columns
    pytest.param((1, 3, 30, 29), 64, 7, (2, 2), (3, 3, 3, 3), (1, 1),  # ResNet's stem
                 marks=pytest.mark.slow),
    pytest.param((2, 5, 11, 10), 32, 3, (2, 1), (2, 1, 0, 2), (1, 2),  # strides, dilation
                 marks=pytest.mark.slow),
])
def test_direct_conv2d_bf16_with_folded_columns_matches_float64(kind, shape, o, k, strides,
                                                                pads, dil):
    """Few input channels (a stem's 3): the kernel's columns folded into the channel block
    by the packing copy, a convolution of a ``KH x 1`` kernel over 32 channels."""
    _check_direct(kind, shape, o, k, strides, pads, dil)


def _check_direct(kind, shape, o, k, strides, pads, dil):
    target = DIRECT_TARGETS[kind]
    if not kiln.target.Target(target).cpu.features <= current_cpu().features:
        pytest.skip(f"this CPU cannot run {target}'s instructions")
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((o, shape[1], k, k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    source = _check_conv(x, w, b, strides, pads, dil, target).get_source()
    assert "kiln_bf16_conv_" in source and "T_bf16_cols" not in source
    assert ("_tile_dpbf16ps" in source) == (kind == "amx")


@requires_bf16
@pytest.mark.slow
def test_amx_blocks_run_in_avx512_pieces_where_the_os_refuses_the_tiles(monkeypatch):
    """A direct convolution's AMX blocks computed by the AVX-512 fallback, as in a process
    Linux denies the tile state (a dense layer's: test_dense_bf16.py)."""
    refuse_amx_tiles(monkeypatch)
    rng = np.random.default_rng(4)
    # a direct convolution's blocks: 61 pixels (32 + 29) x 32 channels
    x = rng.standard_normal((1, 32, 7, 7)).astype(np.float32)
    w = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    _check_conv(x, w, np.zeros(32, np.float32), (1, 1), (1, 1, 1, 1), (1, 1))


@requires_bf16
def _blocked(x: np.ndarray, b: int) -> np.ndarray:
    """NCHW -> ``NCHW{b}c`` (``[N, C/b, H, W, b]``)."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


@requires_bf16
@pytest.mark.slow
@pytest.mark.parametrize("kind", DIRECT_TARGETS)
@pytest.mark.parametrize("in_block,dtype,o,out_block", [
    (16, "uint16", 64, 16),    # a chain's inner convolution: bf16 NCHW16c in, NCHW16c out
    (16, "float32", 48, 16),   # float32 blocked input (a residual stream); 16-channel calls
    (32, "uint16", 64, 32),    # the micro-kernel's own block
    (0, "float32", 64, 16),    # a chain's first convolution: NCHW in, blocked out
    (16, "float32", 64, 0),    # a chain's last: blocked in, NCHW out
])
def test_direct_conv2d_bf16_in_blocked_layouts(kind, in_block, dtype, o, out_block):
    """A direct convolution reads ``NCHW{b}c`` input (float32 or bf16 bits) through its
    packing copy and writes ``NCHW{b}c`` output from the micro-kernel's ``pixels x
    channels`` accumulators stored as they are (no transpose), on both micro-kernels."""
    target = DIRECT_TARGETS[kind]
    if not kiln.target.Target(target).cpu.features <= current_cpu().features:
        pytest.skip(f"this CPU cannot run {target}'s instructions")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 64, 6, 7)).astype(np.float32)
    w = rng.standard_normal((o, 64, 3, 3)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    data = _blocked(x, in_block) if in_block else x
    data = B.np_to_bf16_bits(data) if dtype == "uint16" else data
    packed = B.pack_conv2d_weight(w)
    X = te.placeholder(data.shape, dtype, name="x")
    W = te.placeholder(packed.shape, "uint16", name="w")
    Bb = te.placeholder((o,), name="b")
    with kiln.target.Target(target):
        out = B.conv2d_bf16_nchw(X, W, Bb, (3, 3), o, (1, 1), (1, 1, 1, 1), (1, 1), out_block)
        f = kiln.build(B.schedule_conv2d_bf16(out), [X, W, Bb, out], target=target)
    y = kiln.nd.empty(out.shape)
    f(kiln.nd.array(data), kiln.nd.array(packed), kiln.nd.array(b), y)
    y = y.numpy()
    if out_block:
        assert y.shape == (1, o // out_block, 6, 7, out_block)
        y = y.transpose(0, 1, 4, 2, 3).reshape(1, o, 6, 7)
    _check(y, lambda a, c: _conv64(a, c, (1, 1), (1, 1, 1, 1), (1, 1)), x, w,
           b[None, :, None, None])
    assert ("kiln_bf16_store_t(" in f.get_source()) == (not out_block)


def test_conv2d_bf16_reads_bf16_data_as_it_is():
    """Data given as bf16 bits (``uint16``, from ``bf16_round``) gives the bits of the same
    convolution of the float32 data it was rounded from."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    packed = B.pack_conv2d_weight(rng.standard_normal((16, 4, 3, 3)).astype(np.float32))
    outputs = []
    for data, dtype in ((x, "float32"), (B.np_to_bf16_bits(x), "uint16")):
        X = te.placeholder(x.shape, dtype, name="x")
        W = te.placeholder(packed.shape, "uint16", name="w")
        out = B.conv2d_bf16_nchw(X, W, None, (3, 3), 16, (1, 1), (1, 1, 1, 1), (1, 1))
        f = kiln.build(B.schedule_conv2d_bf16(out), [X, W, out])
        y = kiln.nd.empty(out.shape)
        f(kiln.nd.array(data), kiln.nd.array(packed), y)
        outputs.append(y.numpy())
    assert np.array_equal(*outputs)


def test_schedules_refuse_a_cpu_without_bf16():
    with kiln.target.Target("llvm -mcpu=haswell"):
        X = te.placeholder((1, 32, 8, 8), name="x")
        W = te.placeholder(B.pack_conv2d_weight(np.ones((32, 32, 3, 3), np.float32)).shape,
                           "uint16")
        out = B.conv2d_bf16_nchw(X, W, None, (3, 3), 32, (1, 1), (1, 1, 1, 1), (1, 1))
        with pytest.raises(kiln.TVMError, match="avx512_bf16.*avx2"):
            B.schedule_conv2d_bf16(out)
