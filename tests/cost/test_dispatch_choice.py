"""``split(..., tail="dispatch")``: the cost model's choice of the remainder's vector paths
(kiln/cost/dispatch_choice.py), its refinement of compiler-vectorized loops, and "auto"
with dispatch among its candidates."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import cost, te
from kiln.cost.dispatch_choice import (
    MAX_REMAINDERS,
    candidate_widths,
    choose_widths,
    divisor_chain,
    remainders,
)
from kiln.errors import TVMError
from kiln.ir.transform import PassContext
from kiln.te.schedule import Split


def _vector_add(factor: int, tail: str = "dispatch", nparts: bool = False):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] * 3.0, name="C")
    s = te.create_schedule(C.op)
    if nparts:
        _, inner = s[C].split(C.op.axis[0], nparts=factor, tail=tail)
    else:
        _, inner = s[C].split(C.op.axis[0], factor=factor, tail=tail)
    s[C].vectorize(inner)
    return s, [A, C]


def _split(s) -> Split:
    return next(r for st in s.stages for r in st.relations if isinstance(r, Split))


def test_candidates_are_the_divisors_widest_first():
    assert candidate_widths(16) == [8, 4, 2]
    assert candidate_widths(12) == [6, 4, 3, 2]
    assert candidate_widths(2) == [] and candidate_widths(1) == []


def test_remainders_are_spread_over_the_factor():
    assert remainders(4) == [0, 1, 2, 3]
    assert len(remainders(64)) == MAX_REMAINDERS and remainders(64)[-1] < 64


def test_kept_widths_are_a_divisor_chain_predicted_cheaper_than_none():
    s, args = _vector_add(16)
    rel = _split(s)
    tried = choose_widths(rel, lambda: kiln.lower(s, args))
    kept = rel.dispatch_widths
    assert () in tried and kept in tried and tried[kept] <= tried[()]
    assert all(a % b == 0 for a, b in zip((16, *kept), kept, strict=False))
    assert tried[kept] == min(v for k, v in tried.items() if k == kept[:len(k)])


def test_lowering_chooses_the_widths_and_stays_correct():
    s, args = _vector_add(16)
    f = kiln.build(s, args)
    assert _split(s).dispatch_widths is not None
    for n in (0, 1, 7, 8, 15, 16, 17, 1003):
        a = np.random.rand(n).astype("float32")
        c = kiln.nd.array(np.zeros(n, "float32"))
        f(kiln.nd.array(a), c)
        np.testing.assert_allclose(c.numpy(), a * 3, rtol=1e-6)


def test_an_nparts_split_keeps_the_scalar_remainder():
    s, args = _vector_add(4, nparts=True)
    kiln.lower(s, args)
    assert _split(s).dispatch_widths == ()


def test_auto_may_choose_dispatch():
    s, args = _vector_add(16, tail="auto")
    kiln.lower(s, args)
    rel = _split(s)
    assert rel.auto_choice in ("partition", "predicate", "shift_inwards", "guard", "dispatch")


def test_a_symbolic_trip_count_is_vectorized_with_a_scalar_epilogue():
    """The C compiler vectorizes a loop of run-time trip count by whole vectors and runs the
    rest scalar; a constant trip count below a vector fits in one."""
    def cycles(n, binding=None) -> float:
        A = te.placeholder((n,), name="A")
        C = te.compute((n,), lambda i: A[i] * 3.0, name="C")
        func = kiln.lower(te.create_schedule(C.op), [A, C])
        return cost.estimate(func, binding=binding).compute_cycles

    n = te.var("n")
    assert cycles(n, {"n": 7}) > cycles(7)
    assert cycles(n, {"n": 64}) == cycles(64)


def test_the_config_fixes_the_widths_a_factor_allows():
    assert divisor_chain((8, 4, 2), 16) == (8, 4, 2)
    assert divisor_chain((6, 4, 3), 12) == (6, 3)
    assert divisor_chain((16, 8, 1), 16) == (8,)
    s, args = _vector_add(12)
    with PassContext(config={"tir.DispatchRemainder": {"widths": (6, 4, 3)}}):
        kiln.lower(s, args)
    assert _split(s).dispatch_widths == (6, 3)


def test_a_malformed_config_is_a_tvm_error():
    s, args = _vector_add(16)
    for bad in ({"width": (8,)}, {"widths": (8, 0)}, (8,)):
        with PassContext(config={"tir.DispatchRemainder": bad}), \
                pytest.raises(TVMError, match="tir.DispatchRemainder"):
            kiln.lower(s, args)
