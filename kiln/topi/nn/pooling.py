"""Max and average pooling: windowed (pool2d), global, and adaptive.

``layout`` names the axes (``"NCHW"``, ``"NHWC"``, ``"NCHW16c"`` ...); pooling runs over the
``H`` and ``W`` axes. Average pooling is a ``pool_sum`` reduction followed by a division by
the number of elements counted in each window.

Max pooling skips NaN: a window's result is the maximum of its numbers, wherever a NaN is in
it (the lowest finite value, as for a window of padding, when all are NaN). This is the ONNX
reference's pooling (NaNs are dropped from the window) and onnxruntime's MaxPool for a NaN
anywhere but last in its window; ``te.max``, whose update ``max(acc, x)`` returns ``x`` on a
NaN, kept a NaN only when it came last (docs/reliability.md).
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import dtype as dt
from kiln.ir.op import cast, floordiv, make_const

from ..transform import _parse_layout
from ..utils import const_shape, get_const_tuple
from .pad import pad
from .utils import _pair

#: max pooling's reducer: the update is ``max(x, acc)``, ``x > acc ? x : acc``, which keeps
#: ``acc`` when ``x`` is NaN (kiln's ``max`` returns its second operand on a NaN); ``acc``
#: starts at the lowest value and only ever takes numbers, so no NaN enters it
_max_skip_nan = te.comm_reducer(lambda acc, x: tir.max(x, acc), tir.min_value,
                                name="max_skip_nan")


def _hw_axes(layout: str, ndim: int) -> tuple[int, int]:
    parts = _parse_layout(layout)
    names = [c for c, _ in parts]
    if len(parts) != ndim or "H" not in names or "W" not in names:
        raise ValueError(f"pooling: layout {layout!r} does not describe a {ndim}-D tensor with "
                         f"H and W axes")
    return names.index("H"), names.index("W")


def _pool_padding(padding) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from an int, a pair (h, w) or four ints."""
    if isinstance(padding, int):
        return padding, padding, padding, padding
    p = [int(x) for x in padding]
    if len(p) == 1:
        return p[0], p[0], p[0], p[0]
    if len(p) == 2:
        return p[0], p[1], p[0], p[1]
    if len(p) == 4:
        return p[0], p[1], p[2], p[3]
    raise ValueError(f"pooling padding must have 1, 2 or 4 entries, got {padding}")


