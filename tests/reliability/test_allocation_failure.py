"""A temporary buffer the kernel cannot allocate (issue 25): the call raises a ``TVMError``
naming the buffer and its size, and the process goes on. Inside an OpenMP parallel loop,
where the C function cannot return, the failure is recorded, the buffer's body skipped, and
the error returned after the loop; before, the NULL was dereferenced (SIGSEGV). An element
count whose bytes overflow ``size_t`` is refused too, never allocated short."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te

M = 4
#: elements of B: 2^62 bytes of float32, beyond any address space
HUGE = 1 << 60
#: elements whose float32 bytes (2^64) overflow size_t
OVERFLOWING = 1 << 62


def _row_sums(parallel: bool):
    """C[i] = sum over j < n of A[i] * j, through a temporary row B of n elements computed
    inside C's (parallel or serial) loop: a heap allocation of symbolic size."""
    n = te.var("n", dtype="int64")
    A = te.placeholder((M,), name="A")
    B = te.compute((M, n), lambda i, j: A[i] * j.astype("float32"), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((M,), lambda i: te.sum(B[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    if parallel:
        s[C].parallel(C.op.axis[0])
    s[B].compute_at(s[C], C.op.axis[0])
    return kiln.build(s, [A, C, n])


def _call(f, n: int) -> np.ndarray:
    a = kiln.nd.array(np.arange(1, M + 1, dtype="float32"))
    c = kiln.nd.empty((M,))
    f(a, c, n)
    return c.numpy()


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
def test_failed_allocation_raises_and_the_process_goes_on(parallel):
    f = _row_sums(parallel)
    src = f.get_source()
    assert ("#pragma omp parallel for" in src) == parallel
    for n in (HUGE, OVERFLOWING):
        with pytest.raises(kiln.TVMError, match=rf"^out of memory allocating buffer B: {n} "
                           r"elements of 4 bytes$"):
            _call(f, n)
    np.testing.assert_array_equal(_call(f, 10), np.arange(1, M + 1) * 45.0)


def test_empty_and_negative_extents_allocate_nothing_to_fail():
    f = _row_sums(parallel=True)
    np.testing.assert_array_equal(_call(f, 0), np.zeros(M))
    np.testing.assert_array_equal(_call(f, -3), np.zeros(M))


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
def test_a_small_symbolic_buffer_lives_on_the_stack_and_a_large_one_on_the_heap(parallel):
    """A buffer of symbolic size first tries a stack buffer of ``SMALL_BYTES``: sizes on both
    sides of it (and exactly at it) give the same sums, and only the heap one is freed."""
    from kiln.codegen.c_alloc import SMALL_BYTES

    f = _row_sums(parallel)
    src = f.get_source()
    assert "_B_small" in src and "if (B != _B_small" in src
    fits = SMALL_BYTES // 4
    for n in (1, fits - 1, fits, fits + 1, 4 * fits):
        want = np.arange(1, M + 1, dtype="float64") * (n * (n - 1) / 2)
        np.testing.assert_allclose(_call(f, n), want, rtol=1e-4)  # float32 sums of n terms
