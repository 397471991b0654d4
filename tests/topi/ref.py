"""Independent numpy references for the topi tests (loops over kernel taps and windows,
not the formulas topi uses)."""

from __future__ import annotations

import numpy as np


def pair(x):
    return (x, x) if isinstance(x, int) else tuple(x)


def conv2d_nchw(x, w, stride, padding, dilation, groups=1):
    """Direct convolution: for every kernel tap, a strided slice of the padded input times
    the tap's weights, summed (float64)."""
    sh, sw = pair(stride)
    dh, dw = pair(dilation)
    if isinstance(padding, int):
        pt = pb = pl = pr = padding
    elif len(padding) == 2:
        pt = pb = padding[0]
        pl = pr = padding[1]
    else:
        pt, pl, pb, pr = padding
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    w = w.astype(np.float64)
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    oh = (h - (kh - 1) * dh - 1) // sh + 1
    ow = (wd - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, f, oh, ow))
    fg = f // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg]
        ws = w[g * fg:(g + 1) * fg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                           j * dw: j * dw + sw * (ow - 1) + 1: sw]
                out[:, g * fg:(g + 1) * fg] += np.einsum("nchw,fc->nfhw", patch, ws[:, :, i, j])
    return out


def depthwise_conv2d_nchw(x, w, stride, padding, dilation):
    """Depthwise: input channel c // m with filter (c // m, c % m)."""
    c, m, kh, kw = w.shape
    full = np.zeros((c * m, c, kh, kw), dtype=np.float64)
    for oc in range(c * m):
        full[oc, oc // m] = w[oc // m, oc % m]
    return conv2d_nchw(x, full, stride, padding, dilation)


def pack_nchwc(x, cb):
    n, c, h, w = x.shape
    return x.reshape(n, c // cb, cb, h, w).transpose(0, 1, 3, 4, 2).copy()


def unpack_nchwc(x):
    n, cc, h, w, cb = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, cc * cb, h, w)


def pack_kernel(w, icb, ocb):
    f, c, kh, kw = w.shape
    return w.reshape(f // ocb, ocb, c // icb, icb, kh, kw).transpose(0, 2, 4, 5, 3, 1).copy()


def pool2d_nchw(x, kernel, stride, dilation, padding, pool_type, ceil_mode=False,
                count_include_pad=True):
    """Window-by-window pooling with explicit loops over output positions."""
    kh, kw = pair(kernel)
    sh, sw = pair(stride)
    dh, dw = pair(dilation)
    pt, pl, pb, pr = padding
    n, c, h, w = x.shape

    def out_size(size, k, s, d, b, a):
        dk = (k - 1) * d + 1
        if ceil_mode:
            o = int(np.ceil((size + b + a - dk) / s)) + 1
            if (o - 1) * s >= size + b:
                o -= 1
            return o
        return (size + b + a - dk) // s + 1

    oh = out_size(h, kh, sh, dh, pt, pb)
    ow = out_size(w, kw, sw, dw, pl, pr)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            rows = [i * sh - pt + a * dh for a in range(kh)]
            cols = [j * sw - pl + b * dw for b in range(kw)]
            vals, count = [], 0
            for r in rows:
                for q in cols:
                    inside = 0 <= r < h and 0 <= q < w
                    in_pad = -pt <= r < h + pb and -pl <= q < w + pr
                    if inside:
                        vals.append(x[:, :, r, q].astype(np.float64))
                    if inside or (count_include_pad and in_pad):
                        count += 1
            if pool_type == "max":
                out[:, :, i, j] = np.max(vals, axis=0) if vals else -np.inf
            else:
                out[:, :, i, j] = (np.sum(vals, axis=0) if vals else 0) / max(count, 1)
    return out


def adaptive_pool_nchw(x, out_size, pool_type):
    n, c, h, w = x.shape
    oh, ow = out_size
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            win = x[:, :, h0:h1, w0:w1].astype(np.float64)
            out[:, :, i, j] = win.max(axis=(2, 3)) if pool_type == "max" else win.mean(
                axis=(2, 3))
    return out
