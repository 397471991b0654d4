"""The AutoTVM knob of ``create_fused_loop`` (``kiln.autotvm.fused_loop.fuse_branches``):
one knob, "do not fuse" or one order of the branches, every config correct."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import autotvm, te
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import IfThenElse

M, N = 3, 16


@autotvm.template("test_fused_loop_unequal_branches")
def unequal_branches(m, n):
    A = te.placeholder((m, n), name="A")
    B = te.placeholder((2 * m, n), name="B")
    X = te.compute(A.shape, lambda x, y: A[x, y] + 1, name="X")
    Y = te.compute(B.shape, lambda x, y: te.exp(B[x, y]), name="Y")
    Z = te.compute((m, n), lambda x, y: X[x, y] * Y[2 * x + 1, y], name="Z")
    s = te.create_schedule(Z.op)
    cfg = autotvm.get_config()
    fused = autotvm.fused_loop.fuse_branches(cfg, s, [X, Y])
    if fused is not None:
        s[fused[0]].parallel(fused[0].op.loop_axis)
    return s, [A, B, Z]


def _branch_conditions(body) -> list[str]:
    found: list[str] = []
    post_order_visit(body, lambda n: found.append(str(n.condition))
                     if isinstance(n, IfThenElse) else None)
    return found


def test_knob_is_fuse_or_not_and_the_branch_order():
    task = autotvm.task.create("test_fused_loop_unequal_branches", (M, N), "llvm")
    space = task.config_space
    assert [e.val for e in space.space_map["fuse_branches"].entities] == [[], [0, 1], [1, 0]]
    a, b = np.random.rand(M, N).astype("float32"), np.random.rand(2 * M, N).astype("float32")
    first_rows = []
    for index in range(len(space)):
        with autotvm.ApplyConfig(space.get(index)):
            s, args = unequal_branches(M, N)
        first_rows.append(_branch_conditions(kiln.lower(s, args)["main"].body))
        f = kiln.build(s, args, target="llvm")
        z = kiln.nd.array(np.zeros((M, N), "float32"))
        f(kiln.nd.array(a), kiln.nd.array(b), z)
        np.testing.assert_allclose(z.numpy(), (a + 1) * np.exp(b[1::2]), rtol=1e-5)
    # unfused; X's 3 rows first; Y's 6 rows first
    assert first_rows == [[], ["(fused < 3)"], ["(fused < 6)"]]


def test_untuned_template_does_not_fuse():
    with autotvm.FallbackContext():
        s, _ = unequal_branches(M, N)
    assert "fused" not in [st.name for st in s.stages]


def test_too_many_branches_is_a_clear_error():
    cfg = autotvm.task.space.ConfigSpace()
    with pytest.raises(ValueError, match="give 2 to 5 branches"):
        autotvm.fused_loop.fuse_branches(cfg, None, [None])
