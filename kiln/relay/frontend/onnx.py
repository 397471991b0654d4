"""ONNX importer: ``relay.frontend.from_onnx(model, shape=None) -> (mod, params)``.

Initializers become parameters (``params``, name -> NDArray) referenced by constant nodes;
graph inputs that are not initializers become graph inputs, their shapes from the model or
from ``shape`` (name -> tuple).
"""

from __future__ import annotations

import numpy as np

from kiln.errors import TVMError

from ..graph import Graph, Module, Node, call, const, input_node
from ..op import np_strided_slice


class OnnxImportError(TVMError, ValueError):
    """The ONNX model is malformed or cannot be converted."""


class OpNotImplemented(NotImplementedError):
    """An ONNX operator kiln cannot convert."""


def _attrs(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pair(v, default):
    if v is None:
        return default
    v = list(v)
    return (int(v[0]), int(v[1])) if len(v) == 2 else (int(v[0]), int(v[0]))


def _pads(at, kernel, strides, dilation, in_hw):
    auto = at.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
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
    p = list(at.get("pads", [0, 0, 0, 0]))
    if len(p) != 4:
        raise OpNotImplemented(f"only 2-D pads are supported, got {p}")
    return (int(p[0]), int(p[1]), int(p[2]), int(p[3]))


_FOLD = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
         "divide": np.divide}


