"""ONNX models built with ``onnx.helper``, weights from a seeded numpy generator.

Every builder returns a checked ``onnx.ModelProto`` (opset 13) with one float32 input and one
output, and takes a ``seed``: the same arguments give the same model, byte for byte.

* :func:`resnet18`, :func:`resnet50` and :func:`mobilenet_v2`: the convolutional networks
  (ImageNet shapes by default: 224x224 input, 1000 classes), input ``"input"``, output
  ``"output"``;
* small models exercising one feature each (input ``"x"``, output ``"y"``): a conv with
  bias and relu, a residual block with batch norms, a depthwise block, pooling, a classifier
  head, reshape/matmul/concat, two branches, the exporters' flatten pattern, max pool + relu,
  a transformer's MLP block, an inception block (parallel branches).

A dimension given as a string (``resnet18(batch="batch")``, ``mlp_block(seq="seq")``) is
symbolic in the model (its ``dim_param``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


def _w(rng, name, *shape, scale=0.2):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                   name)


def _scalar(name, value):
    return numpy_helper.from_array(np.array(value, np.float32), name)


def _model(nodes, inits, inp_shape, out_shape, inp="x", out="y", name="g", opset=OPSET,
           inp_type=TensorProto.FLOAT):
    g = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info(inp, inp_type, inp_shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="kiln.relay.testing")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def random_input(model, seed: int = 1) -> tuple[str, np.ndarray]:
    """``(name, array)``: a standard-normal array for the model's (first, fixed-shape) input;
    for an integer input (token ids), integers in ``[0, vocab_size)`` of the model's
    ``vocab_size`` metadata property (2 without one)."""
    vi = model.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        props = {p.key: p.value for p in model.metadata_props}
        return vi.name, rng.integers(0, int(props.get("vocab_size", 2)), shape).astype(dtype)
    return vi.name, rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------
# small models, one feature each
# ---------------------------------------------------------------------------------------


def conv_bias_relu(c=3, f=8, hw=10, seed=0):
    """3x3 conv (pad 1) with bias, then relu."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv0", pads=[1, 1, 1, 1],
                              strides=[1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu0")]
    return _model(nodes, [_w(rng, "w", f, c, 3, 3), _w(rng, "b", f)], [1, c, hw, hw],
                  [1, f, hw, hw])


def _bn(rng, prefix, c, x, y):
    inits = [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(c)).astype(np.float32),
                                     f"{prefix}_g"),
             _w(rng, f"{prefix}_b", c, scale=0.1), _w(rng, f"{prefix}_m", c, scale=0.1),
             numpy_helper.from_array((0.5 + rng.random(c)).astype(np.float32), f"{prefix}_v")]
    node = helper.make_node("BatchNormalization", [x, f"{prefix}_g", f"{prefix}_b",
                                                   f"{prefix}_m", f"{prefix}_v"], [y],
                            name=f"{prefix}", epsilon=1e-5)
    return node, inits


