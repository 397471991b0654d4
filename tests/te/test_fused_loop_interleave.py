"""``create_fused_loop(..., interleave=k)``: the fused loop visits blocks of ``k`` rows of each
branch round-robin, so that a ``parallel`` chunking gives every thread a share of every
branch. Each fused row computes exactly one row of one branch (an interpreter of the lowered
loop checks it, for drawn extents, block sizes and splits); the lowered forms are pinned in
tests/golden/fused_loop/interleave_*.txt and each built function compared with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import kiln
from kiln import te
from kiln.arith import evaluate
from kiln.errors import ScheduleError
from kiln.ir.expr import Ramp, Var
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import AttrStmt, For, IfThenElse, LetStmt, SeqStmt, Store
from kiln.te.fused_loop import FUSED_BRANCH_SCOPE, interleaved

RNG = np.random.default_rng(18)
N = 8


def _rand(*shape):
    return RNG.random(shape).astype("float32")


def _add(a: te.Tensor, c: int, name: str) -> te.Tensor:
    return te.compute(a.shape, lambda x, y: a[x, y] + c, name=name)


def _branches(extents: list[int]):
    """Branch ``i`` adds ``i + 1`` to its input (``extents[i]`` rows); Z sums row ``x``
    of every branch (modulo its extent)."""
    inputs = [te.placeholder((e, N), name=f"A{i}") for i, e in enumerate(extents)]
    branches = [_add(a, i + 1, f"X{i}") for i, a in enumerate(inputs)]
    rows = max(extents)
    Z = te.compute((rows, N), lambda x, y: sum(b[x % e, y] for b, e in
                                               zip(branches, extents, strict=True)), name="Z")
    return inputs, branches, Z


def _reference(arrays, extents):
    rows = np.arange(max(extents))
    return sum(a[rows % e] + (i + 1) for i, (a, e) in enumerate(zip(arrays, extents, strict=True)))


def _value(e, env: dict[str, int]) -> int:
    """``e`` evaluated with its variables taken by name from ``env`` (0 for the loops of a
    branch: its first store tells its row)."""
    found: list[Var] = []
    post_order_visit(e, lambda n: found.append(n) if isinstance(n, Var) else None)
    return evaluate(e, {v: env.get(v.name, 0) for v in found})


def _first_row(branch, env: dict[str, int]) -> int:
    """The row of an (N-wide) branch output that the branch's first store writes."""
    while not isinstance(branch, Store):
        if isinstance(branch, LetStmt):
            env = {**env, branch.var.name: _value(branch.value, env)}
        branch = branch.seq[0] if isinstance(branch, SeqStmt) else branch.body
    index = branch.index.base if isinstance(branch.index, Ramp) else branch.index
    return _value(index, env) // N


def _visits(stmt) -> list[tuple[int, int]]:
    """``(branch, row)`` for every iteration of the fused loop in ``stmt`` (a lowered
    function's body), in loop order: an interpreter of its loops, lets and conditions, that
    reads each branch's row from its first store."""
    out: list[tuple[int, int]] = []

    def run(node, env):
        if isinstance(node, SeqStmt):
            for s in node.seq:
                run(s, env)
        elif isinstance(node, For):
            for v in range(_value(node.min, env), _value(node.min + node.extent, env)):
                run(node.body, {**env, node.loop_var.name: v})
        elif isinstance(node, LetStmt):
            run(node.body, {**env, node.var.name: _value(node.value, env)})
        elif isinstance(node, IfThenElse):
            if _value(node.condition, env):
                run(node.then_case, env)
            elif node.else_case is not None:
                run(node.else_case, env)
        elif isinstance(node, AttrStmt) and node.attr_key == FUSED_BRANCH_SCOPE:
            i = node.value.value if hasattr(node.value, "value") else node.value
            out.append((i, _first_row(node.body, env)))
        elif isinstance(node, AttrStmt) and node.attr_key == "produce":
            if node.node.name == "fused":
                run(node.body, env)
        elif hasattr(node, "body"):
            run(node.body, env)

    run(stmt, {})
    return out


def _schedule(extents, k, split=None, parallel=True):
    inputs, branches, Z = _branches(extents)
    s = te.create_schedule(Z.op)
    fused = s.create_fused_loop([[b] for b in branches], branches, extents, interleave=k)
    axis = fused[0].op.loop_axis
    if split is not None:
        axis, _ = s[fused[0]].split(axis, split)
    if parallel:
        s[fused[0]].parallel(axis)
    return s, [*inputs, Z], fused[0].op


def test_blocks_of_each_branch_round_robin_with_unequal_extents(golden):
    s, args, op = _schedule([2, 6], 1)
    s[op.branches[0]].vectorize(op.branches[0].op.axis[1])
    func = kiln.lower(s, args)["main"]
    # rounds of one row of each branch while X0 has rows, then Y's rows in order
    assert _visits(func.body) == [(0, 0), (1, 0), (0, 1), (1, 1),
                                      (1, 2), (1, 3), (1, 4), (1, 5)]
    golden("fused_loop/interleave_unequal", str(kiln.lower(s, args, simple_mode=True)))
    arrays = [_rand(2, N), _rand(6, N)]
    z = kiln.nd.array(np.zeros((6, N), "float32"))
    kiln.build(s, args, target="llvm")(*map(kiln.nd.array, arrays), z)
    np.testing.assert_allclose(z.numpy(), _reference(arrays, [2, 6]), rtol=1e-6)


