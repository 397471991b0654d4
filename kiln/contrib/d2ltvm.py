"""kiln's implementation of ``d2ltvm``, the helper package of the book "Dive into Deep
Learning Compiler" (every code block the book marks "Save to the d2ltvm package").

Under kiln's tvm alias, ``import d2ltvm`` and ``import d2l_tvm`` give this module; without
it, use ``from kiln.contrib import d2ltvm``. The helpers keep the book's names, signatures
and behaviour (fixed random seed 0 in the data generators, the ``ph * pw != 0`` padding rule
of the convolutions). Where the book's helper is built on MXNet — which no longer installs on
current Python — the data generators and operators have numpy equivalents under the same
names, and the MXNet timers raise ``NotImplementedError``. matplotlib is imported only by the
plot helpers.

Sections: data generators; operator definitions (tensor expressions); schedule helpers;
benchmarking; plotting; MXNet replacements.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import kiln
from kiln import te

Constructor = Callable[[np.ndarray], Any] | None


def _construct(constructor: Constructor, *arrays: np.ndarray) -> tuple:
    return tuple(constructor(x) for x in arrays) if constructor else arrays


# ---------------------------------------------------------------- data generators (numpy)


def get_abc(shape, constructor: Constructor = None):
    """Return random ``a``, ``b`` and an empty ``c``, all float32 of ``shape`` (book §1.2).

    The random seed is fixed to 0 so every call returns the same data. ``constructor``
    (e.g. ``tvm.nd.array``) converts each of the three arrays.
    """
    np.random.seed(0)
    a = np.random.normal(size=shape).astype(np.float32)
    b = np.random.normal(size=shape).astype(np.float32)
    c = np.empty_like(a)
    return _construct(constructor, a, b, c)


def _bcast_shape(shape1: Sequence[int], shape2: Sequence[int]) -> tuple[int, int]:
    return (
        shape1[0] if shape2[0] == 1 else shape2[0],
        shape1[1] if shape2[1] == 1 else shape2[1],
    )


def get_bcast_data(shape1, shape2, constructor: Constructor = None):
    """Return random 2-D float32 ``a`` (``shape1``), ``b`` (``shape2``) and an empty ``c`` of
    their broadcast shape (book §3.1). Seed fixed to 0."""
    np.random.seed(0)
    a = np.random.normal(size=shape1).astype("float32")
    b = np.random.normal(size=shape2).astype("float32")
    c = np.empty(_bcast_shape(shape1, shape2), dtype="float32")
    return _construct(constructor, a, b, c)


def get_conv_data(oc, ic, n, k, p=0, s=1, constructor: Constructor = None, conv_type="direct"):
    """Return random data ``(ic, n, n)``, weight and an empty output ``(oc, on, on)`` (§3.3-3.4).

    The weight is ``(oc, ic, k, k)``, or ``(oc, 1, k, k)`` when ``conv_type == 'depthwise'``;
    ``on = conv_out_size(n, k, p, s)``. Seed fixed to 0; all arrays float32.
    """
    np.random.seed(0)
    data = np.random.normal(size=(ic, n, n)).astype("float32")
    ic_weight = 1 if conv_type == "depthwise" else ic
    weight = np.random.normal(size=(oc, ic_weight, k, k)).astype("float32")
    on = conv_out_size(n, k, p, s)
    out = np.empty((oc, on, on), dtype="float32")
    return _construct(constructor, data, weight, out)


def get_bn_data(c, n, constructor: Constructor = None):
    """Return batch-norm ``data, mean, var, gamma, beta, out`` (book §3.6).

    ``data`` and ``out`` are ``(c, n, n)``, the others ``(c, 1, 1)``; the variance is drawn
    around 1 and made non-negative. Seed fixed to 0; draw order data, mean, var, gamma, beta.
    """
    np.random.seed(0)
    data = np.random.normal(size=(c, n, n)).astype("float32")
    mean = np.random.normal(size=(c, 1, 1)).astype("float32")
    var = np.absolute(np.random.normal(loc=1.0, size=(c, 1, 1)).astype("float32"))
    gamma = np.random.normal(size=(c, 1, 1)).astype("float32")
    beta = np.random.normal(size=(c, 1, 1)).astype("float32")
    out = np.empty((c, n, n), dtype="float32")
    return _construct(constructor, data, mean, var, gamma, beta, out)


def image_preprocessing(image) -> np.ndarray:
    """Normalize an RGB image (H, W, 3) with ImageNet statistics into a (1, 3, H, W) float32
    batch, as the book's model-zoo example expects (§1.3)."""
    x = np.asarray(image, dtype=np.float64) - np.array([123.0, 117.0, 104.0])
    x /= np.array([58.395, 57.12, 57.375])
    return x.transpose((2, 0, 1))[np.newaxis, :].astype("float32")


