"""Importer errors: unsupported operators and malformed models."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln import relay  # noqa: E402
from kiln.relay.frontend.onnx import OnnxImportError  # noqa: E402


def _io(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_unsupported_op_names_type_node_and_inputs():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="r0"),
                           helper.make_node("Elu", ["r"], ["y"], name="my_elu")], "g",
                          [_io("x", [1, 4])], [_io("y", [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(NotImplementedError) as e:
        relay.frontend.from_onnx(m)
    msg = str(e.value)
    assert "Elu" in msg and "my_elu" in msg and "'r'" in msg


def test_malformed_model_clear_error():
    # the node reads a tensor nothing defines
    g = helper.make_graph([helper.make_node("Relu", ["nowhere"], ["y"], name="r0")], "g",
                          [_io("x", [1, 4])], [_io("y", [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(OnnxImportError, match="malformed ONNX model"):
        relay.frontend.from_onnx(m)


def test_not_a_model():
    with pytest.raises(OnnxImportError, match="ModelProto"):
        relay.frontend.from_onnx(b"not a model")


def test_symbolic_dim_needs_shape():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                          [_io("y", [None, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(OnnxImportError, match="symbolic"):
        relay.frontend.from_onnx(m)
    mod, _ = relay.frontend.from_onnx(m, shape={"x": (2, 4)})
    assert mod["main"].outputs[0].shape == (2, 4)


def test_reshape_needs_constant_shape():
    g = helper.make_graph([helper.make_node("Reshape", ["x", "x"], ["y"], name="rs")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
                          [numpy_helper.from_array(np.zeros(1, np.float32), "unused")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(NotImplementedError, match="rs"):
        relay.frontend.from_onnx(m)
