"""Book §4.5 "Matrix Multiplication" on CPU: default, reordered and parallel schedules.

Each function takes the matrix size ``n`` (square n x n matrices) and returns
``s, (A, B, C)``.
"""

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


def default(n):
    """Three nested loops x, y, k."""
    A, B, C = d2ltvm.matmul(n, n, n)
    return te.create_schedule(C.op), (A, B, C)


def reorder(n):
    """Loop order (x, k, y): every matrix is read and written row by row."""
    s, (A, B, C) = default(n)
    (x, y), (k,) = C.op.axis, C.op.reduce_axis
    s[C].reorder(x, k, y)
    return s, (A, B, C)


def parallel(n):
    """``reorder`` with the rows of C computed in parallel."""
    s, (A, B, C) = reorder(n)
    s[C].parallel(C.op.axis[0])
    return s, (A, B, C)


SCHEDULES = {"default": default, "reorder": reorder, "parallel": parallel}

if __name__ == "__main__":
    for name, func in SCHEDULES.items():
        s, args = func(64)
        print(f"# {name}")
        print(tvm.lower(s, args, simple_mode=True))