def residual_block(c=8, hw=9, seed=0):
    """conv-bn-relu-conv-bn, plus the input, relu: a ResNet basic block."""
    rng = np.random.default_rng(seed)
    w1, w2 = _w(rng, "w1", c, c, 3, 3), _w(rng, "w2", c, c, 3, 3)
    n1, i1 = _bn(rng, "bn1", c, "c1", "b1")
    n2, i2 = _bn(rng, "bn2", c, "c2", "b2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]), n1,
             helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]), n2,
             helper.make_node("Add", ["b2", "x"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu2")]
    return _model(nodes, [w1, w2] + i1 + i2, [1, c, hw, hw], [1, c, hw, hw])


def depthwise(c=6, hw=11, seed=0):
    """Depthwise 3x3 stride-2 conv with bias, relu6 (Clip), pointwise conv."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "dw", "db"], ["d"], name="dw", group=c,
                              pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["r"], name="relu6"),
             helper.make_node("Conv", ["r", "pw"], ["y"], name="pw")]
    inits = [_w(rng, "dw", c, 1, 3, 3), _w(rng, "db", c), _scalar("lo", 0), _scalar("hi", 6),
             _w(rng, "pw", 4, c, 1, 1)]
    out = (hw + 2 - 3) // 2 + 1
    return _model(nodes, inits, [1, c, hw, hw], [1, 4, out, out])


def pooling(c=4, hw=12):
    """Max pool, average pool, sigmoid, global average pool (no weights)."""
    nodes = [helper.make_node("MaxPool", ["x"], ["m"], name="mp", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["m"], ["a"], name="ap", kernel_shape=[2, 2],
                              strides=[1, 1]),
             helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),
             helper.make_node("GlobalAveragePool", ["s"], ["y"], name="gap")]
    return _model(nodes, [], [1, c, hw, hw], [1, c, 1, 1])


def gemm_classifier(c=4, hw=6, classes=10, seed=0):
    """conv, relu, global pool, flatten, Gemm, softmax."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["z"], name="fc", transB=1),
             helper.make_node("Softmax", ["z"], ["y"], name="softmax", axis=1)]
    inits = [_w(rng, "w", 16, c, 3, 3), _w(rng, "fc_w", classes, 16), _w(rng, "fc_b", classes)]
    return _model(nodes, inits, [1, c, hw, hw], [1, classes])


def reshape_matmul_concat(seed=0):
    """Reshape by a constant shape, MatMul, Mul, Identity, Concat."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Reshape", ["x", "shp"], ["r"], name="reshape"),
             helper.make_node("MatMul", ["r", "m"], ["mm"], name="matmul"),
             helper.make_node("Mul", ["mm", "k"], ["mk"], name="mul"),
             helper.make_node("Identity", ["mk"], ["i"], name="id"),
             helper.make_node("Concat", ["i", "mm"], ["y"], name="concat", axis=1)]
    inits = [numpy_helper.from_array(np.array([2, 12], np.int64), "shp"), _w(rng, "m", 12, 5),
             numpy_helper.from_array(np.float32(0.5) * np.ones(5, np.float32), "k")]
    return _model(nodes, inits, [2, 3, 4], [2, 10])


def two_branches(c=4, hw=8, seed=0):
    """conv_a(x) -> relu and conv_b(x) summed: the add joins a group created before the
    group of its other input (tests the kernel order)."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"], name="relu_a"),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b"),
             helper.make_node("Add", ["ar", "b"], ["y"], name="add")]
    return _model(nodes, [_w(rng, "wa", 6, c, 3, 3), _w(rng, "wb", 6, c, 1, 1)],
                  [1, c, hw, hw], [1, 6, hw, hw])


