"""storage_flatten: tensor accesses become flat buffer accesses; temporaries get an allocate."""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.printer import to_text
from kiln.tir.storage_flatten import storage_flatten

from .handbuilt import find, function, loop, run

i, j = E.Var("i"), E.Var("j")


def _program():
    """B = (A*2)[2:6] + 1 through two temporaries: T holds rows 2..5 of A*2 (a region that
    does not start at 0), U, a local copy of T with its row stride aligned to 8*k + 3."""
    A = te.placeholder((8, 6), name="A")
    B = te.placeholder((4, 6), name="B")
    T = te.placeholder((8, 6), name="T")
    U = te.placeholder((8, 6), name="U")
    rows = loop(i, 4, loop(j, 6, S.ProducerStore(
        T, E.ProducerLoad(A, [i + 2, j]) * 2.0, [i + 2, j])))
    copy = loop(i, 4, loop(j, 6, S.ProducerStore(U, E.ProducerLoad(T, [i + 2, j]), [i, j])))
    out = loop(i, 4, loop(j, 6, S.ProducerStore(B, E.ProducerLoad(U, [i, j]) + 1.0, [i, j])))
    u = S.ProducerRealize(U, [E.Range(0, 4), E.Range(0, 6)], tir.const(True),
                          S.seq(copy, out), scope="local", align=[(0, 8, 3)])
    t = S.ProducerRealize(T, [E.Range(2, 6), E.Range(0, 6)], tir.const(True),
                          S.seq(rows, u), scope="global")
    buffers = {A: tir.decl_buffer((8, 6), name="A"), B: tir.decl_buffer((4, 6), name="B")}
    return t, buffers


def test_flatten(golden):
    stmt, buffers = _program()
    flat = storage_flatten(stmt, buffers)
    golden("tir/storage_flatten", to_text(flat))
    for cls in (S.ProducerRealize, S.ProducerStore, E.ProducerLoad):
        assert not find(flat, cls)
    sizes = {a.buffer_var.name: a.extents[0].value for a in find(flat, S.Allocate)}
    assert sizes == {"T": 24, "U": 44}  # U: rows of stride 11 (= 8 + 3), 4 rows
    a = np.random.default_rng(0).standard_normal((8, 6)).astype("float32")
    A, B = buffers.values()
    _, b = run(function(flat, A, B), a, np.zeros((4, 6), "float32"))
    np.testing.assert_allclose(b, a[2:6] * 2 + 1)
