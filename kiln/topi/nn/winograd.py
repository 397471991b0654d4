"""Winograd convolution F(m x m, 3 x 3) on the packed NCHW[x]c layout.

A 3x3, stride-1 convolution computes each ``m x m`` tile of output from an
``alpha x alpha`` tile of input (``alpha = m + 2``). Winograd's minimal filtering algorithm
(Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks") does it with
``alpha^2`` multiplications per input/output channel pair instead of ``9 m^2``:

    Y_tile = A^T [ (G g G^T) (.) (B^T d B) ] A

so a convolution becomes three stages:

* input transform ``V[e, n, t, c] = (B^T d_{t,c} B)[e, n]`` for every tile ``t`` and input
  channel ``c`` (additions only for m = 2);
* ``alpha^2`` independent matrix products ``M[e, n] = U[e, n] @ V[e, n]`` over the input
  channels, where ``U = G g G^T`` is the filter transformed once, at compile time
  (:func:`winograd_weight_transform`) — this is where the multiply-adds are, 2.25x (m = 2)
  or 4x (m = 4) fewer than the direct convolution's;
* output transform ``Y_tile[i, j] = (A^T M_{t,k} A)[i, j]``.

The transforms are written as explicit sums over the matrices' non-zero entries, selected by
the (constant, once the loops are unrolled) tile coordinates, so no multiplication by a zero
entry is ever emitted. Layouts: data ``[N, C/cb, H, W, cb]``, transformed filter
``[alpha, alpha, K/ob, C, ob]``, output ``[N, K/ob, H', W', ob]`` — the output-channel block
is innermost everywhere, as in ``conv2d_NCHWc``, so every stage vectorizes along it. The
batch is folded into the tile index (``t = (n * tiles_y + ty) * tiles_x + tx``), so one
batched product covers the tiles of every image and the transformed filter is shared by
the whole batch.
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.ir import dtype as dt

from ..utils import get_const_tuple
from .pad import pad_masked
from .utils import get_pad_tuple

_H = 0.5
#: (B^T, G, A^T) for F(2x2, 3x3) and F(4x4, 3x3) (interpolation points 0, +-1 and 0, +-1, +-2)
WINOGRAD_MATRICES = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [_H, _H, _H], [_H, -_H, _H], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
         [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}


def winograd_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(B^T, G, A^T)`` of F(m x m, 3 x 3) as float64 arrays."""
    if m not in WINOGRAD_MATRICES:
        raise ValueError(f"winograd: tile size m={m} is not supported (use one of "
                         f"{sorted(WINOGRAD_MATRICES)})")
    return tuple(np.array(x, dtype="float64") for x in WINOGRAD_MATRICES[m])


#: F(2x2) tiles of a whole batch from which Winograd pays on images smaller than 24²
BATCH_TILES = 96


