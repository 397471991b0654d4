"""``s.rfactor`` of a split that may not divide the reduction (a symbolic row length): the
bound is TVM's ``likely`` predicate, which ``loop_partition`` cuts, so the whole slices
reduce guard-free as vectors and the result is exact at every length."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import te


def test_rfactor_of_a_symbolic_reduction_runs_whole_slices_guard_free():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(k, factor=8)
    rf = s.rfactor(B, ki)
    lane = s[rf].op.axis[0]
    s[rf].reorder(*s[rf].op.reduce_axis, lane)
    s[rf].vectorize(lane)
    text = str(kiln.lower(s, [A, B], simple_mode=True))
    # the whole slices: one vector update per 8 elements, no test; the tail, a loop bounded
    # by the elements left (past that bound the guard fails: no copy of it is kept)
    assert "for (k.outer, 0, floordiv(n, 8))" in text
    assert "B.rf[ramp(0, 1, 8)] = (B.rf[ramp(0, 1, 8)] + A[ramp((k.outer*8), 1, 8)])" in text
    assert "(k.inner, 0, (n - (k.outer*8)))" in text and "likely(" not in text
    mod = kiln.build(s, [A, B])
    for size in (0, 1, 7, 8, 9, 100):
        a = np.arange(size, dtype=np.float32)
        out = kiln.nd.array(np.zeros(1, np.float32))
        mod(kiln.nd.array(a), out)
        assert out.numpy()[0] == a.sum(), size
