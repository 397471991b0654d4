"""Golden files: the lowered text of the book's chapter 1.2 and 2 programs.

Refresh deliberately with ``pytest --update-golden`` and review the diff of tests/golden/.
"""

from __future__ import annotations

import pytest

import kiln as tvm
from kiln import te


def vector_add():
    A = te.placeholder((100,), name="a")
    B = te.placeholder((100,), name="b")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="c")
    return te.create_schedule(C.op), [A, B, C]


def vector_add_symbolic():
    n = te.var("n")
    A = te.placeholder((n,), name="a")
    B = te.placeholder((n,), name="b")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="c")
    return te.create_schedule(C.op), [A, B, C]


def transpose():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="a")
    B = te.compute((m, n), lambda i, j: A[j, i], "b")
    return te.create_schedule(B.op), [A, B]


def reshape_1d():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="a")
    B = te.compute((m * n,), lambda i: A[i // m, i % m], name="b")
    return te.create_schedule(B.op), [A, B]


def reshape_2d():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="a")
    p, q = te.var("p"), te.var("q")
    B = te.compute((p, q), lambda i, j: A[(i * q + j) // m, (i * q + j) % m], name="b")
    return te.create_schedule(B.op), [A, B]


def slicing():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="a")
    bi, bj, si, sj = [te.var(name) for name in ["bi", "bj", "si", "sj"]]
    B = te.compute(((n - bi) // si, (m - bj) // sj), lambda i, j: A[i * si + bi, j * sj + bj],
                   name="b")
    return te.create_schedule(B.op), [A, B, bi, si, bj, sj]


def sum_rows():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="a")
    j = te.reduce_axis((0, m), name="j")
    B = te.compute((n,), lambda i: te.sum(A[i, j], axis=j), name="b")
    return te.create_schedule(B.op), [A, B]


def sum_all():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="a")
    i, j = te.reduce_axis((0, n), name="i"), te.reduce_axis((0, m), name="j")
    B = te.compute((), lambda: te.sum(A[i, j], axis=(i, j)), name="b")
    return te.create_schedule(B.op), [A, B]


def prod_rows():
    product = te.comm_reducer(lambda a, b: a * b, lambda t: tvm.tir.const(1, dtype=t))
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="a")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: product(A[i, k], axis=k), name="b")
    return te.create_schedule(B.op), [A, B]


def tril():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m))
    B = te.compute(A.shape, lambda i, j: te.if_then_else(i >= j, A[i, j], 0.0))
    return te.create_schedule(B.op), [A, B]


def pad_any():
    p = 1
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="a")
    B = te.compute((n + p * 2, m + p * 2), lambda i, j: te.if_then_else(
        te.any(i < p, i >= n + p, j < p, j >= m + p), 0, A[i - p, j - p]), name="b")
    return te.create_schedule(B.op), [A, B]


PROGRAMS = [vector_add, vector_add_symbolic, transpose, reshape_1d, reshape_2d, slicing,
            sum_rows, sum_all, prod_rows, tril, pad_any]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_lowered_text(program, golden):
    s, args = program()
    golden(f"book_{program.__name__}", str(tvm.lower(s, args, simple_mode=True)))
