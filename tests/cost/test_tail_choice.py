"""``split(..., tail="auto")``: the cost model's choice (kiln/cost/tail_choice.py) is the
cheapest legal strategy, and the program stays correct for every n."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import cost, te
from kiln.te.schedule import Split
from kiln.te.split_tail import legal_tails


def _split(stage) -> Split:
    return next(r for r in stage.relations if isinstance(r, Split))


def vector_add(n, tail):
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] * 3.0, name="C")
    s = te.create_schedule(C.op)
    _, inner = s[C].split(C.op.axis[0], factor=16, tail=tail)
    s[C].vectorize(inner)
    return s, [A, C]


@pytest.mark.parametrize("n", [1000003, 4096])
def test_auto_picks_the_cheapest_legal_strategy(n):
    s, args = vector_add(n, "auto")
    kiln.lower(s, args)
    rel = _split(s[args[-1]])
    legal = legal_tails(s[args[-1]], rel.parent)
    assert rel.auto_choice in legal
    predicted = {t: cost.estimate(kiln.lower(*vector_add(n, t))).cycles for t in legal}
    assert predicted[rel.auto_choice] == min(predicted.values())


def test_auto_stays_correct_for_edge_sizes_of_a_symbolic_n():
    s, args = vector_add(te.var("n"), "auto")
    f = kiln.build(s, args)
    for n in (0, 1, 15, 16, 17, 1000):
        a = np.random.rand(n).astype("float32")
        c = kiln.nd.array(np.zeros(n, "float32"))
        f(kiln.nd.array(a), c)
        np.testing.assert_allclose(c.numpy(), a * 3, rtol=1e-6)


def test_auto_on_a_reduction_keeps_to_its_legal_strategies():
    n = te.var("n")
    A = te.placeholder((n, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=4, tail="auto")
    f = kiln.build(s, [A, C])
    assert _split(s[C]).auto_choice in ("partition", "predicate", "guard", "dispatch")
    for rows in (0, 1, 3, 4, 5, 33):
        a = np.random.rand(rows, 8).astype("float32")
        c = kiln.nd.array(np.zeros(rows, "float32"))
        f(kiln.nd.array(a), c)
        np.testing.assert_allclose(c.numpy(), a.sum(axis=1), rtol=1e-5)


def test_without_auto_nothing_is_chosen():
    s, args = vector_add(100, None)
    kiln.lower(s, args)
    assert _split(s[args[-1]]).auto_choice is None
