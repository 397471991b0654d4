"""A residual QDQ block (convolution -> max pool -> convolutions -> residual add ->
strided 1x1 convolution -> global pool -> dense, quantized by onnxruntime) compiled with its
8-bit activations kept blocked between the int8 kernels (``relay/qnn_layout.py``) and the
residual add and max pool in 8 bits (``qnn.add``, ``max_pool2d`` on uint8): bit for bit
onnxruntime's output, on the host and on pinned targets (AVX-VNNI, AVX2, AMX)."""

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

SHAPE = (1, 3, 16, 16)


def _float_model(width: int) -> onnx.ModelProto:
    """stem conv 3 -> ``width`` + relu, max pool, a basic residual block of ``width``
    channels, a strided 1x1 conv to 32 channels, global pool and a classifier."""
    rng = np.random.default_rng(0)
    shapes = {"w0": (width, 3, 3, 3), "w1": (width, width, 3, 3), "w2": (width, width, 1, 1),
              "w3": (32, width, 1, 1), "fc": (10, 32)}
    inits = [numpy_helper.from_array(rng.normal(0, (2 / np.prod(s[1:])) ** .5, s)
                                     .astype(np.float32), n) for n, s in shapes.items()]
    inits += [numpy_helper.from_array(rng.normal(0, .1, s[0]).astype(np.float32), f"b{n}")
              for n, s in shapes.items()]
    conv = [("x", "w0", "c0", 1, 1), ("p0", "w1", "c1", 1, 1), ("r1", "w2", "c2", 0, 1),
            ("r2", "w3", "c3", 0, 2)]
    nodes = []
    for x, w, y, pad, stride in conv:
        nodes.append(helper.make_node("Conv", [x, w, f"b{w}"], [y], pads=[pad] * 4,
                                      strides=[stride] * 2))
    nodes += [helper.make_node("Relu", ["c0"], ["r0"]),
              helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], pads=[1] * 4,
                               strides=[2, 2]),
              helper.make_node("Relu", ["c1"], ["r1"]),
              helper.make_node("Add", ["c2", "p0"], ["a2"]),
              helper.make_node("Relu", ["a2"], ["r2"]),
              helper.make_node("GlobalAveragePool", ["c3"], ["g"]),
              helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", "fc", "bfc"], ["y"], transB=1)]
    nodes.sort(key=lambda n: ["c0", "r0", "p0", "c1", "r1", "c2", "a2", "r2", "c3", "g", "f",
                              "y"].index(n.output[0]))
    g = helper.make_graph(nodes, "residual",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 10))],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self):
        rng = np.random.default_rng(1)
        self.data = iter([{"x": rng.normal(0, 1, SHAPE).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.data, None)


@pytest.fixture(scope="module", params=[64, 16], ids=["64ch", "16ch"])
def qdq(request, tmp_path_factory) -> onnx.ModelProto:
    d = tmp_path_factory.mktemp(f"qdq{request.param}")
    onnx.save(_float_model(request.param), d / "f.onnx")
    quantization.quantize_static(
        str(d / "f.onnx"), str(d / "q.onnx"), _Calibration(),
        quant_format=quantization.QuantFormat.QDQ, per_channel=True,
        activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8)
    return onnx.load(d / "q.onnx")


def _run(model: onnx.ModelProto, target: str, x: np.ndarray) -> np.ndarray:
    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def _check(model: onnx.ModelProto, target: str) -> None:
    x = np.random.default_rng(2).normal(0, 1, SHAPE).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(_run(model, target, x), want)


def test_activations_stay_blocked_between_int8_kernels(qdq):
    """The fused groups (no kernel compiled): every int8 convolution and the max pool in a
    blocked layout, the residual add a ``qnn.add`` in its convolution's kernel, no float
    dequantize kernel, one transform back where the chain ends (the classifier)."""
    mod, params = relay.frontend.from_onnx(qdq)
    with relay.build_config(opt_level=3):
        _, groups = relay.build_module.optimize_and_fuse(mod, params, kiln.target.Target("llvm"))
    ops = [[n.op for n in g.nodes] for g in groups]
    blocked = [g.output.layout for g in groups if g.nodes[0].op in ("qnn.conv2d", "max_pool2d")]
    assert len(blocked) == 5 and all(lay.startswith("NCHW") and lay.endswith("c")
                                     for lay in blocked)
    assert ["qnn.conv2d", "qnn.add"] in ops
    assert [n.dtype for g in groups for n in g.nodes if n.op == "max_pool2d"] == ["uint8"]
    assert ["qnn.dequantize"] not in ops
    assert sum(o.count("layout_transform") for o in ops) == 1


@pytest.mark.parametrize("out_dtype,relu", [("uint8", False), ("int8", True)])
def test_qnn_add_is_its_qdq_pattern(out_dtype, relu):
    """``qnn.add`` (compiled) equals ``quantize([relu](dequantize(a) + dequantize(b)))``
    evaluated in float32 by numpy (``np_add``), saturation included."""
    from kiln import te
    from kiln.relay import quantize_ops

    attrs = {"lhs_scale": 0.05, "lhs_zero_point": 7, "rhs_scale": 0.125, "rhs_zero_point": 0,
             "output_scale": 0.1, "output_zero_point": -3 if out_dtype == "int8" else 2,
             "out_dtype": out_dtype, "relu": relu}
    rng = np.random.default_rng(3)
    a, b = (rng.integers(0, 256, (2, 3, 4, 5)).astype("uint8") for _ in range(2))
    ta, tb = (te.placeholder(a.shape, "uint8", name=n) for n in "ab")
    out = quantize_ops.add([ta, tb], attrs)
    f = kiln.build(te.create_schedule(out.op), [ta, tb, out])
    got = kiln.nd.empty(a.shape, out_dtype)
    f(kiln.nd.array(a), kiln.nd.array(b), got)
    np.testing.assert_array_equal(got.numpy(), quantize_ops.np_add([a, b], attrs))


@pytest.mark.slow  # the model compiled
def test_blocked_chain_matches_onnxruntime(qdq):
    _check(qdq, "llvm")


def _host_has(features: set[str]) -> bool:
    return features <= kiln.target.current_cpu().features


@pytest.mark.slow  # the model compiled for each target
@pytest.mark.parametrize("mcpu,needs", [
    ("alderlake", {"avxvnni"}), ("haswell", {"avx2"}),
    ("sapphirerapids", {"amx-tile", "amx-int8", "avx512vnni"}),
])
def test_blocked_chain_on_pinned_targets(qdq, mcpu, needs):
    """The AVX-VNNI, AVX2 and AMX kernels of the same chain give onnxruntime's bits."""
    if not _host_has(needs):
        pytest.skip(f"the host lacks {sorted(needs)}")
    _check(qdq, f"llvm -mcpu={mcpu}")
