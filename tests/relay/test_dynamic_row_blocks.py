"""Row blocks of a symbolic batch take the kernels a build for their size takes
(docs/dynamic.md, "Whole models"): a 3x3 convolution on small maps, where Winograd pays
only for several images, is Winograd's in a block of 8 images and the direct convolution
for one; each block's kernel has its own arguments in the plan."""

import copy

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import kiln  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.relay import testing  # noqa: E402
from kiln.relay.alter_layout import (  # noqa: E402
    alter_op_layout,
    pack_conv_weight,
    packed_to_winograd,
    packed_winograd_tile,
    unpack_conv_weight,
)
from kiln.topi.nn.winograd import winograd_weight_transform  # noqa: E402


def _dynamic_batch(m):
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "batch"
    return m


def _model():
    """A 3x3 convolution of 32 channels on 16x16 maps over a symbolic batch (rows of 8192
    elements: single images, or blocks of 8 where that pays): Winograd pays from 2 images
    on (64 tiles each), not for one."""
    return _dynamic_batch(testing.conv_bias_relu(c=4, f=32, hw=16))


def test_unpack_conv_weight_inverts_pack():
    w = np.random.default_rng(0).standard_normal((32, 8, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(unpack_conv_weight(pack_conv_weight(w, 4, 16)), w)


def test_packed_conv_becomes_winograd_for_a_block_of_images():
    mod, params = relay.frontend.from_onnx(_model())
    conv = next(n for n in alter_op_layout(relay.optimize(mod, params)).nodes
                if n.op == "conv2d_NCHWc")  # one image: the direct convolution
    assert packed_winograd_tile(conv, 1) is None
    assert packed_winograd_tile(conv, 8) == 2
    y = packed_to_winograd(conv, 2)
    assert y.op == "conv2d_winograd_NCHWc" and y.inputs[0] is conv.inputs[0]
    assert y.shape == conv.shape and y.layout == conv.layout
    w = unpack_conv_weight(conv.inputs[1].value)
    np.testing.assert_array_equal(y.inputs[1].value,
                                  winograd_weight_transform(w, m=2, ob=conv.shape[4]))


@pytest.mark.slow  # a Winograd build (3 s)
def test_winograd_block_and_single_images_at_every_batch():
    m = _model()
    mod, params = relay.frontend.from_onnx(m)
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    conv = next(st["rows"] for st in lib.plan["steps"] if "conv" in st["func"])
    (r8, _, args8), (r1, _, args1) = conv["kernels"]
    assert (r8, r1) == (8, 1)
    assert args8[1] != args1[1]  # the block of 8 reads the Winograd-transformed weights
    assert lib.plan["tensors"][args8[1]]["shape"][:2] == [4, 4]  # [m+2, m+2, O/ob, I, ob]
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    for b in (1, 2, 7, 16, 9, 0):
        x = np.random.default_rng(b).standard_normal((b, 4, 16, 16)).astype(np.float32)
        gm.set_input("x", x)
        gm.run()
        np.testing.assert_allclose(gm.get_output(0).numpy(), sess.run(None, {"x": x})[0],
                                   rtol=1e-4, atol=1e-4)
    # a plan whose row kernels share their step's arguments (no arguments of their own)
    plan = copy.deepcopy(lib.plan)
    for st in plan["steps"]:
        if "rows" in st and "conv" not in st["func"]:
            st["rows"]["kernels"] = [k[:2] for k in st["rows"]["kernels"]]
    gm = graph_executor.GraphModule(type(lib)(plan, lib.lib, lib.consts))
    gm.set_input("x", x)
    gm.run()
    np.testing.assert_allclose(gm.get_output(0).numpy(), sess.run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)
