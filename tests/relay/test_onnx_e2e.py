"""End to end: small ONNX models imported, compiled by relay.build and run by the graph
executor, compared with onnxruntime."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import kiln  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor, graph_runtime  # noqa: E402

from . import models  # noqa: E402


def _input(m):
    vi = m.graph.input[0]
    shp = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    return vi.name, np.random.default_rng(1).standard_normal(shp).astype(np.float32)


def _ref(m, name, x):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {name: x})[0]


def _compile(m, opt_level=3):
    mod, params = relay.frontend.from_onnx(m)
    with relay.build_config(opt_level=opt_level):
        return relay.build(mod, target="llvm", params=params)


@pytest.mark.parametrize("builder", ["conv_bias_relu", "residual_block", "depthwise", "pooling",
                                     "gemm_classifier", "reshape_matmul_concat",
                                     "two_branches", "exported_flatten_pattern",
                                     "maxpool_relu"])
def test_matches_onnxruntime(builder):
    m = getattr(models, builder)()
    lib = _compile(m)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    name, x = _input(m)
    gm.set_input(name, x)
    gm.run()
    y = gm.get_output(0).numpy()
    ref = _ref(m, name, x)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ref).max()))


def test_fusion_and_memory_plan_summary():
    lib = _compile(models.residual_block())
    s = lib.summary
    # batch norms folded into the convs; bias, residual add and relu fused into conv kernels
    assert "4 kernels" in s  # two convs, the layout transforms in and out
    assert "conv2d_NCHWc + add + add + relu" in s
    assert "bytes planned" in s
    mod, _ = relay.frontend.from_onnx(models.residual_block())
    text = str(mod)
    assert "conv2d(" in text and "ty=Tensor[(1, 8, 9, 9), float32]" in text


def test_memory_planner_reuses_buffers():
    lib = _compile(models.pooling())
    # three intermediates, live ranges allow two storages
    assert lib.plan["storages"] and len(lib.plan["storages"]) == 2


def test_opt_level0_no_fusion_same_result():
    m = models.residual_block()
    name, x = _input(m)
    lib = _compile(m, opt_level=0)
    assert "+" not in lib.summary.split("\n", 1)[1].split("memory")[0]
    gm = graph_runtime.create(lib, None, kiln.cpu(0))
    gm.run(**{name: x})
    np.testing.assert_allclose(gm.get_output(0).numpy(), _ref(m, name, x), rtol=1e-4,
                               atol=1e-5)


def test_pass_context_alias():
    m = models.conv_bias_relu()
    mod, params = relay.frontend.from_onnx(m)
    with relay.PassContext(opt_level=3):
        lib = relay.build(mod, "llvm", params=params)
    assert "conv2d_NCHWc + add + relu" in lib.summary


def test_export_and_load_in_fresh_process(tmp_path):
    m = models.gemm_classifier()
    name, x = _input(m)
    lib = _compile(m)
    path = tmp_path / "model.tar"
    lib.export_library(path)
    np.save(tmp_path / "x.npy", x)
    code = textwrap.dedent(f"""
        import numpy as np, kiln
        from kiln import relay
        from kiln.contrib import graph_executor
        lib = relay.load_module({str(path)!r})
        gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
        gm.set_input({name!r}, np.load({str(tmp_path / 'x.npy')!r}))
        gm.run()
        np.save({str(tmp_path / 'y.npy')!r}, gm.get_output(0).numpy())
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(y, _ref(m, name, x), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("builder", ["resnet18", "mobilenet_v2"])
def test_small_networks_match_onnxruntime(builder):
    """ResNet-18 (32x32 input) and a MobileNetV2-style network (depthwise convs, 64x64)."""
    m = getattr(models, builder)()
    lib = _compile(m)
    assert ("depthwise_conv2d_NCHWc + add + clip" in lib.summary) == (builder == "mobilenet_v2")
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    name, x = _input(m)
    gm.run(**{name: x})
    ref = _ref(m, name, x)
    y = gm.get_output(0).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    planned = sum(lib.plan["storages"])
    assert "bytes planned" in lib.summary and planned > 0


def test_tvm_transform_pass_context():
    import kiln.transform

    m = models.conv_bias_relu()
    mod, params = relay.frontend.from_onnx(m)
    with kiln.transform.PassContext(opt_level=0):
        lib = relay.build(mod, "llvm", params=params)
    assert "conv2d + relu" not in lib.summary  # opt_level 0: no fusion
