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


if __name__ == "__main__":
    size = (64, 64, 3)
    for func in (default_max, default_avg):
        sch, args = func(size)
        print(f"# {func.__name__}")
        print(tvm.lower(sch, args, simple_mode=True))
    for func in (optimized_max, schedule_avg):
        sch, args = func(size)
        print(f"# {func.__name__}")
        print(tvm.lower(sch, args, simple_mode=True))
