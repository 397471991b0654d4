"""tvm.tir.stmt_functor (ir_transform, post/pre_order_visit, substitute), IRModule.from_expr,
te.schedule.InferBound/ScheduleOps and tvm.driver.build_module, as classic TVM code uses them."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import te, tir
from kiln.tir import stmt_functor


def _vector_add(n=64):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    return te.create_schedule(C.op), [A, B, C]


def test_ir_transform_vectorizes_inner_loops_as_the_tvm_tutorial():
    """TVM's "writing a customized pass" tutorial: split loops by 4 and vectorize the inner
    part, as a phase-1 pass."""
    loops = []

    def find_width8(op):
        if isinstance(op, tir.For):
            loops.append(op)

    def vectorize4(op):
        if op in loops:
            return tir.For(op.loop_var, op.min, op.extent, tir.ForKind.VECTORIZED, op.body)
        return None

    @tir.transform.prim_func_pass(opt_level=0)
    def vectorize(f, mod, ctx):
        loops.clear()
        stmt_functor.post_order_visit(f.body, find_width8)
        return f.with_body(stmt_functor.ir_transform(f.body, None, vectorize4, ["tir.For"]))

    s, args = _vector_add()
    with kiln.transform.PassContext(config={"tir.add_lower_pass": [(1, vectorize)]}):
        text = str(kiln.lower(s, args))
        mod = kiln.build(s, args)
    assert "ramp(0, 1, 64)" in text
    a, b = np.random.rand(64).astype("float32"), np.random.rand(64).astype("float32")
    c = kiln.nd.empty((64,))
    mod(kiln.nd.array(a), kiln.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a + b)


def test_preorder_replaces_a_whole_subtree_and_only_enable_filters():
    s, args = _vector_add()
    body = kiln.lower(s, args)["main"].body
    seen = []
    out = stmt_functor.ir_transform(body, lambda n: seen.append(stmt_functor.type_key(n)),
                                    None, ["tir.Add", "Add"])
    assert out is body and seen == ["tir.Add"]
    stop = tir.Evaluate(tir.const(0))
    out = stmt_functor.ir_transform(body, lambda n: stop if isinstance(n, tir.For) else None,
                                    None)
    assert "for" not in str(out)
    visited = []
    stmt_functor.pre_order_visit(body, lambda n: visited.append(type(n).__name__)
                                 or not isinstance(n, tir.For))
    assert "Store" not in visited and "For" in visited


def test_substitute():
    n = te.var("n")
    out = stmt_functor.substitute(n * 2 + 1, {n: tir.const(3)})
    assert str(kiln.arith.Analyzer().simplify(out)) == "7"


def test_infer_bound_schedule_ops_and_schedule_to_module():
    s, (A, B, C) = _vector_add()
    xo, xi = s[C].split(C.op.axis[0], factor=16)
    s = s.normalize()
    bounds = te.schedule.InferBound(s)
    assert int(bounds[xi].extent) == 16 and int(bounds[xo].extent) == 4
    stmt = te.schedule.ScheduleOps(s, bounds)
    assert "for (i.inner, 0, 16)" in str(stmt)
    from kiln.driver import build_module

    mod = build_module.schedule_to_module(s, [A, B, C])
    assert isinstance(mod, kiln.IRModule) and "for (i.inner, 0, 16)" in str(mod["main"])
    assert kiln.IRModule.from_expr(mod["main"])["main"] is mod["main"]
    built = build_module.build(build_module.lower(s, [A, B, C]))
    a = kiln.nd.array(np.ones(64, "float32"))
    c = kiln.nd.empty((64,))
    built(a, a, c)
    np.testing.assert_allclose(c.numpy(), 2.0)
