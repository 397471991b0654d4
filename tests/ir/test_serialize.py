"""``save_json`` / ``load_json``: round trips of expressions, statements, PrimFuncs, modules."""

import json

import numpy as np
import pytest

import kiln
from kiln import alias, te, tir
from kiln.errors import TVMError
from kiln.ir import (
    Broadcast,
    Call,
    Cast,
    ForKind,
    IRModule,
    Ramp,
    Select,
    SizeVar,
    Var,
    load_json,
    save_json,
    structural_equal,
    structural_hash,
)
from kiln.ir.expr import Let
from kiln.ir.functor import collect_vars
from kiln.ir.serialize import OperationRef


def roundtrip(node):
    loaded = load_json(save_json(node))
    assert structural_equal(node, loaded, map_free_vars=True), (node, loaded)
    return loaded


def test_expressions_round_trip():
    x, y = Var("x", "int32"), Var("y", "float32")
    n = SizeVar("n")
    for e in [
        x * 3 + x // 2 - x % 5,
        kiln.ir.op.cast(x, "float32") / y,
        Cast("int8", x),
        Select(x < n, x, n),
        Call("float32", "exp", (y,)),
        Ramp(x, 1, 8) + Broadcast(x, 8),
        Let(Var("t"), x + 1, Var("t") * 2),
        tir.if_then_else(x > 0, y, kiln.ir.const(1.5, "float32")),
        kiln.ir.const(True, "bool"),
    ]:
        loaded = roundtrip(e)
        assert loaded.dtype == e.dtype


def test_identity_of_variables_is_kept():
    x, other_x = Var("x"), Var("x")
    loaded = load_json(save_json(x * x + other_x))
    assert type(loaded.a.a) is Var and loaded.a.a is loaded.a.b
    assert loaded.a.a is not loaded.b and loaded.b.name == "x"
    assert type(load_json(save_json(SizeVar("n")))) is SizeVar


def test_document_has_tvm_shape():
    doc = json.loads(save_json(Var("x") + 1))
    assert set(doc) == {"root", "nodes", "attrs"} and "tvm_version" in doc["attrs"]
    assert doc["nodes"][doc["root"]]["type_key"] == "tir.Add"


def test_plain_values_and_enums():
    value = (1, 2.5, "s", None, True, {"k": (1, 2)}, ForKind.PARALLEL)
    assert load_json(save_json(value)) == value


def test_foreign_objects_raise_naming_the_type():
    A = te.placeholder((4,), name="A")
    with pytest.raises(TVMError, match="Tensor"):
        save_json(A[0])
    with pytest.raises(TVMError, match="not a kiln IR document"):
        load_json('{"root": 0, "nodes": [], "attrs": {"tvm_version": "0.8.0"}}')


def _vector_add():
    n = 64
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].parallel(xo)
    s[C].vectorize(xi)
    return s, [A, B, C], [(n,), (n,)]


def _matmul_cache_write():
    n = 32
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 8)
    s[CC].compute_at(s[C], jo)
    return s, [A, B, C], [(n, n), (n, n)]


def _symbolic_shape():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    return s, [A, B], [(13,)]


@pytest.mark.parametrize("make", [_vector_add, _matmul_cache_write, _symbolic_shape])
def test_lowered_prim_func_round_trips_and_builds(make):
    s, args, in_shapes = make()
    func = kiln.lower(s, args)["main"]
    loaded = roundtrip(func)
    assert loaded.buffer_map.keys() == set(loaded.params)
    assert collect_vars(loaded.body).isdisjoint(collect_vars(func.body))

    rng = np.random.default_rng(0)
    inputs = [rng.random(shape).astype("float32") for shape in in_shapes]
    out_shape = in_shapes[0]
    results = []
    for f in (func, loaded):
        arrays = [kiln.nd.array(x) for x in inputs] + [kiln.nd.empty(out_shape, "float32")]
        kiln.build(f)(*arrays)
        results.append(arrays[-1].numpy())
    np.testing.assert_allclose(results[0], results[1])


def test_module_and_produce_attribute():
    s, args, _ = _vector_add()
    mod = kiln.lower(s, args)
    loaded = load_json(save_json(mod))
    assert isinstance(loaded, IRModule) and "main" in loaded
    assert structural_equal(mod["main"], loaded["main"], map_free_vars=True)
    assert loaded["main"].body.node == OperationRef("C", args[2].op.tag)
    assert str(loaded["main"]) == str(mod["main"])
    assert structural_hash(loaded["main"].body) == structural_hash(mod["main"].body)


def test_reduction_and_statements_round_trip():
    k = te.reduce_axis((0, 16), name="k")
    roundtrip(te.sum(k.var * 2, axis=k))

    n = SizeVar("n")
    buf = kiln.ir.Buffer(Var("A", "handle"), "float32", (n, 4), "A", strides=(4, 1),
                         elem_offset=Var("off"))
    tx = kiln.ir.IterVar(kiln.ir.Range(0, 32), Var("threadIdx.x"), kiln.ir.IterVar.ThreadIndex,
                         "threadIdx.x")
    t, p = Var("t"), Var("p", "handle")
    store = kiln.ir.Store(buf.data, kiln.ir.const(1.0, "float32"), tx.var * 4 + t)
    body = kiln.ir.LetStmt(t, n - 1, kiln.ir.AssertStmt(
        n > 0, "n must be positive", kiln.ir.AttrStmt(tx, "thread_extent", 32, kiln.ir.seq(
            kiln.ir.Allocate(p, "float32", (16,), kiln.ir.const(True, "bool"),
                             kiln.ir.Evaluate(0)),
            kiln.ir.IfThenElse(tx.var < n, store, kiln.ir.Evaluate(1))))))
    func = kiln.ir.PrimFunc((buf.data, n), {buf.data: buf}, body, "f",
                            {"global_symbol": "f", "tir.noalias": True})
    loaded = roundtrip(func)
    assert loaded.attrs == func.attrs
    lbuf = loaded.buffer_map[loaded.params[0]]
    assert lbuf.shape[0] is loaded.params[1] and lbuf.data is loaded.params[0]


def test_tvm_alias():
    alias.install_as_tvm()
    try:
        import tvm

        assert tvm.ir.load_json(tvm.ir.save_json(Var("x"))).name == "x"
    finally:
        alias.uninstall_as_tvm()