class _Converter:
    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.values: dict[str, Node] = {}

    def const_value(self, n: Node, what: str) -> np.ndarray:
        if not n.is_const:
            raise OpNotImplemented(f"{what} must be a constant (got a computed tensor)")
        return n.value

    # ---- converters: (inputs, attrs, name) -> Node ------------------------------------
    def Conv(self, xs, at, name):  # noqa: N802
        x, w = xs[0], xs[1]
        if len(x.shape) != 4:
            raise OpNotImplemented(f"Conv: only 2-D convolutions (NCHW) are supported, "
                                   f"input shape {list(x.shape)}")
        kernel = tuple(w.shape[2:])
        strides = _pair(at.get("strides"), (1, 1))
        dilation = _pair(at.get("dilations"), (1, 1))
        pads = _pads(at, kernel, strides, dilation, x.shape[2:])
        return call("conv2d", xs, name=name, strides=strides, padding=pads, dilation=dilation,
                    groups=int(at.get("group", 1)))

    def Relu(self, xs, at, name):  # noqa: N802
        return call("relu", xs, name=name)

    def Sigmoid(self, xs, at, name):  # noqa: N802
        return call("sigmoid", xs, name=name)

    def _binary(self, op, xs, name):
        """Broadcasting arithmetic (topi follows numpy); on two constants (shape
        computations of exported models, e.g. a channel count halved for a Slice) it is
        folded here, integer division truncating as ONNX's."""
        if all(x.is_const for x in xs):
            a, b = xs[0].value, xs[1].value
            if op == "divide" and np.issubdtype(np.result_type(a, b), np.integer):
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
        lo, hi = at.get("min", -np.inf), at.get("max", np.inf)
        if len(xs) > 1 and xs[1] is not None:
            lo = float(self.const_value(xs[1], "Clip min"))
        if len(xs) > 2 and xs[2] is not None:
            hi = float(self.const_value(xs[2], "Clip max"))
        lo = float(max(lo, np.finfo(np.float32).min))
        hi = float(min(hi, np.finfo(np.float32).max))
        return call("clip", xs[:1], name=name, a_min=lo, a_max=hi)

    def _pool(self, xs, at, name, kind):
        x = xs[0]
        if len(x.shape) != 4:
            raise OpNotImplemented(f"{kind}Pool: only 2-D pooling is supported")
        kernel = _pair(at["kernel_shape"], None)
        strides = _pair(at.get("strides"), (1, 1))
        dilation = _pair(at.get("dilations"), (1, 1))
        pads = _pads(at, kernel, strides, dilation, x.shape[2:])
        return call(f"{kind}_pool2d", [x], name=name, kernel=kernel, strides=strides,
                    dilation=dilation, padding=pads, pool_type=kind,
                    ceil_mode=bool(at.get("ceil_mode", 0)),
                    count_include_pad=bool(at.get("count_include_pad", 0)))

    def MaxPool(self, xs, at, name):  # noqa: N802
        if len(xs) > 1 or at.get("storage_order", 0):
            raise OpNotImplemented("MaxPool: the Indices output / storage_order")
        return self._pool(xs, at, name, "max")

    def AveragePool(self, xs, at, name):  # noqa: N802
        return self._pool(xs, at, name, "avg")

    def GlobalAveragePool(self, xs, at, name):  # noqa: N802
        return call("global_avg_pool2d", xs, name=name)

    def ReduceMean(self, xs, at, name):  # noqa: N802
        """The spatial mean of an NCHW tensor (``x.mean((2, 3))`` in exported models) as a
        global average pooling; other reductions are not supported."""
        x = xs[0]
        axes = self._axes(xs, at, "ReduceMean")
        nd = len(x.shape)
        if nd != 4 or axes is None or sorted(a % nd for a in axes) != [2, 3]:
            raise OpNotImplemented(f"ReduceMean over axes {axes} of a {nd}-D tensor (only the "
                                   f"spatial axes (2, 3) of NCHW)")
        y = call("global_avg_pool2d", [x], name=name if at.get("keepdims", 1) else
                 f"{name}_pool")
        if at.get("keepdims", 1):
            return y
        return call("reshape", [y], name=name, newshape=tuple(x.shape[:2]))

    def BatchNormalization(self, xs, at, name):  # noqa: N802
        x, gamma, beta, mean, var = xs
        eps = float(at.get("epsilon", 1e-5))
        vals = [self.const_value(t, "BatchNormalization parameter")
                for t in (gamma, beta, mean, var)]
        g, b, m, v = (np.asarray(a, dtype=np.float64) for a in vals)
        scale = g / np.sqrt(v + eps)
        shift = b - m * scale
        dtype = x.dtype
        # out = x * scale[c] + shift[c]: a multiply by a [C,1,1] constant then a bias add
        cshape = (-1,) + (1,) * (len(x.shape) - 2)
        y = call("multiply", [x, const(scale.astype(dtype).reshape(cshape),
                                       f"{name}_scale")], name=f"{name}_scale")
        return call("bias_add", [y, const(shift.astype(dtype), f"{name}_shift")], name=name,
                    axis=1)

    def Gemm(self, xs, at, name):  # noqa: N802
        a, b = xs[0], xs[1]
        c = xs[2] if len(xs) > 2 else None
        alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
        if at.get("transA", 0):
            a = self._transpose(a, (1, 0), name + "_transA")
        if not at.get("transB", 0):
            b = self._transpose(b, (1, 0), name + "_transB")
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

    def _transpose(self, x, axes, name):
        if x.is_const:
            return const(np.ascontiguousarray(np.transpose(x.value, axes)), f"{x.name}_T")
        return call("transpose", [x], name=name, axes=tuple(axes))

    def MatMul(self, xs, at, name):  # noqa: N802
        a, b = xs
        if len(a.shape) == 2 and len(b.shape) == 2:
            if b.is_const:
                return call("dense", [a, self._transpose(b, (1, 0), name)], name=name)
            return call("matmul", [a, b], name=name)
        raise OpNotImplemented(f"MatMul: only 2-D x 2-D is supported, got {list(a.shape)} x "
                               f"{list(b.shape)}")

    def Flatten(self, xs, at, name):  # noqa: N802
        x = xs[0]
        axis = int(at.get("axis", 1))
        axis = axis + len(x.shape) if axis < 0 else axis
        lead = int(np.prod(x.shape[:axis], dtype=np.int64))
        if axis == 1:
            return call("flatten", [x], name=name)
        return call("reshape", [x], name=name, newshape=(lead, -1))

    def Reshape(self, xs, at, name):  # noqa: N802
        x = xs[0]
        shape = [int(s) for s in self.const_value(xs[1], "Reshape shape")] if len(xs) > 1 \
            else list(at["shape"])
        if at.get("allowzero", 0) and 0 in shape:
            raise OpNotImplemented("Reshape with allowzero=1 and a 0 in the shape")
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
        if x.is_const:
            return const(x.value.reshape(shape), f"{x.name}_reshaped")
        return call("reshape", [x], name=name, newshape=tuple(shape))

    def Softmax(self, xs, at, name):  # noqa: N802
        x = xs[0]
        nd = len(x.shape)
        axis = int(at.get("axis", -1 if self.opset >= 13 else 1)) % nd
        if self.opset < 13 and axis != nd - 1:
            raise OpNotImplemented(f"Softmax (opset {self.opset}) with axis {axis} on a "
                                   f"{nd}-D input (flattening semantics)")
        return call("softmax", [x], name=name, axis=axis)

    def Constant(self, xs, at, name):  # noqa: N802
        if "value" not in at:
            raise OpNotImplemented(f"Constant with attributes {sorted(at)}")
        import onnx.numpy_helper

        return const(onnx.numpy_helper.to_array(at["value"]), name)

    def Identity(self, xs, at, name):  # noqa: N802
        return xs[0]

    def Concat(self, xs, at, name):  # noqa: N802
        axis = int(at["axis"]) % len(xs[0].shape)
        if all(x.is_const for x in xs):
            return const(np.concatenate([x.value for x in xs], axis), name)
        return call("concatenate", xs, name=name, axis=axis)

    def Slice(self, xs, at, name):  # noqa: N802
        x = xs[0]
        if self.opset < 10:  # starts/ends/axes as attributes
            if "starts" not in at or "ends" not in at:
                raise OnnxImportError(f"Slice {name!r} (opset {self.opset}) needs the "
                                      f"starts and ends attributes")
            starts, ends, axes, steps = at["starts"], at["ends"], at.get("axes"), None
        else:
            def operand(i, what):
                has = len(xs) > i and xs[i] is not None
                return [int(v) for v in self.const_value(xs[i], f"Slice {what}")] if has \
                    else None
            starts, ends = operand(1, "starts"), operand(2, "ends")
            axes, steps = operand(3, "axes"), operand(4, "steps")
        nd = len(x.shape)
        axes = list(range(len(starts))) if axes is None else [int(a) % nd for a in axes]
        steps = steps or [1] * len(axes)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise OnnxImportError(f"Slice {name!r}: starts, ends, axes and steps differ in "
                                  f"length ({len(starts)}, {len(ends)}, {len(axes)}, "
                                  f"{len(steps)})")
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
        data, idx = xs
        if not (data.is_const and idx.is_const):
            raise OpNotImplemented("Gather on a computed tensor (only constant folding of "
                                   "shape computations is supported)")
        return const(np.take(data.value, idx.value, axis=int(at.get("axis", 0))), name)

    def _axes(self, xs, at, what):
        if len(xs) > 1:
            return [int(a) for a in self.const_value(xs[1], f"{what} axes")]
        return list(at["axes"]) if "axes" in at else None

    def Unsqueeze(self, xs, at, name):  # noqa: N802
        x, axes = xs[0], self._axes(xs, at, "Unsqueeze")
        nd = len(x.shape) + len(axes)
        shape = list(x.shape)
        for a in sorted(a % nd for a in axes):
            shape.insert(a, 1)
        if x.is_const:
            return const(x.value.reshape(shape), name)
        return call("reshape", [x], name=name, newshape=tuple(shape))

    def Squeeze(self, xs, at, name):  # noqa: N802
        x, axes = xs[0], self._axes(xs, at, "Squeeze")
        nd = len(x.shape)
        axes = [i for i, s in enumerate(x.shape) if s == 1] if axes is None else \
            [a % nd for a in axes]
        shape = [s for i, s in enumerate(x.shape) if i not in axes]
        if x.is_const:
            return const(x.value.reshape(shape), name)
        return call("reshape", [x], name=name, newshape=tuple(shape))

    def Cast(self, xs, at, name):  # noqa: N802
        import onnx

        x = xs[0]
        to = onnx.helper.tensor_dtype_to_np_dtype(at["to"])
        if x.is_const:
            return const(x.value.astype(to), name)
        if np.dtype(to).name == x.dtype:
            return x
        raise OpNotImplemented(f"Cast of a computed tensor from {x.dtype} to {np.dtype(to)}")

    def Dropout(self, xs, at, name):  # noqa: N802  (inference: identity)
        return xs[0]

    def Tanh(self, xs, at, name):  # noqa: N802
        return call("tanh", xs, name=name)

    def LeakyRelu(self, xs, at, name):  # noqa: N802
        return call("leaky_relu", xs, name=name, alpha=float(at.get("alpha", 0.01)))

    def Transpose(self, xs, at, name):  # noqa: N802
        axes = tuple(at.get("perm", range(len(xs[0].shape))[::-1]))
        return self._transpose(xs[0], axes, name)


