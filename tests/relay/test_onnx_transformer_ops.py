"""ONNX operators of transformer encoders (batched MatMul, LayerNormalization, Erf/Gelu,
Softmax on any axis, Where/Equal masks, Expand, Split, Pow, Sqrt, Gather of embeddings,
Cast, ReduceMean over the last axis), imported, compiled and compared with onnxruntime."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import helper, numpy_helper  # noqa: E402

from kiln import relay  # noqa: E402

from .models import build_and_run  # noqa: E402

_RNG = np.random.default_rng(0)


def _f32(*shape):
    return _RNG.standard_normal(shape).astype("float32")


def _model(nodes, feed: dict, inits=(), outputs=("y",), opset=17):
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in feed.items()]
    outs = [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None)
            for o in outputs]
    g = helper.make_graph(nodes, "g", ins, outs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in
                           dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8  # what every onnxruntime the tests meet reads
    return onnx.shape_inference.infer_shapes(m)  # the outputs' shapes


def _check(nodes, feed, inits=(), opset=17, rtol=1e-5, atol=1e-5):
    m = _model(nodes, feed, inits, opset=opset)
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feed)[0]
    _, y = build_and_run(m, feed)
    assert y.shape == ref.shape and y.dtype == ref.dtype
    np.testing.assert_allclose(y, ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("a,b", [((2, 3, 4, 5), (2, 3, 5, 6)),  # attention scores
                                 ((2, 1, 4, 5), (3, 5, 6)),  # broadcast batch
                                 ((1, 4, 5), (2, 5, 3)),  # a batch of one
                                 ((4, 5), (5, 6))])
def test_batched_matmul(a, b):
    _check([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": _f32(*a), "b": _f32(*b)})


def test_matmul_of_rows_by_a_weight_is_dense():
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": _f32(2, 7, 8)},
               {"w": _f32(8, 5)})
    mod, _ = relay.frontend.from_onnx(m)
    assert "dense" in {n.op for n in mod["main"].nodes if not n.is_const}
    _check(m.graph.node, {"x": _f32(2, 7, 8)}, {"w": _f32(8, 5)})


@pytest.mark.parametrize("axis,with_bias", [(-1, True), (-2, False)])
def test_layer_normalization(axis, with_bias):
    x = _f32(2, 5, 6)
    norm = x.shape[axis:]
    inits = {"g": _f32(*norm), **({"b": _f32(*norm)} if with_bias else {})}
    node = helper.make_node("LayerNormalization", ["x", "g"] + (["b"] if with_bias else []),
                            ["y"], axis=axis, epsilon=1e-3)
    _check([node], {"x": x}, inits, rtol=1e-4, atol=1e-4)


def test_layer_norm_decomposed_by_an_exporter():
    """Before opset 17 exporters write ReduceMean, Sub, Pow 2, Sqrt, Div."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
             helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["d2"]),
             helper.make_node("ReduceMean", ["d2"], ["v"], axes=[-1]),
             helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["y"])]
    inits = {"two": np.array(2.0, "float32"), "eps": np.array(1e-5, "float32")}
    _check(nodes, {"x": _f32(3, 4, 8)}, inits, opset=13, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    node = helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)
    try:
        _check([node], {"x": _f32(4, 9)}, opset=20)
    except ort.capi.onnxruntime_pybind11_state.Fail as e:  # an onnxruntime without opset 20
        pytest.skip(f"onnxruntime: {e}")


def test_exact_gelu_as_exported_erf_pattern_and_neg():
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["p"]),
             helper.make_node("Mul", ["x", "p"], ["h"]),
             helper.make_node("Mul", ["h", "half"], ["g"]),
             helper.make_node("Neg", ["g"], ["y"])]
    inits = {"sqrt2": np.array(np.sqrt(2), "float32"), "one": np.array(1, "float32"),
             "half": np.array(0.5, "float32")}
    _check(nodes, {"x": _f32(3, 10)}, inits)


@pytest.mark.parametrize("axis,opset", [(1, 13), (0, 13), (1, 11)])
def test_softmax_on_any_axis(axis, opset):
    """Opset 13 normalizes one axis; before it, the flattened axes from ``axis`` on."""
    node = helper.make_node("Softmax", ["x"], ["y"], axis=axis)
    _check([node], {"x": _f32(3, 4, 5)}, opset=opset)


def test_attention_mask_where_equal_cast():
    nodes = [helper.make_node("Equal", ["mask", "zero"], ["pad"]),
             helper.make_node("Where", ["pad", "neg", "x"], ["w"]),
             helper.make_node("Cast", ["pad"], ["padf"], to=onnx.TensorProto.FLOAT),
             helper.make_node("Add", ["w", "padf"], ["y"])]
    mask = np.array([[1, 1, 0, 0, 1]], dtype=np.int64)
    inits = {"zero": np.array(0, np.int64), "neg": np.array(-1e4, "float32")}
    _check(nodes, {"x": _f32(2, 3, 5), "mask": mask}, inits)


def test_expand_and_pow():
    nodes = [helper.make_node("Expand", ["x", "shape"], ["e"]),
             helper.make_node("Pow", ["e", "p"], ["y"])]
    _check(nodes, {"x": np.abs(_f32(3, 1)) + 0.5},
           {"shape": np.array([2, 3, 4], np.int64), "p": np.array(1.5, "float32")})


@pytest.mark.parametrize("how", ["input", "equal", "num_outputs"])
def test_split(how):
    """Q, K, V from one projection: sizes as an input (opset 13), equal parts of the node's
    outputs, or ``num_outputs`` (opset 18, the last part smaller)."""
    opset, inputs, attrs, parts = 13, ["x"], {}, 3
    inits = {}
    if how == "input":
        inputs, inits = ["x", "sizes"], {"sizes": np.array([2, 4, 6], np.int64)}
    elif how == "num_outputs":
        opset, attrs, parts = 18, {"num_outputs": 3}, 3
    x = _f32(2, 12 if how != "num_outputs" else 11)
    outs = [f"p{k}" for k in range(parts)]
    nodes = [helper.make_node("Split", inputs, outs, axis=-1, **attrs),
             helper.make_node("Concat", outs[::-1], ["y"], axis=-1)]
    _check(nodes, {"x": x}, inits, opset=opset)


def test_embedding_gather_with_negative_indices():
    ids = np.array([[0, 3, -1], [2, 2, 1]], dtype=np.int64)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)]
    _check(nodes, {"ids": ids}, {"table": _f32(5, 4)})


def test_gather_of_a_computed_tensor_and_mean_over_the_last_axis():
    nodes = [helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
             helper.make_node("ReduceMean", ["g"], ["y"], axes=[-1], keepdims=0)]
    _check(nodes, {"x": _f32(2, 6, 4)}, {"idx": np.array([5, 0, -2], np.int64)}, opset=13)


def test_constant_of_shape_expanded_to_a_batch():
    """A class token expanded to the batch: ConstantOfShape, Expand, Concat."""
    value = numpy_helper.from_array(np.array([1], np.int64))
    nodes = [helper.make_node("ConstantOfShape", ["rank"], ["ones"], value=value),
             helper.make_node("Mul", ["ones", "shape"], ["target"]),
             helper.make_node("Expand", ["cls", "target"], ["c"]),
             helper.make_node("Concat", ["c", "x"], ["y"], axis=1)]
    inits = {"rank": np.array([3], np.int64), "shape": np.array([2, 1, 1], np.int64),
             "cls": _f32(1, 1, 4)}
    _check(nodes, {"x": _f32(2, 3, 4)}, inits)
