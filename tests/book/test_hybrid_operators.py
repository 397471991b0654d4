"""Hybrid script in the book's style: operators whose loops carry a dependency (a running
maximum) or unroll a small window (a 1-D convolution), written as Python loops with
``te.hybrid.script`` and used as stages of a larger tensor program.

The pipeline is: scale the input (a ``te.compute``, inlined into the convolution), convolve
each row with a 3-tap kernel (hybrid, ``const_range`` taps, ``output_tensor``), take the
running maximum along each row (hybrid, a loop from 1), subtract it (a ``te.compute``,
vectorized). The hybrid stages' loops are split and parallelized like any stage's. Each
hybrid operator is also run as plain Python on numpy arrays, and everything is checked
against numpy.
"""

import numpy as np
import pytest

import kiln as tvm
from kiln import te

TAPS = 3  # a module constant: a hybrid function reads it as a number


@te.hybrid.script
def conv1d_rows(x, w):
    """Each row of ``x`` correlated with ``w`` (zero padding, output as long as the row)."""
    y = output_tensor(x.shape, x.dtype)  # noqa: F821
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            acc = 0.0
            for k in const_range(TAPS):  # noqa: F821 - unrolled while parsing
                if j + k - 1 >= 0 and j + k - 1 < x.shape[1]:
                    acc += x[i, j + k - 1] * w[k]
            y[i, j] = acc
    return y


@te.hybrid.script
def running_max(x):
    """``m[i, j] = max(x[i, 0..j])``: each element depends on the one before it."""
    m = output_tensor(x.shape, x.dtype)  # noqa: F821
    for i in range(x.shape[0]):
        m[i, 0] = x[i, 0]
        for j in range(1, x.shape[1]):
            m[i, j] = max(m[i, j - 1], x[i, j])
    return m


def conv1d_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (1, 1)))
    return sum(padded[:, k:k + x.shape[1]] * w[k] for k in range(TAPS))


def pipeline(rows, cols, scale=0.5):
    """The tensor program: X, W -> scaled -> conv1d_rows -> running_max -> Y."""
    X = te.placeholder((rows, cols), name="X")
    W = te.placeholder((TAPS,), name="W")
    scaled = te.compute(X.shape, lambda i, j: X[i, j] * scale, name="scaled")
    conv = conv1d_rows(scaled, W)
    peak = running_max(conv)
    Y = te.compute(X.shape, lambda i, j: conv[i, j] - peak[i, j], name="Y")
    return X, W, scaled, conv, peak, Y


def reference(x, w, scale=0.5):
    conv = conv1d_reference(x * scale, w)
    return conv - np.maximum.accumulate(conv, axis=1)


def _data(rows, cols):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((rows, cols)).astype("float32"),
            rng.standard_normal(TAPS).astype("float32"))


def test_plain_python_matches_numpy():
    """With numpy arrays the hybrid functions run as Python: the operators' specification."""
    x, w = _data(5, 9)
    np.testing.assert_allclose(conv1d_rows(x, w), conv1d_reference(x, w), rtol=1e-5)
    np.testing.assert_allclose(running_max(x), np.maximum.accumulate(x, axis=1))


def test_default_schedule():
    X, W, _, _, _, Y = pipeline(6, 10)
    s = te.create_schedule(Y.op)
    f = tvm.build(s, [X, W, Y])
    x, w = _data(6, 10)
    y = tvm.nd.array(np.zeros((6, 10), "float32"))
    f(tvm.nd.array(x), tvm.nd.array(w), y)
    np.testing.assert_allclose(y.numpy(), reference(x, w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows, cols", [(16, 24), (13, 7)])
def test_scheduled_pipeline(lower_text, rows, cols):
    """Rows in parallel in both hybrid stages (split by 4, so 13 rows leave a tail), the
    scaling inlined into the convolution, the subtraction vectorized."""
    X, W, scaled, conv, peak, Y = pipeline(rows, cols)
    s = te.create_schedule(Y.op)
    s[scaled].compute_inline()
    for op in (conv.op, peak.op):
        io, _ = s[op].split(op.axis[0], factor=4)
        s[op].parallel(io)
    yo, yi = s[Y].split(Y.op.axis[1], factor=4)
    s[Y].vectorize(yi)
    text = lower_text(s, [X, W, Y])
    assert "produce scaled" not in text and "(X[" in text  # inlined into the hybrid body
    assert text.count("parallel (i.outer") >= 2, text
    assert "produce conv1d_rows" in text and "produce running_max" in text
    f = tvm.build(s, [X, W, Y])
    x, w = _data(rows, cols)
    y = tvm.nd.array(np.zeros((rows, cols), "float32"))
    f(tvm.nd.array(x), tvm.nd.array(w), y)
    np.testing.assert_allclose(y.numpy(), reference(x, w), rtol=1e-5, atol=1e-6)
    # the compiled operators agree with their plain-Python runs
    conv_py = conv1d_rows(x * 0.5, w)
    np.testing.assert_allclose(y.numpy(), conv_py - running_max(conv_py), rtol=1e-5,
                               atol=1e-6)


def test_taps_are_unrolled(lower_text):
    """``const_range`` unrolls while parsing: three guarded taps, no loop over k."""
    X, W, _, conv, _, _ = pipeline(4, 8)
    s = te.create_schedule(conv.op)
    text = lower_text(s, [X, W, conv])
    assert "for (k" not in text
    assert "W[2]" in text and "W[0]" in text