# ---------------------------------------------------------------- operator definitions (te)


def vector_add(n):
    """Return ``A, B, C`` (named a, b, c) with ``C = A + B`` on vectors of length ``n`` (§1.2)."""
    A = te.placeholder((n,), name="a")
    B = te.placeholder((n,), name="b")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="c")
    return A, B, C


def broadcast_add(shape1, shape2):
    """Return ``A, B, C`` with ``C`` the broadcast sum of 2-D ``A`` (shape1) and ``B`` (shape2).

    Along each axis the sizes must be equal or one of them 1 (§3.1); otherwise ValueError.
    """
    if len(shape1) != 2 or len(shape2) != 2:
        raise ValueError("broadcast tensors should both be 2-dimension")
    for d1, d2 in zip(shape1, shape2, strict=True):
        if not (d1 == d2 or d1 == 1 or d2 == 1):
            raise ValueError(f"tensor shapes do not fit for broadcasting: {shape1}, {shape2}")
    A = te.placeholder(shape1, name="A")
    B = te.placeholder(shape2, name="B")

    def f(x, y):
        a = A[0 if shape1[0] == 1 else x, 0 if shape1[1] == 1 else y]
        b = B[0 if shape2[0] == 1 else x, 0 if shape2[1] == 1 else y]
        return a + b

    C = te.compute(_bcast_shape(shape1, shape2), f, name="C")
    return A, B, C


def matmul(n, m, l):
    """Return ``A`` (n x l), ``B`` (l x m) and ``C = A B`` (n x m), reducing over ``k`` (§3.2)."""
    k = te.reduce_axis((0, l), name="k")
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    C = te.compute((n, m), lambda x, y: te.sum(A[x, k] * B[k, y], axis=k), name="C")
    return A, B, C


def padding(X, ph, pw, val=0):
    """Return ``PaddedX``: ``X`` with ``ph`` rows / ``pw`` columns of ``val`` added on each side
    of its last two axes (§3.3). ``X`` must have at least two dimensions."""
    if len(X.shape) < 2:
        raise ValueError(f"padding needs a tensor of at least 2 dimensions, got {len(X.shape)}")
    nh, nw = X.shape[-2], X.shape[-1]
    return te.compute(
        (*X.shape[0:-2], nh + ph * 2, nw + pw * 2),
        lambda *i: te.if_then_else(
            te.any(i[-2] < ph, i[-2] >= nh + ph, i[-1] < pw, i[-1] >= nw + pw),
            val,
            X[i[0:-2] + (i[-2] - ph, i[-1] - pw)],
        ),
        name="PaddedX",
    )


def conv_out_size(n, k, p, s):
    """Output width (or height) of a convolution: input ``n``, kernel ``k``, padding ``p``,
    stride ``s``."""
    return (n - k + 2 * p) // s + 1


def conv(oc, ic, nh, nw, kh, kw, ph=0, pw=0, sh=1, sw=1):
    """2-D convolution of one CHW image: return ``X, K, Y, PaddedX`` (§3.3).

    ``X`` is (ic, nh, nw), ``K`` is (oc, ic, kh, kw), ``Y`` is (oc, oh, ow), reducing over
    ``ric, rkh, rkw``. As in the book, ``X`` is padded only when ``ph * pw != 0``; otherwise
    ``PaddedX is X``.
    """
    ric = te.reduce_axis((0, ic), name="ric")
    rkh = te.reduce_axis((0, kh), name="rkh")
    rkw = te.reduce_axis((0, kw), name="rkw")
    oh = conv_out_size(nh, kh, ph, sh)
    ow = conv_out_size(nw, kw, pw, sw)
    X = te.placeholder((ic, nh, nw), name="X")
    K = te.placeholder((oc, ic, kh, kw), name="K")
    PaddedX = padding(X, ph, pw) if ph * pw != 0 else X
    Y = te.compute(
        (oc, oh, ow),
        lambda c, i, j: te.sum(
            PaddedX[ric, i * sh + rkh, j * sw + rkw] * K[c, ric, rkh, rkw],
            axis=[ric, rkh, rkw],
        ),
        name="Y",
    )
    return X, K, Y, PaddedX


