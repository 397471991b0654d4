"""``&``, ``|``, ``^`` and ``~`` on expressions are TVM's bitwise operators: bit operations on
integers (folded on constants, compiled to C's operators, scalar and vector), the logical
operators on conditions, an error on floats."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.ir.expr import And, Call, IntImm, Not


def test_integers_combine_bit_by_bit_and_constants_fold():
    x = te.var("x")
    assert isinstance(x & 3, Call) and (x & 3).op == "bitwise_and"
    assert [(x | 3).op, (x ^ 3).op, (~x).op, (3 & x).op] == \
        ["bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_and"]
    folded = [tir.bitwise_and(6, 3), tir.bitwise_or(6, 3), tir.bitwise_xor(6, 3),
              tir.bitwise_not(kiln.tir.const(6))]
    assert all(isinstance(v, IntImm) for v in folded)
    assert [v.value for v in folded] == [2, 7, 5, -7]
    assert (te.var("u", "uint8") & 1).dtype == "uint8"


def test_conditions_stay_logical():
    x = te.var("x")
    assert isinstance((x < 2) & (x > 0), And) and isinstance(~(x < 2), Not)
    assert str((x < 2) | (x > 5)) == "((x < 2) || (x > 5))"


def test_floats_have_no_bits():
    with pytest.raises(TypeError, match="float type does not support & operation"):
        te.var("f", "float32") & 1
    with pytest.raises(TypeError, match="does not support ~ operation"):
        ~te.var("f", "float32")


@pytest.mark.parametrize("vector", [False, True])
def test_compiled_bit_operations_match_numpy(vector):
    n = 37
    A = te.placeholder((n,), name="A", dtype="int32")
    B = te.compute((n,), lambda i: ((A[i] & 6) | (A[i] ^ 3)) + (~A[i] & 1)
                   + ((i & 1) == 0).astype("int32"), name="B")
    s = te.create_schedule(B.op)
    if vector:
        _, inner = s[B].split(B.op.axis[0], 8)
        s[B].vectorize(inner)
    f = kiln.build(s, [A, B], "llvm")
    a = np.arange(-5, n - 5, dtype="int32")
    b = kiln.nd.array(np.zeros(n, "int32"))
    f(kiln.nd.array(a), b)
    i = np.arange(n)
    np.testing.assert_array_equal(b.numpy(),
                                  ((a & 6) | (a ^ 3)) + (~a & 1) + ((i & 1) == 0))


def test_topi_bitwise_operators_broadcast():
    from kiln import topi

    A = te.placeholder((4, 1), name="A", dtype="int32")
    B = te.placeholder((3,), name="B", dtype="int32")
    outs = [topi.bitwise_and(A, B), topi.bitwise_or(A, B), topi.bitwise_xor(A, B),
            topi.bitwise_not(A)]
    s = te.create_schedule([t.op for t in outs])
    f = kiln.build(s, [A, B, *outs], "llvm")
    a = np.array([[1], [2], [5], [-3]], "int32")
    b = np.array([3, 6, 12], "int32")
    res = [kiln.nd.array(np.zeros([int(d) for d in t.shape], "int32")) for t in outs]
    f(kiln.nd.array(a), kiln.nd.array(b), *res)
    for got, want in zip(res, [a & b, a | b, a ^ b, ~a], strict=True):
        np.testing.assert_array_equal(got.numpy(), want)