def from_onnx(model, shape: dict | None = None, dtype: str = "float32", opset=None,
              freeze_params: bool = True):
    """Convert an ``onnx.ModelProto`` into ``(mod, params)``."""
    try:
        import onnx
        import onnx.numpy_helper
    except ImportError as e:  # pragma: no cover
        raise ImportError("relay.frontend.from_onnx needs the onnx package "
                          "(pip install 'kiln[onnx]')") from e
    if not isinstance(model, onnx.ModelProto):
        raise OnnxImportError(f"from_onnx expects an onnx.ModelProto, got {type(model).__name__}")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise OnnxImportError(f"malformed ONNX model: {e}") from None
    g = model.graph
    if opset is None:
        opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                    default=13)
    conv = _Converter(int(opset))
    shape = dict(shape or {})
    params = {}
    from kiln.runtime import ndarray as nd

    for init in g.initializer:
        arr = onnx.numpy_helper.to_array(init)
        conv.values[init.name] = c = const(arr, init.name)
        c.attrs["param"] = True
        params[init.name] = nd.array(arr)
    inputs = []
    for vi in g.input:
        if vi.name in conv.values:
            continue
        tt = vi.type.tensor_type
        if vi.name in shape:
            shp = tuple(int(s) for s in shape[vi.name])
        else:
            shp = []
            for d in tt.shape.dim:
                if not d.HasField("dim_value"):
                    raise OnnxImportError(
                        f"input {vi.name!r} has a symbolic dimension {d.dim_param!r}: pass "
                        f"shape={{'{vi.name}': (...)}}")
                shp.append(d.dim_value)
        dt = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else dtype
        n = input_node(vi.name, shp, dt)
        conv.values[vi.name] = n
        inputs.append(n)
    for k, node in enumerate(g.node):
        name = node.name or f"{node.op_type}_{k}"
        if node.domain not in ("", "ai.onnx"):
            raise OpNotImplemented(f"ONNX operator {node.domain}.{node.op_type} (node {name!r}, "
                                   f"inputs {list(node.input)}) is not supported")
        fn = getattr(conv, node.op_type, None)
        if fn is None or node.op_type.startswith("_"):
            raise OpNotImplemented(
                f"ONNX operator {node.op_type!r} (node {name!r}, inputs {list(node.input)}) is "
                f"not supported by kiln's importer")
        xs = []
        for i in node.input:
            if i == "":
                xs.append(None)
                continue
            if i not in conv.values:
                raise OnnxImportError(f"node {name!r} ({node.op_type}) reads {i!r}, which no "
                                      f"node, input or initializer defines")
            xs.append(conv.values[i])
        try:
            keep_missing = node.op_type in ("Clip", "Slice")  # optional inputs by position
            args = xs if keep_missing else [x for x in xs if x is not None]
            out = fn(args, _attrs(node), name)
        except OpNotImplemented as e:
            raise OpNotImplemented(f"node {name!r} ({node.op_type}, inputs {list(node.input)}): "
                                   f"{e}") from None
        real_outs = [o for o in node.output if o]
        if node.op_type == "Dropout":
            real_outs = real_outs[:1]
        if len(real_outs) != 1 and node.op_type != "BatchNormalization":
            raise OpNotImplemented(f"node {name!r} ({node.op_type}) with {len(real_outs)} "
                                   f"outputs")
        if node.op_type == "BatchNormalization" and len(real_outs) > 1:
            raise OpNotImplemented(f"node {name!r}: BatchNormalization in training mode "
                                   f"(several outputs)")
        conv.values[real_outs[0]] = out
    outputs = []
    for o in g.output:
        if o.name not in conv.values:
            raise OnnxImportError(f"graph output {o.name!r} is not produced by any node")
        outputs.append(conv.values[o.name])
    used = {n.name for n in Graph(inputs, outputs).nodes if n.is_const and n.attrs.get("param")}
    params = {k: v for k, v in params.items() if k in used}
    return Module(Graph(inputs, outputs)), params