def depthwise_conv(ic, nh, nw, kh, kw, ph=0, pw=0, sh=1, sw=1):
    """Depthwise 2-D convolution: channel ``c`` of ``X`` (ic, nh, nw) is convolved with
    ``K[c, 0]`` of ``K`` (ic, 1, kh, kw). Return ``X, K, Y, PaddedX`` (§3.4)."""
    rkh = te.reduce_axis((0, kh), name="rkh")
    rkw = te.reduce_axis((0, kw), name="rkw")
    oh = conv_out_size(nh, kh, ph, sh)
    ow = conv_out_size(nw, kw, pw, sw)
    X = te.placeholder((ic, nh, nw), name="X")
    K = te.placeholder((ic, 1, kh, kw), name="K")
    PaddedX = padding(X, ph, pw) if ph * pw != 0 else X
    Y = te.compute(
        (ic, oh, ow),
        lambda c, i, j: te.sum(
            PaddedX[c, i * sh + rkh, j * sw + rkw] * K[c, 0, rkh, rkw], axis=[rkh, rkw]
        ),
        name="Y",
    )
    return X, K, Y, PaddedX


def _min_value(dtype: str):
    """The smallest value of ``dtype`` as a constant (``te.min_value`` where kiln has it)."""
    fn = getattr(te, "min_value", None)
    if fn is not None:
        return fn(dtype)
    info = np.finfo(dtype) if dtype.startswith("float") else np.iinfo(dtype)
    return kiln.tir.const(info.min, dtype)


def pool(pool_type, c, nh, nw, kh, kw, ph=0, pw=0, sh=1, sw=1):
    """2-D max or average pooling of a CHW tensor: return ``X, Y, PaddedX`` (§3.5).

    ``pool_type`` is ``'max'`` (pads with the dtype's minimum; stage ``PoolMax``) or ``'avg'``
    (pads with 0; stages ``PoolSum`` then ``PoolAvg``, dividing by ``kh * kw``, padding
    included). Anything else raises ValueError.
    """
    rkh = te.reduce_axis((0, kh), name="rkh")
    rkw = te.reduce_axis((0, kw), name="rkw")
    oh = conv_out_size(nh, kh, ph, sh)
    ow = conv_out_size(nw, kw, pw, sw)
    X = te.placeholder((c, nh, nw), name="X")
    if pool_type == "max":
        PaddedX = padding(X, ph, pw, val=_min_value(X.dtype)) if ph * pw != 0 else X
        Y = te.compute(
            (c, oh, ow),
            lambda c, h, w: te.max(PaddedX[c, h * sh + rkh, w * sw + rkw], axis=[rkh, rkw]),
            tag="pool_max",
            name="PoolMax",
        )
    elif pool_type == "avg":
        PaddedX = padding(X, ph, pw) if ph * pw != 0 else X
        tsum = te.compute(
            (c, oh, ow),
            lambda c, h, w: te.sum(PaddedX[c, h * sh + rkh, w * sw + rkw], axis=[rkh, rkw]),
            tag="pool_avg1",
            name="PoolSum",
        )
        Y = te.compute(
            (c, oh, ow), lambda c, h, w: tsum[c, h, w] / (kh * kw), tag="pool_avg2", name="PoolAvg"
        )
    else:
        raise ValueError("Pool type should be 'avg' or 'max'.")
    return X, Y, PaddedX


