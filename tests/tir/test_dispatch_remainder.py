"""The dispatch_remainder pass alone (kiln/tir/dispatch_remainder.py): a remainder loop
annotated with its paths becomes vector paths of descending widths and a scalar loop, each
iteration run once and in order."""

from __future__ import annotations

import pytest

from kiln.arith import evaluate
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.op import floordiv
from kiln.tir.dispatch_remainder import DISPATCH_ANNOTATION, dispatch_remainder


def _remainder(paths: tuple[int, ...], below_factor: bool = True):
    """``n`` and ``for (i, 0, r) B[o*16 + i] = 1`` annotated with ``paths``: with
    ``below_factor``, inside the tail iteration ``o = floordiv(n, 16)`` (``r = n - o*16``,
    which the enclosing loop shows below 16); else ``r = n`` with ``o = 0``."""
    n, o, i = E.Var("n", "int32"), E.Var("o", "int32"), E.Var("i", "int32")
    store = S.Store(E.Var("B", "handle"), E.FloatImm("float32", 1.0), o * 16 + i)
    extent = n - o * 16 if below_factor else n
    loop = S.For(i, 0, extent, S.ForKind.SERIAL, store,
                 annotations=(("tail", "remainder"), (DISPATCH_ANNOTATION, paths)))
    start = floordiv(n, 16) if below_factor else E.IntImm("int32", 0)
    return n, S.For(o, start, 1, S.ForKind.SERIAL, loop)


def _stored(stmt: S.Stmt, env: dict) -> list[int]:
    """The indices ``stmt`` stores to, in order (loops, ifs and stores interpreted; a
    vectorized loop lane by lane)."""
    if isinstance(stmt, S.For):
        lo, ext = int(evaluate(stmt.min, env)), int(evaluate(stmt.extent, env))
        return [x for v in range(lo, lo + ext)
                for x in _stored(stmt.body, {**env, stmt.loop_var: v})]
    if isinstance(stmt, S.IfThenElse):
        return _stored(stmt.then_case, env) if evaluate(stmt.condition, env) else []
    if isinstance(stmt, S.SeqStmt):
        return [x for s in stmt.seq for x in _stored(s, env)]
    assert isinstance(stmt, S.Store)
    return [int(evaluate(stmt.index, env))]


def test_an_8_wide_path_below_twice_its_width_is_an_if():
    _, stmt = _remainder((16, 8, 1))
    text = str(dispatch_remainder(stmt))
    assert "if ((8 <= (n - (o*16))))" in text and "vectorized (i.l8, 0, 8)" in text
    assert "for (i.v8" not in text and "for (i, (floordiv((n - (o*16)), 8)*8)" in text


def test_an_extent_not_known_below_the_factor_gets_a_loop_of_vectors():
    _, stmt = _remainder((16, 8, 1), below_factor=False)
    assert "for (i.v8, 0, floordiv(n, 8))" in str(dispatch_remainder(stmt))


@pytest.mark.parametrize("paths", [(16, 8, 1), (16, 4, 2, 1), (16, 8, 4, 2, 1), (16, 2, 1)])
@pytest.mark.parametrize("below_factor", [True, False])
def test_every_iteration_runs_once_in_order(paths, below_factor):
    n, stmt = _remainder(paths, below_factor)
    out = dispatch_remainder(stmt)
    for value in range(40):
        assert _stored(out, {n: value}) == _stored(stmt, {n: value})


def test_a_loop_of_the_full_width_is_left_alone():
    i = E.Var("i", "int32")
    full = S.For(i, 0, 16, S.ForKind.VECTORIZED,
                 S.Store(E.Var("B", "handle"), E.FloatImm("float32", 1.0), i),
                 annotations=((DISPATCH_ANNOTATION, (16, 8, 1)),))
    assert dispatch_remainder(full) is full


def test_virtual_threads_keep_their_own_remainder_bounds():
    """A dispatch split under a vthread-bound tile: after virtual-thread injection, each
    thread's statement in the remainder loop has its own bound, so the loop keeps their
    guards instead of taking one bound for all (found by the schedule fuzzer)."""
    import numpy as np

    import kiln
    from kiln import te
    from kiln.ir.transform import PassContext

    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((m, n), name="B")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, 5, tail="dispatch")
    fused = s[C].fuse(*s[C].split(i, 1, tail="auto"))
    _, _, _, yi = s[C].tile(fused, jo, 5, 7)
    s[C].bind(yi, te.thread_axis("vthread"))
    with PassContext(config={"tir.DispatchRemainder": {"widths": (3,)}}):
        mod = kiln.build(s, [A, B, C])
    rng = np.random.default_rng(0)
    for size in (1, 5, 9, 12):
        a = rng.standard_normal((size, 9)).astype("float32")
        b = rng.standard_normal((9, size)).astype("float32")
        c = kiln.nd.empty((size, size), "float32")
        mod(kiln.nd.array(a), kiln.nd.array(b), c)
        np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4, err_msg=str(size))
