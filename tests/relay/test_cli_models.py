"""kiln.relay.testing: the ONNX model builders, onnx_to_torch and the onnxruntime comparison
helpers used by ``kiln bench`` and the demo."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from kiln.relay import testing  # noqa: E402
from kiln.relay.testing import compare  # noqa: E402

SMALL = ["conv_bias_relu", "residual_block", "depthwise", "pooling", "gemm_classifier",
         "reshape_matmul_concat", "two_branches", "exported_flatten_pattern", "maxpool_relu"]


def _ort(m, name, x):
    return compare.onnxruntime_session(m, 1).run(None, {name: x})[0]


def test_same_seed_same_model_bytes():
    a = testing.resnet18(hw=32, classes=10).SerializeToString()
    assert a == testing.resnet18(hw=32, classes=10).SerializeToString()
    assert a != testing.resnet18(hw=32, classes=10, seed=1).SerializeToString()
    assert testing.depthwise().SerializeToString() == testing.depthwise().SerializeToString()


def test_networks_default_to_imagenet_shapes():
    for name in ("resnet18", "mobilenet_v2"):
        m = testing.get_model(name)
        inp, out = m.graph.input[0], m.graph.output[0]
        assert inp.name == "input" and out.name == "output"
        assert [d.dim_value for d in inp.type.tensor_type.shape.dim] == [1, 3, 224, 224]
        assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [1, 1000]
    ops = {n.op_type for n in testing.mobilenet_v2(hw=32).graph.node}
    assert {"Conv", "BatchNormalization", "Clip", "Add", "Gemm"} <= ops


def test_get_model_unknown_name():
    with pytest.raises(KeyError, match="unknown test model 'vgg'.*resnet18"):
        testing.get_model("vgg")


def test_import_without_onnx_says_what_to_install():
    code = textwrap.dedent("""
        import sys
        sys.modules["onnx"] = None          # as if onnx were not installed
        try:
            import kiln.relay.testing
        except ImportError as e:
            print("ERR", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "ERR" in out and "pip install 'kiln[onnx]'" in out


@pytest.mark.parametrize("builder", SMALL + ["resnet18", "mobilenet_v2"])
def test_onnx_to_torch_matches_onnxruntime(builder):
    torch = pytest.importorskip("torch")
    kw = {"hw": 32, "classes": 10} if builder in ("resnet18", "mobilenet_v2") else {}
    m = testing.get_model(builder, **kw)
    name, x = testing.random_input(m)
    with torch.no_grad():
        y = testing.onnx_to_torch(m)(torch.from_numpy(x)).numpy()
    ref = _ort(m, name, x)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ref).max()))


def test_onnx_to_torch_unsupported_op():
    pytest.importorskip("torch")
    from onnx import TensorProto, helper

    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in "xy"]
    g = helper.make_graph([helper.make_node("Elu", ["x"], ["y"], name="e")], "g", io[:1],
                          io[1:])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(NotImplementedError, match="'Elu'"):
        testing.onnx_to_torch(m)(__import__("torch").zeros(1, 4))


def test_against_onnxruntime_and_report():
    from kiln import relay

    m = testing.conv_bias_relu()
    name, x = testing.random_input(m)
    mod, params = relay.frontend.from_onnx(m)
    lib = relay.build(mod, "llvm", params=params)
    res = compare.against_onnxruntime(lib, m, {name: x}, threads=1, rounds=2)
    assert res["ok"] and len(res["kiln_s"]) == 2 and len(res["onnxruntime_s"]) == 2
    text = "\n".join(compare.report_lines(res, 2))
    assert "max abs diff" in text and ": ok" in text and "kiln / onnxruntime" in text


def test_differences():
    ref = np.array([1.0, -4.0], np.float32)
    d = compare.differences(ref + np.float32(0.5), ref)
    assert d == {"max_abs": 0.5, "max_rel": 0.125, "ref_max": 4.0}
    assert not compare.close(d) and compare.close(compare.differences(ref, ref))
    with pytest.raises(ValueError, match="shape"):
        compare.differences(ref[:1], ref)
