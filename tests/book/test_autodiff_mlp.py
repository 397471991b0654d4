"""A 2-layer MLP trained with ``te.gradient``, as classic TVM code writes it: dense, relu,
dense, softmax and a cross-entropy loss; the gradients of the loss with respect to the weights
and biases checked by finite differences (``tvm.testing.check_numerical_grads``), then used
for a few steps of gradient descent.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te, topi

BATCH, N_IN, N_HIDDEN, N_OUT = 4, 5, 6, 3


def mlp_loss(dtype: str = "float64"):
    """The network's loss and its placeholders: ``(loss, x, labels, params)``."""
    x = te.placeholder((BATCH, N_IN), dtype, name="x")
    labels = te.placeholder((BATCH, N_OUT), dtype, name="labels")  # one-hot rows
    w1 = te.placeholder((N_HIDDEN, N_IN), dtype, name="w1")
    b1 = te.placeholder((N_HIDDEN,), dtype, name="b1")
    w2 = te.placeholder((N_OUT, N_HIDDEN), dtype, name="w2")
    b2 = te.placeholder((N_OUT,), dtype, name="b2")
    hidden = topi.nn.relu(topi.add(topi.nn.dense(x, w1), b1))
    prob = topi.nn.softmax(topi.add(topi.nn.dense(hidden, w2), b2))
    i = te.reduce_axis((0, BATCH), name="i")
    j = te.reduce_axis((0, N_OUT), name="j")
    total = te.compute((1,), lambda _: te.sum(-labels[i, j] * te.log(prob[i, j]), axis=[i, j]),
                       name="total")
    loss = te.compute((1,), lambda z: total[z] / BATCH, name="loss")
    return loss, x, labels, [w1, b1, w2, b2]


@pytest.mark.slow  # one build of ~30 stages: about 2 s
def test_mlp_gradients_by_finite_differences_then_descent():
    loss, x, labels, params = mlp_loss()
    grads = te.gradient(loss, params)  # head None: Jacobians of the (1,)-shaped loss
    assert [tuple(g.shape) for g in grads] == [(1, *p.shape) for p in params]
    s = te.create_schedule([loss.op] + [g.op for g in grads])
    f = tvm.build(s, [x, labels, *params, loss, *grads])

    rng = np.random.default_rng(1)
    xv = rng.uniform(-1, 1, (BATCH, N_IN))
    lv = np.eye(N_OUT)[rng.integers(0, N_OUT, BATCH)]
    weights = [rng.uniform(-1, 1, [int(d) for d in p.shape]) for p in params]

    def run(*ws):
        outs = [tvm.nd.empty([int(d) for d in t.shape], t.dtype) for t in [loss, *grads]]
        f(*[tvm.nd.array(a) for a in (xv, lv, *ws)], *outs)
        return outs[0].numpy()[0], [g.numpy()[0] for g in outs[1:]]

    value, analytic = run(*weights)
    tvm.testing.check_numerical_grads(lambda *ws: run(*ws)[0], weights, analytic,
                                      delta=1e-6, atol=1e-6, rtol=1e-4)

    losses = [value]
    for _ in range(20):
        weights = [w - 0.5 * g for w, g in zip(weights, run(*weights)[1], strict=True)]
        losses.append(run(*weights)[0])
    assert losses[-1] < 0.5 * losses[0]
