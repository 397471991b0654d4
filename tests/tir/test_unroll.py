"""pragma auto_unroll_max_step marks small constant loop nests as unrolled."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import te


def test_auto_unroll_max_step():
    A = te.placeholder((64, 4), name="A")
    B = te.compute((64, 4), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    s[B].pragma(i, "auto_unroll_max_step", 16)
    text = str(kiln.lower(s, [A, B]))
    assert "unrolled (j, 0, 4)" in text
    assert "for (i, 0, 64)" in text
    mod = kiln.build(s, [A, B])
    a = np.random.default_rng(0).standard_normal((64, 4)).astype("float32")
    b = kiln.nd.empty((64, 4))
    mod(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), a * 2)
