"""``Schedule.create_fused_loop``: horizontal fusion of independent stages (seed 002).

F1-F5 of the seed inventory (§5.4.2) plus reductions, unequal inner shapes, three branches and
scheduled inner loops; each lowered form is pinned in tests/golden/fused_loop/ and each built
function compared with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.errors import ScheduleError
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import AttrStmt, For, ForKind, IfThenElse
from kiln.te.fused_loop import FUSED_BRANCH_SCOPE, FusedLoopOp

RNG = np.random.default_rng(18)
N = 64


def _rand(*shape):
    return RNG.random(shape).astype("float32")


def _run(s, args, inputs):
    """Build for llvm and run on numpy ``inputs``; returns the last argument as numpy."""
    f = kiln.build(s, args, target="llvm")
    arrays = [kiln.nd.array(x) for x in inputs]
    f(*arrays)
    return arrays[-1].numpy()


def _balanced(M):
    A = te.placeholder((M, N), name="A")
    B = te.placeholder((M, N), name="B")
    X = te.compute(A.shape, lambda x, y: A[x, y] + 1, name="X")
    Y = te.compute(B.shape, lambda x, y: B[x, y] + 3, name="Y")
    Z = te.compute(X.shape, lambda x, y: X[x, y] * Y[x, y], name="Z")
    return A, B, X, Y, Z


def _unbalanced(M):
    A = te.placeholder((M, N), name="A")
    B = te.placeholder((M, N), name="B")
    X = te.compute(A.shape, lambda x, _: A[x, 0] + 1, name="X")
    Y = te.compute(B.shape, lambda x, y: te.sigmoid(te.exp(B[x, y])), name="Y")
    Z = te.compute(X.shape, lambda x, y: X[x, y] + Y[x, y], name="Z")
    return A, B, X, Y, Z


def _fused(make, M):
    """The seed's Figure 2 schedule: fuse X and Y, parallelize the fused loop."""
    A, B, X, Y, Z = make(M)
    s = te.create_schedule(Z.op)
    new = s.create_fused_loop([[X], [Y]], [X, Y], [M, M])
    s[new[0]].parallel(new[0].op.loop_axis)
    return s, [A, B, Z], new


def _default(make, M):
    """The seed's default parallelized schedule: X and Y each parallel over rows."""
    A, B, X, Y, Z = make(M)
    s = te.create_schedule(Z.op)
    s[X].parallel(X.op.axis[0])
    s[Y].parallel(Y.op.axis[0])
    return s, [A, B, Z]


def _loops(stmt) -> list[For]:
    found: list[For] = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, For) else None)
    return found


def _attrs(stmt, key: str) -> list[AttrStmt]:
    found: list[AttrStmt] = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, AttrStmt)
                     and n.attr_key == key else None)
    return found


def _body(s, args):
    return kiln.lower(s, args)["main"].body


# ---- F1, F2: correctness against numpy for M = 1..8 (one build, M symbolic) ---------------
@pytest.mark.parametrize("make, reference", [
    (_balanced, lambda a, b: (a + 1) * (b + 3)),
    (_unbalanced, lambda a, b: (a[:, :1] + 1) + 1 / (1 + np.exp(-np.exp(b)))),
], ids=["F1_balanced", "F2_unbalanced"])
def test_fused_matches_default_and_numpy_for_m_1_to_8(make, reference):
    M = te.var("M")
    fused = kiln.build(*_fused(make, M)[:2], target="llvm")
    default = kiln.build(*_default(make, M), target="llvm")
    for m in range(1, 9):
        a, b = _rand(m, N), _rand(m, N)
        for f in (fused, default):
            z = kiln.nd.array(np.zeros((m, N), "float32"))
            f(kiln.nd.array(a), kiln.nd.array(b), z)
            np.testing.assert_allclose(z.numpy(), reference(a, b), rtol=1e-5)


