"""Graph operators: for each, its TE compute (from kiln.topi), its fusion pattern (TVM's
kinds) and, where cheap, a numpy evaluation used by constant folding.

Fusion patterns, as TVM orders them: ELEMWISE < BROADCAST < INJECTIVE < COMM_REDUCE <
OUT_ELEMWISE_FUSABLE < OPAQUE.
"""

from __future__ import annotations

import numpy as np

from kiln import te, topi
from kiln.ir.expr import PrimExpr
from kiln.target import Target

from . import bf16_ops, bitwise_ops
from . import quantize_ops as qnn
from .fingerprint import NotPlainData, fingerprint

ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_ELEMWISE_FUSABLE, OPAQUE = 0, 1, 2, 3, 4, 7
PATTERN_NAMES = {0: "elemwise", 1: "broadcast", 2: "injective", 3: "reduction",
                 4: "complex-out-fusable", 7: "opaque"}


def conv2d(ts, a, conv2d_nchw=topi.nn.conv2d_nchw,
           depthwise_conv2d_nchw=topi.nn.depthwise_conv2d_nchw):
    """The ``conv2d`` operator (plain, depthwise or grouped, then the bias add): the plain and
    depthwise convolutions are computed by the given topi computes (TVM's signature
    ``(data, kernel, strides, padding, dilation, out_dtype)``), topi.nn's by default; the op
    strategy passes a target's own (``topi.cuda.conv2d_nchw``)."""
    x, w = ts[0], ts[1]
    groups = a.get("groups", 1)
    pad = tuple(a["padding"])
    if groups == 1:
        out = conv2d_nchw(x, w, a["strides"], pad, a["dilation"], x.dtype)
    elif a.get("depthwise_layout"):  # weight already reshaped to [C, M, KH, KW]
        out = depthwise_conv2d_nchw(x, w, a["strides"], pad, a["dilation"], x.dtype)
    else:
        out = topi.nn.group_conv2d_nchw(x, w, a["strides"], pad, a["dilation"], groups)
    if len(ts) > 2:
        b = ts[2]
        out = te.compute(out.shape, lambda n, c, h, ww: out[n, c, h, ww] + b[c],
                         name="T_bias_add", tag="broadcast")
    return out


def _bias_add(ts, a):
    x, b = ts
    axis = a.get("axis", 1) % x.ndim

    def f(*i):
        return x(*i) + b[i[axis]]

    return te.compute(x.shape, f, name="T_bias_add", tag="broadcast")


def dense(ts, a, dense_compute=topi.nn.dense):
    """The ``dense`` operator with its optional bias, computed by ``dense_compute`` (TVM's
    signature ``(data, weight, bias, out_dtype)``; topi.nn's by default)."""
    return dense_compute(ts[0], ts[1], ts[2] if len(ts) > 2 else None, ts[0].dtype)


def _pool(ts, a):
    return topi.nn.pool2d(ts[0], a["kernel"], a["strides"], a.get("dilation", (1, 1)),
                          tuple(a["padding"]), a["pool_type"], ceil_mode=a.get("ceil_mode", False),
                          layout=a.get("layout", "NCHW"),
                          count_include_pad=a.get("count_include_pad", False))


def _conv2d_nchwc(ts, a):
    return topi.nn.conv2d_NCHWc(ts[0], ts[1], a["strides"], tuple(a["padding"]), a["dilation"],
                                out_dtype=ts[0].dtype)


def _conv2d_winograd(ts, a):
    return topi.nn.conv2d_winograd_NCHWc(ts[0], ts[1], tuple(a["padding"]), a["tile"],
                                         out_dtype=ts[0].dtype)


def _depthwise_nchwc(ts, a):
    return topi.nn.depthwise_conv2d_NCHWc(ts[0], ts[1], a["strides"], tuple(a["padding"]),
                                          a["dilation"])


