"""The layout pass (TVM's AlterOpLayout for x86): convolutions in the packed ``NCHW{b}c``
layout, layout-agnostic operators carried in it, ``layout_transform`` only at boundaries.

What the pass guarantees:

* every float32 3x3 stride-1 ``conv2d`` where ``topi.nn.winograd_tile`` says Winograd
  pays (a constant batch counts: its images share the tiles' batched product; a symbolic
  one counts as one image, the row block of its kernels)
  becomes ``conv2d_winograd_NCHWc`` (its weights transformed here, at compile time, to
  ``[m+2, m+2, O/ob, I, ob]``; ``WINOGRAD = False`` turns this off);
* every other ``conv2d`` with constant weights and ``groups == 1`` becomes ``conv2d_NCHWc``, and
  every depthwise ``conv2d`` (channel multiplier 1) ``depthwise_conv2d_NCHWc``; their weights
  are packed here, at compile time (``OIHW`` -> ``OIHW{ib}i{ob}o``, depthwise
  ``[C, 1, KH, KW]`` -> ``[C/b, 1, KH, KW, 1, b]``); a conv bias becomes an ``add`` of a
  packed ``[C/b, 1, 1, b]`` constant (fused into the conv's kernel);
* a tensor of ``C`` channels is packed by :func:`channel_block` ``(C)``: the preferred block
  ``B`` (one SIMD register of float32 of the target CPU: 16 with AVX-512, 8 with AVX2) when
  it divides, else the largest power-of-two divisor ≥ 4, else ``C`` itself when ``C ≤ B``,
  else the largest divisor ≤ B. A convolution reads its input in whatever block its
  producer wrote (the input block is only a split of the reduction), so consecutive
  convolutions need no transform; the 3-channel stem reads ``NCHW3c`` (one block of the 3
  channels, no padding);
* elementwise / broadcast operators (relu, clip, sigmoid, tanh, leaky relu, add, subtract,
  multiply, divide, bias add), max / average pooling and global average pooling run in the
  layout of their blocked input; a per-channel constant operand ``[C, 1, 1]`` is packed to
  ``[C/b, 1, 1, b]``, a scalar one kept; a second tensor operand of the same channels
  (full size, or broadcast over N/H/W like a squeeze-and-excitation gate ``[N, C, 1, 1]``)
  in another layout gets a ``layout_transform`` (``NCHW{a}c -> NCHW{b}c`` is one kernel);
  a channel concatenation of packed tensors concatenates the chunk axis in the largest of
  the inputs' blocks that divides every input's channels;
* every float32 ``dense`` with a constant 2-D weight ``[N, K]`` becomes ``dense_pack``
  (``topi.x86.dense_pack``): its weight packed here, at compile time, to
  ``[ceil(N/nb), K, nb]`` (``nb``: four or two SIMD registers of float32 of the target
  CPU, ``topi.x86.packed_dense.dense_pack_block``; the last panel padded with zeros), once per
  weight constant however many dense layers share it; except a dense over a constant
  number of rows below one register block (``dense_pack_rows``, a classifier's single
  row), which keeps ``dense`` (its schedule splits the reduction across vector lanes:
  more independent FMA chains than a block of a few rows has);
* int8 convolutions and the 8-bit operators between them keep their activations blocked
  (the rules of :mod:`.qnn_layout`), and so do bf16 convolutions (:mod:`.bf16_layout`);
* any other operator (flatten, reshape, softmax, grouped convolutions ...) and every
  graph output read ``NCHW``: a ``layout_transform`` back is inserted once per tensor.

Results are unchanged up to float rounding (only the order of the reduction over input
channels changes) for finite inputs; the packed convolutions pad branch-free
(``topi.nn.pad_masked``), so an ``inf``/``nan`` on a feature map's edge gives ``nan``
instead of ``inf`` in the outputs whose window reads it.
"""

from __future__ import annotations

import numpy as np

from kiln.target import current_cpu
from kiln.topi.nn.winograd import winograd_tile, winograd_weight_transform
from kiln.topi.x86.packed_dense import dense_pack_block, dense_pack_rows, pack_dense_weight

from .bf16_layout import BF16_RULES
from .const_memo import memo_transform
from .graph import Graph, Node, call, const
from .op import np_layout_transform
from .qnn_layout import QNN_RULES

#: operators computed element by element (any layout works)
UNARY = {"relu", "clip", "sigmoid", "tanh", "leaky_relu"}
#: binary operators with numpy broadcasting
BINARY = {"add", "subtract", "multiply", "divide"}
POOLS = {"max_pool2d", "avg_pool2d", "global_avg_pool2d"}