def batch_norm(c, n, eps=1e-5):
    """Inference batch normalization of a (c, n, n) tensor: return
    ``X, Mean, Var, Gamma, Beta, Y`` with ``Y = (X - Mean) / sqrt(Var + eps) * Gamma + Beta``,
    the per-channel parameters being (c, 1, 1) (§3.6).

    The book builds this from TOPI's broadcast operators; here the same six stages are written
    with ``te.compute`` under TOPI's stage names (T_subtract, T_add, compute, T_divide,
    T_multiply, T_add), so this helper needs nothing beyond ``te``.
    """
    X = te.placeholder((c, n, n), name="X")
    Mean = te.placeholder((c, 1, 1), name="Mean")
    Var = te.placeholder((c, 1, 1), name="Var")
    Gamma = te.placeholder((c, 1, 1), name="Gamma")
    Beta = te.placeholder((c, 1, 1), name="Beta")
    C1 = te.compute(
        (c, n, n), lambda ax0, ax1, ax2: X[ax0, ax1, ax2] - Mean[ax0, 0, 0], name="T_subtract"
    )
    V = te.compute((c, 1, 1), lambda ax0, ax1, ax2: Var[ax0, ax1, ax2] + eps, name="T_add")
    C2 = te.compute((c, 1, 1), lambda i0, i1, i2: te.sqrt(V[i0, i1, i2]), name="compute")
    D = te.compute(
        (c, n, n), lambda ax0, ax1, ax2: C1[ax0, ax1, ax2] / C2[ax0, 0, 0], name="T_divide"
    )
    M = te.compute(
        (c, n, n), lambda ax0, ax1, ax2: D[ax0, ax1, ax2] * Gamma[ax0, 0, 0], name="T_multiply"
    )
    Y = te.compute(
        (c, n, n), lambda ax0, ax1, ax2: M[ax0, ax1, ax2] + Beta[ax0, 0, 0], name="T_add"
    )
    return X, Mean, Var, Gamma, Beta, Y


# ---------------------------------------------------------------- schedule helpers


def split(stage, axis, factors):
    """Split ``axis`` of ``stage`` by ``factors``, innermost factor last; return the axes from
    outermost to innermost (§5.4). ``factors=(16, 8)`` gives ``[outer, 16, 8]``."""
    axes = []
    for f in reversed(factors):
        axis, x = stage.split(axis, f)
        axes.append(x)
    return list(reversed(axes + [axis]))


def bind_thread(stage, axes, tags):
    """Bind each axis in ``axes`` to ``te.thread_axis`` of the matching tag in ``tags`` (§5.4)."""
    for axis, tag in zip(axes, tags, strict=False):
        stage.bind(axis, te.thread_axis(tag))


def split_axis(factors, sch, op, axis):
    """Split ``axis`` of ``sch[op]`` into ``len(factors) + 1`` axes, outermost first, the inner
    ones of extents ``factors`` (§5.5). ``[4, 8]`` on an extent-64 axis gives extents 2, 4, 8."""
    ret = []
    for i in range(len(factors)):
        ax0, ax1 = sch[op].split(axis, factor=int(np.prod(factors[i:])))
        ret.append(ax0)
        axis = ax1
    return ret + [axis]


# ---------------------------------------------------------------- benchmarking


def bench_workload(workload: Callable[[int], float]) -> float:
    """Return the mean time of one run of ``workload`` (§4.2).

    ``workload(n)`` runs the work ``n`` times and returns the total seconds. After a warm-up
    run, the work is repeated for about a second (at least 5 times) unless one run already
    takes longer than a second.
    """
    workload(1)  # warm-up
    time = workload(1)
    if time > 1:
        return time
    num_repeats = max(int(1.0 / time), 5)
    return workload(num_repeats) / num_repeats


def np_matmul_timer(n) -> Callable[[int], float]:
    """Return a ``timeit``-style timer of ``np.dot(a, b, out=c)`` on (n, n) float32 (§4.5)."""
    a, b, c = get_abc((int(n), int(n)))
    return timeit.Timer(lambda: np.dot(a, b, out=c)).timeit


def conv_gflop(oc, ic, n, k, p, s) -> float:
    """Giga floating-point operations of a convolution (§4.7): ``2 * oc * ic * on^2 * k^2``."""
    on = conv_out_size(n, k, p, s)
    return 2 * oc * ic * on * on * k * k / 1e9


def _device(target):
    """The device a target string (``'llvm -mcpu=...'``, ``'cuda'``) runs on."""
    return kiln.device(str(target).split()[0], 0)


def _to_device(dev) -> Callable[[np.ndarray], Any]:
    """A constructor for the data generators that copies an array to ``dev``."""
    return lambda x: kiln.nd.array(x, dev)


