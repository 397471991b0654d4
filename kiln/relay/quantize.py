"""``fake_quantization_to_integer`` (TVM's FakeQuantizationToInteger): the quantize /
dequantize ("QDQ") patterns of a quantized model turned into int8 kernels.

The pass rewrites

    quantize([relu](conv2d(dequantize(x_q), dequantize(w_q)[, bias])))
    quantize([relu]([bias_add](dense|matmul(dequantize(x_q), [transpose](dequantize(w_q))))))

into ``qnn.conv2d`` / ``qnn.dense`` on ``x_q`` (int8 or uint8, per-tensor scale): int32
accumulation, the bias in int32 with the input zero point's term folded in
(``bias - zx * sum(w)``; convolutions pad with ``zx``, the quantized 0.0, and compute int8
data shifted to uint8, so there ``zx + 128``), and the requantization ``acc * (sx * sw[o] /
sy)`` fused into the kernel. Constant weights (per tensor or per output channel, their zero
point subtracted at compile time; they must then fit int8) are packed for convolutions in
the blocked layout of their VNNI kernel (``kiln.topi.x86.int8.pack_conv2d_weight``).
Guarantee: the result equals onnxruntime's QLinearConv / QLinearMatMul on the same operands
(float32 multiplier, round half to even, saturation).

Two more patterns keep 8-bit tensors 8-bit, bit for bit as their float form:

    quantize([relu](add(dequantize(a_q), dequantize(b_q))))  ->  qnn.add(a_q, b_q)
    quantize(max_pool2d(dequantize(x_q)))  ->  max_pool2d(x_q)   (the same scale, zero point)

(the max of dequantized values is the dequantized max, and quantizing a dequantized value
at its own scale gives it back). A residual add then reads its operands as bytes in the
producing convolution's kernel instead of a float copy made by a kernel of its own.
Anything else (grouped convolutions, per-channel activations, computed weights) is left as
it is: the float operators between dequantize and quantize, which compute the same values
up to rounding.
"""

from __future__ import annotations

import numpy as np

from kiln.topi.x86 import int8

from .graph import Graph, Node, call, const
from .quantize_ops import np_dequantize, np_quantize
from .transform import rewrite

_QNN_ANCHORS = ("conv2d", "dense", "matmul")


def _const_int(n: Node) -> np.ndarray | None:
    """The integer value of ``n``: a constant, or a quantize of constants; else None."""
    if n.is_const and n.value.dtype.kind in "iu":
        return n.value
    if n.op == "qnn.quantize" and all(i.is_const for i in n.inputs):
        return np_quantize([i.value for i in n.inputs], n.attrs)
    return None


