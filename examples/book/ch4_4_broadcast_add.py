"""Book §4.4 "Broadcast Add" on CPU: (n, 1) + (n, n), a good and a bad schedule.

Each function takes ``n`` and returns ``s, (A, B, C)``.
"""

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


def default(n):
    A, B, C = d2ltvm.broadcast_add((n, 1), (n, n))
    s = te.create_schedule(C.op)
    return s, (A, B, C)


def good_schedule(n, min_parallel=0):
    """Parallel rows, vectorized columns: contiguous accesses, ``A[x]`` broadcast.

    ``min_parallel`` (not in the book): below that many elements the rows stay sequential,
    since waking the other threads costs more than a short loop."""
    s, (A, B, C) = default(n)
    x, y = C.op.axis
    if n * n >= min_parallel:
        s[C].parallel(x)
    s[C].vectorize(y)
    return s, (A, B, C)


def bad_schedule(n):
    """Columns outermost and parallel, rows vectorized: strided accesses to B and C."""
    s, (A, B, C) = default(n)
    x, y = C.op.axis
    s[C].reorder(y, x)
    s[C].parallel(y)
    s[C].vectorize(x)
    return s, (A, B, C)


SCHEDULES = {"default": default, "good": good_schedule, "bad": bad_schedule}

if __name__ == "__main__":
    for name, func in SCHEDULES.items():
        s, args = func(64)
        print(f"# {name}")
        print(tvm.lower(s, args, simple_mode=True))
