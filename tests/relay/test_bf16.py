"""``relay.build(..., precision="bf16")``: the mixed-precision pass on small ONNX models
against onnxruntime's float32 outputs, the PassContext key, the saved artifact, and the
errors (a CPU without bf16 instructions, a GPU target, an unknown precision).

Tolerance against float32: ``max |y_bf16 - y_fp32| <= 2e-2 * max |y_fp32|`` (each operand
of each layer rounded to 8 significant bits, a relative error of about ``2**-8`` per layer,
over a few layers), and the same top-1 class on every input of the small ResNet.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.ir.transform import PassContext
from kiln.relay import mixed_precision
from kiln.relay.mixed_precision import CONFIG_KEY
from kiln.target import current_cpu
from kiln.topi.x86.bf16_intrin import BF16_FEATURE

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from kiln.relay.testing import onnx_models  # noqa: E402

requires_bf16 = pytest.mark.skipif(BF16_FEATURE not in current_cpu().features,
                                   reason="this CPU has no AVX-512 BF16")


def _run(lib, name: str, x: np.ndarray) -> np.ndarray:
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.set_input(name, x)
    gm.run()
    return gm.get_output(0).numpy()


def _onnxruntime(model, name: str, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {name: x})[0]


def _close(y: np.ndarray, ref: np.ndarray) -> bool:
    return float(np.abs(y - ref).max()) <= 2e-2 * float(np.abs(ref).max())


@requires_bf16
@pytest.mark.parametrize("model", [onnx_models.conv_bias_relu(c=128, f=20),
                                   onnx_models.conv_bias_relu(c=128, f=32),
                                   onnx_models.mlp_block(d=1024, hidden=1024)],
                         ids=["conv_bias_relu", "conv_bias_relu_direct", "mlp"])
def test_bf16_build_matches_fp32(model):
    mod, params = relay.frontend.from_onnx(model)
    name, x = onnx_models.random_input(model)
    lib = relay.build(mod, target="llvm", params=params, precision="bf16")
    y = _run(lib, name, x)
    assert _close(y, _onnxruntime(model, name, x))
    assert "_bf16" in lib.summary
    assert y.dtype == np.float32


def _projection_3d(batch: int = 2, seq: int = 8, d: int = 1024, units: int = 48):
    """``[batch, seq, d] @ W[d, units] + b``: a transformer's dense projection."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((d, units)) * d ** -0.5)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(units).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "projection", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            [batch, seq, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, units])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)  # what every onnxruntime the tests meet reads


@requires_bf16
def test_3d_matmul_by_a_constant_weight_is_bf16():
    model = _projection_3d()
    mod, params = relay.frontend.from_onnx(model)
    name, x = onnx_models.random_input(model)
    lib = relay.build(mod, target="llvm", params=params, precision="bf16")
    assert "dense_bf16" in lib.summary
    y = _run(lib, name, x)
    assert y.shape == (2, 8, 48) and _close(y, _onnxruntime(model, name, x))


@requires_bf16
def test_pass_context_key_selects_bf16_and_artifact_round_trips(tmp_path):
    model = onnx_models.mlp_block(d=1024, hidden=1024)
    name, x = onnx_models.random_input(model)
    mod, params = relay.frontend.from_onnx(model)
    with PassContext(opt_level=3, config={CONFIG_KEY: "bfloat16"}):
        lib = relay.build(mod, target="llvm", params=params)
    assert lib.summary.count("dense_bf16") == 2
    lib.export_library(tmp_path / "m.tar")
    loaded = relay.load_module(str(tmp_path / "m.tar"))
    assert np.array_equal(_run(loaded, name, x), _run(lib, name, x))
    with PassContext(opt_level=3, config={CONFIG_KEY: "bfloat16"}):  # precision= wins
        fp32 = relay.build(mod, target="llvm", params=params, precision="fp32")
    assert "_bf16" not in fp32.summary