def winograd_tile(out_h: int, out_w: int, in_channels: int, out_channels: int,
                  batch: int = 1) -> int | None:
    """The tile size ``m`` worth using for a 3x3 stride-1 convolution with this output, or
    None where the direct convolution is as fast. Measured on a 2-core AVX2 machine at batch
    1: F(4x4) at 56² and 28² is 2.5-3.5x faster than the direct convolution; at 14² F(2x2)
    only matches it (in ResNet-18, 2.8 ms per layer against the direct schedule's ~2.5: the
    16/9 bigger transformed kernel is streamed for only 49 tiles), and at 7² it is slower.
    F(4x4) only up to 256 channels (its error grows with the reduction: ~1e-5 relative at
    256), F(2x2) beyond.

    At batch > 1 the batch is folded into the batched product's tiles, so the transformed
    kernel is streamed once for the tiles of several images: on images below 24² F(2x2)
    pays from :data:`BATCH_TILES` tiles of the whole batch (AVX-512, 1 thread, per
    layer: 256@14² at batch 2 0.7x the direct convolution's time, 512@7² the same time at
    batch 4 (64 tiles) and 0.75x at batch 8). F(4x4) measured the same as F(2x2) at
    256@14² (its 4x4 tiles pad 14 to 16) with a larger error, so small images take F(2x2)."""
    if min(out_h, out_w) >= 24:
        return 4 if max(in_channels, out_channels) <= 256 else 2
    if batch > 1 and batch * -(-out_h // 2) * -(-out_w // 2) >= BATCH_TILES:
        return 2
    return None


def winograd_weight_transform(kernel: np.ndarray, m: int, ob: int) -> np.ndarray:
    """``U = G g G^T`` of an OIHW 3x3 ``kernel``, laid out ``[alpha, alpha, K/ob, C, ob]``
    (computed in float64, returned in the kernel's dtype)."""
    kernel = np.asarray(kernel)
    k, c, kh, kw = kernel.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"winograd: needs a 3x3 kernel, got {kh}x{kw}")
    if k % ob:
        raise ValueError(f"winograd: {k} output channels do not split into blocks of {ob}")
    _, g, _ = winograd_matrices(m)
    u = np.einsum("er,kcrs,ns->enkc", g, kernel.astype("float64"), g)
    a = m + 2
    u = u.reshape(a, a, k // ob, ob, c).transpose(0, 1, 2, 4, 3)
    return np.ascontiguousarray(u.astype(kernel.dtype))


def _combination(coeffs, term):
    """``sum_k coeffs[k] * term(k)`` over the non-zero coefficients, +-1 as add/subtract."""
    out = None
    for k, c in enumerate(coeffs):
        if c == 0:
            continue
        x = term(k)
        if c == -1:
            out = -x if out is None else out - x
            continue
        if c != 1:
            x = x * tir.const(float(c), x.dtype)
        out = x if out is None else out + x
    return out


def _select(index, cases):
    """``cases[index]`` for a symbolic ``index`` in ``[0, len(cases))``."""
    out = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        out = tir.Select(index == k, cases[k], out)
    return out


def conv2d_winograd_NCHWc(data, kernel_transformed, padding, m: int = 2,  # noqa: N802
                          out_dtype=None):
    """3x3 stride-1 convolution of packed ``data`` by a :func:`winograd_weight_transform`
    ``kernel_transformed`` (tag ``"conv2d_NCHWc_winograd"``). Stages: ``winograd_BTd`` and
    ``winograd_V`` (the input transform, one 1-D transform each: ``B^T d`` then ``(.) B``),
    ``winograd_M`` (``"winograd_batch_gemm"``), ``winograd_ATM`` and the output (the output
    transform, ``A^T M`` then ``(.) A``). Separable 1-D transforms keep every expression a
    choice among ``alpha`` short sums, instead of ``alpha^2`` sums of up to 16 terms."""
    out_dtype = dt.normalize(out_dtype or data.dtype)
    bt, _, at = winograd_matrices(m)
    alpha = m + 2
    n_batch, ico, h, w, cb = get_const_tuple(data.shape)
    a1, a2, oco, ic, ob = get_const_tuple(kernel_transformed.shape)
    if (a1, a2) != (alpha, alpha) or ic != ico * cb:
        raise ValueError(
            f"winograd: transformed kernel {get_const_tuple(kernel_transformed.shape)} does "
            f"not match F({m}x{m}, 3x3) on data {get_const_tuple(data.shape)}: expected "
            f"[{alpha}, {alpha}, K/ob, {ico * cb}, ob]")
    pt, pl, pb, pr = get_pad_tuple(padding, (3, 3))
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    nh, nw = -(-oh // m), -(-ow // m)
    # pad so that every tile's alpha x alpha window is inside the padded input
    padded = pad_masked(data, (0, 0, pt, pl, 0),
                        (0, 0, nh * m + 2 - h - pt, nw * m + 2 - w - pl, 0), name="data_pad")
    n_tiles = n_batch * nh * nw  # the batch folded into the tile index: t = (b, ty, tx)

    def rows(e, s, t, c):  # (B^T d)[e, s] of tile t, channel c
        b, ty, tx = t // (nh * nw), t // nw % nh, t % nw
        return _select(e, [_combination(bt[i], lambda r: padded[
            b, c // cb, ty * m + r, tx * m + s, c % cb]) for i in range(alpha)])

    BTd = te.compute((alpha, alpha, n_tiles, ic), rows, name="winograd_BTd",
                     tag="winograd_input_transform")
    V = te.compute(
        (alpha, alpha, n_tiles, ic),
        lambda e, nu, t, c: _select(nu, [_combination(bt[j], lambda s: BTd[e, s, t, c])
                                         for j in range(alpha)]),
        name="winograd_V", tag="winograd_input_transform")
    c = te.reduce_axis((0, ic), name="c")
    M = te.compute(
        (alpha, alpha, oco, n_tiles, ob),
        lambda e, nu, k, t, o: te.sum(
            V[e, nu, t, c].astype(out_dtype) * kernel_transformed[e, nu, k, c, o].astype(
                out_dtype), axis=c),
        name="winograd_M", tag="winograd_batch_gemm")
    ATM = te.compute(
        (m, alpha, oco, n_tiles, ob),
        lambda i, nu, k, t, o: _select(i, [_combination(at[ii], lambda e: M[e, nu, k, t, o])
                                           for ii in range(m)]),
        name="winograd_ATM", tag="winograd_output_transform")

    def output_tile(b, k, y, x, o):
        t = (b * nh + y // m) * nw + x // m
        return _select(x % m, [_combination(at[j], lambda nu: ATM[y % m, nu, k, t, o])
                               for j in range(m)])

    return te.compute((n_batch, oco, oh, ow, ob), output_tile, name="conv2d_NCHWc_winograd",
                      tag="conv2d_NCHWc_winograd", attrs={"winograd_m": m})


__all__ = ["conv2d_winograd_NCHWc", "winograd_weight_transform", "winograd_matrices",
           "winograd_tile", "WINOGRAD_MATRICES", "BATCH_TILES"]
