"""ONNX operators of exported torchvision models (Slice with shape-computed bounds, the
spatial ReduceMean, constant folding of shape arithmetic), imported, compiled and compared
with onnxruntime."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln import relay  # noqa: E402

from .models import build_and_run  # noqa: E402


def _i64(name, *values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _model(nodes, inits, x_shape, y_shape, opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8  # what every onnxruntime the tests meet reads (onnx may write a newer one)
    return m


def _check(m):
    x = np.random.default_rng(0).standard_normal(
        [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]).astype("float32")
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    lib, y = build_and_run(m, {"x": x})
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    return lib


def test_slice_of_a_channel_split_with_computed_bounds():
    """ShuffleNet's split: ends = Shape(x)[1] / 2, computed at import."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
             helper.make_node("Div", ["c", "two"], ["half"]),
             helper.make_node("Unsqueeze", ["half", "zero"], ["end"]),
             helper.make_node("Slice", ["x", "start", "end", "axes"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    scalars = [numpy_helper.from_array(np.array(v, dtype=np.int64), n)
               for n, v in (("one", 1), ("two", 2))]
    inits = [*scalars, _i64("zero", 0), _i64("start", 0), _i64("axes", 1)]
    _check(_model(nodes, inits, [1, 6, 5, 7], [1, 3, 5, 7]))


@pytest.mark.parametrize("starts,ends,axes,steps,out", [
    ((1, 2), (4, -1), (2, 3), None, [1, 6, 3, 4]),
    ((-1,), (-100,), (3,), (-2,), [1, 6, 5, 4]),
    ((2,), (2 ** 62,), (1,), (3,), [1, 2, 5, 7]),
])
def test_slice_steps_negative_bounds_and_clamping(starts, ends, axes, steps, out):
    inputs = ["x", "st", "en", "ax"] + (["sp"] if steps else [])
    inits = [_i64("st", *starts), _i64("en", *ends), _i64("ax", *axes)]
    if steps:
        inits.append(_i64("sp", *steps))
    _check(_model([helper.make_node("Slice", inputs, ["y"])], inits, [1, 6, 5, 7], out))


def test_slice_opset_9_attributes():
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[3], axes=[1])
    _check(_model([node], [], [1, 4, 3, 3], [1, 2, 3, 3], opset=9))


@pytest.mark.parametrize("keepdims", [0, 1])
def test_spatial_reduce_mean_is_a_global_pooling(keepdims):
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[-2, -1], keepdims=keepdims)
    out = [1, 16, 1, 1] if keepdims else [1, 16]
    lib = _check(_model([node], [], [1, 16, 7, 7], out, opset=17))
    assert "global_avg_pool2d" in lib.summary


def test_reduce_mean_over_other_axes_is_a_mean():
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=1)
    _check(_model([node], [], [1, 16, 7, 7], [1, 1, 7, 7], opset=17))


def test_slice_with_mismatched_operands_is_a_clear_error():
    from kiln.relay.frontend.onnx import OnnxImportError

    node = helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])
    m = _model([node], [_i64("st", 0, 1), _i64("en", 2), _i64("ax", 1)], [1, 4, 3, 3],
               [1, 2, 3, 3])
    with pytest.raises(OnnxImportError, match="Slice.*starts and ends"):  # ONNX's inference
        relay.frontend.from_onnx(m)


def test_scalar_initializer_operand():
    """A 0-d initializer (x / 2.0) keeps its 0-d shape in the graph executor's constants."""
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    _check(_model([helper.make_node("Div", ["x", "two"], ["y"])], [two], [2, 3], [2, 3]))