def _tvm_workload(mod, dev, args) -> Callable[[int], float]:
    """A workload for :func:`bench_workload` that runs ``mod``'s entry ``nrepeats`` times."""

    def workload(nrepeats: int) -> float:
        timer = mod.time_evaluator(mod.entry_name, dev, number=nrepeats)
        return timer(*args).mean * nrepeats

    return workload


def bench_vector_add_tvm(func, sizes, target) -> np.ndarray:
    """GFLOPS of vector add for each n in ``sizes``; ``func(n)`` returns ``s, (A, B, C)`` (§4.3)."""
    times = []
    for n in sizes:
        s, (A, B, C) = func(int(n))
        mod = kiln.build(s, [A, B, C], target)
        dev = _device(target)
        a, b, c = get_abc(int(n), _to_device(dev))
        times.append(bench_workload(_tvm_workload(mod, dev, (a, b, c))))
    return np.asarray(sizes) / 1e9 / np.array(times)


def bench_bcast_add_tvm(func, sizes, target) -> np.ndarray:
    """GFLOPS of the (n, 1) + (n, n) broadcast add for each n in ``sizes`` (§4.4)."""
    times = []
    for n in sizes:
        n = int(n)
        s, (A, B, C) = func(n)
        mod = kiln.build(s, [A, B, C], target)
        dev = _device(target)
        a, b, c = get_bcast_data((n, 1), (n, n), _to_device(dev))
        times.append(bench_workload(_tvm_workload(mod, dev, (a, b, c))))
    sizes = np.asarray(sizes)
    return sizes * sizes / 1e9 / np.array(times)


def bench_matmul_tvm(func, sizes, target) -> np.ndarray:
    """GFLOPS of (n, n) matrix multiplication for each n in ``sizes`` (§4.5)."""
    times = []
    for n in sizes:
        s, (A, B, C) = func(int(n))
        mod = kiln.build(s, [A, B, C], target)
        dev = _device(target)
        a, b, c = get_abc((int(n), int(n)), _to_device(dev))
        times.append(bench_workload(_tvm_workload(mod, dev, (a, b, c))))
    return 2 * np.asarray(sizes, dtype=np.float64) ** 3 / 1e9 / np.array(times)


def bench_conv_tvm(func, sizes, target) -> np.ndarray:
    """GFLOPS of SAME-padded stride-1 convolutions, ``sizes`` being (c, n, k) triples and
    ``func(oc, ic, n, k, p, s)`` returning ``s, (X, K, Y)`` (§4.7)."""
    gflops, times = [], []
    for c, n, k in sizes:
        args = c, c, n, k, (k - 1) // 2, 1  # oc, ic, n, k, p, s
        s, (X, K, Y) = func(*args)
        mod = kiln.build(s, [X, K, Y], target)
        dev = _device(target)
        x, w, y = get_conv_data(*args, _to_device(dev))
        times.append(bench_workload(_tvm_workload(mod, dev, (x, w, y))))
        gflops.append(conv_gflop(*args))
    return np.array(gflops) / np.array(times)


def bench_depthwise_conv_tvm(func, sizes, target) -> np.ndarray:
    """GFLOPS of depthwise convolutions, ``sizes`` being (c, n, k) triples and
    ``func(c, n, k, p, s)`` returning ``s, (X, K, Y)`` (§4.9)."""
    gflops, times = [], []
    for c, n, k in sizes:
        args = c, n, k, (k - 1) // 2, 1  # c, n, k, p, s
        s, (X, K, Y) = func(*args)
        mod = kiln.build(s, [X, K, Y], target)
        dev = _device(target)
        x, w, y = get_conv_data(args[0], *args, _to_device(dev), conv_type="depthwise")
        times.append(bench_workload(_tvm_workload(mod, dev, (x, w, y))))
        gflops.append(conv_gflop(1, *args))
    return np.array(gflops) / np.array(times)


def bench_pooling_tvm(func, sizes, target) -> np.ndarray:
    """Seconds per run of pooling, ``sizes`` being (c, n, k) triples (padding 1, stride 1) and
    ``func(size)`` returning ``sch, args`` (§4.10). Times, not GFLOPS."""
    times = []
    for size in sizes:
        sch, args = func(size)
        mod = kiln.build(sch, args, target)
        dev = _device(target)
        data, _, out = get_conv_data(size[0], size[0], size[1], size[2], 1, 1, _to_device(dev))
        times.append(bench_workload(_tvm_workload(mod, dev, (data, out))))
    return np.array(times)