def np_layout_transform(v: np.ndarray, src: str, dst: str) -> np.ndarray:
    """numpy ``layout_transform`` between ``NCHW`` and ``NCHW{b}c`` layouts (and between two
    blocks); ``OIHW`` weights go through the layout pass's own packing."""
    from kiln.topi.transform import _parse_layout

    def block(lay):
        parts = _parse_layout(lay)
        names = "".join(c for c, _ in parts)
        if names == "NCHW":
            return 0
        if names == "NCHWc":
            return parts[4][1]
        raise NotImplementedError(f"layout_transform {src} -> {dst}: only NCHW / NCHW{{b}}c")

    bs, bd = block(src), block(dst)
    if bs:  # unpack to NCHW
        n, cc, h, w, b = v.shape
        v = v.transpose(0, 1, 4, 2, 3).reshape(n, cc * b, h, w)
    if bd:
        n, c, h, w = v.shape
        v = v.reshape(n, c // bd, bd, h, w).transpose(0, 1, 3, 4, 2)
    return np.ascontiguousarray(v)


def _softmax(ts, a):
    return topi.nn.fast_softmax(ts[0], a.get("axis", -1))


def np_strided_slice(v: np.ndarray, a) -> np.ndarray:
    """``v`` sliced as the ``strided_slice`` attributes ``begin/end/strides/axes`` say."""
    idx = [slice(None)] * v.ndim
    for ax, b, e, st in zip(a["axes"], a["begin"], a["end"], a["strides"], strict=True):
        idx[ax] = slice(b, e, st)
    return v[tuple(idx)]


def _reshape(ts, a):
    return topi.reshape(ts[0], list(a["newshape"]))


# name -> (compute, pattern, numpy evaluation or None)
OPS: dict = {
    "conv2d": (conv2d, OUT_ELEMWISE_FUSABLE, None),
    "dense": (dense, OUT_ELEMWISE_FUSABLE, lambda v, a: v[0] @ v[1].T + (v[2] if len(v) > 2
                                                                            else 0)),
    "matmul": (lambda ts, a: topi.matmul(ts[0], ts[1]), OUT_ELEMWISE_FUSABLE,
               lambda v, a: v[0] @ v[1]),
    # dense with its weight packed by the x86 layout pass (``topi.x86.dense_pack``)
    "dense_pack": (lambda ts, a: topi.x86.dense_pack(ts[0], ts[1], ts[2] if len(ts) > 2 else None,
                                                     units=a["units"],
                                                     data_layout=a.get("data_layout"),
                                                     out_layout=a.get("out_layout")),
                   OUT_ELEMWISE_FUSABLE, None),
    "bias_add": (_bias_add, BROADCAST, None),
    "add": (lambda ts, a: topi.add(ts[0], ts[1]), BROADCAST, lambda v, a: v[0] + v[1]),
    "subtract": (lambda ts, a: topi.subtract(ts[0], ts[1]), BROADCAST, lambda v, a: v[0] - v[1]),
    "multiply": (lambda ts, a: topi.multiply(ts[0], ts[1]), BROADCAST, lambda v, a: v[0] * v[1]),
    "divide": (lambda ts, a: topi.divide(ts[0], ts[1]), BROADCAST, lambda v, a: v[0] / v[1]),
    "relu": (lambda ts, a: topi.nn.relu(ts[0]), ELEMWISE, lambda v, a: np.maximum(v[0], 0)),
    "sigmoid": (lambda ts, a: topi.sigmoid(ts[0]), ELEMWISE,
                lambda v, a: 1 / (1 + np.exp(-v[0]))),
    # erf, tanh and softmax's exp: the vectorizable approximations (topi.fast_math)
    "tanh": (lambda ts, a: topi.fast_tanh(ts[0]), ELEMWISE, lambda v, a: np.tanh(v[0])),
    "erf": (lambda ts, a: topi.fast_erf(ts[0]), ELEMWISE, None),
    "leaky_relu": (lambda ts, a: topi.nn.leaky_relu(ts[0], a["alpha"]), ELEMWISE,
                   lambda v, a: np.where(v[0] > 0, v[0], v[0] * a["alpha"])),
    "clip": (lambda ts, a: topi.clip(ts[0], a["a_min"], a["a_max"]), ELEMWISE,
             lambda v, a: np.clip(v[0], a["a_min"], a["a_max"])),
    "max_pool2d": (_pool, OUT_ELEMWISE_FUSABLE, None),
    "avg_pool2d": (_pool, OPAQUE, None),  # topi.x86.schedule_pool cannot take a tail yet
    "global_avg_pool2d": (lambda ts, a: topi.nn.global_pool(ts[0], "avg",
                                                            a.get("layout", "NCHW")),
                          OPAQUE, None),
    "conv2d_NCHWc": (_conv2d_nchwc, OUT_ELEMWISE_FUSABLE, None),
    "depthwise_conv2d_NCHWc": (_depthwise_nchwc, OUT_ELEMWISE_FUSABLE, None),
    "conv2d_winograd_NCHWc": (_conv2d_winograd, OUT_ELEMWISE_FUSABLE, None),
    "layout_transform": (lambda ts, a: topi.layout_transform(ts[0], a["src_layout"],
                                                             a["dst_layout"]), INJECTIVE,
                         lambda v, a: np_layout_transform(v[0], a["src_layout"],
                                                          a["dst_layout"])),
    "softmax": (_softmax, OPAQUE, None),
    "reshape": (_reshape, INJECTIVE, lambda v, a: v[0].reshape(a["newshape"])),
    "flatten": (lambda ts, a: topi.nn.flatten(ts[0]), INJECTIVE,
                lambda v, a: v[0].reshape(v[0].shape[0], -1)),
    "transpose": (lambda ts, a: topi.transpose(ts[0], list(a["axes"])), INJECTIVE,
                  lambda v, a: np.transpose(v[0], a["axes"])),
    "concatenate": (lambda ts, a: topi.concatenate(list(ts), a["axis"]), INJECTIVE,
                    lambda v, a: np.concatenate(v, a["axis"])),
    "strided_slice": (lambda ts, a: topi.strided_slice(ts[0], a["begin"], a["end"],
                                                       a["strides"], a["axes"]), INJECTIVE,
                      lambda v, a: np_strided_slice(v[0], a)),
    # quantized operators (TVM's qnn dialect; docs/precision.md)
    "qnn.quantize": (qnn.quantize, BROADCAST, qnn.np_quantize),
    "qnn.dequantize": (qnn.dequantize, BROADCAST, qnn.np_dequantize),
    "qnn.conv2d": (qnn.conv2d, OUT_ELEMWISE_FUSABLE, None),
    "qnn.dense": (qnn.dense, OUT_ELEMWISE_FUSABLE, None),
    "qnn.add": (qnn.add, ELEMWISE, qnn.np_add),
    # bf16 operators (relay.build(..., precision="bf16"); docs/precision.md)
    "conv2d_bf16": (bf16_ops.conv2d, OUT_ELEMWISE_FUSABLE, None),
    "dense_bf16": (bf16_ops.dense, OUT_ELEMWISE_FUSABLE, None),
    "bf16_round": (bf16_ops.bf16_round, ELEMWISE, None),
    # transformer operators (attention, layer norm, GELU, masks)
    "batch_matmul": (lambda ts, a: topi.nn.batch_matmul(ts[0], ts[1], transpose_b=False),
                     OUT_ELEMWISE_FUSABLE, lambda v, a: np.matmul(v[0], v[1])),
    "layer_norm": (lambda ts, a: topi.nn.layer_norm(ts[0], ts[1], ts[2], a["axis"],
                                                    a["epsilon"]), OPAQUE, None),
    "mean": (lambda ts, a: topi.mean(ts[0], a["axis"], a["keepdims"]), COMM_REDUCE,
             lambda v, a: np.mean(v[0], tuple(a["axis"]), keepdims=a["keepdims"])),
    "power": (lambda ts, a: topi.power(ts[0], ts[1]), BROADCAST, lambda v, a: v[0] ** v[1]),
    "sqrt": (lambda ts, a: topi.sqrt(ts[0]), ELEMWISE, lambda v, a: np.sqrt(v[0])),
    "negative": (lambda ts, a: topi.negative(ts[0]), ELEMWISE, lambda v, a: -v[0]),
    "equal": (lambda ts, a: topi.equal(ts[0], ts[1]), BROADCAST, lambda v, a: v[0] == v[1]),
    "where": (lambda ts, a: topi.where(ts[0], ts[1], ts[2]), BROADCAST,
              lambda v, a: np.where(v[0], v[1], v[2])),
    "cast": (lambda ts, a: topi.cast(ts[0], a["dtype"]), ELEMWISE,
             lambda v, a: v[0].astype(a["dtype"])),
    "broadcast_to": (lambda ts, a: topi.broadcast_to(ts[0], a["shape"]), BROADCAST,
                     lambda v, a: np.broadcast_to(v[0], a["shape"]).copy()),
    "take": (lambda ts, a: topi.take(ts[0], ts[1], a["axis"], mode="wrap"), INJECTIVE,
             lambda v, a: np.take(v[0], v[1], a["axis"])),
    # logical and bitwise operators, their dtype checks (bitwise_ops.py)
    **{name: (f, BROADCAST, np_f) for name, (f, np_f) in bitwise_ops.BINARY.items()},
    **{name: (f, ELEMWISE, np_f) for name, (f, np_f) in bitwise_ops.UNARY.items()},
}


#: (operator and its compute, attributes, input types, target) -> the output's type, for
#: static shapes
_TYPES: dict[str, tuple[tuple[int, ...], str]] = {}
_MAX_TYPES = 4096


def infer_type(node) -> tuple[tuple[int, ...], str]:
    """Shape and dtype of an operator node, by building its compute on placeholders
    (remembered for static shapes and plain attributes: graph passes rebuild nodes often)."""
    if node.op not in OPS:
        raise NotImplementedError(f"relay: operator {node.op!r} is not implemented")
    try:
        key = fingerprint([node.op, id(OPS[node.op][0]), node.attrs,
                           [[i.shape, i.dtype] for i in node.inputs], str(Target.current())])
    except NotPlainData:  # a symbolic dimension, an attribute that is an object
        return _infer_type(node)
    if key not in _TYPES:
        if len(_TYPES) >= _MAX_TYPES:
            _TYPES.clear()
        _TYPES[key] = _infer_type(node)
    return _TYPES[key]


def _infer_type(node) -> tuple[tuple[int, ...], str]:
    ts = [te.placeholder(i.shape, dtype=i.dtype, name=f"in{k}") for k, i in
          enumerate(node.inputs)]
    try:
        out = OPS[node.op][0](ts, node.attrs)
    except Exception as e:  # name the node in the message
        try:
            err = type(e)(f"{node.op} ({node.name or 'unnamed'}): {e}")
        except Exception:  # an exception type with another constructor
            raise e from None
        raise err from e
    from kiln.topi.utils import get_const_tuple

    return tuple(s if isinstance(s, PrimExpr) else int(s) for s in get_const_tuple(out.shape)), \
        str(out.dtype)


def pattern(op: str) -> int:
    return OPS[op][1]