# ---- F3: structure -------------------------------------------------------------------------
def test_structure_one_parallel_loop_branches_and_consumer_unchanged(golden):
    s, args, new = _fused(_balanced, 2)
    text = str(kiln.lower(s, args, simple_mode=True))
    golden("fused_loop/balanced", text)
    assert [t.name for t in new] == ["fused.v0", "fused.v1"]
    assert isinstance(new[0].op, FusedLoopOp) and new[1].op is new[0].op
    body = _body(s, args)
    parallel = [f for f in _loops(body) if f.kind == ForKind.PARALLEL]
    assert len(parallel) == 1 and parallel[0].extent.value == 4
    branch = parallel[0].body
    assert isinstance(branch, IfThenElse) and str(branch.condition) == "(fused < 2)"
    scopes = _attrs(body, FUSED_BRANCH_SCOPE)
    assert [a.value.value for a in scopes] == [0, 1]
    assert all(a.node is new[0].op for a in scopes)
    # the consumer's loop nest is the default schedule's, reading the fused outputs
    ds, dargs = _default(_balanced, 2)
    default_text = str(kiln.lower(ds, dargs, simple_mode=True))
    consumer = text[text.index("produce Z"):]
    assert consumer == default_text[default_text.index("produce Z"):].replace(
        "X[", "fused.v0[").replace("Y[", "fused.v1[")


def test_no_loop_is_left_over_the_branch_rows():
    """Inner fusion without dead loops (the seed's prototype left some): every loop of the
    fused stage is the fused loop or a branch's inner loop."""
    s, args, _ = _fused(_balanced, 3)
    names = [(f.loop_var.name, f.extent.value) for f in _loops(_body(s, args))]
    assert names == [("y", N), ("y", N), ("fused", 6), ("y", N), ("x", 3)]


