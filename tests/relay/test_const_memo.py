"""The per-process memo of weight transforms (kiln/relay/const_memo.py)."""

import numpy as np
import pytest

from kiln.relay import const_memo
from kiln.relay.const_memo import memo_transform
from kiln.relay.graph import Graph, call, const, input_node
from kiln.relay.transform import fold_batch_norm


@pytest.fixture
def calls(monkeypatch):
    monkeypatch.setattr(const_memo, "_MEMO", type(const_memo._MEMO)())
    seen = []

    def scaled(w, factor):
        seen.append(w)
        return w * factor
    return seen, scaled


def test_same_inputs_computed_once_and_read_only(calls):
    seen, scaled = calls
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = memo_transform(scaled, w, factor=2)
    b = memo_transform(scaled, w.copy(), factor=2)  # equal bytes: the same result
    assert a is b and len(seen) == 1 and not a.flags.writeable
    np.testing.assert_array_equal(a, w * 2)


def test_other_bytes_dtype_or_parameters_computed_again(calls):
    seen, scaled = calls
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    memo_transform(scaled, w, factor=2)
    memo_transform(scaled, w + 1, factor=2)
    memo_transform(scaled, w.astype(np.float64), factor=2)
    memo_transform(scaled, w.reshape(3, 2), factor=2)
    memo_transform(scaled, w, factor=3)
    assert len(seen) == 5


def test_least_recently_used_dropped_beyond_the_bound(calls, monkeypatch):
    seen, scaled = calls
    monkeypatch.setattr(const_memo, "MEMO_BYTES", 2 * 24)  # two results of 6 float32
    ws = [np.full((2, 3), k, np.float32) for k in range(3)]
    for w in ws:
        memo_transform(scaled, w, factor=2)
    memo_transform(scaled, ws[2], factor=2)  # kept
    memo_transform(scaled, ws[0], factor=2)  # dropped: computed again
    assert len(seen) == 4


def test_batch_norm_folding_reuses_its_weights_and_graph_stays_writable(monkeypatch):
    monkeypatch.setattr(const_memo, "_MEMO", type(const_memo._MEMO)())
    rng = np.random.default_rng(0)
    x = input_node("x", (1, 4, 6, 6))
    w = const(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    s = const(rng.standard_normal((8, 1, 1)).astype(np.float32), "s")
    y = call("multiply", [call("conv2d", [x, w], strides=(1, 1), padding=(1, 1, 1, 1),
                               dilation=(1, 1)), s])

    def folded():
        g = fold_batch_norm(Graph([x], [y]))
        return next(n for n in g.nodes if n.name == "w_bnfold").value

    first, again = folded(), folded()
    assert len(const_memo._MEMO) == 1 and again.flags.writeable
    want = (w.value * s.value.reshape(-1, 1, 1, 1).astype(np.float64)).astype(np.float32)
    assert first.tobytes() == again.tobytes() == want.tobytes()
