"""Book §4.11 "Batch Normalization" on CPU: the default and the optimized schedule.

Each function takes ``size = (c, n)`` (channels, input height/width) and returns
``sch, (X, Mean, Var, Gamma, Beta, Y)``. ``optimized_bn`` calls
``te.schedule.AutoInlineInjective(sch)`` as the book does, or ``inline`` when given
(see ``ch4_10_pooling.inline_injective``).
"""

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


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


if __name__ == "__main__":
    for func in (default_bn, optimized_bn):
        sch, args = func((32, 28))
        print(f"# {func.__name__}")
        print(tvm.lower(sch, args, simple_mode=True))
