"""QDQ / QLinear ONNX models (made by onnxruntime's quantizer from small float models)
imported and compiled by kiln against onnxruntime's outputs: the int8 kernels of
``fake_quantization_to_integer`` agree within one unit of the output's scale; unsupported
quantization forms are clear errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _float_model(kind: str) -> onnx.ModelProto:
    """conv + relu + conv (``"cnn"``) or matmul + relu + matmul (``"mlp"``), fixed weights."""
    rng = np.random.default_rng(0)
    if kind == "cnn":
        inits = [numpy_helper.from_array(rng.normal(0, .3, s).astype(np.float32), n)
                 for n, s in (("w1", (8, 3, 3, 3)), ("b1", (8,)), ("w2", (6, 8, 3, 3)),
                              ("b2", (6,)))]
        nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c1"], ["r1"]),
                 helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], strides=[2, 2])]
        x_shape, y_shape = (1, 3, 12, 12), (1, 6, 5, 5)
    else:
        inits = [numpy_helper.from_array(rng.normal(0, .3, s).astype(np.float32), n)
                 for n, s in (("w1", (16, 24)), ("w2", (24, 5)))]
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]),
                 helper.make_node("Relu", ["m1"], ["r1"]),
                 helper.make_node("MatMul", ["r1", "w2"], ["y"])]
        x_shape, y_shape = (4, 16), (4, 5)
    g = helper.make_graph(nodes, kind,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self, shape):
        rng = np.random.default_rng(1)
        self.data = iter([{"x": rng.normal(0, 1, shape).astype(np.float32)}
                          for _ in range(4)])

    def get_next(self):
        return next(self.data, None)


def quantized(kind: str, tmp_path, fmt: str = "QDQ", per_channel: bool = False,
              activation: str = "QUInt8") -> onnx.ModelProto:
    """The ``kind`` model quantized statically by onnxruntime (random calibration)."""
    src, dst = tmp_path / f"{kind}.onnx", tmp_path / f"{kind}_q.onnx"
    m = _float_model(kind)
    onnx.save(m, src)
    shape = tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim)
    quantization.quantize_static(
        str(src), str(dst), _Calibration(shape),
        quant_format=getattr(quantization.QuantFormat, fmt), per_channel=per_channel,
        activation_type=getattr(quantization.QuantType, activation),
        weight_type=quantization.QuantType.QInt8)
    return onnx.load(dst)


def _run_both(model: onnx.ModelProto, x: np.ndarray):
    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    m.set_input("x", x)
    m.run()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return m.get_output(0).numpy(), sess.run(None, {"x": x})[0], lib.summary


def _output_scale(model: onnx.ModelProto) -> float:
    """The scale of the model's last DequantizeLinear (the output's quantization step)."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    last = [n for n in model.graph.node if n.op_type == "DequantizeLinear"][-1]
    return float(inits[last.input[1]])


@pytest.mark.parametrize("kind,fmt,per_channel,activation", [
    ("cnn", "QDQ", False, "QUInt8"),
    ("cnn", "QDQ", True, "QInt8"),
    ("cnn", "QOperator", True, "QUInt8"),
    ("mlp", "QDQ", False, "QUInt8"),
    ("mlp", "QOperator", False, "QInt8"),
])
def test_quantized_model_matches_onnxruntime(kind, fmt, per_channel, activation, tmp_path):
    model = quantized(kind, tmp_path, fmt, per_channel, activation)
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    x = np.random.default_rng(2).normal(0, 1, shape).astype(np.float32)
    got, want, summary = _run_both(model, x)
    assert f"qnn.{'conv2d' if kind == 'cnn' else 'dense'}" in summary  # int8 kernels ran
    step = _output_scale(model) if fmt == "QDQ" else np.abs(want).max() / 100
    assert np.abs(got - want).max() <= step * 1.001
    assert np.mean(got == want) > 0.9


def _qdq_model(zero_point: np.ndarray, scale_input: bool = False, **attrs) -> onnx.ModelProto:
    """``DequantizeLinear(QuantizeLinear(x))`` with the given zero point (its type is the
    quantized type); ``scale_input`` makes the scale a graph input (computed)."""
    inits = [numpy_helper.from_array(zero_point, "zp")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 4))]
    if scale_input:
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, ()))
    else:
        inits.append(numpy_helper.from_array(np.array(0.1, np.float32), "s"))
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], **attrs),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"])]
    g = helper.make_graph(nodes, "qdq", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 4))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=8)


def test_quantize_dequantize_round_trip_matches_onnxruntime():
    model = _qdq_model(np.array(3, np.int8))
    x = np.array([[0.05, 0.15, -0.25, 0.35], [20.0, -20.0, 0.0, 0.449]], np.float32)
    mod, params = relay.frontend.from_onnx(model)
    lib = relay.build(mod, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    m.set_input("x", x)
    m.run()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(m.get_output(0).numpy(), sess.run(None, {"x": x})[0])


@pytest.mark.parametrize("model,match", [
    (lambda: _qdq_model(np.array(0, np.int16)), "QuantizeLinear to int16"),
    (lambda: _qdq_model(np.array(0, np.uint8), scale_input=True), "computed scale"),
    (lambda: _qdq_model(np.array(0, np.uint8), saturate=0), "saturate=0"),
])
def test_unsupported_quantization_forms_are_clear_errors(model, match):
    with pytest.raises(relay.frontend.onnx.OpNotImplemented, match=match):
        relay.frontend.from_onnx(model())


def _qdq_matmul(w_zero_point: int) -> onnx.ModelProto:
    """``x -> Q -> DQ -> MatMul(DQ(uint8 w)) -> Q -> DQ`` with the weight's zero point."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(v, n) for n, v in (
        ("w", rng.integers(0, 256, (8, 3)).astype(np.uint8)),
        ("ws", np.array(0.01, np.float32)), ("wz", np.array(w_zero_point, np.uint8)),
        ("s", np.array(0.05, np.float32)), ("ys", np.array(0.1, np.float32)),
        ("z", np.array(128, np.uint8)))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "ys", "z"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "z"], ["y"])]
    g = helper.make_graph(nodes, "qdq_matmul",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 8))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("w_zero_point,int8_kernel", [(128, True), (0, False)])
def test_weights_outside_int8_stay_float(w_zero_point, int8_kernel):
    """uint8 weights with zero point 128 become int8 (w - 128); with zero point 0 they do
    not fit int8 and the pattern runs in float, still within a step of onnxruntime."""
    x = np.random.default_rng(4).normal(0, 2, (2, 8)).astype(np.float32)
    got, want, summary = _run_both(_qdq_matmul(w_zero_point), x)
    assert ("qnn.dense" in summary) == int8_kernel
    assert np.abs(got - want).max() <= 0.1 * 1.001