def _out_size(size, k, s, d, before, after, ceil_mode) -> tuple[int, int]:
    """Output size and the extra padding after that ceil_mode needs."""
    dk = (k - 1) * d + 1
    span = size + before + after - dk
    if span < 0:
        raise ValueError(f"pooling window {dk} larger than the padded input "
                         f"{size + before + after}")
    if ceil_mode:
        out = -(-span // s) + 1
        if (out - 1) * s >= size + before:  # the last window must start inside the input
            out -= 1
    else:
        out = span // s + 1
    extra = max(0, (out - 1) * s + dk - (size + before + after))
    return out, extra


def _count(start, k, d, lo, hi):
    """Number of taps ``start + t*d`` (t in [0, k)) that fall in [lo, hi)."""
    if d == 1:
        first = tir.max(lo - start, 0)
        last = tir.min(hi - start, k)
    else:
        first = tir.max(floordiv(lo - start + d - 1, d), 0)
        last = tir.min(floordiv(hi - start + d - 1, d), k)
    return tir.max(last - first, 0)


def _clamp_is_exact(kernel, dilation, before, after) -> bool:
    """Max pooling may read the nearest input element instead of a ``-inf`` padding when the
    window is contiguous (dilation 1) and every window overlaps the input (padding smaller
    than the kernel): the clamped element is then inside the window, so the maximum is the
    same, and there is no padding stage (nor its per-element bounds test). Used when the
    innermost axis is not W (NCHW16c, NHWC): the clamp is then per vector of channels;
    along a vectorized W it would turn the loads into gathers (measured 1.5x slower)."""
    return (tuple(dilation) == (1, 1) and any(before + after)
            and all(p < k for p, k in zip(before, kernel, strict=True))
            and all(p < k for p, k in zip(after, kernel, strict=True)))


def _clamped(data, hax, wax, pt, pl, shape):
    """``f(*i)`` reading ``data`` at padded coordinates, clamped into the input."""
    def f(*i):
        idx = list(i)
        idx[hax] = tir.min(tir.max(i[hax] - pt, 0), shape[hax] - 1)
        idx[wax] = tir.min(tir.max(i[wax] - pl, 0), shape[wax] - 1)
        return data(*idx)

    return f


def pool2d(data, kernel, stride, dilation, padding, pool_type, ceil_mode=False,
           layout="NCHW", count_include_pad=True):
    """2-D max (``pool_type="max"``) or average (``"avg"``) pooling.

    ``kernel``, ``stride``, ``dilation``: int or pair; ``padding``: int, pair or
    ``(top, left, bottom, right)``. ``ceil_mode`` rounds the output size up (the last window
    still starts inside the input or its leading padding). Average pooling divides by the
    window size clipped to the padded input (``count_include_pad=True``) or to the input.
    """
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    hax, wax = _hw_axes(layout, data.ndim)
    shape = get_const_tuple(data.shape)  # the batch and channels may be symbolic
    const_shape((shape[hax], shape[wax]), "pooling input height and width")
    kh, kw = _pair(kernel, "kernel")
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pt, pl, pb, pr = _pool_padding(padding)
    out_h, xh = _out_size(shape[hax], kh, sh, dh, pt, pb, ceil_mode)
    out_w, xw = _out_size(shape[wax], kw, sw, dw, pl, pr, ceil_mode)
    before = [0] * data.ndim
    after = [0] * data.ndim
    before[hax], before[wax] = pt, pl
    after[hax], after[wax] = pb + xh, pr + xw
    pad_value = tir.min_value(data.dtype) if pool_type == "max" else make_const(0, data.dtype)
    padded = data
    if pool_type == "max" and wax != data.ndim - 1 and _clamp_is_exact(
            (kh, kw), (dh, dw), (pt, pl), (pb + xh, pr + xw)):
        padded = _clamped(data, hax, wax, pt, pl, shape)
    elif any(before) or any(after):
        padded = pad(data, before, after, pad_value=pad_value, name="PaddedInput")
    out_shape = list(shape)
    out_shape[hax], out_shape[wax] = out_h, out_w
    rh = te.reduce_axis((0, kh), name="rv0")
    rw = te.reduce_axis((0, kw), name="rv1")
    attrs = {"layout": layout, "kernel": (kh, kw), "strides": (sh, sw), "dilation": (dh, dw),
             "padding": (pt, pl, pb, pr)}

    def index(i):
        idx = list(i)
        idx[hax] = i[hax] * sh + rh * dh
        idx[wax] = i[wax] * sw + rw * dw
        return idx

    if pool_type == "max":
        return te.compute(out_shape,
                          lambda *i: _max_skip_nan(padded(*index(i)), axis=[rh, rw]),
                          name="PoolMax", tag="pool_max", attrs=attrs)
    psum = te.compute(out_shape, lambda *i: te.sum(padded(*index(i)), axis=[rh, rw]),
                      name="PoolSum", tag="pool_sum", attrs=attrs)
    full_window = (count_include_pad and xh == 0 and xw == 0) or not any(before + after)
    odtype = data.dtype if dt.is_float(data.dtype) else "float32"

    def avg(*i):
        if full_window:
            div = make_const(kh * kw, odtype)
        else:
            lo_h, hi_h = (-pt, shape[hax] + pb) if count_include_pad else (0, shape[hax])
            lo_w, hi_w = (-pl, shape[wax] + pr) if count_include_pad else (0, shape[wax])
            ch = _count(i[hax] * sh - pt, kh, dh, lo_h, hi_h)
            cw = _count(i[wax] * sw - pl, kw, dw, lo_w, hi_w)
            div = cast(tir.max(ch * cw, 1), odtype)
        return cast(psum(*i), odtype) / div

    return te.compute(out_shape, avg, name="PoolAvg", tag="pool_avg", attrs=attrs)


def pool(data, kernel, stride, padding, pool_type, ceil_mode=False, layout="NCHW",
         count_include_pad=True):
    """Classic TVM's ``topi.nn.pool`` (no dilation): see :func:`pool2d`."""
    return pool2d(data, kernel, stride, 1, padding, pool_type, ceil_mode, layout,
                  count_include_pad)


def global_pool(data, pool_type, layout="NCHW"):
    """Max or average over the whole H x W plane; H and W stay as size-1 axes."""
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    hax, wax = _hw_axes(layout, data.ndim)
    h, w = data.shape[hax], data.shape[wax]
    rh = te.reduce_axis((0, h), name="rv0")
    rw = te.reduce_axis((0, w), name="rv1")
    out_shape = list(data.shape)
    out_shape[hax] = out_shape[wax] = 1

    def index(i):
        idx = list(i)
        idx[hax], idx[wax] = rh, rw
        return idx

    if pool_type == "max":
        return te.compute(out_shape,
                          lambda *i: _max_skip_nan(data(*index(i)), axis=[rh, rw]),
                          name="GlobalPoolMax", tag="global_pool_max",
                          attrs={"layout": layout})
    s = te.compute(out_shape, lambda *i: te.sum(data(*index(i)), axis=[rh, rw]),
                   name="GlobalPoolSum", tag="global_pool_sum", attrs={"layout": layout})
    odtype = data.dtype if dt.is_float(data.dtype) else "float32"
    return te.compute(out_shape, lambda *i: cast(s(*i), odtype) / cast(h * w, odtype),
                      name="GlobalPoolAvg", tag="global_pool_avg", attrs={"layout": layout})


def adaptive_pool(data, output_size, pool_type, layout="NCHW"):
    """Pooling to a fixed ``output_size`` (int or pair; None keeps the input size): output
    ``i`` covers input ``[floor(i*H/OH), ceil((i+1)*H/OH))``."""
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    hax, wax = _hw_axes(layout, data.ndim)
    shape = const_shape(data.shape, "adaptive pooling input shape")
    h, w = shape[hax], shape[wax]
    if isinstance(output_size, int):
        output_size = (output_size, output_size)
    oh, ow = output_size
    oh = h if oh is None else int(oh)
    ow = w if ow is None else int(ow)

    def win(size, osize):
        return max(-(-(i + 1) * size // osize) - (i * size // osize) for i in range(osize))

    kh, kw = win(h, oh), win(w, ow)
    rh = te.reduce_axis((0, kh), name="rv0")
    rw = te.reduce_axis((0, kw), name="rv1")
    out_shape = list(shape)
    out_shape[hax], out_shape[wax] = oh, ow

    def bounds(i, size, osize):
        start = floordiv(i * size, osize)
        end = floordiv((i + 1) * size + osize - 1, osize)
        return start, end

    def reduce(reducer):
        def f(*i):
            sh_, eh = bounds(i[hax], h, oh)
            sw_, ew = bounds(i[wax], w, ow)
            idx = list(i)
            idx[hax], idx[wax] = sh_ + rh, sw_ + rw
            cond = tir.all(rh < eh - sh_, rw < ew - sw_)
            return reducer(data(*idx), axis=[rh, rw], where=cond)

        return f

    if pool_type == "max":
        return te.compute(out_shape, reduce(_max_skip_nan), name="AdaptivePoolMax",
                          tag="adaptive_pool_max", attrs={"layout": layout})
    s = te.compute(out_shape, reduce(te.sum), name="AdaptivePoolSum", tag="adaptive_pool_sum",
                   attrs={"layout": layout})
    odtype = data.dtype if dt.is_float(data.dtype) else "float32"

    def avg(*i):
        sh_, eh = bounds(i[hax], h, oh)
        sw_, ew = bounds(i[wax], w, ow)
        return cast(s(*i), odtype) / cast((eh - sh_) * (ew - sw_), odtype)

    return te.compute(out_shape, avg, name="AdaptivePoolAvg", tag="adaptive_pool_avg",
                      attrs={"layout": layout})


__all__ = ["pool2d", "pool", "global_pool", "adaptive_pool"]
