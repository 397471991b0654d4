"""bf16 activations kept in the blocked layout between bf16 convolutions
(``relay/bf16_layout.py``): a small ResNet compiled with ``precision="bf16"`` has
``layout_transform`` only at its ends (the input into the stem's block, the pooled
features out to the classifier's flatten), each direct bf16 convolution writes
``NCHW16c`` and reads its producer's layout, and the whole network agrees with float32
(onnxruntime) within the tolerance of tests/relay/test_bf16.py
(``max |y_bf16 - y_fp32| <= 2e-2 * max |y_fp32|``, the same top-1), on the AMX and the
AVX-512 BF16 micro-kernels (targets pinned)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay import alter_layout, build_module
from kiln.relay.mixed_precision import precision_context
from kiln.target import Target, current_cpu
from kiln.topi.x86.bf16 import is_direct

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from kiln.relay.testing import onnx_models  # noqa: E402

TARGETS = {"amx": "llvm -mcpu=sapphirerapids", "avx512": "llvm -mcpu=cooperlake"}


def _small_resnet():
    model = onnx_models.resnet18(hw=32, classes=10)
    return model, *relay.frontend.from_onnx(model)


def _optimized(mod, params, target: str):
    with precision_context("bf16"):
        return build_module.optimize_and_fuse(mod, params, Target(target))[0]


def _direct(n) -> bool:
    a = n.attrs
    return is_direct((a["channels"], *_channels(n.inputs[0]), *a["kernel_size"]),
                     a["strides"])


def _channels(x) -> tuple[int]:
    return (x.shape[1] * x.shape[4],) if len(x.shape) == 5 else (x.shape[1],)


@pytest.mark.parametrize("kind", TARGETS)
def test_residual_block_keeps_bf16_activations_blocked(kind):
    """conv -> relu -> conv -> residual add -> relu, both convolutions direct bf16: the
    first reads the NCHW input (through its packing copy) and writes ``NCHW16c``, its
    relu and ``bf16_round`` stay blocked, the second reads them as they are, the add and
    relu run blocked: ``layout_transform`` only at the chain's ends, the graph input into
    the add's block and the output back to NCHW."""
    model = onnx_models.residual_block(c=128, hw=5)
    mod, params = relay.frontend.from_onnx(model)
    g = _optimized(mod, params, TARGETS[kind])
    transforms = [n for n in g.nodes if n.op == "layout_transform"]
    assert [(n.attrs["src_layout"], n.attrs["dst_layout"]) for n in transforms] == \
        [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW")]
    first, second = [n for n in g.nodes if n.op == "conv2d_bf16"]
    assert len(first.inputs[0].shape) == 4 and first.shape == (1, 8, 5, 5, 16)
    assert second.inputs[0].op == "bf16_round" and second.inputs[0].shape == (1, 8, 5, 5, 16)
    assert second.inputs[0].dtype == "uint16" and second.attrs["out_layout"] == "NCHW16c"


@pytest.mark.slow
def test_small_resnet_transforms_layouts_only_at_its_ends(monkeypatch):
    _, mod, params = _small_resnet()
    g = _optimized(mod, params, TARGETS["amx"])
    transforms = [n for n in g.nodes if n.op == "layout_transform"]
    # the stem reads the NCHW input itself: one transform, the pooled features out
    assert [(n.attrs["src_layout"], n.attrs["dst_layout"]) for n in transforms] == \
        [("NCHW16c", "NCHW")]
    direct = [n for n in g.nodes if n.op == "conv2d_bf16" and _direct(n)]
    # every layer: 3x3, strided and 1x1 (MIN_DIRECT_REDUCTION), the stem's columns folded
    assert len(direct) == 20 and {n.attrs["strides"] for n in direct} == {(1, 1), (2, 2)}
    assert all(len(n.shape) == 5 for n in direct)
    # all but the stem read their producer's blocked output, bf16 where only convolutions
    # read it
    assert [len(n.inputs[0].shape) for n in direct] == [4] + [5] * 19
    assert sum(n.inputs[0].dtype == "uint16" for n in direct) == 14
    monkeypatch.setattr(alter_layout, "BF16_RULES", {})  # without the rules: all NCHW
    g = _optimized(mod, params, TARGETS["amx"])
    assert all(len(n.shape) == 4 for n in g.nodes if n.op == "conv2d_bf16")


@pytest.mark.slow  # the AMX micro-kernel; both micro-kernels in blocked layouts: tests/topi
# (the host target's bf16 build of this model is the same one: no second test of it)
@pytest.mark.parametrize("kind", ["amx"])
def test_small_resnet_blocked_bf16_agrees_with_fp32(kind):
    target = TARGETS[kind]
    if not Target(target).cpu.features <= current_cpu().features:
        pytest.skip(f"this CPU cannot run {target}'s instructions")
    model, mod, params = _small_resnet()
    lib = relay.build(mod, target=target, params=params, precision="bf16")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    for seed in range(4):
        name, x = onnx_models.random_input(model, seed=seed)
        gm.set_input(name, x)
        gm.run()
        y, ref = gm.get_output(0).numpy(), sess.run(None, {name: x})[0]
        assert float(np.abs(y - ref).max()) <= 2e-2 * float(np.abs(ref).max())
        assert np.array_equal(y.argmax(1), ref.argmax(1))
