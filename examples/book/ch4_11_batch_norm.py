"""Book §4.11 "Batch Normalization" on CPU: the default and the optimized schedule.

Each function takes ``size = (c, n)`` (channels, input height/width) and returns
``sch, (X, Mean, Var, Gamma, Beta, Y)``. ``optimized_bn`` calls
``te.schedule.AutoInlineInjective(sch)`` as the book does, or ``inline`` when given
(see ``ch4_10_pooling.inline_injective``).

``fast_bn`` goes beyond the book: inlining every stage makes each output element compute a
square root and a division (the per-channel ``sqrt(var + eps)`` is recomputed n² times).
It folds the per-channel work into two small stages first, ``scale = gamma / sqrt(var +
eps)`` and ``shift = beta - mean * scale``, so each element is one multiply-add, and runs
the (channel, pixel) loops in parallel blocks of 16-lane vectors.
"""

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm
from kiln.topi.x86 import lanes  # fp32 lanes of one vector register (16 AVX-512, 8 AVX2)


def default_bn(size):
    c, n = size[:]
    X, Mean, Var, Gamma, Beta, Y = d2ltvm.batch_norm(c, n)
    sch = te.create_schedule(Y.op)
    return sch, (X, Mean, Var, Gamma, Beta, Y)


def optimized_bn(size, inline=None):
    sch, (X, Mean, Var, Gamma, Beta, Y) = default_bn(size)
    if inline is None:
        te.schedule.AutoInlineInjective(sch)
    else:
        inline(sch)
    c, h, w = Y.op.axis[0:3]
    fused = sch[Y].fuse(c, h)
    sch[Y].parallel(fused)
    sch[Y].vectorize(w)
    return sch, (X, Mean, Var, Gamma, Beta, Y)


def bn_scale_shift(c, n, eps=1e-5):
    """The same batch norm as ``d2ltvm.batch_norm`` with the per-channel work in two stages
    of c elements: returns ``X, Mean, Var, Gamma, Beta, Y`` (Y = X * scale + shift)."""
    X = te.placeholder((c, n, n), name="X")
    Mean, Var, Gamma, Beta = (te.placeholder((c, 1, 1), name=name)
                              for name in ("Mean", "Var", "Gamma", "Beta"))
    Scale = te.compute((c,), lambda i: Gamma[i, 0, 0] / te.sqrt(Var[i, 0, 0] + eps),
                       name="Scale")
    Shift = te.compute((c,), lambda i: Beta[i, 0, 0] - Mean[i, 0, 0] * Scale[i], name="Shift")
    Y = te.compute((c, n, n), lambda i, h, w: X[i, h, w] * Scale[i] + Shift[i], name="Y")
    return X, Mean, Var, Gamma, Beta, Y


def fast_bn(size, vl=None, min_parallel=1 << 16):
    """``bn_scale_shift`` with the (h, w) plane of each channel flattened, split into vectors
    of ``vl`` lanes; parallel over channels when there are at least ``min_parallel``
    elements (below that, waking a second thread costs more than it saves)."""
    vl = vl or lanes("float32")
    c, n = size[:]
    X, Mean, Var, Gamma, Beta, Y = bn_scale_shift(c, n)
    sch = te.create_schedule(Y.op)
    i, h, w = Y.op.axis
    hw = sch[Y].fuse(h, w)
    outer, inner = sch[Y].split(hw, factor=vl)
    sch[Y].vectorize(inner)
    if c * n * n >= min_parallel:
        sch[Y].parallel(i)
    return sch, (X, Mean, Var, Gamma, Beta, Y)


if __name__ == "__main__":
    for func in (default_bn, optimized_bn, fast_bn):
        sch, args = func((32, 28))
        print(f"# {func.__name__}")
        print(tvm.lower(sch, args, simple_mode=True))
