"""Logical and bitwise operators: relay's ``logical_*``, ``bitwise_*``, ``left_shift`` and
``right_shift`` (type relation, dtype errors, compiled kernels against numpy) and the ONNX
importer's And, Or, Xor, Not, BitwiseAnd/Or/Xor/Not and BitShift against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.relay.bitwise_ops import BINARY, UNARY  # noqa: E402
from kiln.relay.frontend.onnx_check import OnnxImportError, OpNotImplemented  # noqa: E402
from kiln.relay.graph import call, const, input_node  # noqa: E402
from kiln.relay.op import OPS, infer_type  # noqa: E402

from .models import build_and_run  # noqa: E402

RNG = np.random.default_rng(24)
_ONNX_TYPES = {"bool": TensorProto.BOOL, "int32": TensorProto.INT32,
               "int64": TensorProto.INT64, "uint8": TensorProto.UINT8}


def _values(dtype: str, shape: tuple[int, ...], high: int = 1 << 20) -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) > 0.5
    lo = 0 if dtype == "uint8" else -high
    hi = 256 if dtype == "uint8" else high
    return RNG.integers(lo, hi, shape).astype(dtype)


def _against_onnxruntime(m: onnx.ModelProto, feed: dict) -> np.ndarray:
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feed)[0]
    _, got = build_and_run(m, feed)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)
    return got


# ---- ONNX against onnxruntime -------------------------------------------------------------
def _graph_model(nodes, inputs: dict[str, tuple[str, tuple[int, ...]]], out_dtype: str,
                 out_shape: tuple[int, ...], opset: int = 18, inits=()) -> onnx.ModelProto:
    """A model of ``nodes`` with typed ``inputs`` (name -> (dtype, shape)) and output y."""
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, _ONNX_TYPES[d], s)
                                       for n, (d, s) in inputs.items()],
                          [helper.make_tensor_value_info("y", _ONNX_TYPES[out_dtype],
                                                         out_shape)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8  # what every onnxruntime the tests meet reads
    return m


def test_onnx_logical_ops_broadcast():
    """``Or(And(a, b), Not(Xor(b, c)))`` over broadcast shapes (one fused kernel)."""
    shapes = {"a": (3, 1, 17), "b": (4, 17), "c": (17,)}
    nodes = [helper.make_node("And", ["a", "b"], ["ab"]),
             helper.make_node("Xor", ["b", "c"], ["bc"]),
             helper.make_node("Not", ["bc"], ["nbc"]),
             helper.make_node("Or", ["ab", "nbc"], ["y"])]
    m = _graph_model(nodes, {k: ("bool", s) for k, s in shapes.items()}, "bool", (3, 4, 17))
    a, b, c = (_values("bool", s) for s in shapes.values())
    got = _against_onnxruntime(m, {"a": a, "b": b, "c": c})
    np.testing.assert_array_equal(got, (a & b) | ~(b ^ c))


@pytest.mark.parametrize("dtype", ["int32", pytest.param("int64", marks=pytest.mark.slow),
                                   pytest.param("uint8", marks=pytest.mark.slow)])
def test_onnx_bitwise_ops(dtype):
    """``BitwiseXor(BitwiseAnd(a, b), BitwiseNot(BitwiseOr(a, c)))``, broadcast."""
    shapes = {"a": (2, 3, 20), "b": (3, 1), "c": (20,)}
    nodes = [helper.make_node("BitwiseAnd", ["a", "b"], ["ab"]),
             helper.make_node("BitwiseOr", ["a", "c"], ["ac"]),
             helper.make_node("BitwiseNot", ["ac"], ["nac"]),
             helper.make_node("BitwiseXor", ["ab", "nac"], ["y"])]
    m = _graph_model(nodes, {k: (dtype, s) for k, s in shapes.items()}, dtype, (2, 3, 20))
    a, b, c = (_values(dtype, s) for s in shapes.values())
    got = _against_onnxruntime(m, {"a": a, "b": b, "c": c})
    np.testing.assert_array_equal(got, (a & b) ^ ~(a | c))


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_onnx_bitshift(direction):
    """``BitShift`` of uint8 (opset 11), the shift broadcast along the rows."""
    a, s = _values("uint8", (6, 35)), RNG.integers(0, 8, (35,)).astype("uint8")
    m = _graph_model([helper.make_node("BitShift", ["a", "s"], ["y"], direction=direction)],
                     {"a": ("uint8", a.shape), "s": ("uint8", s.shape)}, "uint8", a.shape,
                     opset=11)
    got = _against_onnxruntime(m, {"a": a, "s": s})
    np.testing.assert_array_equal(got, a << s if direction == "LEFT" else a >> s)


def test_onnx_logical_of_comparisons_in_one_kernel():
    """``Not(Equal(a, b)) Or Equal(a, c)``: bools computed and combined inside the graph."""
    shape = (8, 24)
    nodes = [helper.make_node("Equal", ["x0", "x1"], ["e1"]),
             helper.make_node("Equal", ["x0", "x2"], ["e2"]),
             helper.make_node("Not", ["e1"], ["n1"]),
             helper.make_node("Or", ["n1", "e2"], ["y"])]
    m = _graph_model(nodes, {f"x{k}": ("int32", shape) for k in range(3)}, "bool", shape)
    a = RNG.integers(0, 3, shape).astype("int32")
    b, c = RNG.integers(0, 3, shape).astype("int32"), RNG.integers(0, 3, shape).astype("int32")
    _against_onnxruntime(m, {"x0": a, "x1": b, "x2": c})


def test_onnx_constant_operands_fold_at_import():
    """``BitwiseAnd`` of two initializers and ``Xor`` with a constant: folded in numpy."""
    from kiln import relay

    k = numpy_helper.from_array(np.array([6, 3], np.int32), "k")
    nodes = [helper.make_node("BitwiseAnd", ["k", "k"], ["kk"]),
             helper.make_node("BitwiseXor", ["x0", "kk"], ["y"])]
    m = _graph_model(nodes, {"x0": ("int32", (2,))}, "int32", (2,), inits=[k])
    mod, _ = relay.frontend.from_onnx(m)
    assert [n.op for n in mod["main"].nodes if not n.is_input and not n.is_const] == \
        ["bitwise_xor"]
    _against_onnxruntime(m, {"x0": np.array([5, -1], np.int32)})


def test_onnx_bitshift_direction_and_dtype_errors():
    m = _graph_model([helper.make_node("BitShift", ["a", "b"], ["y"], direction="UP")],
                     {"a": ("uint8", (4,)), "b": ("uint8", (4,))}, "uint8", (4,), opset=11)
    with pytest.raises(OnnxImportError, match="BitShift direction 'UP' is not 'LEFT' or "
                                              "'RIGHT'"):
        _import(m)
    m = _graph_model([helper.make_node("BitwiseAnd", ["a", "b"], ["y"])],
                     {"a": ("int32", (4,)), "b": ("int32", (4,))}, "int32", (4,))
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.INT16
    m.graph.input[1].type.tensor_type.elem_type = TensorProto.INT16
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT16
    with pytest.raises(OpNotImplemented, match="int16"):
        _import(m)


def _import(m: onnx.ModelProto):
    from kiln import relay

    return relay.frontend.from_onnx(m)


# ---- relay: type relation and dtype checks -----------------------------------------------
@pytest.mark.parametrize("op", sorted(BINARY))
def test_relay_binary_type_relation(op):
    dtype = "bool" if op.startswith("logical") else "int32"
    a, b = input_node("a", (3, 1, 5), dtype), input_node("b", (4, 5), dtype)
    n = call(op, [a, b])
    assert n.shape == (3, 4, 5)
    assert n.dtype == ("bool" if op.startswith("logical") else "int32")


@pytest.mark.parametrize("op, dtypes, message", [
    ("logical_and", ("int32", "int32"), "operands must be bool tensors, got int32 and int32"),
    ("logical_not", ("float32",), "operands must be bool tensors, got float32"),
    ("bitwise_or", ("float32", "float32"),
     "operands must be integer or bool tensors, got float32 and float32"),
    ("bitwise_xor", ("int32", "int64"), "operands must have one dtype, got int32 and int64"),
    ("left_shift", ("bool", "bool"), "operands must be integer tensors, got bool and bool"),
    ("right_shift", ("uint8", "int32"), "operands must have one dtype, got uint8 and int32"),
])
def test_relay_dtype_errors_name_the_node(op, dtypes, message):
    xs = [input_node(f"x{k}", (4,), d) for k, d in enumerate(dtypes)]
    with pytest.raises(TypeError, match=rf"{op} \(n7\): {message}"):
        call(op, xs, name="n7")


def test_relay_shapes_that_do_not_broadcast():
    a, b = input_node("a", (3, 4), "bool"), input_node("b", (5,), "bool")
    with pytest.raises(ValueError, match=r"logical_or \(unnamed\).*\[3, 4\] and \[5\]"):
        call("logical_or", [a, b])


_FAST = ("logical_xor", "right_shift")  # the others' kernels run in the ONNX tests above


@pytest.mark.parametrize("op", [op if op in _FAST else pytest.param(op, marks=pytest.mark.slow)
                                for op in sorted(BINARY) + sorted(UNARY)])
def test_relay_numpy_evaluation_matches_the_kernel(op):
    """Each operator compiled alone (a one-node graph) against its numpy evaluation, which
    constant folding uses."""
    from kiln import relay
    from kiln.relay.graph import Graph, Module

    dtype = "bool" if op.startswith("logical") else "int32"
    shapes = [(3, 16), (16,)] if op in BINARY else [(3, 16)]
    values = [_values(dtype, s) for s in shapes]
    if op.endswith("shift"):
        values[1] = RNG.integers(0, 31, (16,)).astype("int32")
    xs = [input_node(f"x{k}", s, dtype) for k, s in enumerate(shapes)]
    y = call(op, xs)
    with relay.build_config(opt_level=3):
        lib = relay.build(Module(Graph(xs, [y])), "llvm")
    import kiln
    from kiln.contrib import graph_executor

    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.set_input(**{f"x{k}": v for k, v in enumerate(values)})
    gm.run()
    np.testing.assert_array_equal(gm.get_output(0).numpy(), OPS[op][2](values, {}))
    assert infer_type(y) == (tuple(np.broadcast_shapes(*shapes)), y.dtype)


def test_relay_constant_operands_fold():
    a = const(np.array([True, False, True]))
    b = const(np.array([True, True, False]))
    np.testing.assert_array_equal(OPS["logical_xor"][2]([a.value, b.value], {}),
                                  [False, True, True])