@requires_bf16
@pytest.mark.slow
def test_activations_only_bf16_convolutions_read_are_stored_in_bf16(monkeypatch):
    """A residual block: ``relu(conv1)`` feeds only conv2, so conv1's kernel writes it in
    bf16 (``bf16_round`` in its tail); the block's input, also read by the residual add,
    stays float32. Rounding once in the producer gives the same bits as rounding in the
    consumer."""
    model = onnx_models.residual_block(c=128, hw=5)
    mod, params = relay.frontend.from_onnx(model)
    name, x = onnx_models.random_input(model)
    lib = relay.build(mod, target="llvm", params=params, precision="bf16")
    assert lib.summary.count("conv2d_bf16") == 2 and lib.summary.count("bf16_round") == 1
    monkeypatch.setattr(mixed_precision, "bf16_activations", lambda graph: graph)
    rounding_in_consumer = relay.build(mod, target="llvm", params=params, precision="bf16")
    assert "bf16_round" not in rounding_in_consumer.summary
    assert np.array_equal(_run(lib, name, x), _run(rounding_in_consumer, name, x))


@requires_bf16
@pytest.mark.slow
def test_activations_only_bf16_dense_layers_read_are_stored_in_bf16(monkeypatch):
    """An MLP block: ``relu(x W1 + b1)`` feeds only the second dense layer, so the first
    one's kernel writes it in bf16 (``bf16_round`` in its tail) and the second reads the
    bits as its ``a`` operand; ``x``, also read by the residual add, stays float32. The
    same bits as rounding in the consumer."""
    model = onnx_models.mlp_block(d=1024, hidden=1024)
    mod, params = relay.frontend.from_onnx(model)
    name, x = onnx_models.random_input(model)
    lib = relay.build(mod, target="llvm", params=params, precision="bf16")
    assert lib.summary.count("dense_bf16") == 2 and lib.summary.count("bf16_round") == 1
    monkeypatch.setattr(mixed_precision, "bf16_activations", lambda graph: graph)
    rounding_in_consumer = relay.build(mod, target="llvm", params=params, precision="bf16")
    assert "bf16_round" not in rounding_in_consumer.summary
    assert np.array_equal(_run(lib, name, x), _run(rounding_in_consumer, name, x))


@requires_bf16
@pytest.mark.parametrize("model", [onnx_models.gemm_classifier(),  # reductions 36 and 16
                                   onnx_models.mlp_block(seq="seq", d=1024, hidden=32)],
                         ids=["short_reductions", "symbolic_rows"])
def test_what_bf16_leaves_float32(model):
    mod, params = relay.frontend.from_onnx(model)
    lib = relay.build(mod, target="llvm", params=params, precision="bf16")
    assert "_bf16" not in lib.summary


def test_bf16_on_a_cpu_without_the_instructions_is_a_clear_error():
    mod, params = relay.frontend.from_onnx(onnx_models.conv_bias_relu())
    with pytest.raises(kiln.TVMError, match=r"relay.build\(precision='bf16'\): bf16 needs a "
                                            r"CPU with AVX-512 BF16 .* avx2"):
        relay.build(mod, target="llvm -mcpu=haswell", params=params, precision="bf16")


def test_bf16_on_a_gpu_target_and_unknown_precisions_are_errors():
    mod, params = relay.frontend.from_onnx(onnx_models.conv_bias_relu())
    with pytest.raises(kiln.TVMError, match="CPU targets only"):
        relay.build(mod, target="cuda", params=params, precision="bf16")
    with pytest.raises(ValueError, match="precision must be one of"):
        relay.build(mod, target="llvm", params=params, precision="fp8")


@requires_bf16
def test_kiln_compile_precision_bf16(tmp_path, capsys):
    from kiln import cli

    path, out = tmp_path / "m.onnx", tmp_path / "m.kiln"
    path.write_bytes(onnx_models.conv_bias_relu(c=128, f=20).SerializeToString())
    assert cli.main(["compile", str(path), "-o", str(out), "--precision", "bf16"]) == 0
    assert "conv2d_bf16" in capsys.readouterr().out
    assert cli.main(["run", str(out), "--repeat", "1"]) == 0