def bench_bn_tvm(func, sizes, target) -> np.ndarray:
    """Seconds per run of batch norm, ``sizes`` being (c, n) pairs and ``func(size)``
    returning ``sch, args`` (§4.11). Times, not GFLOPS."""
    times = []
    for size in sizes:
        sch, args = func(size)
        mod = kiln.build(sch, args, target)
        dev = _device(target)
        arrays = get_bn_data(size[0], size[1], _to_device(dev))
        times.append(bench_workload(_tvm_workload(mod, dev, arrays)))
    return np.array(times)


# ---------------------------------------------------------------- plotting (matplotlib, lazily)


def _use_svg() -> None:
    """Ask a Jupyter front end for SVG figures, as the book does; a no-op elsewhere."""
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("svg")
    except Exception:
        pass


def plot(
    X,
    Y,
    xlabel=None,
    ylabel=None,
    legend=None,
    xlim=None,
    ylim=None,
    xscale="linear",
    yscale="linear",
    fmts=None,
    figsize=(4.5, 3),
    axes=None,
):
    """Plot one or several lines of ``Y`` against ``X`` on the current matplotlib axes (§4.3).

    ``Y`` is one sequence or a list of them; ``X`` is shared or one per line, and a line shorter
    than its ``X`` is drawn over the first x values. Returns the axes. Needs matplotlib.
    """
    from matplotlib import pyplot as plt

    _use_svg()
    plt.rcParams["figure.figsize"] = figsize
    axes = axes if axes is not None else plt.gca()
    ys = [Y] if np.ndim(Y[0]) == 0 else list(Y)
    xs = [X] * len(ys) if np.ndim(X[0]) == 0 else list(X)
    fmts = fmts or ["-"] * len(ys)
    for x, y, fmt in zip(xs, ys, fmts, strict=False):
        y = np.asarray(y)
        axes.plot(np.asarray(x)[: len(y)], y, fmt)  # a shorter line covers the first x values
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_xscale(xscale)
    axes.set_yscale(yscale)
    axes.set_xlim(xlim)
    axes.set_ylim(ylim)
    if legend:
        axes.legend(legend)
    axes.grid()
    return axes


def plot_gflops(sizes, gflops, legend, xlabel="Size"):
    """Log-log plot of GFLOPS lines against ``sizes``; the last line solid, the others dashed."""
    return plot(
        sizes,
        gflops,
        xlabel=xlabel,
        ylabel="GFLOPS",
        xscale="log",
        yscale="log",
        legend=legend,
        fmts=["--"] * (len(gflops) - 1) + ["-"],
    )


# ---------------------------------------------------------------- MXNet replacements (numpy)


def _no_mxnet(name: str):
    raise NotImplementedError(
        f"d2ltvm.{name}: MXNet is not supported by kiln (it does not install on current "
        "Python). Use a numpy or torch reference instead, e.g. d2ltvm.np_matmul_timer, "
        "or torch.nn.functional timed with d2ltvm.bench_workload."
    )


def get_conv_data_mxnet(oc, ic, n, k, p, s, ctx="cpu", conv_type="direct"):
    """numpy stand-in for the book's MXNet data: ``data (1, ic, n, n), weight, bias (oc,),
    out (1, oc, on, on)`` as numpy arrays (``ctx`` is ignored); same values as get_conv_data."""
    data, weight, out = get_conv_data(oc, ic, n, k, p, s, conv_type=conv_type)
    return data[np.newaxis], weight, np.zeros(out.shape[0], "float32"), out[np.newaxis]


def _windows(data: np.ndarray, k: int, p: int, s: int, pad_value: float) -> np.ndarray:
    """Strided k x k windows of the zero-(or value-)padded last two axes: (..., oh, ow, k, k)."""
    pad = [(0, 0)] * (data.ndim - 2) + [(p, p), (p, p)]
    padded = np.pad(data.astype(np.float64), pad, constant_values=pad_value)
    win = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(-2, -1))
    return win[..., ::s, ::s, :, :]


