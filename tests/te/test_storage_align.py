"""storage_align pads a cache's row stride; results stay the same."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te


def test_storage_align_pads_stride():
    n = 64
    A = te.placeholder((n, 32), name="A")
    B = te.compute((n, 32), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "local", [B])
    s[AA].storage_align(AA.op.axis[0], 32, 1)
    text = str(kiln.lower(s, [A, B]))
    assert "allocate A.local[float32 * 2112]" in text  # 64 rows of stride 33 (not 32)
    assert "A.local[((i*33) + j)]" in text
    mod = kiln.build(s, [A, B])
    a = np.random.default_rng(0).standard_normal((n, 32)).astype("float32")
    b = kiln.nd.empty((n, 32))
    mod(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), a * 2)


def test_storage_align_checks_arguments():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(kiln.ScheduleError, match="0 <= offset < factor"):
        s[B].storage_align(B.op.axis[0], 4, 7)
    other = te.compute((8,), lambda i: A[i, 0], name="C")
    with pytest.raises(kiln.ScheduleError, match="must be one of the operation's axes"):
        s[B].storage_align(other.op.axis[0], 4, 1)
