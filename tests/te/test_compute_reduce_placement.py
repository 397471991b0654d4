"""A reduction is a whole output of te.compute, as in TVM: anything else fails at definition
with TVM's message, naming the compute."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te

N = 8
TOP_LEVEL = r"compute B: reductions are only allowed at the top level of compute"


def _parts():
    A = te.placeholder((N, N), name="A")
    k = te.reduce_axis((0, N), name="k")
    return A, k


@pytest.mark.parametrize("body", [
    lambda A, k: (lambda i: te.sum(A[i, k], axis=k) / N),
    lambda A, k: (lambda i: te.sum(A[i, k], axis=k).astype("float64")),
    lambda A, k: (lambda i: te.max(te.sum(A[i, k], axis=k), 0.0)),
    lambda A, k: (lambda i: te.sum(te.sum(A[i, k], axis=k), axis=k)),
    lambda A, k: (lambda i: te.sum(A[i, k], axis=k, where=te.sum(A[k, i], axis=k) > 0)),
], ids=["divided", "cast", "elementwise_max", "nested", "in_condition"])
def test_reduction_not_at_top_level(body):
    A, k = _parts()
    with pytest.raises(tvm.TVMError, match=TOP_LEVEL) as err:  # TVM's class, as TVM raises
        te.compute((N,), body(A, k), name="B")
    assert isinstance(err.value, ValueError)  # and kiln's other definition checks' class


def test_two_step_form_works():
    """The fix the message suggests: the reduction as its own tensor."""
    A, k = _parts()
    S = te.compute((N,), lambda i: te.sum(A[i, k], axis=k), name="S")
    B = te.compute((N,), lambda i: S[i] / N, name="B")
    s = te.create_schedule(B.op)
    f = tvm.build(s, [A, B])
    a = np.random.default_rng(0).random((N, N)).astype("float32")
    b = tvm.nd.array(np.zeros(N, "float32"))
    f(tvm.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), a.mean(axis=1), rtol=1e-5)
