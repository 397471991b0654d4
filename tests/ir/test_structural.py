"""Structural equality and hashing (kiln.ir.structural)."""

from __future__ import annotations

import pytest

from kiln import tir
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.structural import structural_equal, structural_hash

i, j = E.Var("i"), E.Var("j")
A = E.Var("A", "handle")


def _loop(var: E.Var, extent: int, value: float) -> S.For:
    store = S.Store(A, tir.const(value, "float32"), var * 2 + 1)
    return S.For(var, 0, extent, S.ForKind.SERIAL, store)


def test_separately_built_trees_are_equal_and_hash_alike():
    a, b = (i * 2 + 1) // 4, (i * 2 + 1) // 4
    assert a is not b
    assert structural_equal(a, b)
    assert structural_hash(a) == structural_hash(b)
    s, t = _loop(i, 8, 1.0), _loop(i, 8, 1.0)
    assert structural_equal(s, t) and structural_hash(s) == structural_hash(t)


def test_differences_in_values_kinds_and_dtypes():
    assert not structural_equal(i + 1, i + 2)
    assert not structural_equal(i + 1, i - 1)
    assert not structural_equal(tir.const(1), tir.const(1, "int64"))
    assert not structural_equal(tir.const(1.0), tir.const(1.0, "float64"))
    assert not structural_equal(_loop(i, 8, 1.0), _loop(i, 4, 1.0))
    assert not structural_equal(_loop(i, 8, 1.0), _loop(i, 8, 2.0))
    assert not structural_equal(i, i + 0.0)  # a Var and an Add


def test_free_variables_compare_by_identity_defined_ones_up_to_renaming():
    assert structural_equal(i, i)
    assert not structural_equal(i, E.Var("i"))  # the same name is not the same variable
    # a loop variable is defined by its loop: loops differing only in its name are equal (TVM)
    k = E.Var("k")
    assert structural_equal(_loop(i, 8, 1.0), _loop(k, 8, 1.0))
    assert structural_hash(_loop(i, 8, 1.0)) == structural_hash(_loop(k, 8, 1.0))
    # ... but the store's buffer A is free: another A is another buffer
    other = S.For(k, 0, 8, S.ForKind.SERIAL, S.Store(E.Var("A", "handle"), tir.const(1.0),
                                                      k * 2 + 1))
    assert not structural_equal(_loop(i, 8, 1.0), other)


def test_lowered_functions_are_equal_up_to_renaming():
    import kiln
    from kiln import te
    from kiln.ir.structural import assert_structural_equal

    def lowered(name):
        n = te.var("n")
        X = te.placeholder((n,), name=name)
        Y = te.compute((n,), lambda t: X[t] * 2.0, name="Y")
        return kiln.lower(te.create_schedule(Y.op), [X, Y])["main"]

    assert_structural_equal(lowered("A"), lowered("B"))
    with pytest.raises(ValueError, match="StructuralEqual check failed"):
        assert_structural_equal(lowered("A").body, lowered("A").body)  # free buffers differ


def test_free_variables_may_be_mapped_consistently():
    x, y = E.Var("x"), E.Var("y")
    assert structural_equal(i + j, x + y, map_free_vars=True)
    assert structural_equal(_loop(i, 8, 1.0), _loop(x, 8, 1.0), map_free_vars=True)
    assert not structural_equal(i + i, x + y, map_free_vars=True)
    assert not structural_equal(i, E.Var("x", "int64"), map_free_vars=True)


def test_free_variable_map_is_a_bijection():
    x = E.Var("x")
    assert not structural_equal(i + j, x + x, map_free_vars=True)


def test_functions_with_temporaries_and_threads_are_equal_up_to_renaming():
    import kiln
    from kiln import te

    def lowered():
        A = te.placeholder((64,), name="A")
        B = te.compute((64,), lambda t: A[t] + 1.0, name="B")
        C = te.compute((64,), lambda t: B[t] * 2.0, name="C")
        s = te.create_schedule(C.op)
        bx, tx = s[C].split(C.op.axis[0], factor=16)
        s[C].bind(bx, te.thread_axis("blockIdx.x"))
        s[C].bind(tx, te.thread_axis("threadIdx.x"))
        s[B].compute_at(s[C], tx)
        s[B].set_scope("local")
        return kiln.lower(s, [A, C])["main"]

    assert structural_equal(lowered(), lowered())


def test_identical_lowerings_hash_alike():
    import kiln
    from kiln import te

    def lowered():
        A = te.placeholder((16,), name="A")
        B = te.compute((16,), lambda t: A[t] * 3.0, name="B")
        return kiln.lower(te.create_schedule(B.op), [A, B])["main"]

    assert structural_hash(lowered()) == structural_hash(lowered())
