"""Convolution references (``conv2d_nchw_python`` and relatives, TVM's names and layouts).

Every convolution here is one computation, :func:`_conv2d_nchw`: for each kernel tap, a
strided slice of the padded input times that tap's weights, summed in float64. The other
layouts and kinds (NHWC, depthwise, 1-D, transposed) reshape their operands into it.
"""

from __future__ import annotations

import numpy as np

from ..nn.utils import get_pad_tuple
from .dilate import dilate_python

Stride = int | tuple[int, int] | list[int]
Padding = int | str | tuple[int, ...] | list[int]


def _pair(x: Stride) -> tuple[int, int]:
    return (x, x) if isinstance(x, int) else (int(x[0]), int(x[1]))


def _conv2d_nchw(a: np.ndarray, w: np.ndarray, stride: Stride,
                 pads: tuple[int, int, int, int], groups: int) -> np.ndarray:
    """float64 ``[N, F, OH, OW]`` from ``a`` ``[N, C, H, W]`` and ``w`` ``[F, C // groups,
    KH, KW]``; ``pads`` is ``(top, left, bottom, right)``."""
    sh, sw = _pair(stride)
    pt, pl, pb, pr = pads
    x = np.pad(a.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    w = w.astype(np.float64)
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    if c != cg * groups or f % groups:
        raise ValueError(f"{c} input channels, {f} filters and {cg} channels per filter do "
                         f"not make {groups} groups")
    oh, ow = (h - kh) // sh + 1, (wd - kw) // sw + 1
    out = np.zeros((n, f, oh, ow))
    fg = f // groups
    for g in range(groups):
        xs, ws = x[:, g * cg:(g + 1) * cg], w[g * fg:(g + 1) * fg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
                out[:, g * fg:(g + 1) * fg] += np.einsum("nchw,fc->nfhw", patch, ws[:, :, i, j])
    return out


def conv2d_nchw_python(a_np: np.ndarray, w_np: np.ndarray, stride: Stride, padding: Padding,
                       groups: int = 1) -> np.ndarray:
    """Convolution of ``a_np`` ``[N, C, H, W]`` with ``w_np`` ``[F, C // groups, KH, KW]``.

    ``padding``: an int, ``(pad_h, pad_w)``, ``(top, left, bottom, right)`` or
    ``"SAME"``/``"VALID"``. For a dilated kernel, pass ``dilate_python(w_np, (1, 1, d, d))``.
    """
    pads = get_pad_tuple(padding, w_np.shape[2:])
    return _conv2d_nchw(a_np, w_np, stride, pads, groups).astype(a_np.dtype)


def conv2d_nhwc_python(a_np: np.ndarray, w_np: np.ndarray, stride: Stride, padding: Padding,
                       groups: int = 1) -> np.ndarray:
    """Convolution in NHWC: ``a_np`` ``[N, H, W, C]``, ``w_np`` ``[KH, KW, C // groups, F]``
    (HWIO), result ``[N, OH, OW, F]``."""
    out = conv2d_nchw_python(a_np.transpose(0, 3, 1, 2), w_np.transpose(3, 2, 0, 1), stride,
                             padding, groups)
    return out.transpose(0, 2, 3, 1)


def _depthwise_as_grouped(filter_np: np.ndarray) -> np.ndarray:
    """``[C, M, KH, KW]`` depthwise filter -> ``[C * M, 1, KH, KW]`` grouped filter (output
    channel ``c * M + m`` reads input channel ``c``)."""
    c, m, kh, kw = filter_np.shape
    return filter_np.reshape(c * m, 1, kh, kw)


def depthwise_conv2d_python_nchw(input_np: np.ndarray, filter_np: np.ndarray, stride: Stride,
                                 padding: Padding) -> np.ndarray:
    """Depthwise convolution: ``input_np`` ``[N, C, H, W]``, ``filter_np`` ``[C, M, KH, KW]``
    (``M`` the channel multiplier), result ``[N, C * M, OH, OW]``."""
    return conv2d_nchw_python(input_np, _depthwise_as_grouped(filter_np), stride, padding,
                              groups=input_np.shape[1])


def depthwise_conv2d_python_nhwc(input_np: np.ndarray, filter_np: np.ndarray, stride: Stride,
                                 padding: Padding) -> np.ndarray:
    """Depthwise convolution in NHWC: ``filter_np`` ``[KH, KW, C, M]``, result
    ``[N, OH, OW, C * M]``."""
    out = depthwise_conv2d_python_nchw(input_np.transpose(0, 3, 1, 2),
                                       filter_np.transpose(2, 3, 0, 1), stride, padding)
    return out.transpose(0, 2, 3, 1)


def conv1d_ncw_python(a_np: np.ndarray, w_np: np.ndarray, stride: int, padding: Padding,
                      dilation: int) -> np.ndarray:
    """1-D convolution: ``a_np`` ``[N, C, W]``, ``w_np`` ``[F, C, K]``; ``padding`` an int,
    ``(left, right)`` or ``"SAME"``/``"VALID"``."""
    s = stride if isinstance(stride, int) else stride[0]
    d = dilation if isinstance(dilation, int) else dilation[0]
    w = dilate_python(w_np, (1, 1, d))
    if isinstance(padding, str):
        _, left, _, right = get_pad_tuple(padding, (1, w.shape[2]))
    else:
        left, right = (padding, padding) if isinstance(padding, int) else padding
    out = _conv2d_nchw(a_np[:, :, None, :], w[:, :, None, :], (1, s), (0, left, 0, right), 1)
    return out[:, :, 0, :].astype(a_np.dtype)


def conv2d_transpose_nchw_python(a_np: np.ndarray, w_np: np.ndarray, stride: Stride,
                                 padding: Padding, output_padding: Stride = 0) -> np.ndarray:
    """Transposed convolution (the gradient of conv2d with respect to its input):
    ``a_np`` ``[N, C, H, W]``, ``w_np`` ``[C, F, KH, KW]``, result ``[N, F, OH, OW]`` with
    ``OH = (H - 1) * stride - pad_top - pad_bottom + KH + output_padding``.

    Computed as a stride-1 convolution of the stride-dilated input, padded by ``K - 1 - pad``
    (plus ``output_padding`` at the bottom/right), with the flipped kernel."""
    sh, sw = _pair(stride)
    oph, opw = _pair(output_padding)
    _, _, kh, kw = w_np.shape
    pt, pl, pb, pr = get_pad_tuple(padding, (kh, kw))
    dilated = dilate_python(a_np, (1, 1, sh, sw))
    flipped = w_np[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
    pads = (kh - 1 - pt, kw - 1 - pl, kh - 1 - pb + oph, kw - 1 - pr + opw)
    return _conv2d_nchw(dilated, flipped, 1, pads, 1).astype(a_np.dtype)