def exported_flatten_pattern(c=4, hw=5):
    """The shape computation exporters emit for ``x.view(x.size(0), -1)`` (opset 13), with
    Dropout, Tanh and LeakyRelu around it."""
    nodes = [helper.make_node("LeakyRelu", ["x"], ["l"], name="leaky", alpha=0.1),
             helper.make_node("Shape", ["l"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["nu"], name="unsq"),
             helper.make_node("Concat", ["nu", "minus1"], ["shp"], name="cat", axis=0),
             helper.make_node("Reshape", ["l", "shp"], ["r"], name="view"),
             helper.make_node("Dropout", ["r"], ["d"], name="drop"),
             helper.make_node("Tanh", ["d"], ["y"], name="tanh")]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    return _model(nodes, inits, [2, c, hw, hw], [2, c * hw * hw])


def maxpool_relu(c=8, hw=12):
    """3x3 stride-2 max pool, then relu."""
    nodes = [helper.make_node("MaxPool", ["x"], ["m"], name="mp", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    out = (hw + 2 - 3) // 2 + 1
    return _model(nodes, [], [1, c, hw, hw], [1, c, out, out])


def mlp_block(seq=16, d=64, hidden=256, seed=0):
    """A transformer's MLP block on ``[seq, d]`` tokens: ``x + relu(x W1 + b1) W2 + b2``
    (MatMul, Add, Relu); ``seq`` may be a name (a symbolic sequence length)."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
             helper.make_node("Relu", ["hb"], ["a"], name="act"),
             helper.make_node("MatMul", ["a", "w2"], ["o"], name="fc2"),
             helper.make_node("Add", ["o", "b2"], ["ob"], name="fc2_bias"),
             helper.make_node("Add", ["ob", "x"], ["y"], name="residual")]
    inits = [_w(rng, "w1", d, hidden, scale=d ** -0.5), _w(rng, "b1", hidden),
             _w(rng, "w2", hidden, d, scale=hidden ** -0.5), _w(rng, "b2", d)]
    return _model(nodes, inits, [seq, d], [seq, d])


def attention_block(seq=16, d=64, seed=0):
    """A transformer's single-head self-attention block on ``[seq, d]`` tokens:
    ``x + softmax((x Wq)(x Wk)^T / sqrt(d)) (x Wv) Wo``; ``seq`` may be a name (a symbolic
    sequence length), and then both products of the attention have symbolic operands."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"], name="query"),
             helper.make_node("MatMul", ["x", "wk"], ["k"], name="key"),
             helper.make_node("MatMul", ["x", "wv"], ["v"], name="value"),
             helper.make_node("Transpose", ["k"], ["kt"], name="key_t", perm=[1, 0]),
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
             helper.make_node("Div", ["s", "scale"], ["ss"], name="scaled"),
             helper.make_node("Softmax", ["ss"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["c"], name="context"),
             helper.make_node("MatMul", ["c", "wo"], ["o"], name="out"),
             helper.make_node("Add", ["o", "x"], ["y"], name="residual")]
    inits = [_w(rng, w, d, d, scale=d ** -0.5) for w in ("wq", "wk", "wv", "wo")]
    return _model(nodes, inits + [_scalar("scale", np.sqrt(d))], [seq, d], [seq, d])


def inception_block(c=32, hw=8, seed=0):
    """A GoogLeNet inception block: four branches from ``x`` — 1x1 conv; 1x1 then 3x3 conv;
    1x1 then 5x5 conv; 3x3 max pool (stride 1) then 1x1 conv — each conv with bias and relu,
    concatenated on the channels (``[1, c, hw, hw]`` -> ``[1, 2c + c // 2 + c // 2, hw, hw]``)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv_relu(x, name, cin, cout, k):
        inits.extend([_w(rng, f"{name}_w", cout, cin, k, k), _w(rng, f"{name}_b", cout)])
        nodes.extend([helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_c"],
                                       name=name, pads=[k // 2] * 4),
                      helper.make_node("Relu", [f"{name}_c"], [name], name=f"{name}_relu")])
        return name

    b1 = conv_relu("x", "b1", c, c // 2, 1)
    b2 = conv_relu(conv_relu("x", "b2a", c, c // 2, 1), "b2", c // 2, c, 3)
    b3 = conv_relu(conv_relu("x", "b3a", c, c // 4, 1), "b3", c // 4, c // 2, 5)
    nodes.append(helper.make_node("MaxPool", ["x"], ["pool"], name="pool",
                                  kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]))
    b4 = conv_relu("pool", "b4", c, c // 2, 1)
    nodes.append(helper.make_node("Concat", [b1, b2, b3, b4], ["y"], name="concat", axis=1))
    return _model(nodes, inits, [1, c, hw, hw], [1, c // 2 + c + c // 2 + c // 2, hw, hw])


# ---------------------------------------------------------------------------------------
# networks
# ---------------------------------------------------------------------------------------


class _Net:
    """A small ONNX graph builder for ResNet / MobileNetV2-style networks: He-initialised
    conv weights, batch norms with random statistics, a global-pool + Gemm head."""

    def __init__(self, seed: int) -> None:
        self.nodes: list = []
        self.inits: list = []
        self.k = 0
        self.rng = np.random.default_rng(seed)

    def _name(self, p):
        self.k += 1
        return f"{p}{self.k}"

    def conv(self, x, cin, cout, k, s, p, g=1):
        w, y = self._name("w"), self._name("conv")
        std = np.sqrt(2.0 / (cin // g * k * k))
        self.inits.append(numpy_helper.from_array(
            (self.rng.standard_normal((cout, cin // g, k, k)) * std).astype(np.float32), w))
        self.nodes.append(helper.make_node("Conv", [x, w], [y], name=y, pads=[p] * 4,
                                           strides=[s, s], group=g, kernel_shape=[k, k]))
        return y

    def bn(self, x, c):
        p, y = self._name("bn"), self._name("bn_out")
        r = self.rng
        self.inits += [numpy_helper.from_array(v.astype(np.float32), p + s) for v, s in (
            (1 + 0.1 * r.standard_normal(c), "_g"), (0.1 * r.standard_normal(c), "_b"),
            (0.1 * r.standard_normal(c), "_m"), (0.5 + r.random(c), "_v"))]
        self.nodes.append(helper.make_node("BatchNormalization",
                                           [x, p + "_g", p + "_b", p + "_m", p + "_v"], [y],
                                           name=p, epsilon=1e-5))
        return y

    def op(self, kind, *xs, **attrs):
        y = self._name(kind.lower())
        self.nodes.append(helper.make_node(kind, list(xs), [y], name=y, **attrs))
        return y

    def head(self, x, c, classes, out):
        f = self.op("Flatten", self.op("GlobalAveragePool", x))
        self.inits += [_w(self.rng, "fc_w", classes, c, scale=0.05),
                       _w(self.rng, "fc_b", classes, scale=0.05)]
        self.nodes.append(helper.make_node("Gemm", [f, "fc_w", "fc_b"], [out], name="fc",
                                           transB=1))

    def model(self, batch, hw, classes, name):
        return _model(self.nodes, self.inits, [batch, 3, hw, hw], [batch, classes],
                      inp="input", out="output", name=name)


def resnet18(hw: int = 224, batch: int = 1, classes: int = 1000, seed: int = 0):
    """ResNet-18, input ``[batch, 3, hw, hw]``, output ``[batch, classes]``.

    v1: conv 7x7/2, max pool, 4 stages of 2 basic blocks, 64-512 channels,
    global pool, fully connected."""
    n = _Net(seed)
    x = n.op("Relu", n.bn(n.conv("input", 3, 64, 7, 2, 3), 64))
    x = n.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, s in [(64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                    (512, 1)]:
        h = n.op("Relu", n.bn(n.conv(x, cin, cout, 3, s, 1), cout))
        h = n.bn(n.conv(h, cout, cout, 3, 1, 1), cout)
        sc = x if (s == 1 and cin == cout) else n.bn(n.conv(x, cin, cout, 1, s, 0), cout)
        x, cin = n.op("Relu", n.op("Add", h, sc)), cout
    n.head(x, 512, classes, "output")
    return n.model(batch, hw, classes, "resnet18")


def resnet50(hw: int = 224, batch: int = 1, classes: int = 1000, seed: int = 0):
    """ResNet-50, input ``[batch, 3, hw, hw]``, output ``[batch, classes]``.

    v1.5 (torchvision's): conv 7x7/2, max pool, 4 stages of 3, 4, 6, 3 bottleneck blocks
    (1x1 reduce, 3x3 with the stage's stride, 1x1 expand by 4; a 1x1 projection shortcut at
    each stage's first block), 256-2048 channels, global pool, fully connected."""
    n = _Net(seed)
    x = n.op("Relu", n.bn(n.conv("input", 3, 64, 7, 2, 3), 64))
    x = n.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        cout = 4 * width
        for b in range(blocks):
            s = stride if b == 0 else 1
            h = n.op("Relu", n.bn(n.conv(x, cin, width, 1, 1, 0), width))
            h = n.op("Relu", n.bn(n.conv(h, width, width, 3, s, 1), width))
            h = n.bn(n.conv(h, width, cout, 1, 1, 0), cout)
            sc = x if b > 0 else n.bn(n.conv(x, cin, cout, 1, s, 0), cout)
            x, cin = n.op("Relu", n.op("Add", h, sc)), cout
    n.head(x, 2048, classes, "output")
    return n.model(batch, hw, classes, "resnet50")


def mobilenet_v2(hw: int = 224, width: float = 1.0, batch: int = 1, classes: int = 1000,
                 seed: int = 0):
    """MobileNetV2, input ``[batch, 3, hw, hw]``, output ``[batch, classes]``.

    A stride-2 3x3 stem, 17 inverted-residual blocks (1x1 expand, 3x3
    depthwise, 1x1 project; residual add where shapes allow; relu6 as Clip(0, 6)), a 1x1 conv
    to 1280 channels, global pool, fully connected. ``width`` scales the block channels
    (rounded down to multiples of 8, at least 8)."""
    n = _Net(seed)
    n.inits += [_scalar("zero", 0), _scalar("six", 6)]

    def relu6(v):
        return n.op("Clip", v, "zero", "six")

    def ch(c):
        return max(8, int(c * width) // 8 * 8)

    cin = ch(32)
    x = relu6(n.bn(n.conv("input", 3, cin, 3, 2, 1), cin))
    for t, c, reps, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                          (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        c = ch(c)
        for i in range(reps):
            st, hid, h = (s if i == 0 else 1), cin * t, x
            if t != 1:
                h = relu6(n.bn(n.conv(h, cin, hid, 1, 1, 0), hid))
            h = relu6(n.bn(n.conv(h, hid, hid, 3, st, 1, g=hid), hid))
            h = n.bn(n.conv(h, hid, c, 1, 1, 0), c)
            x, cin = (n.op("Add", h, x) if (st == 1 and cin == c) else h), c
    x = relu6(n.bn(n.conv(x, cin, 1280, 1, 1, 0), 1280))
    n.head(x, 1280, classes, "output")
    return n.model(batch, hw, classes, "mobilenet_v2")
