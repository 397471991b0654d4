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


def test_symbolic_dim_kept_or_bound_by_shape():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                          [_io("y", [None, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    mod, _ = relay.frontend.from_onnx(m)  # kept symbolic (tests/relay/test_dynamic_shapes.py)
    assert [str(d) for d in mod["main"].outputs[0].shape] == ["N", "4"]
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


# ---- the importer's boundary: each invalid model is a kiln error naming what is wrong ----

def _conv_model(x_type=TensorProto.FLOAT, w_dtype=np.float32, opset=13, **conv_attrs):
    """x [1, 2, 5, 5] -> Conv (node 'c0', weight 'w' [3, 2, 3, 3]) -> y."""
    conv_attrs.setdefault("pads", [1, 1, 1, 1])
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="c0", **conv_attrs)], "g",
        [helper.make_tensor_value_info("x", x_type, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", x_type, [1, 3, 5, 5])],
        [numpy_helper.from_array(np.ones((3, 2, 3, 3), w_dtype), "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("data", [b"\x0a\xff", _conv_model().SerializeToString()[:-7]])
def test_bad_model_bytes_are_not_a_valid_onnx_model(data):
    with pytest.raises(OnnxImportError, match="not a valid ONNX model|malformed ONNX model"):
        relay.frontend.from_onnx(data)


def test_model_bytes_are_accepted():
    mod, params = relay.frontend.from_onnx(_conv_model().SerializeToString())
    assert mod["main"].outputs[0].shape == (1, 3, 5, 5) and set(params) == {"w"}


@pytest.mark.parametrize("opset", [99, 5])
def test_opset_outside_kilns_range(opset):
    with pytest.raises(NotImplementedError, match=f"opset {opset} is not supported"):
        relay.frontend.from_onnx(_conv_model(opset=opset))


def test_double_input_into_float_conv_is_an_error():
    with pytest.raises(OnnxImportError, match="c0"):  # the ONNX type rule: T bound twice
        relay.frontend.from_onnx(_conv_model(x_type=TensorProto.DOUBLE))
    # a valid all-double Conv: kiln's convolutions are float32 only
    with pytest.raises(NotImplementedError, match=r"'c0'.*float64.*Conv for float32"):
        relay.frontend.from_onnx(_conv_model(x_type=TensorProto.DOUBLE, w_dtype=np.float64))


@pytest.mark.parametrize("attrs, match", [
    ({"strides": [1]}, "strides"),
    ({"pads": [1, 1]}, "pads"),
    ({"pads": [-1, 0, 0, 0]}, "pads"),
    ({"dilations": [0, 1]}, "dilations"),
    ({"group": 2}, "c0"),
    ({"auto_pad": "SIDEWAYS"}, "auto_pad"),
])
def test_bad_conv_attributes_name_the_node(attrs, match):
    with pytest.raises(OnnxImportError, match=match) as e:
        relay.frontend.from_onnx(_conv_model(**attrs))
    assert "c0" in str(e.value)


def _unary(op, x_shape, opset=13, inits=(), inputs=(), **attrs):
    """x -> op (node 'n0', the other inputs ``inputs``) -> y of unknown dimensions."""
    g = helper.make_graph([helper.make_node(op, ["x", *inputs], ["y"], name="n0", **attrs)],
                          "g", [_io("x", x_shape)], [_io("y", [None] * len(x_shape))],
                          list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("model", [
    _unary("Softmax", [2, 3], axis=2),
    _unary("Flatten", [2, 3], axis=-3),
    _unary("Concat", [2, 3], axis=-3),
    _unary("Transpose", [2, 3], perm=[0, 0]),
    _unary("Unsqueeze", [2, 3], inits=[numpy_helper.from_array(np.array([3], np.int64), "a")],
           inputs=["a"]),
])
def test_out_of_range_axes_are_errors_not_wrapped(model):
    with pytest.raises(OnnxImportError, match="n0"):
        relay.frontend.from_onnx(model)


def test_batch_norm_parameters_must_be_per_channel():
    inits = [numpy_helper.from_array(np.ones(s, np.float32), n)
             for n, s in [("g", [4]), ("b", [4]), ("m", []), ("v", [4])]]
    m = _unary("BatchNormalization", [1, 4, 2, 2], inits=inits, inputs=["g", "b", "m", "v"])
    with pytest.raises(OnnxImportError, match=r"'n0'.*must have shape \[4\]"):
        relay.frontend.from_onnx(m)


def test_required_input_left_empty():
    m = _unary("Concat", [2, 3], inputs=[""], axis=0)
    with pytest.raises(OnnxImportError, match=r"'n0'.*input 1 .* not optional"):
        relay.frontend.from_onnx(m)


def test_graph_input_types_and_dims():
    def model(elem, dims):
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                              [helper.make_tensor_value_info("x", elem, dims)],
                              [helper.make_tensor_value_info("y", elem, [None])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])

    with pytest.raises(OnnxImportError, match="'x' has element type 12345"):
        relay.frontend.from_onnx(model(12345, [2]))
    with pytest.raises(NotImplementedError, match="'x' is a bfloat16 tensor"):
        relay.frontend.from_onnx(model(TensorProto.BFLOAT16, [2]))
    with pytest.raises(NotImplementedError, match=r"'x' has shape \[2, 0\]"):
        relay.frontend.from_onnx(model(TensorProto.FLOAT, [2, 0]))
    with pytest.raises(OnnxImportError, match="rank 1, but the model's input 'x' has rank 2"):
        relay.frontend.from_onnx(model(TensorProto.FLOAT, [2, 3]), shape={"x": (6,)})


def test_graph_without_outputs():
    m = _unary("Relu", [2])
    del m.graph.output[:]
    with pytest.raises(OnnxImportError, match="no outputs"):
        relay.frontend.from_onnx(m)


def test_operator_type_that_is_not_utf8():
    data = _conv_model().SerializeToString().replace(b"Conv", b"\xff\xfenv")
    with pytest.raises(OnnxImportError, match="not valid UTF-8"):
        relay.frontend.from_onnx(data)


def test_node_name_that_is_not_utf8():
    # protobuf hands a name that is not UTF-8 over as bytes, and the ONNX checker accepts it
    m = _conv_model()
    m.graph.node[0].name = "conv0"
    data = m.SerializeToString().replace(b"conv0", b"\x19\x94nv0")
    with pytest.raises(OnnxImportError, match=r"node 0 \('Conv'\) has a name .* not valid UTF-8"):
        relay.frontend.from_onnx(data)


@pytest.mark.parametrize("model, message", [
    (_conv_model(auto_pad="SAME_UPPER"), r"pads \[1, 1, 1, 1\] and auto_pad 'SAME_UPPER' "
                                         r"cannot both be given"),
    (_conv_model(pads=[2**62, 1, 1, 1]), r"pads \[4611686018427387904, 1, 1, 1\] are too "
                                         r"large: each must be below 2\^31"),
])
def test_what_the_importer_fuzz_found(model, message):
    # issue 25's fuzz run (seed 2, 10,000 mutants): onnxruntime rejects both; kiln ran the
    # first and failed inside numpy on the second
    with pytest.raises(OnnxImportError, match=message):
        relay.frontend.from_onnx(model)


@pytest.mark.parametrize("to", [TensorProto.STRING, TensorProto.FLOAT8E4M3FN])
def test_cast_to_a_type_kiln_has_not(to):
    # the second fuzz run of seed 2 (mutant 1550): onnxruntime casts to strings; kiln failed
    # with a ValueError from its dtype parser
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], name="to_text", to=to)], "g",
                          [_io("x", [2])], [helper.make_tensor_value_info("y", to, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    name = TensorProto.DataType.Name(to)
    with pytest.raises(NotImplementedError, match=rf"node 'to_text' \(Cast.*Cast to {name}: "
                                                  r"kiln does not compile"):
        relay.frontend.from_onnx(m)


def _matmul_model(w: np.ndarray):
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [_io("x", [1, w.shape[0]])], [_io("y", [1, w.shape[1]])],
                          [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_checker_verdict_is_remembered_not_its_weights(monkeypatch):
    # a model imported again is not checked (serialized) again; one whose large weights
    # changed only in value neither; one whose weights' bytes are too few is
    from kiln.relay.frontend import onnx_check

    calls = []
    check = onnx.checker.check_model
    monkeypatch.setattr(onnx.checker, "check_model", lambda m: calls.append(m) or check(m))
    w = np.random.default_rng(7).standard_normal((64, 32)).astype(np.float32)
    m = _matmul_model(w)
    onnx_check.check_model(m)
    onnx_check.check_model(m)
    onnx_check.check_model(_matmul_model(w + 1))
    assert len(calls) == 1
    m.graph.initializer[0].raw_data = m.graph.initializer[0].raw_data[:-4]
    with pytest.raises(OnnxImportError, match="raw_data size .* too small"):
        onnx_check.check_model(m)
    assert len(calls) == 2