def conv_mxnet(data, weight, bias, out, k, p, s):
    """numpy stand-in for MXNet's convolution: NCHW ``data``, OIHW ``weight``; writes ``out``."""
    win = _windows(np.asarray(data), k, p, s, 0.0)
    res = np.einsum("bchwij,ocij->bohw", win, np.asarray(weight, np.float64))
    out[...] = res + np.asarray(bias).reshape(1, -1, 1, 1)


def depthwise_conv_mxnet(data, weight, bias, out, k, p, s):
    """numpy stand-in for MXNet's grouped convolution with one group per channel; the weight
    is (c, 1, k, k). Writes ``out``."""
    win = _windows(np.asarray(data), k, p, s, 0.0)
    res = np.einsum("bchwij,cij->bchw", win, np.asarray(weight, np.float64)[:, 0])
    out[...] = res + np.asarray(bias).reshape(1, -1, 1, 1)


def get_pool_data_mxnet(c, n, k, p, s, ctx="cpu"):
    """numpy stand-in for the book's MXNet pooling data: ``data (1, c, n, n), out (1, c, on, on)``
    (``ctx`` is ignored); same values as get_conv_data."""
    data, _, out = get_conv_data(c, c, n, k, p, s)
    return data[np.newaxis], out[np.newaxis]


def pool_mxnet(pool_type, data, out, k, p, s):
    """numpy stand-in for MXNet's pooling (``'max'`` or ``'avg'``, padding counted in the
    average as MXNet does by default). Writes ``out``."""
    if pool_type == "max":
        out[...] = _windows(np.asarray(data), k, p, s, -np.inf).max(axis=(-2, -1))
    elif pool_type == "avg":
        out[...] = _windows(np.asarray(data), k, p, s, 0.0).sum(axis=(-2, -1)) / (k * k)
    else:
        raise ValueError("Pool type should be 'avg' or 'max'.")


def get_bn_data_mxnet(c, n, ctx="cpu"):
    """numpy stand-in for the book's MXNet batch-norm data: as get_bn_data with a batch axis
    added to ``data`` and ``out`` (``ctx`` is ignored)."""
    data, mean, var, gamma, beta, out = get_bn_data(c, n)
    return data[np.newaxis], mean, var, gamma, beta, out[np.newaxis]


def batch_norm_mxnet(data, mean, var, gamma, beta, out, eps=1e-5):
    """numpy stand-in for MXNet's inference batch norm (global statistics, gamma used) on NCHW
    ``data`` with per-channel parameters. Writes ``out``."""

    def chan(x):
        return np.asarray(x, np.float64).reshape(-1, 1, 1)

    x = np.asarray(data, np.float64)
    out[...] = (x - chan(mean)) / np.sqrt(chan(var) + eps) * chan(gamma) + chan(beta)


def conv_timer_mxnet(c, n, k, ctx):
    """Not supported: MXNet timing (raises NotImplementedError)."""
    _no_mxnet("conv_timer_mxnet")


def bench_conv_mxnet(sizes, ctx="cpu"):
    """Not supported: MXNet timing (raises NotImplementedError)."""
    _no_mxnet("bench_conv_mxnet")


def depthwise_conv_timer_mxnet(c, n, k, ctx):
    """Not supported: MXNet timing (raises NotImplementedError)."""
    _no_mxnet("depthwise_conv_timer_mxnet")


def bench_depthwise_conv_mxnet(sizes, ctx="cpu"):
    """Not supported: MXNet timing (raises NotImplementedError)."""
    _no_mxnet("bench_depthwise_conv_mxnet")


def pooling_timer_mxnet(pool_type, c, n, k, ctx):
    """Not supported: MXNet timing (raises NotImplementedError)."""
    _no_mxnet("pooling_timer_mxnet")


def bench_pooling_mxnet(pool_type, sizes, ctx="cpu"):
    """Not supported: MXNet timing (raises NotImplementedError)."""
    _no_mxnet("bench_pooling_mxnet")


def bn_timer_mxnet(c, n, ctx):
    """Not supported: MXNet timing (raises NotImplementedError)."""
    _no_mxnet("bn_timer_mxnet")


def bench_bn_mxnet(sizes, ctx="cpu"):
    """Not supported: MXNet timing (raises NotImplementedError)."""
    _no_mxnet("bench_bn_mxnet")


def matmul_timer_mxnet(n, ctx):
    """Not supported: MXNet timing (raises NotImplementedError)."""
    _no_mxnet("matmul_timer_mxnet")
