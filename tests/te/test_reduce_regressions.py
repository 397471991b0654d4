"""Regressions: tuple (multi-output) reductions and attachments seen by several consumers."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir


def argmax_reducer():
    def fcombine(x, y):  # TVM's signature: the two tuples
        take_x = x[1] >= y[1]
        return tir.Select(take_x, x[0], y[0]), tir.Select(take_x, x[1], y[1])

    def fidentity(t0, t1):
        return tir.const(-1, t0), tir.min_value(t1)

    return te.comm_reducer(fcombine, fidentity, name="argmax")


def test_argmax_with_only_the_index_as_argument():
    A = te.placeholder((4, 6), name="A")
    k = te.reduce_axis((0, 6), "k")
    T0, T1 = te.compute((4,), lambda i: argmax_reducer()((k.var, A[i, k]), axis=k), name="T")
    s = te.create_schedule(T0.op)
    mod = kiln.build(s, [A, T0])
    a = np.random.default_rng(0).random((4, 6)).astype("float32")
    out = kiln.nd.empty((4,), "int32")
    mod(kiln.nd.array(a), out)
    np.testing.assert_equal(out.numpy(), a.argmax(1))


def test_tuple_reduction_updates_from_old_values():
    red = te.comm_reducer(lambda x, y: (x[0] + y[0], x[1] + x[0]),
                          lambda t0, t1: (tir.const(0, t0), tir.const(0, t1)), name="prefix")
    n = 5
    A = te.placeholder((1, n), name="A")
    k = te.reduce_axis((0, n), "k")
    a, b = te.compute((1,), lambda i: red((A[i, k], A[i, k]), axis=k), name="T")
    s = te.create_schedule(a.op)
    mod = kiln.build(s, [A, a, b])
    oa, ob = kiln.nd.empty((1,)), kiln.nd.empty((1,))
    mod(kiln.nd.array(np.ones((1, n), "float32")), oa, ob)
    assert oa.numpy()[0] == 5
    assert ob.numpy()[0] == 0 + 1 + 2 + 3 + 4


def test_compute_at_hidden_from_another_consumer_is_a_schedule_error():
    A = te.placeholder((4, 8), name="A")
    k = te.reduce_axis((0, 8), "k")
    M = te.compute((4,), lambda i: te.max(A[i, k], axis=k), name="M")
    k2 = te.reduce_axis((0, 8), "k2")
    S = te.compute((4,), lambda i: te.sum(A[i, k2] - M[i], axis=k2), name="S")
    C = te.compute((4, 8), lambda i, j: A[i, j] - M[i] - S[i], name="C")
    s = te.create_schedule(C.op)
    s[S].compute_at(s[C], C.op.axis[0])
    s[M].compute_at(s[S], S.op.axis[0])
    with pytest.raises(kiln.ScheduleError, match="stage 'C' also reads it outside that loop"):
        kiln.build(s, [A, C])
