"""Kernels over symbolic shapes build fast and compute what numpy computes (issue 19).

Each case is a schedule that once took 25 s to minutes to build, or ended in a RecursionError
in the simplifier: loop_partition cut a loop once per ``likely`` guard, each cut nesting the
next bound one min/max deeper (a virtual thread or an unrolled stage repeats a guard per
copy), partition_conditions then split every copy again at bounds the simplifier could not
order, and every later pass re-simplified the grown bounds. The build time follows the code
size, so the tests pin the size of the generated C (deterministic) rather than a time; the
measured times are in docs/lowering.md. Every size is run around the split factors: 1,
factor - 1, factor, factor + 1 and a size with a tail.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.arith import evaluate

#: generated C (runtime header included, about 9 KB) of every case stays below this; the
#: schedules below produced from 50 KB to megabytes before the fix
MAX_SOURCE_CHARS = 40_000


def _check(s, args, ref: Callable, sizes: list[dict]) -> None:
    """Build once; for each binding of the size variables run and compare with ``ref``."""
    mod = kiln.build(s, args)
    assert len(mod.get_source()) < MAX_SOURCE_CHARS
    rng = np.random.default_rng(0)
    *inputs, out = args
    for env in sizes:
        arrays = [rng.standard_normal(_shape(t, env)).astype("float32") for t in inputs]
        result = kiln.nd.empty(_shape(out, env))
        mod(*[kiln.nd.array(a) for a in arrays], result)
        np.testing.assert_allclose(result.numpy(), ref(*arrays), rtol=1e-5, atol=1e-5,
                                   err_msg=str(env))


def _shape(t, env: dict) -> list[int]:
    return [int(evaluate(d, env)) for d in t.shape]


@pytest.mark.parametrize("parallel, vectorize", [(False, False), (False, True), (True, True)],
                         ids=["split", "vectorize", "parallel_vectorize"])
def test_vector_add_split_by_8(parallel, vectorize):
    n = te.var("n")
    A, B = te.placeholder((n,), name="A"), te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    if parallel:
        s[C].parallel(xo)
    if vectorize:
        s[C].vectorize(xi)
    _check(s, [A, B, C], np.add, [{n: k} for k in (1, 7, 8, 9, 37)])


def _elementwise_13(symbolic: bool):
    """``C = 2*A + B`` through an intermediate T, over 13 x 13 or symbolic (n, m)."""
    n, m = (te.var("n"), te.var("m")) if symbolic else (13, 13)
    A, B = te.placeholder((n, m), name="A"), te.placeholder((n, m), name="B")
    T = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="T")
    C = te.compute((n, m), lambda i, j: T[i, j] + B[i, j], name="C")
    sizes = [{n: a, m: b} for a, b in ((1, 1), (13, 13), (5, 20), (7, 37))] if symbolic else [{}]
    return te.create_schedule(C.op), (A, B, T, C), sizes


@pytest.mark.parametrize("symbolic", [False, True], ids=["13x13", "symbolic"])
@pytest.mark.parametrize("vthread", [True, False], ids=["vthread", "no_vthread"])
def test_fuse_unroll_two_splits_parallel_vthread(symbolic, vthread):
    """The issue's 13 x 13 stage: unroll, fuse, a split by 6 and one into 4 parts, parallel,
    a vthread (each virtual thread repeats the guard) and T computed inside."""
    s, (A, B, T, C), sizes = _elementwise_13(symbolic)
    i, j = C.op.axis
    s[C].unroll(j)
    fused = s[C].fuse(i, j)
    outer, inner = s[C].split(fused, factor=6)
    oo, oi = s[C].split(outer, nparts=4)
    s[C].parallel(oo)
    if vthread:
        s[C].bind(inner, te.thread_axis("vthread"))
    s[T].compute_at(s[C], oi)
    _check(s, [A, B, C], lambda a, b: 2 * a + b, sizes)


@pytest.mark.parametrize("symbolic", [False, True], ids=["13x13", "symbolic"])
def test_vthread_over_a_split_of_a_split(symbolic):
    """A vthread over the innermost of two splits: seven copies of each guard, which cut the
    loop seven times over (100 s to build over symbolic shapes)."""
    s, (A, B, T, C), sizes = _elementwise_13(symbolic)
    i, j = C.op.axis
    s[C].unroll(i)
    jo, ji = s[C].split(j, nparts=3)
    jio, jii = s[C].split(ji, factor=7)
    fused = s[C].fuse(i, jo)
    s[C].parallel(fused)
    s[C].bind(jii, te.thread_axis("vthread"))
    s[T].compute_at(s[C], jii)
    _check(s, [A, B, C], lambda a, b: 2 * a + b, sizes)


def test_symbolic_2d_tile_parallel_vectorize():
    n, m = te.var("n"), te.var("m")
    A, B = te.placeholder((n, m), name="A"), te.placeholder((n, m), name="B")
    C = te.compute((n, m), lambda i, j: A[i, j] - B[i, j], name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[C].parallel(xo)
    s[C].vectorize(yi)
    sizes = [{n: a, m: b} for a, b in ((1, 1), (7, 9), (8, 8), (9, 7), (37, 20))]
    _check(s, [A, B, C], np.subtract, sizes)


def test_symbolic_batch_row_sum():
    n = te.var("n")
    A = te.placeholder((n, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[C].parallel(xo)
    ko, ki = s[C].split(k, factor=8)
    s[C].vectorize(xi)
    _check(s, [A, C], lambda a: a.sum(axis=1), [{n: b} for b in (1, 3, 4, 5, 37)])
