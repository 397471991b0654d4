"""Book §4.3 "Vector Add" on CPU: the default, parallel and vectorized schedules.

Each function takes the vector length ``n`` and returns ``s, (A, B, C)`` as in the book.
Run this file to print the lowered code of each schedule at the book's size 64.
"""

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


def default(n):
    """A plain one-level loop."""
    A, B, C = d2ltvm.vector_add(n)
    s = te.create_schedule(C.op)
    return s, (A, B, C)


def parallel(n):
    """The only loop becomes a parallel loop."""
    s, (A, B, C) = default(n)
    # add thread-level parallelism
    s[C].parallel(C.op.axis[0])
    return s, (A, B, C)


def vectorized(n, factor=8, min_parallel=0):
    """Split by ``factor``; parallelize the outer loop, vectorize the inner one.

    ``min_parallel`` (not in the book): below that many elements the outer loop stays
    sequential, since waking the other threads costs more than a short loop (microseconds;
    far more when other processes hold the cores)."""
    s, (A, B, C) = default(n)
    outer, inner = s[C].split(C.op.axis[0], factor=factor)
    if n >= min_parallel:
        s[C].parallel(outer)
    s[C].vectorize(inner)
    return s, (A, B, C)


SCHEDULES = {"default": default, "parallel": parallel, "vectorized": vectorized}

if __name__ == "__main__":
    for name, func in SCHEDULES.items():
        s, args = func(64)
        print(f"# {name}")
        print(tvm.lower(s, args, simple_mode=True))
