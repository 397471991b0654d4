"""The layout pass: convolutions in NCHW{b}c, layout-agnostic operators carried in it,
layout_transform only at boundaries; results checked against onnxruntime."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import kiln  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.relay.alter_layout import (  # noqa: E402
    alter_op_layout,
    channel_block,
    pack_conv_weight,
    pack_depthwise_weight,
    preferred_block,
)
from kiln.relay.op import np_layout_transform  # noqa: E402
from kiln.target import Target, host_cpu  # noqa: E402

from . import models  # noqa: E402

_rng = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def _avx512_blocks(monkeypatch):
    """The expected layouts below are those of a 64-byte-vector (AVX-512) target, whatever
    this machine's vectors (the kernels run correctly either way)."""
    monkeypatch.setenv("KILN_VECTOR_BYTES", "64")


def _w(name, *shape):
    return numpy_helper.from_array((_rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def _model(nodes, inits, inp_shape, out_shape):
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, inp_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def mixed_ops(c=3, f=24, hw=13):
    """Stem conv (3 channels in), grouped conv (stays NCHW), a per-channel multiply and a
    scalar add on a packed tensor, average and max pooling, sigmoid, global pooling."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "wg"], ["g0"], group=2, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["g0", "w1"], ["c1"], strides=[2, 2]),
        helper.make_node("Mul", ["c1", "scale"], ["m1"]),
        helper.make_node("Add", ["m1", "half"], ["a1"]),
        helper.make_node("Sigmoid", ["a1"], ["s1"]),
        helper.make_node("AveragePool", ["s1"], ["p1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["p1"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Add", ["p2", "p2"], ["d2"]),
        helper.make_node("GlobalAveragePool", ["d2"], ["y"]),
    ]
    inits = [_w("w0", f, c, 3, 3), _w("b0", f), _w("wg", f, f // 2, 3, 3), _w("w1", 40, f, 1, 1),
             _w("scale", 40, 1, 1), numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    return _model(nodes, inits, [1, c, hw, hw], [1, 40, 1, 1])


def _build(m, opt_level=3, target="llvm", **kw):
    mod, params = relay.frontend.from_onnx(m)
    with relay.build_config(opt_level=opt_level, **kw):
        return relay.build(mod, target, params=params)


def _run_and_check(m, lib):
    vi = m.graph.input[0]
    shp = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shp).astype(np.float32)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.run(**{vi.name: x})
    y = gm.get_output(0).numpy()
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {vi.name: x})[0]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref).max()))


def test_channel_block():
    assert [channel_block(c) for c in (64, 48, 24, 8, 3, 10, 36, 20, 34)] == \
        [16, 16, 8, 8, 3, 10, 4, 4, 2]
    assert [channel_block(c, 8) for c in (64, 48, 24, 8, 3, 10, 36, 20, 12)] == \
        [8, 8, 8, 8, 3, 5, 4, 4, 4]


def test_block_follows_the_target_vector_width(monkeypatch):
    """One float32 vector of the target CPU: ``-mcpu`` names it, else this machine."""
    monkeypatch.delenv("KILN_VECTOR_BYTES")
    with Target("llvm -mcpu=skylake-avx512"):
        assert preferred_block() == 16
    with Target("llvm -mcpu=haswell"):
        assert preferred_block() == 8
    assert preferred_block() == max(4, host_cpu().vector_bytes // 4)
    m = mixed_ops(f=32)
    assert "NCHW16c" in _build(m, target="llvm -mcpu=skylake-avx512").summary
    lib = _build(m, target="llvm -mcpu=haswell")
    assert "NCHW8c" in lib.summary and "NCHW16c" not in lib.summary
    if host_cpu().vector_bytes >= 32:  # an AVX2 binary runs here
        _run_and_check(m, lib)


def test_weight_packing_matches_layout_transform():
    w = _rng.standard_normal((32, 24, 3, 3)).astype(np.float32)
    p = pack_conv_weight(w, 8, 16)
    assert p.shape == (2, 3, 3, 3, 8, 16)
    assert p[1, 2, 0, 1, 5, 7] == w[1 * 16 + 7, 2 * 8 + 5, 0, 1]
    d = _rng.standard_normal((32, 1, 3, 3)).astype(np.float32)
    q = pack_depthwise_weight(d, 16)
    assert q.shape == (2, 1, 3, 3, 1, 16) and q[1, 0, 2, 1, 0, 3] == d[19, 0, 2, 1]


@pytest.mark.parametrize("src,dst", [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW16c"),
                                     ("NCHW16c", "NCHW4c"), ("NCHW4c", "NCHW")])
def test_layout_transform_kernel_matches_numpy(src, dst):
    """One kernel converts between blocks (the relay op, compiled), against numpy."""
    from kiln import te, topi

    x = _rng.standard_normal((1, 32, 5, 3)).astype(np.float32)
    xs = np_layout_transform(x, "NCHW", src)
    t = te.placeholder(xs.shape, name="t")
    out = topi.layout_transform(t, src, dst)
    f = kiln.build(topi.x86.schedule_auto([out]), [t, out], "llvm")
    res = kiln.nd.empty([int(s) for s in out.shape])
    f(kiln.nd.array(xs), res)
    np.testing.assert_array_equal(res.numpy(), np_layout_transform(xs, src, dst))
    np.testing.assert_array_equal(np_layout_transform(res.numpy(), dst, "NCHW"), x)


@pytest.mark.slow
def test_transforms_only_at_boundaries():
    """ResNet-18: one transform in (the 3-channel input to NCHW3c), one out (before
    flatten); every conv, the max pool and the global pool run packed; bias, residual add and
    relu fused into the conv kernels."""
    lib = _build(models.resnet18(hw=32))
    s = lib.summary
    assert s.count("layout_transform") == 2
    assert "NCHW3c" in s and "conv2d_NCHWc + add + add + relu" in s
    assert "max_pool2d  [complex-out-fusable]  -> [1, 4, 8, 8, 16] NCHW16c" in s
    assert "global_avg_pool2d  [opaque]  -> [1, 32, 1, 1, 16] NCHW16c" in s
    assert "conv2d +" not in s  # no NCHW convolution left


def test_graph_keeps_nchw_outputs_and_layouts_in_text():
    m = models.residual_block()
    mod, params = relay.frontend.from_onnx(m)
    g = alter_op_layout(relay.optimize(mod, params))
    assert g.outputs[0].op == "layout_transform" and g.outputs[0].shape == (1, 8, 9, 9)
    text = g.astext()
    assert "conv2d_NCHWc(" in text and "NCHW8c */" in text


def test_mixed_operators_match_onnxruntime():
    m = mixed_ops()
    lib = _build(m)
    s = lib.summary
    assert "group_conv2d" in s  # grouped convolutions stay NCHW
    assert "avg_pool2d  [opaque]  -> [1, 5, 7, 7, 8] NCHW8c" in s
    _run_and_check(m, lib)


def test_depthwise_and_odd_channels_match_onnxruntime():
    m = models.depthwise()  # 6 channels: one block of 6; 4 output channels: NCHW4c
    lib = _build(m)
    assert "depthwise_conv2d_NCHWc + add + clip" in lib.summary
    _run_and_check(m, lib)


def test_layout_pass_only_at_opt_level3_and_can_be_disabled():
    m = models.residual_block()
    assert "NCHW" not in _build(m, opt_level=2).summary
    assert "NCHW" not in _build(m, disabled_pass=["AlterOpLayout"]).summary


def test_float64_graph_keeps_its_dtype():
    from kiln.relay.graph import Graph, Module, call, const, input_node

    from ..topi import ref

    x = input_node("x", (1, 16, 6, 6), "float64")
    w = const(_rng.standard_normal((32, 16, 3, 3)), "w")
    y = call("relu", [call("conv2d", [x, w], strides=(1, 1), padding=(1, 1, 1, 1),
                           dilation=(1, 1), groups=1)])
    lib = relay.build(Module(Graph([x], [y])), "llvm")
    assert "conv2d_NCHWc + relu" in lib.summary
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    xv = _rng.standard_normal((1, 16, 6, 6))
    gm.run(x=xv)
    out = gm.get_output(0).numpy()
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, np.maximum(ref.conv2d_nchw(xv, w.value, 1, 1, 1), 0),
                               rtol=1e-12, atol=1e-12)


def test_block_to_block_conversion_is_one_transform():
    """A tensor packed in one block and needed in another gets a single
    NCHW{a}c -> NCHW{b}c layout_transform (cached: asked twice, made once)."""
    from kiln.relay.alter_layout import _Packer
    from kiln.relay.graph import call, input_node

    x = input_node("x", (1, 32, 4, 4))
    p = _Packer()
    p.put(x, x, 0)
    packed = p.get(x, 8)
    assert packed.op == "layout_transform" and packed.shape == (1, 4, 4, 4, 8)
    relu = call("relu", [x])
    p.put(relu, call("relu", [packed]), 8)
    t = p.get(relu, 16)
    assert (t.attrs["src_layout"], t.attrs["dst_layout"]) == ("NCHW8c", "NCHW16c")
    assert t.shape == (1, 2, 4, 4, 16) and t.layout == "NCHW16c" and p.get(relu, 16) is t


def concat_model(ca=16, cb=8, hw=6):
    """Two convs (ca and cb output channels) concatenated on channels, then a conv, and a
    concatenation with the graph input (3 channels: not packable -> NCHW)."""
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "wb"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
             helper.make_node("Relu", ["ab"], ["r"]),
             helper.make_node("Conv", ["r", "wc"], ["c"]),
             helper.make_node("Concat", ["c", "x"], ["y"], axis=-3)]
    inits = [_w("wa", ca, 3, 3, 3), _w("wb", cb, 3, 3, 3), _w("wc", 8, ca + cb, 1, 1)]
    return _model(nodes, inits, [1, 3, hw, hw], [1, 11, hw, hw])


def test_channel_concat_in_nchwc():
    m = concat_model()
    lib = _build(m)
    s = lib.summary
    # 16 + 8 channels concatenated in the 8-block: the 16-block input's conversion, the
    # concatenation and the relu are one kernel
    assert "layout_transform + concatenate + relu  [injective]  -> [1, 3, 6, 6, 8] NCHW8c" in s
    # in: x to NCHW3c; out: c back to NCHW for the concatenation with x
    assert s.count("layout_transform") == 3
    _run_and_check(m, lib)


def se_block(c=16, hw=6):
    """Squeeze-and-excitation: the [1, C, 1, 1] gate multiplies the packed feature map."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["r0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["r0"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Conv", ["g", "w1"], ["g1"]),
             helper.make_node("Sigmoid", ["g1"], ["s"]),
             helper.make_node("Mul", ["r", "s"], ["y"])]
    return _model(nodes, [_w("w0", c, 3, 3, 3), _w("w1", c, c, 1, 1)], [1, 3, hw, hw],
                  [1, c, hw, hw])


def test_squeeze_excitation_gate_stays_packed():
    m = se_block()
    lib = _build(m)
    assert lib.summary.count("layout_transform") == 2  # only in and out
    assert "sigmoid + multiply  [complex-out-fusable]  -> [1, 1, 6, 6, 16] NCHW16c" in lib.summary
    _run_and_check(m, lib)


def _conv3x3(batch, c=16, hw=7):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    return _model(nodes, [_w("w", c, c, 3, 3), _w("b", c)], [batch, c, hw, hw],
                  [batch, c, hw, hw])


@pytest.mark.parametrize("batch,op", [(1, "conv2d_NCHWc"), (4, "conv2d_NCHWc"),
                                      (8, "conv2d_winograd_NCHWc")])
def test_winograd_where_the_batch_pays(batch, op):
    """A 7x7 map takes Winograd only from ``topi.nn.winograd.BATCH_TILES`` F(2x2) tiles of the
    whole batch (8 x 16 here; 4 x 16 is too few), the batch folded into its tiles."""
    m = _conv3x3(batch)
    mod, params = relay.frontend.from_onnx(m)
    ops = {n.op for n in alter_op_layout(relay.optimize(mod, params)).nodes}
    assert op in ops and ({"conv2d_NCHWc", "conv2d_winograd_NCHWc"} - {op}).isdisjoint(ops)
    if batch == 8:
        _run_and_check(m, _build(m))