def test_three_branches_with_a_reduction_blocks_of_two(golden):
    A = te.placeholder((4, N), name="A")
    B = te.placeholder((5, N), name="B")
    C = te.placeholder((3, N, 6), name="C")
    X = te.compute(A.shape, lambda x, y: A[x, y] + 1, name="X")
    Y = te.compute(B.shape, lambda x, y: B[x, y] * 2, name="Y")
    k = te.reduce_axis((0, 6), name="k")
    R = te.compute((3, N), lambda x, y: te.sum(C[x, y, k], axis=k), name="R")
    Z = te.compute((5, N), lambda x, y: X[x % 4, y] + Y[x, y] + R[x % 3, y], name="Z")
    s = te.create_schedule(Z.op)
    F, _, _ = s.create_fused_loop([[X], [Y], [R]], [X, Y, R], [4, 5, 3], interleave=2)
    outer, _ = s[F].split(F.op.loop_axis, 4)
    s[F].parallel(outer)
    s[X].vectorize(X.op.axis[1])
    args = [A, B, C, Z]
    assert _visits(kiln.lower(s, args)["main"].body) == [
        (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1),
        (0, 2), (0, 3), (1, 2), (1, 3), (2, 2), (1, 4)]
    golden("fused_loop/interleave_three_branches", str(kiln.lower(s, args, simple_mode=True)))
    a, b, c = _rand(4, N), _rand(5, N), _rand(3, N, 6)
    z = kiln.nd.array(np.zeros((5, N), "float32"))
    kiln.build(s, args, target="llvm")(*map(kiln.nd.array, (a, b, c)), z)
    r = np.arange(5)
    np.testing.assert_allclose(z.numpy(), (a[r % 4] + 1) + b * 2 + c.sum(-1)[r % 3],
                               rtol=1e-5)


def test_blocks_as_large_as_the_branches_are_the_classic_end_to_end_loop():
    s1, args1, _ = _schedule([3, 5], 5)
    inputs, branches, Z = _branches([3, 5])
    s2 = te.create_schedule(Z.op)
    fused = s2.create_fused_loop([[b] for b in branches], branches, [3, 5])
    s2[fused[0]].parallel(fused[0].op.loop_axis)
    assert str(kiln.lower(s1, args1, simple_mode=True)) == \
        str(kiln.lower(s2, [*inputs, Z], simple_mode=True))


@pytest.mark.parametrize("interleave, message", [
    (0, "give the rows per block as a positive int"),
    (2.0, "give the rows per block as a positive int"),
])
def test_bad_interleave_is_rejected(interleave, message):
    _, branches, Z = _branches([2, 2])
    s = te.create_schedule(Z.op)
    with pytest.raises(ScheduleError, match=message):
        s.create_fused_loop([[b] for b in branches], branches, [2, 2], interleave=interleave)


def test_interleave_needs_constant_extents():
    n = te.var("n")
    A, B = te.placeholder((n, N), name="A"), te.placeholder((n, N), name="B")
    X = te.compute(A.shape, lambda x, y: A[x, y] + 1, name="X")
    Y = te.compute(B.shape, lambda x, y: B[x, y] + 2, name="Y")
    Z = te.compute(A.shape, lambda x, y: X[x, y] + Y[x, y], name="Z")
    s = te.create_schedule(Z.op)
    with pytest.raises(ScheduleError, match="interleave=2 needs constant extents, got n"):
        s.create_fused_loop([[X], [Y]], [X, Y], [n, n], interleave=2)


def _expected_order(extents: list[int], k: int) -> list[tuple[int, int]]:
    """Round robin: round t gives each branch that has rows left its rows [t*k, t*k + k)."""
    order, t = [], 0
    while any(e > t * k for e in extents):
        for i, e in enumerate(extents):
            order += [(i, r) for r in range(t * k, min(t * k + k, e))]
        t += 1
    return order


@settings(deadline=None, max_examples=10)
@given(extents=st.lists(st.integers(1, 9), min_size=2, max_size=4),
       k=st.integers(1, 5), split=st.one_of(st.none(), st.integers(1, 6)))
@example(extents=[4, 4], k=1, split=3)  # the last piece has several rounds and overruns
def test_every_fused_row_computes_one_row_of_one_branch(extents, k, split):
    """For drawn extents, block sizes and splits of the fused loop, the lowered loop visits
    the branches' rows in round-robin order, each exactly once, none out of range."""
    s, args, op = _schedule(extents, k, split=split, parallel=False)
    assert _visits(kiln.lower(s, args)["main"].body) == _expected_order(extents, k)
    assert sum(p.rounds * int(p.period) for p in interleaved(extents, k)) == sum(extents)


@pytest.mark.slow
@settings(deadline=None, max_examples=10)
@given(extents=st.lists(st.integers(1, 7), min_size=2, max_size=3), k=st.integers(1, 4),
       split=st.one_of(st.none(), st.integers(2, 5)))
def test_interleaved_builds_match_numpy(extents, k, split):
    s, args, op = _schedule(extents, k, split=split)
    arrays = [_rand(e, N) for e in extents]
    z = kiln.nd.array(np.zeros((max(extents), N), "float32"))
    kiln.build(s, args, target="llvm")(*map(kiln.nd.array, arrays), z)
    np.testing.assert_allclose(z.numpy(), _reference(arrays, extents), rtol=1e-6)
