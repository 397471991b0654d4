"""Book §4.10 "Pooling" on CPU: max and average pooling, default and optimized schedules.

Each function takes ``size = (c, n, k)`` (channels, input height/width, kernel height/width;
padding 1, stride 1 as in the book) and returns ``sch, (X, Y)``.

The optimized schedules call ``te.schedule.AutoInlineInjective(sch)`` as the book does;
``inline=inline_injective`` swaps in :func:`inline_injective`, the same transformation
spelled out with ``compute_inline`` (the tests check that both give the same code).
"""

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm
from kiln.te.tensor import ComputeOp
from kiln.topi.x86 import lanes  # fp32 lanes of one vector register (16 AVX-512, 8 AVX2)


def auto_inline_injective(sch):
    """The book's call: ``te.schedule.AutoInlineInjective(sch)``."""
    te.schedule.AutoInlineInjective(sch)


def inline_injective(sch):
    """Inline every stage that is not an output and computes without a reduction, the rule
    classic TVM's AutoInlineInjective applies to stages nobody has scheduled yet."""
    for stage in sch.stages:
        op = stage.op
        if isinstance(op, ComputeOp) and not op.reduce_axis and not stage.is_output:
            stage.compute_inline()


def default_max(size):
    c, n, k = size[:]
    X, Y, PaddedX = d2ltvm.pool("max", c, n, n, k, k, 1, 1, 1, 1)
    sch = te.create_schedule(Y.op)
    return sch, (X, Y)


def optimized_max(size, inline=auto_inline_injective):
    sch, (X, Y) = default_max(size)
    inline(sch)
    c, h, w = Y.op.axis[0:3]
    fused = sch[Y].fuse(c, h)
    sch[Y].parallel(fused)
    sch[Y].vectorize(w)
    return sch, (X, Y)


def default_avg(size):
    c, n, k = size[:]
    X, Y, PaddedX = d2ltvm.pool("avg", c, n, n, k, k, 1, 1, 1, 1)
    sch = te.create_schedule(Y.op)
    return sch, (X, Y)


def schedule_avg(size, inline=auto_inline_injective):
    sch, (X, Y) = default_avg(size)
    inline(sch)
    c, h, w = Y.op.axis[0:3]
    fused = sch[Y].fuse(c, h)
    sch[Y].parallel(fused)
    sch[Y].vectorize(w)
    PoolSum = Y.op.input_tensors[0]
    sch[PoolSum].compute_at(sch[Y], Y.op.axis[2])
    return sch, (X, Y)


def fast_pool(pool_type, size, vl=None, min_parallel=1 << 14):
    """Beyond the book: the padding is *not* inlined. Inlined, every one of the k*k reads of
    every output element carries the ``if_then_else`` of the padding, which kiln leaves
    scalar; here each channel's padded plane is computed once, just before that channel's
    pooling (``compute_at`` the channel loop, so it is still in cache), and the window
    reduction reads it without conditions, 16-lane vectors of output columns in a local
    accumulator. Channels run in parallel when the output has ``min_parallel`` elements."""
    vl = vl or lanes("float32")
    c, n, k = size[:]
    X, Y, PaddedX = d2ltvm.pool(pool_type, c, n, n, k, k, 1, 1, 1, 1)
    sch = te.create_schedule(Y.op)
    # the window accumulator: a local cache of PoolMax, or PoolAvg's input PoolSum
    local = sch.cache_write(Y, "local") if pool_type == "max" else Y.op.input_tensors[0]
    ch, h, w = Y.op.axis
    wo, wi = sch[Y].split(w, factor=vl)
    sch[Y].vectorize(wi)
    if c * n * n >= min_parallel:
        sch[Y].parallel(ch)
    sch[local].compute_at(sch[Y], wo)
    lc, lh, lw = local.op.axis
    rkh, rkw = local.op.reduce_axis
    sch[local].reorder(lc, lh, rkh, rkw, lw)
    sch[local].vectorize(lw)
    if PaddedX is not X:
        sch[PaddedX].compute_at(sch[Y], ch)
    return sch, (X, Y)


def fast_max(size):
    return fast_pool("max", size)


def fast_avg(size):
    return fast_pool("avg", size)


if __name__ == "__main__":
    size = (64, 64, 3)
    for func in (default_max, default_avg):
        sch, args = func(size)
        print(f"# {func.__name__}")
        print(tvm.lower(sch, args, simple_mode=True))
    for func in (optimized_max, schedule_avg, fast_max, fast_avg):
        sch, args = func(size)
        print(f"# {func.__name__}")
        print(tvm.lower(sch, args, simple_mode=True))