# ---- F4: unequal extents, unequal inner shapes ----------------------------------------------
def test_unequal_extents_rebase_at_the_prefix_sum(golden):
    M = 2
    A = te.placeholder((M, N), name="A")
    B = te.placeholder((2 * M, N // 2), name="B")
    X = te.compute(A.shape, lambda x, y: A[x, y] + 1, name="X")
    Y = te.compute(B.shape, lambda x, y: B[x, y] * 2, name="Y")
    Z = te.compute((M, N), lambda x, y: X[x, y] + Y[2 * x + y // 32, y % 32], name="Z")
    s = te.create_schedule(Z.op)
    new = s.create_fused_loop([[X], [Y]], [X, Y], [M, 2 * M])
    s[new[0]].parallel(new[0].op.loop_axis)
    golden("fused_loop/unequal_extents", str(kiln.lower(s, [A, B, Z], simple_mode=True)))
    a, b = _rand(M, N), _rand(2 * M, N // 2)
    z = _run(s, [A, B, Z], [a, b, np.zeros((M, N), "float32")])
    np.testing.assert_allclose(z, a + 1 + (b * 2).reshape(M, N), rtol=1e-6)


# ---- reductions, three branches, scheduled inner loops --------------------------------------
def _three_branches():
    """X element-wise (M, 16), Y element-wise (2M, 8), R a row sum over k (M+1, 16, 5)."""
    M, K = 3, 5
    A = te.placeholder((M, 16), name="A")
    B = te.placeholder((2 * M, 8), name="B")
    C = te.placeholder((M + 1, 16, K), name="C")
    X = te.compute((M, 16), lambda x, y: A[x, y] + 1, name="X")
    Y = te.compute((2 * M, 8), lambda x, y: B[x, y] * 2, name="Y")
    k = te.reduce_axis((0, K), name="k")
    R = te.compute((M + 1, 16), lambda x, y: te.sum(C[x, y, k], axis=k), name="R")
    Z = te.compute((M, 16), lambda x, y: X[x, y] + Y[x, y % 8] + R[x + 1, y], name="Z")
    a, b, c = _rand(M, 16), _rand(2 * M, 8), _rand(M + 1, 16, K)
    ref = a + 1 + np.tile(b[:M] * 2, (1, 2)) + c.sum(-1)[1:]
    return (A, B, C, X, Y, R, Z), [a, b, c, np.zeros((M, 16), "float32")], ref


def test_three_branches_with_a_reduction_and_scheduled_inner_loops(golden):
    (A, B, C, X, Y, R, Z), inputs, ref = _three_branches()
    s = te.create_schedule(Z.op)
    F, _, _ = s.create_fused_loop([[X], [Y], [R]], [X, Y, R], [3, 6, 4])
    fo, _ = s[F].split(F.op.loop_axis, factor=4)  # 13 rows: the last chunk overruns
    s[F].parallel(fo)
    _, yi = s[X].split(X.op.axis[1], factor=4)
    s[X].vectorize(yi)
    s[Y].unroll(Y.op.axis[1])
    ro, ri = s[R].split(R.op.axis[1], factor=8)
    s[R].reorder(ri, ro)
    golden("fused_loop/three_branches", str(kiln.lower(s, [A, B, C, Z], simple_mode=True)))
    np.testing.assert_allclose(_run(s, [A, B, C, Z], inputs), ref, rtol=1e-5)


def test_split_of_a_reduction_axis_inside_a_branch():
    (A, B, C, X, Y, R, Z), inputs, ref = _three_branches()
    s = te.create_schedule(Z.op)
    F, _, _ = s.create_fused_loop([[R], [X], [Y]], [R, X, Y], [4, 3, 6])
    s[F].parallel(F.op.loop_axis)
    ko, ki = s[R].split(R.op.reduce_axis[0], factor=2)
    s[R].reorder(ko, R.op.axis[1], ki)
    np.testing.assert_allclose(_run(s, [A, B, C, Z], inputs), ref, rtol=1e-5)


def test_fused_outputs_feed_every_former_reader():
    """Readers of a branch placed before the other branch in the stage order still run
    after the fused loop."""
    A, B, X, Y, Z = _balanced(2)
    W = te.compute(X.shape, lambda x, y: X[x, y] * 2, name="W")
    Out = te.compute(X.shape, lambda x, y: W[x, y] + Z[x, y], name="Out")
    s = te.create_schedule(Out.op)
    s.create_fused_loop([[X], [Y]], [X, Y], [2, 2])
    order = [st.name for st in s.stages]
    assert order.index("fused") < min(order.index("W"), order.index("Z"))
    a, b = _rand(2, N), _rand(2, N)
    out = _run(s, [A, B, Out], [a, b, np.zeros((2, N), "float32")])
    np.testing.assert_allclose(out, (a + 1) * 2 + (a + 1) * (b + 3), rtol=1e-6)


# ---- F5 and the other errors, raised at the call ------------------------------------------
def test_fusing_dependent_stages_names_the_dependence():
    A, _, X, _, _ = _balanced(2)
    T = te.compute(X.shape, lambda x, y: X[x, y] - 1, name="T")
    W = te.compute(X.shape, lambda x, y: T[x, y] * 2, name="W")
    Out = te.compute(X.shape, lambda x, y: W[x, y] + X[x, y], name="Out")
    s = te.create_schedule(Out.op)
    with pytest.raises(ScheduleError, match="stage 'W' reads stage 'X' through 'T'; fused "
                                            "branches run side by side and must be "
                                            "independent"):
        s.create_fused_loop([[X], [W]], [X, W], [2, 2])
    with pytest.raises(ScheduleError, match="stage 'T' reads stage 'X';"):
        s.create_fused_loop([[T], [X]], [T, X], [2, 2])
    with pytest.raises(ScheduleError, match="stage 'Out' reads stage 'X' through 'T', 'W';"):
        s2 = te.create_schedule(te.compute(X.shape, lambda x, y: Out[x, y] * 1, name="F").op)
        s2.create_fused_loop([[X], [Out]], [X, Out], [2, 2])


@pytest.mark.parametrize("case, error, message", [
    ("one_branch", ScheduleError, "at least two branches"),
    ("wrong_extent", ScheduleError, "extent 3 differs from the stage's first dimension 2"),
    ("output", ScheduleError, "stage 'Z' is an output of the schedule"),
    ("placeholder", ScheduleError, "is a PlaceholderOp"),
    ("scheduled", ScheduleError, "call create_fused_loop before scheduling the branch"),
    ("group_without_branch", ScheduleError, r"inputs\[0\] \(A\) must list the branch's "
                                            r"own stage 'X'"),
    ("group_not_a_producer", ScheduleError, r"inputs\[1\] lists 'X', which is not a compute "
                                            r"stage that branch 'Y' reads"),
    ("twice", ScheduleError, "stage 'X' is given twice"),
])
def test_bad_arguments_are_rejected(case, error, message):
    A, B, X, Y, Z = _balanced(2)
    s = te.create_schedule(Z.op)
    calls = {
        "one_branch": lambda: s.create_fused_loop([[X]], [X], [2]),
        "wrong_extent": lambda: s.create_fused_loop([[X], [Y]], [X, Y], [2, 3]),
        "output": lambda: s.create_fused_loop([[X], [Z]], [X, Z], [2, 2]),
        "placeholder": lambda: s.create_fused_loop([[X], [A]], [X, A], [2, 2]),
        "scheduled": lambda: (s[Y].parallel(Y.op.axis[0]),
                              s.create_fused_loop([[X], [Y]], [X, Y], [2, 2])),
        "group_without_branch": lambda: s.create_fused_loop([[A], [Y]], [X, Y], [2, 2]),
        "group_not_a_producer": lambda: s.create_fused_loop([[X], [X, Y]], [X, Y], [2, 2]),
        "twice": lambda: s.create_fused_loop([[X], [X]], [X, X], [2, 2]),
    }
    with pytest.raises(error, match=message):
        calls[case]()


def test_fused_stage_takes_only_loop_primitives_and_branches_stay_in_it():
    s, args, new = _fused(_balanced, 2)
    with pytest.raises(ScheduleError, match="vectorize: stage 'fused' is a fused loop over "
                                            "stages X, Y"):
        s[new[0]].vectorize(new[0].op.loop_axis)
    X = s.stages[[st.name for st in s.stages].index("X")].op.output(0)
    s[X].compute_inline()
    with pytest.raises(ScheduleError, match="stage 'X' is a branch of fused loop 'fused' but "
                                            "is inlined"):
        kiln.lower(s, args)


def _branch_with_producer(group: bool = False):
    """X reads P = A*2 (reversed rows: a producer of the whole row); Y independent.
    ``group``: P is listed in X's inputs."""
    A, B, _, Y, _ = _balanced(2)
    P = te.compute(A.shape, lambda x, y: A[x, y] * 2, name="P")
    X = te.compute(A.shape, lambda x, y: P[x, N - 1 - y] + 1, name="X")
    Z = te.compute(X.shape, lambda x, y: X[x, y] * Y[x, y], name="Z")
    s = te.create_schedule(Z.op)
    s.create_fused_loop([[P, X] if group else [X], [Y]], [X, Y], [2, 2])
    return s, [A, B, Z], P, X


def test_a_multi_stage_branch_computes_its_producers_per_row(golden):
    s, args, _, _ = _branch_with_producer(group=True)
    golden("fused_loop/multi_stage_branch", str(kiln.lower(s, args, simple_mode=True)))
    a, b = _rand(2, N), _rand(2, N)
    z = _run(s, args, [a, b, np.zeros((2, N), "float32")])
    np.testing.assert_allclose(z, (a[:, ::-1] * 2 + 1) * (b + 3), rtol=1e-6)


@pytest.mark.parametrize("where", ["compute_at", "compute_inline"])
def test_a_branch_producer_computed_inside_the_branch(where):
    s, args, P, X = _branch_with_producer()
    if where == "compute_at":
        s[P].compute_at(s[X], X.op.axis[1])
    else:
        s[P].compute_inline()
    a, b = _rand(2, N), _rand(2, N)
    z = _run(s, args, [a, b, np.zeros((2, N), "float32")])
    np.testing.assert_allclose(z, (a[:, ::-1] * 2 + 1) * (b + 3), rtol=1e-6)


def test_a_branch_producer_at_root_is_rejected():
    s, args, _, _ = _branch_with_producer()
    with pytest.raises(ScheduleError, match=r"stage 'P' feeds branch 'X' of fused loop 'fused' "
                                            r"but is computed outside it; .*"
                                            r"\(s\[P\]\.compute_at\(s\[X\], X\.op\.axis\[-1\]\)"):
        kiln.lower(s, args)
