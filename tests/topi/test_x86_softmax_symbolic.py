"""topi.x86's softmax, log_softmax and layer_norm schedules over symbolic shapes (a sequence
length known at run time, docs/dynamic.md): one build run at every edge size of the vector
width and of the row block against numpy, the row as vector code (no ``expf`` call, the
maximum and the sum as vector partial results, guard-free whole vectors) and one parallel
loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

import kiln
from kiln import te, topi
from kiln.target import Target
from kiln.topi.x86._common import PARALLEL_MIN_ELEMS, lanes
from kiln.topi.x86.softmax import ROW_BLOCK

from .common import randn


def _edge_sizes() -> list[int]:
    """0, 1, one less than, equal to and one more than the vector width and the row block,
    a large size with a tail, and both sides of the size from which the rows run in
    parallel (``n * n >= PARALLEL_MIN_ELEMS``: serial below, docs/dynamic.md)."""
    w = lanes("float32")
    side = math.isqrt(PARALLEL_MIN_ELEMS)
    return sorted({0, 1, w - 1, w, w + 1, ROW_BLOCK - 1, ROW_BLOCK, ROW_BLOCK + 1, 5 * w + 3,
                   side - 1, side})


@pytest.fixture(scope="module")
def scores_softmax():
    """``(X, Y, lowered text, module)`` of fast_softmax over ``[n, n]`` (one build)."""
    n = te.var("n")
    X = te.placeholder((n, n), name="X")
    Y = topi.nn.fast_softmax(X, -1)
    lowered, mod = _build(Y, [X, Y])
    return str(lowered), mod


def _build(outs, args):
    with Target("llvm"):
        s = (topi.x86.schedule_layer_norm if outs.op.tag == "layer_norm"
             else topi.x86.schedule_softmax)(outs)
        return kiln.lower(s, args, simple_mode=True), kiln.build(s, args, "llvm")


def _call(mod, inputs: list[np.ndarray], out_shape) -> np.ndarray:
    out = kiln.nd.array(np.zeros(out_shape, np.float32))
    mod(*[kiln.nd.array(x) for x in inputs], out)
    return out.numpy()


def _reference(f, x: np.ndarray) -> np.ndarray:
    """``f`` (scipy's softmax or log_softmax) along the last axis; an empty ``x`` as it is."""
    return f(x.astype(np.float64), axis=-1) if x.size else x


def _scores(n: int, seed: int) -> np.ndarray:
    x = randn((n, n), seed) * 4
    if n > 1:
        x[0, 0] = -np.inf  # a masked position
    return x


def _check_edge_sizes(mod, f) -> None:
    for size in _edge_sizes():
        x = _scores(size, size)
        np.testing.assert_allclose(_call(mod, [x], (size, size)), _reference(f, x),
                                   rtol=1e-5, atol=1e-6, err_msg=f"n = {size}")


def test_symbolic_softmax_matches_numpy_at_every_edge_size(scores_softmax):
    """Attention's scores ``[n, n]``: rows and row length symbolic, one build."""
    _check_edge_sizes(scores_softmax[1], special.softmax)


@pytest.fixture(scope="module")
def attention_softmax():
    """fast_softmax over attention's scores ``[heads * seq, seq]``, rows and row length two
    symbolic dimensions (one build)."""
    rows, n = te.var("rows"), te.var("n")
    X = te.placeholder((rows, n), name="X")
    Y = topi.nn.fast_softmax(X, -1)
    return _build(Y, [X, Y])[1]


@pytest.mark.parametrize("seq", [1, 2, 7, 15, 16, 17, 64, 500])
def test_symbolic_softmax_over_heads_times_seq_rows(attention_softmax, seq):
    """Two heads of scores: ``2 * seq`` rows of ``seq`` columns, the row tails (7 of 16
    lanes at seq 7) included."""
    x = _scores(seq, seq)
    x = np.concatenate([x, x[::-1] * 0.5])
    np.testing.assert_allclose(_call(attention_softmax, [x], x.shape),
                               _reference(special.softmax, x), rtol=1e-5, atol=1e-6)


def test_symbolic_softmax_exponentials_tail_is_one_masked_vector(attention_softmax):
    """The exponentials past a row's last whole vector are one masked vector (fast_exp's
    ``reinterpret`` computed in every lane, stored in those below the row's length), not a
    scalar loop, so a row of 7 columns is vector code."""
    src = attention_softmax.get_source()
    w = lanes("float32")
    assert f"kiln_mask_store_float32x{w}(T_softmax_exp + " in src
    assert "expf(" not in src


def test_symbolic_log_softmax_matches_numpy_at_every_edge_size():
    n = te.var("n")
    X = te.placeholder((n, n), name="X")
    Y = topi.nn.log_softmax(X, -1)
    _check_edge_sizes(_build(Y, [X, Y])[1], special.log_softmax)


def test_symbolic_row_length_with_static_rows():
    """A static batch of rows, each of symbolic length, over a middle axis too."""
    n = te.var("n")
    X = te.placeholder((3, n), name="X")
    Y = topi.nn.fast_softmax(X, -1)
    _, mod = _build(Y, [X, Y])
    for size in (0, 1, lanes("float32") + 1, 100):
        x = randn((3, size), size)
        np.testing.assert_allclose(_call(mod, [x], (3, size)), _reference(special.softmax, x),
                                   rtol=1e-5, atol=1e-6, err_msg=f"n = {size}")


def test_symbolic_softmax_row_is_vector_code_in_one_parallel_loop(scores_softmax):
    """The exponentials in whole vectors (fast_exp: no ``expf`` call), the maximum and the
    sum as vector partial results whose whole vectors run guard-free, one parallel loop over
    blocks of rows (one fork per call)."""
    text, mod = scores_softmax
    src = mod.get_source()
    w = lanes("float32")
    assert "expf(" not in src
    assert "T_softmax_maxelem_rf" in src and "T_softmax_expsum_rf" in src
    # the partial results of whole vectors: a vector update with no test
    assert f"T_softmax_maxelem.rf[ramp(0, 1, {w})] = max(" in text
    assert f"T_softmax_expsum.rf[ramp(0, 1, {w})] = (" in text
    assert "T_softmax_exp[ramp(" in text  # the exponentials stored a vector at a time
    assert text.count("parallel (") == 1
    assert f"floordiv((n + {ROW_BLOCK - 1}), {ROW_BLOCK})" in text
    # the threads fork only for a large enough score matrix (tests/topi/test_x86_parallel_when.py)
    assert f"if (((n * n) >= {PARALLEL_MIN_ELEMS})) {{" in src


def test_layer_norm_over_symbolic_rows():
    """Token rows ``[n, 64]`` (a symbolic sequence length), normalized over the features."""
    n = te.var("n")
    X = te.placeholder((n, 64), name="X")
    g = te.placeholder((64,), name="g")
    b = te.placeholder((64,), name="b")
    Y = topi.nn.layer_norm(X, g, b, axis=[-1])
    lowered, mod = _build(Y, [X, g, b, Y])
    assert str(lowered).count("parallel (") == 1
    # forked from PARALLEL_MIN_ELEMS elements on (256 rows of 64), tested at run time
    assert "pragma_parallel_if" in str(lowered)
    gamma, beta = randn((64,), 1), randn((64,), 2)
    for size in (0, 1, 7, 17, 300):
        x = randn((size, 64), size).astype(np.float64)
        ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(_call(mod, [x.astype(np.float32), gamma, beta], (size, 64)),
                                   ref * gamma + beta, rtol=1e-4, atol=1e-5,
                                   err_msg=f"n = {size}")