def _qparams(n: Node, op: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(scale, zero_point)`` of an ``op`` node (``qnn.quantize`` / ``qnn.dequantize``)
    whose parameters are constants, else None."""
    if n.op != op or not all(i.is_const for i in n.inputs[1:]):
        return None
    return n.inputs[1].value.astype(np.float32), n.inputs[2].value.astype(np.int64)


def _dq_params(n: Node) -> tuple[np.ndarray, np.ndarray] | None:
    return _qparams(n, "qnn.dequantize")


def _per_tensor(n: Node) -> tuple[float, int] | None:
    """``(scale, zero_point)`` of a per-tensor quantize or dequantize node, else None."""
    p = _qparams(n, n.op) if n.op in ("qnn.quantize", "qnn.dequantize") else None
    if p is None or p[0].size != 1 or p[1].size != 1:
        return None
    return float(p[0].reshape(())), int(p[1].reshape(()))


def _weight(w: Node, out_axis: int, n_out: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The integer weight of ``dequantize(w_q)`` with its zero point subtracted (int8), and
    the per-output-channel scale along ``out_axis``; None when it is not that form."""
    p = _dq_params(w)
    wq = _const_int(w.inputs[0]) if p is not None else None
    if wq is None:
        return None
    scale, zp = p
    if scale.size not in (1, n_out) or zp.size not in (1, n_out) or (
            scale.size > 1 and w.attrs.get("axis", 1) % wq.ndim != out_axis):
        return None
    shape = [-1 if k == out_axis else 1 for k in range(wq.ndim)]
    shifted = wq.astype(np.int64) - (zp.reshape(shape) if zp.size > 1 else zp.reshape(()))
    if shifted.min() < -128 or shifted.max() > 127:
        return None
    return shifted.astype(np.int8), np.broadcast_to(scale.reshape(-1), (n_out,))


def _bias_i32(b: Node | None, in_scale: np.ndarray, n_out: int) -> np.ndarray | None:
    """The bias in int32 at the accumulator's scale ``in_scale[o] = sx * sw[o]``."""
    if b is None:
        return np.zeros(n_out, np.int64)
    p = _dq_params(b)
    bq = _const_int(b.inputs[0]) if p is not None else None
    if bq is not None and np.allclose(p[0], in_scale, rtol=1e-6) and not p[1].any():
        return bq.astype(np.int64).reshape(n_out)
    value = _float_value(b)
    if value is None:
        return None
    return np.rint(value.astype(np.float64).reshape(n_out) / in_scale).astype(np.int64)


def _float_value(n: Node) -> np.ndarray | None:
    """A float constant's value, or that of a dequantize of constants."""
    if n.is_const and n.value.dtype.kind == "f":
        return n.value
    q = _const_int(n.inputs[0]) if _dq_params(n) is not None else None
    if q is None:
        return None
    return np_dequantize([q, n.inputs[1].value, n.inputs[2].value], n.attrs)


def _through_reshapes(n: Node) -> Node:
    """``n`` with the reshapes that keep its shape (a 2-D MatMul's rows) looked through."""
    while n.op == "reshape" and n.shape == n.inputs[0].shape:
        n = n.inputs[0]
    return n


def _single_use(n: Node, users: dict[int, list[Node]], outs: set[int]) -> bool:
    return len(users.get(n.uid, [])) == 1 and n.uid not in outs


def _match(q: Node, users, outs) -> dict | None:
    """The parts of ``quantize([relu]([bias_add](anchor)))`` above ``q``, or None."""
    if _per_tensor(q) is None:
        return None
    t, relu, bias = q.inputs[0], False, None
    if t.op == "relu" and _single_use(t, users, outs):
        t, relu = t.inputs[0], True
    if t.op in ("bias_add", "add") and _single_use(t, users, outs) and \
            t.inputs[0].op in ("dense", "matmul") and len(t.inputs[1].shape) == 1:
        t, bias = t.inputs[0], t.inputs[1]
    if t.op not in _QNN_ANCHORS or not _single_use(t, users, outs):
        return None
    if t.op == "conv2d" and (t.attrs.get("groups", 1) != 1 or t.attrs.get("depthwise_layout")):
        return None
    if t.op == "conv2d" and len(t.inputs) > 2:
        bias = t.inputs[2]
    x = _through_reshapes(t.inputs[0])
    if _per_tensor(x) is None or x.inputs[0].dtype not in ("int8", "uint8"):
        return None
    return {"anchor": t, "x": x, "relu": relu, "bias": bias}


def _rewrite_quantized(q: Node, m: dict, x_q: Node) -> Node | None:
    """The ``qnn.conv2d`` / ``qnn.dense`` node on ``x_q`` (the rebuilt quantized input)
    replacing the pattern ``m`` ending in ``q``, or None when its constants do not fit."""
    anchor, x = m["anchor"], m["x"]
    sx, zx = _per_tensor(x)
    sy, zy = _per_tensor(q)
    w = anchor.inputs[1]
    if anchor.op == "conv2d":
        n_out, w_axis, transposed = w.shape[0], 0, False
    elif anchor.op == "dense":
        n_out = w.shape[0]
        transposed = w.op == "transpose"
        w_axis = 1 if transposed else 0
        w = w.inputs[0] if transposed else w
    else:  # matmul: [K, N]
        n_out, w_axis, transposed = w.shape[1], 1, True
    found = _weight(w, w_axis, n_out)
    if found is None:
        return None
    wq, sw = found
    if transposed:
        wq = np.ascontiguousarray(wq.T)
    in_scale = (np.float32(sx) * sw.astype(np.float32)).astype(np.float32)
    bias = _bias_i32(m["bias"], in_scale.astype(np.float64), n_out)
    if bias is None:
        return None
    # the input zero point's term; a convolution computes int8 data shifted to uint8
    zx_acc = int8.unsigned_zero_point(x.inputs[0].dtype, zx) if anchor.op == "conv2d" else zx
    bias = bias - zx_acc * wq.reshape(n_out, -1).astype(np.int64).sum(axis=1)
    mult = (in_scale / np.float32(sy)).astype(np.float32)
    common = {"output_zero_point": zy, "out_dtype": q.dtype, "relu": m["relu"]}
    ops = [x_q, None, const(bias.astype(np.int32), f"{anchor.name}_bias_i32"),
           const(mult, f"{anchor.name}_requant_scale")]
    if anchor.op == "conv2d":
        ops[1] = const(int8.pack_conv2d_weight(wq), f"{anchor.name}_w_packed")
        a = anchor.attrs
        return call("qnn.conv2d", ops, name=anchor.name, channels=n_out, strides=a["strides"],
                    padding=a["padding"], dilation=a["dilation"], input_zero_point=zx, **common)
    ops[1] = const(wq, f"{anchor.name}_w_int8")
    return call("qnn.dense", ops, name=anchor.name, **common)


def _dequantized_8bit(n: Node) -> tuple[Node, float, int] | None:
    """``(x_q, scale, zero_point)`` of a per-tensor ``dequantize(x_q)`` of a computed 8-bit
    ``x_q``, else None."""
    p = _per_tensor(n) if n.op == "qnn.dequantize" else None
    x = n.inputs[0] if p is not None else None
    if x is None or x.is_const or x.dtype not in ("int8", "uint8"):
        return None
    return x, *p


def _integer_add_or_pool(q: Node, t: Node) -> Node | None:
    """``qnn.add`` / an 8-bit ``max_pool2d`` replacing ``q = quantize(t)`` (the patterns of
    the module doc; ``t`` rebuilt), or None."""
    out = _per_tensor(q)
    if out is None:
        return None
    relu = t.op == "relu"
    t = t.inputs[0] if relu else t
    ins = [_dequantized_8bit(i) for i in t.inputs]
    if t.op == "add" and len(ins) == 2 and None not in ins and \
            t.inputs[0].shape == t.inputs[1].shape:
        (a, sa, za), (b, sb, zb) = ins
        return call("qnn.add", [a, b], name=t.name, lhs_scale=sa, lhs_zero_point=za,
                    rhs_scale=sb, rhs_zero_point=zb, output_scale=out[0],
                    output_zero_point=out[1], out_dtype=q.dtype, relu=relu)
    if t.op == "max_pool2d" and not relu and ins[0] is not None and \
            ins[0][0].dtype == q.dtype and ins[0][1:] == out:
        return call("max_pool2d", [ins[0][0]], name=t.name, **t.attrs)
    return None


def fake_quantization_to_integer(graph: Graph) -> Graph:
    """``graph`` with each quantize-dequantize pattern around a convolution or dense turned
    into an int8 kernel with fused requantization, and those around residual adds and max
    pooling into 8-bit operators (see the module doc); run before constant folding, which
    would fold the weights' dequantize."""
    users = graph.users()
    outs = {o.uid for o in graph.outputs}
    quantizes = [q for q in graph.nodes if q.op == "qnn.quantize"]
    if not quantizes:
        return graph
    matches = {q.uid: m for q in quantizes if (m := _match(q, users, outs)) is not None}

    def fn(n, xs):
        m = matches.get(n.uid)
        if m is None:
            if n.op == "qnn.quantize" and _single_use(n.inputs[0], users, outs):
                return _integer_add_or_pool(n, xs[0])
            return None
        t = xs[0]  # the rebuilt pattern: walk down to its anchor, then to x_q
        while t.op != m["anchor"].op:
            t = t.inputs[0]
        return _rewrite_quantized(n, m, _through_reshapes(t.inputs[0]).inputs[0])

    return rewrite(graph, fn)


# TVM's relay.quantize namespace: the post-training quantizer beside the QDQ pass
from .ptq import (  # noqa: E402, F401
    QConfig,
    current_qconfig,
    kl_divergence_scale,
    qconfig,
    quantize,
)
