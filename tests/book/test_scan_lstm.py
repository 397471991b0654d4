"""An LSTM over time steps with ``te.scan``, as classic TVM's ``topi/recipe/rnn/lstm.py`` writes
it (hidden and cell state scanned together, the hidden-to-hidden product a reduction inside the
step, the gates inlined), scheduled for the CPU and for CUDA (compiled for the CPU emulator of
tests/codegen/cuda_emulator.py), against a numpy LSTM.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda

NUM_STEP, BATCH, HIDDEN = 6, 2, 16


def lstm(num_step=NUM_STEP, batch_size=BATCH, num_hidden=HIDDEN):
    """The LSTM cell's tensor program; returns the stages a schedule needs."""
    # the input-to-hidden product, precomputed by one GEMM over all steps
    Xi2h = te.placeholder((num_step, batch_size, 4, num_hidden), name="Xi2h")
    # the hidden-to-hidden transition, one matrix per gate
    Wh2h = te.placeholder((4, num_hidden, num_hidden), name="Wh2h")
    # h: output hidden state, c: cell state
    s_state_h = te.placeholder((num_step, batch_size, num_hidden), name="s_state_h")
    s_state_c = te.placeholder((num_step, batch_size, num_hidden), name="s_state_c")
    s_init_c = te.compute((1, batch_size, num_hidden), lambda *i: 0.0, name="init_c")
    s_init_h = te.compute((1, batch_size, num_hidden), lambda *i: 0.0, name="init_h")
    k = te.reduce_axis((0, num_hidden), name="ki2h")
    s_h2h = te.compute(
        (num_step, batch_size, 4, num_hidden),
        lambda t, i, x, j: te.sum(s_state_h[t - 1, i, k] * Wh2h[x, j, k], axis=k),
        name="s_h2h")
    gates = te.compute(Xi2h.shape, lambda *i: Xi2h(*i) + s_h2h(*i), name="gates")
    gshape = (num_step, batch_size, num_hidden)
    in_gate = te.compute(gshape, lambda t, i, j: te.sigmoid(gates[t, i, 0, j]), name="in_gate")
    in_transform = te.compute(gshape, lambda t, i, j: te.tanh(gates[t, i, 1, j]),
                              name="in_transform")
    forget_gate = te.compute(gshape, lambda t, i, j: te.sigmoid(gates[t, i, 2, j]),
                             name="forget_gate")
    out_gate = te.compute(gshape, lambda t, i, j: te.sigmoid(gates[t, i, 3, j]),
                          name="out_gate")
    next_c = te.compute(
        gshape,
        lambda t, i, j: forget_gate[t, i, j] * s_state_c[t - 1, i, j]
        + in_gate[t, i, j] * in_transform[t, i, j],
        name="next_c")
    next_h = te.compute(gshape, lambda t, i, j: out_gate[t, i, j] * tvm.tir.tanh(next_c[t, i, j]),
                        name="next_h")
    update_c = te.compute(gshape, lambda *i: next_c(*i), name="update_c")
    update_h = te.compute(gshape, lambda *i: next_h(*i), name="update_h")
    scan_h, scan_c = te.scan([s_init_h, s_init_c], [update_h, update_c],
                             [s_state_h, s_state_c], inputs=[Xi2h], name="lstm_scan")
    s = te.create_schedule(scan_h.op)
    for gate in (gates, in_gate, in_transform, forget_gate, out_gate):
        s[gate].compute_inline()
    return s, [Xi2h, Wh2h, scan_h, scan_c], s_h2h, [next_c, next_h, update_c, update_h]


def lstm_reference(xi2h: np.ndarray, wh2h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same recurrence in numpy: states start at zero, step t reads step t - 1."""
    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    h = np.zeros(xi2h.shape[:2] + xi2h.shape[3:], "float32")
    c = np.zeros_like(h)
    for t in range(1, xi2h.shape[0]):
        g = xi2h[t] + np.einsum("bk,xjk->bxj", h[t - 1], wh2h)
        c[t] = sigmoid(g[:, 2]) * c[t - 1] + sigmoid(g[:, 0]) * np.tanh(g[:, 1])
        h[t] = sigmoid(g[:, 3]) * np.tanh(c[t])
    return h, c


def _data():
    rng = np.random.default_rng(0)
    xi2h = rng.normal(size=(NUM_STEP, BATCH, 4, HIDDEN)).astype("float32")
    wh2h = (rng.normal(size=(4, HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)).astype("float32")
    return xi2h, wh2h


def test_lstm_cpu():
    s, args, s_h2h, stages = lstm()
    # the reduction over the hidden units vectorized along j, the batch in parallel
    i, x, j = s_h2h.op.axis[1:]
    jo, ji = s[s_h2h].split(j, factor=8)
    s[s_h2h].reorder(i, x, jo, s_h2h.op.reduce_axis[0], ji)
    s[s_h2h].vectorize(ji)
    s[s_h2h].parallel(i)
    text = str(tvm.lower(s, args, simple_mode=True))
    assert "for (lstm_scan.idx, 0, 5)" in text and "produce s_h2h" in text, text
    assert "in_gate" not in text  # inlined into next_c
    xi2h, wh2h = _data()
    f = tvm.build(s, args)
    h = tvm.nd.array(np.zeros((NUM_STEP, BATCH, HIDDEN), "float32"))
    c = tvm.nd.array(np.zeros((NUM_STEP, BATCH, HIDDEN), "float32"))
    f(tvm.nd.array(xi2h), tvm.nd.array(wh2h), h, c)
    ref_h, ref_c = lstm_reference(xi2h, wh2h)
    np.testing.assert_allclose(h.numpy(), ref_h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c.numpy(), ref_c, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
def test_lstm_cuda_emulated():
    """Each stage of a step is a kernel over (batch, hidden) threads; the host loops over the
    steps. Run on the CPU emulator."""
    s, args, s_h2h, stages = lstm()
    block_x, thread_x = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
    for stage in [s_h2h, *stages]:
        fused = s[stage].fuse(*stage.op.axis[1:])
        bx, tx = s[stage].split(fused, factor=16)
        s[stage].bind(bx, block_x)
        s[stage].bind(tx, thread_x)
    for init in args[2].op.init:
        s[init].bind(s[init].fuse(*init.op.axis), thread_x)
    mod = build_cuda(s, args, name="lstm")
    assert "lstm_kernel" in mod.imported_modules[0].get_source()
    xi2h, wh2h = _data()
    h = np.zeros((NUM_STEP, BATCH, HIDDEN), "float32")
    c = np.zeros_like(h)
    cuda_emulator.Emulated(mod)(xi2h, wh2h, h, c)
    ref_h, ref_c = lstm_reference(xi2h, wh2h)
    np.testing.assert_allclose(h, ref_h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c, ref_c, rtol=1e-4, atol=1e-5)