#: the preferred channel block; None: one SIMD register of float32 of the CPU the graph is
#: built for (16 with AVX-512, 8 with AVX2, 4 otherwise; ``kiln.target.current_cpu``)
BLOCK: int | None = None


def preferred_block() -> int:
    """The channel block the packed kernels are built around: one vector of float32."""
    if BLOCK:
        return BLOCK
    return max(4, current_cpu().vector_lanes(4))  # 4: the bytes of a float32


def channel_block(c: int, block: int | None = None) -> int:
    """The channel block of a tensor with ``c`` channels (``block``: the preferred one,
    default :func:`preferred_block`)."""
    block = block or preferred_block()
    if c % block == 0:
        return block
    b = block // 2
    while b >= 4:
        if c % b == 0:
            return b
        b //= 2
    if c <= block:
        return c
    return max(d for d in range(1, block + 1) if c % d == 0)


def layout_name(block: int) -> str:
    return f"NCHW{block}c" if block else "NCHW"


def pack_conv_weight(w: np.ndarray, ib: int, ob: int) -> np.ndarray:
    """``OIHW`` -> ``[O/ob, I/ib, KH, KW, ib, ob]``."""
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(
        w.reshape(o // ob, ob, i // ib, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def unpack_conv_weight(wp: np.ndarray) -> np.ndarray:
    """``[O/ob, I/ib, KH, KW, ib, ob]`` -> ``OIHW``: the inverse of :func:`pack_conv_weight`."""
    oo, io, kh, kw, ib, ob = wp.shape
    return np.ascontiguousarray(wp.transpose(0, 5, 1, 4, 2, 3).reshape(oo * ob, io * ib, kh, kw))


def pack_depthwise_weight(w: np.ndarray, b: int) -> np.ndarray:
    """``[C, 1, KH, KW]`` -> ``[C/b, 1, KH, KW, 1, b]``."""
    c, _, kh, kw = w.shape
    return np.ascontiguousarray(
        w.reshape(c // b, b, 1, kh, kw).transpose(0, 2, 3, 4, 1)[:, :, :, :, None, :])


def pack_channel_const(v: np.ndarray, c: int, b: int) -> np.ndarray | None:
    """A per-channel constant (``[C]``, ``[C,1,1]``, ``[1,C,1,1]``) packed to
    ``[C/b, 1, 1, b]``; a scalar-like one (size 1) as ``[1]``; None when it is neither."""
    if v.size == 1:
        return v.reshape(1)
    if v.size != c or v.ndim > 4:
        return None
    if v.ndim == 1:  # a conv bias
        v = v.reshape(c, 1, 1)
    shp = (1,) * (4 - v.ndim) + v.shape
    if shp[1] != c:
        return None
    return np.ascontiguousarray(v.reshape(c // b, b)[:, None, None, :])


class _Packer:
    """Rebuilds a graph node by node, remembering each new node's channel block."""

    def __init__(self) -> None:
        self.new: dict[int, Node] = {}  # old uid -> new node, in its chosen layout
        self.block: dict[int, int] = {}  # new uid -> channel block (0 = NCHW)
        self.cache: dict[tuple[int, int], Node] = {}  # (old uid, block) -> converted node
        self.packed: dict[tuple[int, int], Node] = {}  # (weight uid, nb) -> packed weight

    def blk(self, old: Node) -> int:
        return self.block.get(self.new[old.uid].uid, 0)

    def put(self, old: Node, node: Node, block: int) -> None:
        node.layout = layout_name(block) if block else ""
        self.new[old.uid] = node
        self.block[node.uid] = block

    def get(self, old: Node, block: int) -> Node:
        """``old``'s value in layout ``block`` (0 = NCHW), converted once."""
        node = self.new[old.uid]
        cur = self.block.get(node.uid, 0)
        if cur == block:
            return node
        key = (old.uid, block)
        if key not in self.cache:
            if node.is_const:
                v = np_layout_transform(node.value, layout_name(cur), layout_name(block))
                conv = const(v, f"{node.name}_{layout_name(block)}")
            else:
                conv = call("layout_transform", [node], name=f"{old.name or old.op}_to_"
                            f"{layout_name(block)}", src_layout=layout_name(cur),
                            dst_layout=layout_name(block))
            conv.layout = layout_name(block) if block else ""
            self.block[conv.uid] = block
            self.cache[key] = conv
        return self.cache[key]


def _is_4d(n: Node) -> bool:
    return len(n.shape) == 4


#: turn 3x3 stride-1 convolutions into Winograd's (``topi.nn.winograd_tile`` picks where)
WINOGRAD = True


def _winograd_tile(n: Node, w: Node) -> int | None:
    """F(m x m, 3 x 3)'s ``m`` for a float32 3x3 stride-1 undilated convolution (a constant
    batch folded into ``conv2d_winograd_NCHWc``'s tiles; a symbolic one chosen for one image,
    the row block its kernels run on, :mod:`kiln.relay.row_blocks`) where it pays, else
    None."""
    batch = n.shape[0] if isinstance(n.shape[0], int) else 1
    return _winograd_pays(n, w.shape[2:], w.shape[1], w.shape[0], batch)


def _winograd_pays(n: Node, kernel: tuple, in_channels: int, out_channels: int,
                   batch: int) -> int | None:
    """``topi.nn.winograd_tile`` for convolution ``n`` (NCHW or packed: its output's
    spatial axes are 2 and 3) of a ``kernel`` window at ``batch`` images, where the
    convolution is one Winograd computes (float32, 3x3, stride 1, undilated)."""
    a = n.attrs
    if not WINOGRAD or tuple(kernel) != (3, 3) or n.dtype != "float32":
        return None
    if tuple(a["strides"]) != (1, 1) or tuple(a["dilation"]) != (1, 1):
        return None
    return winograd_tile(n.shape[2], n.shape[3], in_channels, out_channels, batch=batch)


def packed_winograd_tile(n: Node, batch: int) -> int | None:
    """The Winograd tile the layout pass would give the packed convolution ``n``
    (``conv2d_NCHWc``) over a constant ``batch``, else None: a row block of a symbolic
    batch (:mod:`kiln.relay.row_blocks`) takes the kernel a build for its size takes."""
    if n.op != "conv2d_NCHWc":
        return None
    x, w = n.inputs[0], n.inputs[1]
    return _winograd_pays(n, w.shape[2:4], x.shape[1] * x.shape[4],
                          n.shape[1] * n.shape[4], batch)


def packed_to_winograd(n: Node, m: int) -> Node:
    """The packed convolution ``n`` (``conv2d_NCHWc``, constant weights) as
    ``conv2d_winograd_NCHWc`` with tile ``m``, on the same input and output blocks."""
    x, wp = n.inputs[0], n.inputs[1]
    ob = n.shape[4]
    u = memo_transform(winograd_weight_transform, unpack_conv_weight(wp.value), m=m, ob=ob)
    y = call("conv2d_winograd_NCHWc", [x, const(u, f"{wp.name}_winograd{m}")], name=n.name,
             padding=n.attrs["padding"], tile=m)
    y.layout = n.layout
    return y


def _conv(p: _Packer, n: Node) -> bool:
    x, w = n.inputs[0], n.inputs[1]
    if not (_is_4d(x) and w.is_const and len(w.shape) == 4):
        return False
    a = n.attrs
    groups = a.get("groups", 1)
    c, oc = x.shape[1], n.shape[1]
    conv_attrs = {"strides": a["strides"], "padding": a["padding"], "dilation": a["dilation"]}
    m = _winograd_tile(n, w) if groups == 1 else None
    if m:
        ib = p.blk(x) or channel_block(c)
        ob = channel_block(oc)
        u = memo_transform(winograd_weight_transform, w.value, m=m, ob=ob)
        wp = const(u, f"{w.name}_winograd{m}_{ob}o")
        y = call("conv2d_winograd_NCHWc", [p.get(x, ib), wp], name=n.name,
                 padding=a["padding"], tile=m)
    elif groups == 1:
        ib = p.blk(x) or channel_block(c)
        ob = channel_block(oc)
        wp = const(pack_conv_weight(w.value, ib, ob), f"{w.name}_OIHW{ib}i{ob}o")
        y = call("conv2d_NCHWc", [p.get(x, ib), wp], name=n.name, **conv_attrs)
    elif a.get("depthwise_layout") and w.shape[1] == 1 and groups == c:
        b = p.blk(x) or channel_block(c)
        wp = const(pack_depthwise_weight(w.value, b), f"{w.name}_dw{b}c")
        y = call("depthwise_conv2d_NCHWc", [p.get(x, b), wp], name=n.name, **conv_attrs)
        ob = b
    else:  # grouped convolutions, channel multipliers: NCHW
        return False
    if len(n.inputs) > 2:
        bias = n.inputs[2]
        packed = pack_channel_const(bias.value, oc, ob) if bias.is_const else None
        if packed is None:
            return False
        y.layout = layout_name(ob)
        y = call("add", [y, const(packed, f"{bias.name}_{layout_name(ob)}")],
                 name=f"{n.name}_bias")
    p.put(n, y, ob)
    return True


def _elementwise(p: _Packer, n: Node) -> bool:
    """Unary / binary / bias-add operators in the layout of a blocked input."""
    blocked = [i for i in n.inputs if not i.is_const and p.blk(i) and _is_4d(i)]
    if not blocked or not _is_4d(n):
        return False
    b = p.blk(blocked[0])
    c = n.shape[1]
    ins = []
    for i in n.inputs:
        if i.is_const:
            v = p.new[i.uid].value
            if n.op == "bias_add" and v.ndim == 1 and v.size == c:
                v = v.reshape(c, 1, 1)
            packed = pack_channel_const(v, c, b)
            if packed is None:
                return False
            ins.append(const(packed.astype(v.dtype), f"{i.name}_{layout_name(b)}"))
        elif _is_4d(i) and i.shape[1] == c and all(
                d in (1, e) for d, e in zip(i.shape, n.shape, strict=True)):
            ins.append(p.get(i, b))  # same shape, or broadcast over N/H/W (SE gates)
        else:
            return False
    op = "add" if n.op == "bias_add" else n.op
    attrs = {} if n.op == "bias_add" else dict(n.attrs)
    p.put(n, call(op, ins, name=n.name, **attrs), b)
    return True


def _pool(p: _Packer, n: Node) -> bool:
    x = n.inputs[0]
    b = p.blk(x)
    if not b or n.attrs.get("layout", "NCHW") != "NCHW":
        return False
    p.put(n, call(n.op, [p.get(x, b)], name=n.name, **{**n.attrs, "layout": layout_name(b)}),
          b)
    return True


def _concat(p: _Packer, n: Node) -> bool:
    """Channel concatenation of packed tensors: a concatenation of the chunk axis, in the
    largest of the inputs' blocks that divides every input's channels (inputs in another
    block are converted)."""
    if n.attrs.get("axis") not in (1, -3) or not _is_4d(n) or \
            not all(_is_4d(i) and not i.is_const for i in n.inputs):
        return False
    fits = [b for b in sorted({p.blk(i) for i in n.inputs} - {0}, reverse=True)
            if all(i.shape[1] % b == 0 for i in n.inputs)]
    if not fits:
        return False
    b = fits[0]
    p.put(n, call("concatenate", [p.get(i, b) for i in n.inputs], name=n.name, axis=1), b)
    return True


def _dense(p: _Packer, n: Node) -> bool:
    """A float32 ``dense`` with a constant ``[N, K]`` weight (over a symbolic row count
    or at least one register block of rows) as ``dense_pack``, its weight packed (once per
    weight constant)."""
    x, w = n.inputs[0], n.inputs[1]
    if not (w.is_const and len(w.shape) == 2 and len(x.shape) == 2
            and n.dtype == w.dtype == "float32"):
        return False
    units = w.shape[0]
    nb = dense_pack_block(units)
    if isinstance(x.shape[0], int) and x.shape[0] < dense_pack_rows(nb):
        return False
    key = (w.uid, nb)
    if key not in p.packed:
        p.packed[key] = const(pack_dense_weight(w.value, nb), f"{w.name}_pack{nb}n")
    ins = [p.get(x, 0), p.packed[key], *(p.get(b, 0) for b in n.inputs[2:])]
    p.put(n, call("dense_pack", ins, name=n.name, units=units), 0)
    return True


def alter_op_layout(graph: Graph) -> Graph:
    """Run the layout pass on ``graph`` (see the module docstring)."""
    p = _Packer()
    for n in graph.nodes:
        if n.is_const or n.is_input:
            p.put(n, n, 0)
            continue
        if n.op == "conv2d" and _conv(p, n):
            continue
        if n.op in QNN_RULES and QNN_RULES[n.op](p, n):  # 8-bit tensors: .qnn_layout
            continue
        if n.op in BF16_RULES and BF16_RULES[n.op](p, n):  # bf16 convolutions: .bf16_layout
            continue
        if (n.op in UNARY or n.op in BINARY or n.op == "bias_add") and _elementwise(p, n):
            continue
        if n.op in POOLS and _pool(p, n):
            continue
        if n.op == "concatenate" and _concat(p, n):
            continue
        if n.op == "dense" and _dense(p, n):
            continue
        ins = [p.get(i, 0) for i in n.inputs]
        if all(a is b for a, b in zip(ins, n.inputs, strict=True)):
            p.put(n, n, 0)
        else:
            p.put(n, call(n.op, ins, name=n.name, **n.attrs), 0)
    return Graph([p.new[i.uid] for i in graph.inputs], [p.get(o, 0) for o in graph.outputs])


__all__ = ["alter_op_layout", "channel_block", "preferred_block", "pack_conv_weight",
           "pack_depthwise_weight", "pack_channel_const", "layout_name"]
