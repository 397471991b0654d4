"""Bound inference regressions: regions of producers seen through attached consumers."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import te


def test_root_producer_read_by_attached_consumer():
    """P sits at root; B is computed inside C's outer loop: P must cover all of B's reads."""
    n = 16
    A = te.placeholder((n,), name="A")
    P = te.compute((n + 2,), lambda i: A[te.min(te.max(i - 1, 0), n - 1)], name="P")
    B = te.compute((n,), lambda i: P[i] + P[i + 2], name="B")
    C = te.compute((n,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    o, _ = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], o)
    assert "allocate P[float32 * 18]" in str(kiln.lower(s, [A, C]))
    mod = kiln.build(s, [A, C])
    a = np.arange(n, dtype="float32")
    c = kiln.nd.empty((n,))
    mod(kiln.nd.array(a), c)
    p = a[np.clip(np.arange(n + 2) - 1, 0, n - 1)]
    np.testing.assert_allclose(c.numpy(), (p[:-2] + p[2:]) * 2)


def test_attached_producer_gets_one_tile():
    n = 64
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((n,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    o, _ = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], o)
    text = str(kiln.lower(s, [A, C]))
    assert "allocate B[float32 * 8]" in text
    mod = kiln.build(s, [A, C])
    a = np.arange(n, dtype="float32")
    c = kiln.nd.empty((n,))
    mod(kiln.nd.array(a), c)
    np.testing.assert_allclose(c.numpy(), (a + 1) * 2)


def test_input_tensors_is_a_new_list_each_time():
    """``input_tensors`` (bound inference asks it of every stage) is found once per
    operation, and callers may still change the list they get."""
    A = te.placeholder((8,), name="A")
    B = te.placeholder((8,), name="B")
    C = te.compute((8,), lambda i: A[i] * B[7 - i] + A[7 - i], name="C")
    first = C.op.input_tensors
    assert first == [A, B]
    first.append(C)
    assert C.op.input_tensors == [A, B]
    assert C.op.input_tensors is not C.op.input_tensors
