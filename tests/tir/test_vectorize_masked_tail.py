"""The masked vector tail of ``tail="predicate"`` (issue 19): the remainder loop of a
vectorized split, bounded by a run-time extent, becomes one vector of the split's width
whose loads and stores carry the lane predicate (masked moves in C), in ``kiln.build``'s C
pipeline; ``kiln.lower`` keeps the scalar remainder loop."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.ir import expr as E
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import For, IfThenElse, Store
from kiln.tir.vectorize import MASKED_LANES, vectorize, vectorize_lane_masks

#: 0, 1, one less than, equal to and one more than the factor, and larger sizes
SIZES = (0, 1, 2, 15, 16, 17, 7, 64, 500)


def _scaled(dtype: str = "float32", fn=lambda a: a * 2 + 1):
    """``B[i] = fn(A[i])`` over a symbolic ``n``, split by 16 with ``tail="predicate"``,
    the inner loop vectorized."""
    n = te.var("n")
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute((n,), lambda i: fn(A[i]), name="B")
    s = te.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[0], factor=16, tail="predicate")
    s[B].vectorize(inner)
    return s, [A, B]


def _body(s, args):
    return next(iter(kiln.lower(s, args).functions.values())).body


def _find(stmt, cls):
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, cls) else None)
    return found


def test_lowering_keeps_the_marked_scalar_remainder():
    body = _body(*_scaled())
    marked = [f for f in _find(body, For) if dict(f.annotations).get(MASKED_LANES)]
    assert len(marked) == 1 and dict(marked[0].annotations)[MASKED_LANES] == 16
    assert not isinstance(marked[0].extent, E.IntImm)
    assert "for (i.inner, 0, (n - (i.outer*16)))" in str(vectorize(body))


def test_lane_masks_predicate_the_remainder_stores():
    stmt = vectorize_lane_masks(_body(*_scaled()))
    stores = [st for st in _find(stmt, Store) if st.predicate is not None]
    assert len(stores) == 1 and "ramp(0, 1, 16) <" in str(stores[0].predicate)
    assert not [f for f in _find(stmt, For) if dict(f.annotations).get(MASKED_LANES)]
    guard = [c for c in _find(stmt, IfThenElse) if "(0 < " in str(c.condition)]
    assert len(guard) == 1  # an empty remainder reads nothing


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_masked_tail_matches_numpy_every_size(dtype):
    s, args = _scaled(dtype)
    mod = kiln.build(s, args)
    src = mod.get_source()
    assert f"kiln_mask_store_{dtype}x16(" in src and f"kiln_mask_load_{dtype}x16(" in src
    assert "i_inner" not in src  # no scalar remainder loop
    for n in SIZES:
        a = (np.arange(n) % 97).astype(dtype)
        b = kiln.nd.array(np.zeros(n, dtype))
        mod(kiln.nd.array(a), b)
        np.testing.assert_array_equal(b.numpy(), a * 2 + 1, err_msg=f"n = {n}")


def test_a_call_in_the_tail_keeps_the_scalar_loop():
    """The lanes past the extent would compute the value too: a call (which may trap or
    cost) keeps the remainder scalar."""
    s, args = _scaled(fn=te.exp)
    mod = kiln.build(s, args)
    assert "kiln_mask_" not in mod.get_source()
    for n in (0, 5, 21):
        a = np.linspace(-1, 1, n).astype("float32")
        b = kiln.nd.array(np.zeros(n, "float32"))
        mod(kiln.nd.array(a), b)
        np.testing.assert_allclose(b.numpy(), np.exp(a), rtol=1e-6)
