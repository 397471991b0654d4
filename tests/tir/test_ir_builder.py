"""``tvm.tir.ir_builder``: statements built imperatively, checked by shape and by running them."""

import numpy as np
import pytest

import kiln as tvm
from kiln.ir import stmt as S
from tests.tir.handbuilt import find, function, run

N = 16


def test_vector_add_with_buffer_ptr():
    A, B, C = (tvm.tir.decl_buffer((N,), "float32", name) for name in "ABC")
    ib = tvm.tir.ir_builder.create()
    a, b, c = ib.buffer_ptr(A), ib.buffer_ptr(B), ib.buffer_ptr(C)
    with ib.for_range(0, N, name="i") as i:
        c[i] = a[i] + b[i]
    x, y = np.arange(N, dtype="float32"), np.ones(N, dtype="float32")
    *_, out = run(function(ib.get(), A, B, C), x, y, np.zeros(N, "float32"))
    np.testing.assert_allclose(out, x + y)


def test_2d_loop_with_if_else_and_tuple_index():
    A = tvm.tir.decl_buffer((4, 5), "float32", "A")
    B = tvm.tir.decl_buffer((4, 5), "float32", "B")
    ib = tvm.tir.ir_builder.create()
    a, b = ib.buffer_ptr(A), ib.buffer_ptr(B)
    with ib.for_range(0, 4) as i:
        with ib.for_range(0, 5) as j:
            with ib.if_scope(ib.likely(i < j)):
                b[i, j] = a[i, j] * 2.0
            with ib.else_scope():
                b[i, j] = tvm.tir.const(-1.0, "float32")
    stmt = ib.get()
    loops = find(stmt, S.For)
    assert [f.loop_var.name for f in loops] == ["j", "i"]
    x = np.arange(20, dtype="float32").reshape(4, 5)
    _, out = run(function(stmt, A, B), x, np.zeros((4, 5), "float32"))
    np.testing.assert_allclose(out, np.where(np.triu(np.ones((4, 5)), 1) > 0, x * 2, -1.0))


def test_allocated_temporary_and_let():
    A = tvm.tir.decl_buffer((N,), "float32", "A")
    B = tvm.tir.decl_buffer((N,), "float32", "B")
    ib = tvm.tir.ir_builder.create()
    a, b = ib.buffer_ptr(A), ib.buffer_ptr(B)
    tmp = ib.allocate("float32", N, name="tmp")
    with ib.for_range(0, N, name="i") as i:
        tmp[i] = a[i] + 1.0
    with ib.for_range(0, N, name="i") as i:
        k = ib.let("k", N - 1 - i)
        b[i] = tmp[k]
    stmt = ib.get()
    assert isinstance(stmt, S.Allocate) and len(find(stmt, S.LetStmt)) == 1
    x = np.arange(N, dtype="float32")
    _, out = run(function(stmt, A, B), x, np.zeros(N, "float32"))
    np.testing.assert_allclose(out, x[::-1] + 1)


@pytest.mark.parametrize("kind, for_kind", [("parallel", S.ForKind.PARALLEL),
                                            ("unroll", S.ForKind.UNROLLED),
                                            ("vectorize", S.ForKind.VECTORIZED)])
def test_outer_loop_kind(kind, for_kind):
    A = tvm.tir.decl_buffer((8, 4), "float32", "A")
    ib = tvm.tir.ir_builder.create()
    a = ib.buffer_ptr(A)
    with ib.for_range(0, 8, name="i", kind=kind) as i:
        with ib.for_range(0, 4, name="j") as j:
            a[i * 4 + j] = a[i * 4 + j] + 1.0
    stmt = ib.get()
    assert stmt.kind is for_kind
    (out,) = run(function(stmt, A), np.zeros((8, 4), "float32"))
    np.testing.assert_allclose(out, np.ones((8, 4)))


def test_new_scope_ends_scope_attr_and_begin_offsets_extent():
    ib = tvm.tir.ir_builder.create()
    p = ib.pointer("float32", name="p")
    with ib.new_scope():
        ib.scope_attr(p.data, "pragma_x", 1)
        p[0] = tvm.tir.const(1.0, "float32")
    with ib.for_range(2, 10) as i:
        ib.emit(tvm.tir.Evaluate(i))
    stmt = ib.get()
    assert isinstance(stmt, S.SeqStmt)
    attr, loop = stmt.seq
    assert isinstance(attr, S.AttrStmt) and isinstance(attr.body, S.Store)
    assert loop.min.value == 2 and loop.extent.value == 8


def test_misuse_is_rejected():
    ib = tvm.tir.ir_builder.create()
    with pytest.raises(RuntimeError, match="else_scope"):
        ib.else_scope()
    with pytest.raises(ValueError, match="Unknown kind"):
        ib.for_range(0, 4, kind="spiral")
    buf = ib.pointer("float32")
    with pytest.raises(ValueError, match="data type"):
        buf[0] = tvm.tir.const(1, "int32")
    ib.for_range(0, 4).__enter__()
    with pytest.raises(RuntimeError, match="construction scope"):
        ib.get()
