"""ONNX importer: ``relay.frontend.from_onnx(model, shape=None) -> (mod, params)``.

``model`` is an ``onnx.ModelProto`` or its serialized bytes. The model is validated first
(:mod:`.onnx_check`: the ONNX checker with strict type and shape inference, the opsets,
input dtypes and shapes kiln compiles), then each node is converted, its converter checking
the attributes and operand shapes kiln's operators assume. Every failure is an
:class:`OnnxImportError` (the model is not valid ONNX) or an :class:`OpNotImplemented` (valid,
but beyond kiln) whose message names the node, its operator and its inputs; axes out of
range are an error, never wrapped.

Initializers become parameters (``params``, name -> NDArray) referenced by constant nodes;
graph inputs that are not initializers become graph inputs, their shapes from the model or
from ``shape`` (name -> tuple). A symbolic dimension of the model that ``shape`` does not fix
stays a ``te.var`` (docs/dynamic.md, "Whole models"); an operator that cannot be compiled
with it is an :class:`OpNotImplemented` naming the operator and the dimension.
"""

from __future__ import annotations

import math

import numpy as np

from kiln.ir.dtype import parse as parse_dtype

from ..graph import Graph, Module, Node, call, const, input_node
from ..op import np_strided_slice
from .common import batch_norm_inference, reshape, spatial_mean, transpose
from .onnx_check import (
    OnnxImportError,
    OpNotImplemented,
    axis,
    check_missing_inputs,
    check_model,
    check_operand_dtypes,
    input_type,
    int_list,
    load,
    scalar,
)
from .onnx_logical import LogicalConverters
from .onnx_qnn import QuantizedConverters

__all__ = ["from_onnx", "OnnxImportError", "OpNotImplemented"]

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
#: pads at or above this are rejected (a padded extent must stay an array size)
_MAX_PAD = 2**31


def _attrs(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _window(at: dict, kernel: tuple[int, ...], in_hw) -> dict:
    """Strides, dilations and pads (top, left, bottom, right) of a 2-D convolution or
    pooling window, checked: each is a pair (pads four values), and the dilated kernel fits
    the padded input."""
    strides = int_list(at, "strides", 2, (1, 1), minimum=1)
    dilation = int_list(at, "dilations", 2, (1, 1), minimum=1)
    pads = _pads(at, kernel, strides, dilation, in_hw)
    for k, d, n, lo, hi in zip(kernel, dilation, in_hw, pads[:2], pads[2:], strict=True):
        if (k - 1) * d + 1 > n + lo + hi:
            raise OnnxImportError(f"the kernel {list(kernel)} (dilations {list(dilation)}) "
                                  f"does not fit the input {list(in_hw)} padded by "
                                  f"{list(pads)}")
    return {"strides": strides, "dilation": dilation, "padding": pads}


def _pads(at, kernel, strides, dilation, in_hw) -> tuple[int, int, int, int]:
    auto = at.get("auto_pad", b"NOTSET")
    auto = auto.decode(errors="replace") if isinstance(auto, bytes) else auto
    if auto not in _AUTO_PADS:
        raise OnnxImportError(f"auto_pad {auto!r} is not one of {', '.join(_AUTO_PADS)}")
    if auto != "NOTSET" and "pads" in at:
        raise OnnxImportError(f"pads {at['pads']!r} and auto_pad {auto!r} cannot both be "
                              "given")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for k, s, d, n in zip(kernel, strides, dilation, in_hw, strict=True):
            o = -(-n // s)
            total = max((o - 1) * s + (k - 1) * d + 1 - n, 0)
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            out.append((lo, total - lo))
        return (out[0][0], out[1][0], out[0][1], out[1][1])
    if auto == "VALID":
        return (0, 0, 0, 0)
    pads = int_list(at, "pads", 4, (0, 0, 0, 0), minimum=0)
    if max(pads) >= _MAX_PAD:
        raise OnnxImportError(f"pads {list(pads)} are too large: each must be below 2^31")
    return pads


def _broadcast(*shapes: tuple) -> tuple:
    """numpy's broadcast of ``shapes``, whose dimensions may be symbolic (``te.var``): a
    symbolic dimension broadcasts with 1 and with itself."""
    rank = max(len(s) for s in shapes)
    out = []
    for dims in zip(*[(1,) * (rank - len(s)) + tuple(s) for s in shapes], strict=True):
        other = {str(d): d for d in dims if not (isinstance(d, int) and d == 1)}
        if len(other) > 1:
            raise OnnxImportError(f"shapes {' and '.join(str(list(s)) for s in shapes)} "
                                  f"cannot be broadcast together")
        out.append(next(iter(other.values()), 1))
    return tuple(out)


#: ONNX operator -> the axes of its first input that may be symbolic (None: any axis, the
#: operand shapes of its other inputs too); an operator not listed takes static shapes only
_SYMBOLIC_AXES: dict[str, frozenset[int] | None] = {
    **dict.fromkeys(("Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "Add", "Sub", "Mul",
                     "Div", "Identity", "Dropout", "Transpose", "Softmax"), None),
    **dict.fromkeys(("Conv", "MaxPool", "AveragePool", "GlobalAveragePool",
                     "BatchNormalization", "Gemm", "MatMul", "Flatten"), frozenset({0})),
}
#: operators whose operands, all 2-D, may be symbolic on any axis (attention's ``q k^T`` and
#: ``softmax(...) v`` over a symbolic sequence length)
_SYMBOLIC_2D = frozenset({"MatMul"})


def _check_symbolic(op_type: str, xs: list) -> None:
    """Raise OpNotImplemented naming the operator and the dimension when an input of
    ``op_type`` has a symbolic dimension the operator cannot be compiled with."""
    allowed = _SYMBOLIC_AXES.get(op_type, frozenset())
    if allowed is None or (op_type in _SYMBOLIC_2D and
                           all(x is not None and len(x.shape) == 2 for x in xs)):
        return
    for k, x in enumerate(xs):
        for ax, d in enumerate(() if x is None else x.shape):
            if not isinstance(d, int) and (k > 0 or ax not in allowed):
                raise OpNotImplemented(
                    f"{op_type} cannot be compiled with the symbolic dimension {d} (axis {ax} "
                    f"of input {k}, shape {list(x.shape)}); give it a value with "
                    f"from_onnx(shape=...)")


def _distinct_axes(axes, rank: int, what: str) -> list[int]:
    out = [axis(a, rank, f"{what} axis") for a in axes]
    if len(set(out)) != len(out):
        raise OnnxImportError(f"{what} axes {list(axes)} repeat an axis")
    return out


_FOLD = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
         "divide": np.divide}

#: Clip's bounds when absent: the float32 range, as onnxruntime's (an infinite input
#: becomes the largest float)
_F32 = np.finfo(np.float32)


class _Converter(QuantizedConverters, LogicalConverters):
    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.values: dict[str, Node] = {}
        #: the number of outputs of the node being converted (Split's parts)
        self.num_outputs = 1

    def const_value(self, n: Node, what: str) -> np.ndarray:
        if not n.is_const:
            raise OpNotImplemented(f"{what} must be a constant (got a computed tensor)")
        return n.value

    def const_ints(self, n: Node, what: str) -> list[int]:
        v = self.const_value(n, what)
        if v.ndim > 1 or v.dtype.kind not in "iu":
            raise OnnxImportError(f"{what} must be a 1-D integer tensor, got {v.dtype} of "
                                  f"shape {list(v.shape)}")
        return [int(i) for i in v.reshape(-1)]

    # ---- converters: (inputs, attrs, name) -> Node ------------------------------------
    def Conv(self, xs, at, name):  # noqa: N802
        x, w = xs[0], xs[1]
        if len(x.shape) != 4:
            raise OpNotImplemented(f"Conv: only 2-D convolutions (NCHW) are supported, "
                                   f"input shape {list(x.shape)}")
        groups = at.get("group", 1)
        if len(w.shape) != 4 or groups < 1 or w.shape[1] * groups != x.shape[1] or \
                w.shape[0] % groups:
            raise OnnxImportError(f"the weight's shape {list(w.shape)} (group {groups}) does "
                                  f"not fit the {x.shape[1]} input channels of the input's "
                                  f"shape {list(x.shape)}")
        if len(xs) > 2 and xs[2].shape != (w.shape[0],):
            raise OnnxImportError(f"the bias's shape {list(xs[2].shape)} is not "
                                  f"[{w.shape[0]}] (the output channels)")
        kernel = tuple(w.shape[2:])
        if int_list(at, "kernel_shape", 2, kernel, minimum=1) != kernel:
            raise OnnxImportError(f"kernel_shape {at['kernel_shape']} differs from the "
                                  f"weight's {list(kernel)}")
        return call("conv2d", xs, name=name, groups=groups, **_window(at, kernel, x.shape[2:]))

    def Relu(self, xs, at, name):  # noqa: N802
        return call("relu", xs, name=name)

    def Sigmoid(self, xs, at, name):  # noqa: N802
        return call("sigmoid", xs, name=name)

    def _binary(self, op, xs, name):
        """Broadcasting arithmetic (topi follows numpy); on two constants (shape
        computations of exported models, e.g. a channel count halved for a Slice) it is
        folded here, integer division truncating as ONNX's."""
        _broadcast(xs[0].shape, xs[1].shape)
        if all(x.is_const for x in xs):
            a, b = xs[0].value, xs[1].value
            if op == "divide" and np.issubdtype(np.result_type(a, b), np.integer):
                if not np.all(b):
                    raise OnnxImportError("integer division by zero")
                return const(np.trunc(a / b).astype(np.result_type(a, b)), name)
            return const(_FOLD[op](a, b), name)
        return call(op, xs, name=name)

    def Add(self, xs, at, name):  # noqa: N802
        return self._binary("add", xs, name)

    def Sub(self, xs, at, name):  # noqa: N802
        return self._binary("subtract", xs, name)

    def Mul(self, xs, at, name):  # noqa: N802
        return self._binary("multiply", xs, name)

    def Div(self, xs, at, name):  # noqa: N802
        return self._binary("divide", xs, name)

    def Clip(self, xs, at, name):  # noqa: N802
        """``min(max(x, lo), hi)`` keeping NaN inputs NaN, as onnxruntime; an absent or NaN
        bound is the float32 limit, and ``hi`` wins where ``lo > hi``."""
        lo, hi = at.get("min"), at.get("max")  # opset < 11: attributes
        if len(xs) > 1 and xs[1] is not None:
            lo = scalar(self.const_value(xs[1], "Clip min"), "Clip min")
        if len(xs) > 2 and xs[2] is not None:
            hi = scalar(self.const_value(xs[2], "Clip max"), "Clip max")
        lo = float(_F32.min) if lo is None or np.isnan(lo) else float(lo)
        hi = float(_F32.max) if hi is None or np.isnan(hi) else float(hi)
        return call("clip", xs[:1], name=name, a_min=lo, a_max=hi)

    def _pool(self, xs, at, name, kind):
        x = xs[0]
        if len(x.shape) != 4:
            raise OpNotImplemented(f"{kind}Pool: only 2-D pooling is supported")
        kernel = int_list(at, "kernel_shape", 2, None, minimum=1)
        window = _window(at, kernel, x.shape[2:])
        if any(p >= k for p, k in zip(window["padding"], kernel * 2, strict=True)):
            raise OnnxImportError(f"pads {list(window['padding'])} must be smaller than the "
                                  f"kernel {list(kernel)}")
        return call(f"{kind}_pool2d", [x], name=name, kernel=kernel, pool_type=kind,
                    ceil_mode=bool(at.get("ceil_mode", 0)),
                    count_include_pad=bool(at.get("count_include_pad", 0)), **window)

    def MaxPool(self, xs, at, name):  # noqa: N802
        if len(xs) > 1 or at.get("storage_order", 0):
            raise OpNotImplemented("MaxPool: the Indices output / storage_order")
        return self._pool(xs, at, name, "max")

    def AveragePool(self, xs, at, name):  # noqa: N802
        return self._pool(xs, at, name, "avg")

    def GlobalAveragePool(self, xs, at, name):  # noqa: N802
        if len(xs[0].shape) != 4:
            raise OpNotImplemented(f"GlobalAveragePool: only 2-D pooling (NCHW) is "
                                   f"supported, input shape {list(xs[0].shape)}")
        return call("global_avg_pool2d", xs, name=name)

    def ReduceMean(self, xs, at, name):  # noqa: N802
        """The mean over ``axes`` (all when absent): of an NCHW tensor over its spatial
        axes (``x.mean((2, 3))`` in exported models) a global average pooling, else ``mean``
        (a layer norm decomposed by exporters before opset 17)."""
        x = xs[0]
        axes = self._axes(xs, at, "ReduceMean")
        nd = len(x.shape)
        if axes is not None:
            axes = _distinct_axes(axes, nd, "ReduceMean")
        keepdims = bool(at.get("keepdims", 1))
        if nd == 4 and axes is not None and sorted(axes) == [2, 3]:
            return spatial_mean(x, keepdims, name)
        axes = tuple(range(nd)) if axes is None else tuple(sorted(axes))
        return call("mean", [x], name=name, axis=axes, keepdims=keepdims)

    def BatchNormalization(self, xs, at, name):  # noqa: N802
        x, gamma, beta, mean, var = xs
        if len(x.shape) < 2:
            raise OnnxImportError(f"the input's shape {list(x.shape)} has no channel axis")
        eps = float(at.get("epsilon", 1e-5))
        vals = [self.const_value(t, "BatchNormalization parameter")
                for t in (gamma, beta, mean, var)]
        if any(v.shape != x.shape[1:2] for v in vals):
            raise OnnxImportError(f"scale, B, mean and var must have shape [{x.shape[1]}] "
                                  f"(the channels), got {[list(v.shape) for v in vals]}")
        return batch_norm_inference(x, *vals, eps, name)

    def Gemm(self, xs, at, name):  # noqa: N802
        a, b = xs[0], xs[1]
        c = xs[2] if len(xs) > 2 else None
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise OnnxImportError(f"A and B must be 2-D, got shapes {list(a.shape)} and "
                                  f"{list(b.shape)}")
        alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
        trans_a, trans_b = bool(at.get("transA", 0)), bool(at.get("transB", 0))
        m, k = a.shape[::-1] if trans_a else a.shape
        kb, n = b.shape[::-1] if trans_b else b.shape
        if k != kb or (c is not None and _broadcast(c.shape, (m, n)) != (m, n)):
            raise OnnxImportError(
                f"shapes A {list(a.shape)} (transA={int(trans_a)}), B {list(b.shape)} "
                f"(transB={int(trans_b)})" + (f" and C {list(c.shape)}" if c is not None else "") +
                " do not fit")
        if trans_a:
            a = transpose(a, (1, 0), name + "_transA")
        if not trans_b:
            b = transpose(b, (1, 0), name + "_transB")
        if alpha != 1.0:
            b = (const((self.const_value(b, "Gemm B with alpha != 1") * alpha)
                       .astype(b.dtype), f"{b.name}_alpha") if b.is_const
                 else call("multiply", [b, const(np.array(alpha, b.dtype))]))
        y = call("dense", [a, b], name=name)
        if c is not None:
            if beta != 1.0:
                c = (const((c.value * beta).astype(c.dtype), f"{c.name}_beta") if c.is_const
                     else call("multiply", [c, const(np.array(beta, c.dtype))]))
            if len(c.shape) == 1 and c.shape[0] == y.shape[1]:
                y = call("bias_add", [y, c], name=name + "_bias", axis=1)
            else:
                y = call("add", [y, c], name=name + "_bias")
        return y

    def Flatten(self, xs, at, name):  # noqa: N802
        x = xs[0]
        nd = len(x.shape)
        a = axis(at.get("axis", 1), nd, "Flatten axis", end_inclusive=True)
        if a == 1:
            return call("flatten", [x], name=name)
        lead = int(np.prod(x.shape[:a], dtype=np.int64))
        return call("reshape", [x], name=name, newshape=(lead, -1))

    def Reshape(self, xs, at, name):  # noqa: N802
        x = xs[0]
        shape = self.const_ints(xs[1], "Reshape shape")
        if at.get("allowzero", 0) and 0 in shape:
            raise OpNotImplemented("Reshape with allowzero=1 and a 0 in the shape")
        shape = _reshaped(x.shape, shape)
        if x.is_const:
            return const(x.value.reshape(shape), f"{x.name}_reshaped")
        return call("reshape", [x], name=name, newshape=tuple(shape))

    def Softmax(self, xs, at, name):  # noqa: N802
        x = xs[0]
        nd = len(x.shape)
        a = axis(at.get("axis", -1 if self.opset >= 13 else 1), nd, "Softmax axis")
        if self.opset < 13 and a != nd - 1:  # over the flattened axes a.. (a 2-D softmax)
            flat = reshape(x, (math.prod(x.shape[:a]), math.prod(x.shape[a:])), f"{name}_2d")
            y = call("softmax", [flat], name=f"{name}_flat", axis=1)
            return reshape(y, tuple(x.shape), name)
        return call("softmax", [x], name=name, axis=a)

    def Constant(self, xs, at, name):  # noqa: N802
        if "value" not in at:
            raise OpNotImplemented(f"Constant with attributes {sorted(at)}")
        import onnx.numpy_helper

        return const(onnx.numpy_helper.to_array(at["value"]), name)

    def Identity(self, xs, at, name):  # noqa: N802
        return xs[0]

    def Concat(self, xs, at, name):  # noqa: N802
        nd = len(xs[0].shape)
        a = axis(at["axis"], nd, "Concat axis")
        if any(len(x.shape) != nd or x.shape[:a] + x.shape[a + 1:] !=
               xs[0].shape[:a] + xs[0].shape[a + 1:] for x in xs):
            raise OnnxImportError(f"shapes {[list(x.shape) for x in xs]} differ outside the "
                                  f"axis {a}")
        if all(x.is_const for x in xs):
            return const(np.concatenate([x.value for x in xs], a), name)
        return call("concatenate", xs, name=name, axis=a)

    def Slice(self, xs, at, name):  # noqa: N802
        x = xs[0]
        if self.opset < 10:  # starts/ends/axes as attributes
            if "starts" not in at or "ends" not in at:
                raise OnnxImportError(f"Slice (opset {self.opset}) needs the starts and ends "
                                      f"attributes")
            starts, ends, axes, steps = at["starts"], at["ends"], at.get("axes"), None
        else:
            def operand(i, what):
                has = len(xs) > i and xs[i] is not None
                return self.const_ints(xs[i], f"Slice {what}") if has else None
            starts, ends = operand(1, "starts"), operand(2, "ends")
            axes, steps = operand(3, "axes"), operand(4, "steps")
        nd = len(x.shape)
        axes = list(range(len(starts))) if axes is None else _distinct_axes(axes, nd, "Slice")
        steps = steps or [1] * len(axes)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise OnnxImportError(f"Slice: starts, ends, axes and steps differ in length "
                                  f"({len(starts)}, {len(ends)}, {len(axes)}, {len(steps)})")
        if 0 in steps:
            raise OnnxImportError(f"Slice steps {steps} contain 0")
        attrs = {"begin": tuple(int(v) for v in starts), "end": tuple(int(v) for v in ends),
                 "strides": tuple(steps), "axes": tuple(axes)}
        if x.is_const:
            return const(np_strided_slice(x.value, attrs), name)
        return call("strided_slice", [x], name=name, **attrs)

    # ---- shape-computing patterns of exported models (folded at import) ---------------
    def Shape(self, xs, at, name):  # noqa: N802
        shp = np.array(xs[0].shape, dtype=np.int64)
        start, end = at.get("start", 0), at.get("end", None)
        return const(shp[start:end], name)

    def Gather(self, xs, at, name):  # noqa: N802
        """``take`` along ``axis`` (negative indices count from the end); folded when both
        operands are constants (the shape computations of exported models), an embedding
        lookup (``take`` of a constant table at computed indices) otherwise."""
        data, idx = xs
        a = axis(at.get("axis", 0), len(data.shape), "Gather axis")
        n = data.shape[a]
        if idx.is_const and (idx.value.dtype.kind not in "iu" or
                             np.any((idx.value < -n) | (idx.value >= n))):
            raise OnnxImportError(f"Gather indices {idx.value.tolist()} are not integers in "
                                  f"[{-n}, {n - 1}] (axis {a} of shape {list(data.shape)})")
        if data.is_const and idx.is_const:
            return const(np.take(data.value, idx.value, axis=a), name)
        return call("take", [data, idx], name=name, axis=a)

    def _axes(self, xs, at, what):
        if len(xs) > 1:
            return self.const_ints(xs[1], f"{what} axes")
        return list(at["axes"]) if "axes" in at else None

    def Unsqueeze(self, xs, at, name):  # noqa: N802
        x, axes = xs[0], self._axes(xs, at, "Unsqueeze")
        if axes is None:
            raise OnnxImportError("Unsqueeze needs axes")
        shape = list(x.shape)
        for a in sorted(_distinct_axes(axes, len(x.shape) + len(axes), "Unsqueeze")):
            shape.insert(a, 1)
        return reshape(x, tuple(shape), name)

    def Squeeze(self, xs, at, name):  # noqa: N802
        x, axes = xs[0], self._axes(xs, at, "Squeeze")
        nd = len(x.shape)
        axes = [i for i, s in enumerate(x.shape) if s == 1] if axes is None else \
            _distinct_axes(axes, nd, "Squeeze")
        if any(x.shape[a] != 1 for a in axes):
            raise OnnxImportError(f"Squeeze axes {axes} of shape {list(x.shape)} are not all "
                                  f"of size 1")
        shape = [s for i, s in enumerate(x.shape) if i not in axes]
        return reshape(x, tuple(shape), name)

    def Cast(self, xs, at, name):  # noqa: N802
        import onnx

        x = xs[0]
        try:
            to = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(at["to"]))
        except KeyError:
            raise OnnxImportError(f"Cast to {at['to']}, which is not an ONNX tensor "
                                  f"type") from None
        try:
            parse_dtype(to.name)
        except ValueError:
            to_name = onnx.TensorProto.DataType.Name(at["to"])
            raise OpNotImplemented(f"Cast to {to_name}: kiln does not compile "
                                   f"{to_name.lower()} tensors") from None
        if x.is_const:
            return const(x.value.astype(to), name)
        if to.name == x.dtype:
            return x
        return call("cast", [x], name=name, dtype=to.name)

    def Dropout(self, xs, at, name):  # noqa: N802  (inference: identity)
        for x, what in zip(xs[1:], ("ratio", "training_mode"), strict=False):
            if math.prod(x.shape) != 1:
                raise OnnxImportError(f"the {what} input must hold a single value, got shape "
                                      f"{list(x.shape)}")
        return xs[0]

    def Tanh(self, xs, at, name):  # noqa: N802
        return call("tanh", xs, name=name)

    def LeakyRelu(self, xs, at, name):  # noqa: N802
        return call("leaky_relu", xs, name=name, alpha=float(at.get("alpha", 0.01)))

    def Transpose(self, xs, at, name):  # noqa: N802
        nd = len(xs[0].shape)
        perm = tuple(at.get("perm", range(nd)[::-1]))
        if sorted(perm) != list(range(nd)):
            raise OnnxImportError(f"perm {list(perm)} is not a permutation of the {nd} axes")
        return transpose(xs[0], perm, name)

    # ---- transformer operators (attention, layer norm, GELU, masks, embeddings) -------
    def MatMul(self, xs, at, name):  # noqa: N802
        """numpy's ``matmul`` for operands of rank >= 2: a 2-D product is ``dense`` (a
        constant right operand) or ``matmul``; an N-D one with a constant 2-D right operand
        (a linear layer) is ``dense`` on the flattened rows; any other is ``batch_matmul``
        over the broadcast leading (batch) dimensions."""
        a, b = xs
        if len(a.shape) < 2 or len(b.shape) < 2:
            raise OpNotImplemented(f"MatMul of a 1-D operand ({list(a.shape)} x "
                                   f"{list(b.shape)})")
        if a.shape[-1] != b.shape[-2]:
            raise OnnxImportError(f"shapes {list(a.shape)} and {list(b.shape)} cannot be "
                                  f"multiplied")
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        if len(a.shape) == len(b.shape) == 2:
            if b.is_const:
                return call("dense", [a, transpose(b, (1, 0), name)], name=name)
            return call("matmul", [a, b], name=name)
        if len(b.shape) == 2 and b.is_const:
            rows = reshape(a, (math.prod(a.shape[:-1]), k), f"{name}_rows")
            y = call("dense", [rows, transpose(b, (1, 0), name)], name=name)
            return reshape(y, a.shape[:-1] + (n,), f"{name}_out")
        batch = _broadcast(a.shape[:-2], b.shape[:-2])
        a3, b3 = (self._batched(x, batch, rows, f"{name}_{w}")
                  for x, rows, w in ((a, (m, k), "a"), (b, (k, n), "b")))
        y = call("batch_matmul", [a3, b3], name=name)
        return reshape(y, batch + (m, n), f"{name}_out")

    @staticmethod
    def _batched(x: Node, batch: tuple[int, ...], rows: tuple[int, int], name: str) -> Node:
        """``x`` as a 3-D ``[B, rows]`` operand of ``batch_matmul`` for the broadcast
        ``batch`` dimensions: a batch of one stays one (batch_matmul broadcasts it)."""
        if math.prod(x.shape[:-2]) == 1:
            return reshape(x, (1,) + rows, name)
        if tuple(x.shape[:-2]) != batch:
            x = call("broadcast_to", [x], name=f"{name}_bcast", shape=batch + rows)
        return reshape(x, (math.prod(batch),) + rows, name)

    def LayerNormalization(self, xs, at, name):  # noqa: N802
        x, gamma = xs[0], xs[1]
        nd = len(x.shape)
        a = axis(at.get("axis", -1), nd, "LayerNormalization axis")
        norm = tuple(x.shape[a:])
        beta = xs[2] if len(xs) > 2 else const(np.zeros(norm, x.dtype), f"{name}_beta")
        for t, what in ((gamma, "Scale"), (beta, "B")):
            if _broadcast(t.shape, norm) != norm:
                raise OnnxImportError(f"{what}'s shape {list(t.shape)} does not broadcast to "
                                      f"the normalized shape {list(norm)}")
        gamma, beta = (t if t.shape == norm else call("broadcast_to", [t], shape=norm)
                       for t in (gamma, beta))
        return call("layer_norm", [x, gamma, beta], name=name, axis=tuple(range(a, nd)),
                    epsilon=float(at.get("epsilon", 1e-5)))

    def Erf(self, xs, at, name):  # noqa: N802
        return call("erf", xs, name=name)

    def Gelu(self, xs, at, name):  # noqa: N802
        """``x * Φ(x)`` (opset 20): exact, ``0.5 x (1 + erf(x / √2))``, or with
        ``approximate="tanh"``, ``0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))``."""
        x = xs[0]
        approx = at.get("approximate", b"none")
        approx = approx.decode() if isinstance(approx, bytes) else approx

        def c(v: float) -> Node:
            return const(np.array(v, x.dtype))

        if approx == "tanh":
            cube = call("multiply", [call("multiply", [x, x]), x])
            inner = call("add", [x, call("multiply", [cube, c(0.044715)])])
            phi = call("tanh", [call("multiply", [inner, c(math.sqrt(2 / math.pi))])])
        elif approx == "none":
            phi = call("erf", [call("multiply", [x, c(1 / math.sqrt(2))])])
        else:
            raise OnnxImportError(f"Gelu approximate {approx!r} is not 'none' or 'tanh'")
        half_x = call("multiply", [x, c(0.5)])
        return call("multiply", [half_x, call("add", [phi, c(1.0)])], name=name)

    def Sqrt(self, xs, at, name):  # noqa: N802
        return call("sqrt", xs, name=name)

    def Neg(self, xs, at, name):  # noqa: N802
        return call("negative", xs, name=name)

    def Pow(self, xs, at, name):  # noqa: N802
        """``x ** y``; a constant exponent 2 (a variance) is ``x * x``."""
        x, y = xs
        _broadcast(x.shape, y.shape)
        if y.is_const and y.value.size == 1 and float(y.value.reshape(())) == 2.0:
            return call("multiply", [x, x], name=name)
        if y.is_const and y.dtype != x.dtype:
            y = const(y.value.astype(x.dtype), f"{name}_exponent")
        return call("power", [x, y], name=name)

    def Equal(self, xs, at, name):  # noqa: N802
        a, b = xs
        _broadcast(a.shape, b.shape)
        if all(x.is_const for x in xs):
            return const(np.equal(a.value, b.value), name)
        return call("equal", xs, name=name)

    def Where(self, xs, at, name):  # noqa: N802
        cond, x, y = xs
        _broadcast(cond.shape, x.shape, y.shape)
        if all(t.is_const for t in xs):
            return const(np.where(cond.value, x.value, y.value), name)
        return call("where", xs, name=name)

    def ConstantOfShape(self, xs, at, name):  # noqa: N802
        """A constant tensor of the (constant) shape ``xs[0]``, filled with ``value``'s one
        element (float32 0 when absent); exporters write it for expanded class tokens."""
        import onnx.numpy_helper

        shape = self.const_ints(xs[0], "ConstantOfShape shape")
        value = (onnx.numpy_helper.to_array(at["value"]) if "value" in at
                 else np.zeros(1, np.float32))
        if value.size != 1:
            raise OnnxImportError(f"ConstantOfShape value must hold one element, got shape "
                                  f"{list(value.shape)}")
        return const(np.full(shape, value.reshape(()), value.dtype), name)

    def Expand(self, xs, at, name):  # noqa: N802
        x = xs[0]
        shape = _broadcast(x.shape, tuple(self.const_ints(xs[1], "Expand shape")))
        if x.is_const:
            return const(np.broadcast_to(x.value, shape).copy(), name)
        if shape == tuple(x.shape):
            return x
        return call("broadcast_to", [x], name=name, shape=shape)

    def Split(self, xs, at, name):  # noqa: N802
        """The parts of ``x`` along ``axis``: the sizes from the ``split`` input (opset 13)
        or attribute, else ``num_outputs`` (opset 18) or the node's outputs, equal parts
        (the last smaller); each part is a ``strided_slice``."""
        x = xs[0]
        a = axis(at.get("axis", 0), len(x.shape), "Split axis")
        n = x.shape[a]
        if len(xs) > 1:
            sizes = self.const_ints(xs[1], "Split split")
        elif "split" in at:
            sizes = [int(s) for s in at["split"]]
        else:
            parts = int(at.get("num_outputs", self.num_outputs))
            step = -(-n // parts)
            sizes = [min(step, n - i * step) for i in range(parts)]
        if sum(sizes) != n or min(sizes) < 0 or len(sizes) != self.num_outputs:
            raise OnnxImportError(f"Split sizes {sizes} do not cut axis {a} (size {n}) into "
                                  f"the node's {self.num_outputs} outputs")
        starts = np.cumsum([0] + sizes)
        return tuple(self._slice(x, a, int(b), int(e), f"{name}_{i}")
                     for i, (b, e) in enumerate(zip(starts[:-1], starts[1:], strict=True)))

    @staticmethod
    def _slice(x: Node, a: int, begin: int, end: int, name: str) -> Node:
        attrs = {"begin": (begin,), "end": (end,), "strides": (1,), "axes": (a,)}
        if x.is_const:
            return const(np_strided_slice(x.value, attrs), name)
        return call("strided_slice", [x], name=name, **attrs)


def _reshaped(in_shape: tuple[int, ...], shape: list[int]) -> list[int]:
    """ONNX Reshape's target ``shape`` resolved against ``in_shape``: 0 copies the input's
    dimension, one -1 takes the remaining size; the element count must not change."""
    if any(s < -1 for s in shape) or shape.count(-1) > 1:
        raise OnnxImportError(f"Reshape shape {shape}: dimensions must be >= -1, with at most "
                              f"one -1")
    if any(s == 0 and i >= len(in_shape) for i, s in enumerate(shape)):
        raise OnnxImportError(f"Reshape shape {shape} copies (0) a dimension beyond the "
                              f"input's rank {len(in_shape)}")
    out = [in_shape[i] if s == 0 else s for i, s in enumerate(shape)]
    total = int(np.prod(in_shape, dtype=np.int64))
    known = int(np.prod([s for s in out if s != -1], dtype=np.int64))
    if -1 in out and known and total % known == 0:
        out[out.index(-1)] = total // known
    if int(np.prod(out, dtype=np.int64)) != total or -1 in out:
        raise OnnxImportError(f"cannot reshape {list(in_shape)} ({total} elements) into "
                              f"{shape}")
    return out


def _convert_node(conv: _Converter, node, k: int) -> None:
    """Convert one ONNX node into ``conv.values``; errors name the node."""
    name = node.name or f"{node.op_type}_{k}"
    where = f"node {name!r} ({node.op_type}, inputs {list(node.input)})"
    if node.domain not in ("", "ai.onnx"):
        raise OpNotImplemented(f"ONNX operator {node.domain}.{node.op_type} ({where}) is not "
                               f"supported")
    fn = getattr(conv, node.op_type, None)
    if fn is None or not node.op_type[:1].isupper():  # not a helper of the converter
        raise OpNotImplemented(f"ONNX operator {node.op_type!r} ({where}) is not supported by "
                               f"kiln's importer")
    xs = []
    for i in node.input:
        if i == "":
            xs.append(None)
            continue
        if i not in conv.values:
            raise OnnxImportError(f"{where} reads {i!r}, which no node, input or initializer "
                                  f"defines")
        xs.append(conv.values[i])
    real_outs = [o for o in node.output if o]
    if node.op_type == "Dropout":
        real_outs = real_outs[:1]
    conv.num_outputs = len(real_outs)
    if len(real_outs) != 1 and node.op_type != "Split":
        what = "BatchNormalization in training mode" if node.op_type == \
            "BatchNormalization" else f"{node.op_type} with {len(real_outs)} outputs"
        raise OpNotImplemented(f"{where}: {what}")
    try:
        check_missing_inputs(node, conv.opset)
        check_operand_dtypes(node.op_type, xs)
        _check_symbolic(node.op_type, xs)
        keep_missing = node.op_type in ("Clip", "Slice")  # optional inputs by position
        args = xs if keep_missing else [x for x in xs if x is not None]
        out = fn(args, _attrs(node), name)
    except (OpNotImplemented, OnnxImportError) as e:
        raise type(e)(f"{where}: {e}") from None
    for o, v in zip(real_outs, out if isinstance(out, tuple) else (out,), strict=True):
        conv.values[o] = v


def from_onnx(model, shape: dict | None = None, dtype: str = "float32", opset=None,
              freeze_params: bool = True):
    """Convert an ``onnx.ModelProto`` (or its serialized bytes) into ``(mod, params)``.

    ``dtype`` and ``freeze_params`` are TVM's parameters, accepted for compatibility: ONNX
    graph inputs carry their element type, and initializers are always parameters."""
    try:
        import onnx
        import onnx.numpy_helper
    except ImportError as e:  # pragma: no cover
        raise ImportError("relay.frontend.from_onnx needs the onnx package "
                          "(pip install 'kiln[onnx]')") from e
    model = load(model)
    model_opset = check_model(model)
    g = model.graph
    conv = _Converter(int(opset) if opset is not None else model_opset)
    shape = dict(shape or {})
    params = {}
    from kiln.runtime import ndarray as nd

    for init in g.initializer:
        arr = onnx.numpy_helper.to_array(init)
        conv.values[init.name] = c = const(arr, init.name)
        c.attrs["param"] = True
        params[init.name] = arr
    inputs = []
    dims: dict = {}  # symbolic dimension name -> its te.var, shared by the inputs naming it
    for vi in g.input:
        if vi.name in conv.values:
            continue
        shp, dt = input_type(vi, shape.get(vi.name), dims)
        n = input_node(vi.name, shp, dt)
        conv.values[vi.name] = n
        inputs.append(n)
    for k, node in enumerate(g.node):
        _convert_node(conv, node, k)
    outputs = []
    for o in g.output:
        if o.name not in conv.values:
            raise OnnxImportError(f"graph output {o.name!r} is not produced by any node")
        outputs.append(conv.values[o.name])
    used = {n.name for n in Graph(inputs, outputs).nodes if n.is_const and n.attrs.get("param")}
    params = {k: nd.array(v) for k, v in params.items() if k in used}
    return Module(Graph(inputs, outputs)), params
