"""The PyTorch importer's operator table: ``aten::`` operator name -> converter.

A converter takes the operator's arguments in TorchScript's order, already converted (a graph
:class:`~kiln.relay.graph.Node` for a tensor; ``int``, ``float``, ``bool``, ``str``, ``None``
or a list of them for the rest), and the name of the value it produces, and returns the
converted value. Tensors of kiln's graph are static: sizes (``aten::size``) are Python ints,
and arithmetic on Python numbers or constant nodes is folded now, so shape computations such
as ``x.view(x.size(0), -1)`` become constant reshapes.

Guarantees: each converter builds only operators of :data:`kiln.relay.op.OPS` with
PyTorch's semantics for the argument forms it accepts (in-place variants ``relu_``, ``add_``
are converted as their functional form by the importer); any other form raises
``NotImplementedError`` saying what is not supported.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import numpy as np

from ..graph import Node, call, const
from ..op import np_strided_slice
from .common import batch_norm_inference, reshape, spatial_mean, transpose

#: float32's range: a ``clamp`` bound left out
_F32 = np.finfo(np.float32)


# ---- argument helpers --------------------------------------------------------------------
def _tensor(v, what: str = "operand") -> Node:
    if not isinstance(v, Node):
        raise NotImplementedError(f"the {what} must be a tensor, got {type(v).__name__} {v!r}")
    return v


def _pair(v) -> tuple[int, int]:
    """A 2-D window argument: one int or a list of two."""
    vals = [int(i) for i in (v if isinstance(v, (list, tuple)) else [v])]
    return (vals[0], vals[0]) if len(vals) == 1 else (vals[0], vals[1])


def _axis(a: int, rank: int) -> int:
    if not -rank <= a < rank:
        raise ValueError(f"dimension {a} is out of range for a {rank}-D tensor")
    return a % rank


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _resolved(shape: list, numel: int) -> tuple[int, ...]:
    """A ``view``/``reshape`` target with its one ``-1`` resolved."""
    if any(isinstance(s, Node) for s in shape):
        raise NotImplementedError("a shape computed from tensor values (only sizes known at "
                                  "import)")
    dims = [int(s) for s in shape]
    known = _numel([s for s in dims if s != -1])
    if dims.count(-1) == 1 and known and numel % known == 0:
        dims[dims.index(-1)] = numel // known
    if _numel(dims) != numel or -1 in dims:
        raise ValueError(f"shape {list(shape)} is invalid for an input of {numel} elements")
    return tuple(dims)


def _scalar(v):
    """The Python number of a number or a 0-d constant node (``prim::NumToTensor``'s)."""
    if isinstance(v, Node) and v.is_const and v.value.ndim == 0:
        return v.value.item()
    if isinstance(v, Node):
        raise NotImplementedError(f"a scalar computed from tensor values ({v.name})")
    return v


def _is_constant(v) -> bool:
    return not isinstance(v, Node) or v.is_const


# ---- arithmetic --------------------------------------------------------------------------
#: each operator on Python values (TorchScript's int, float and list arithmetic) ...
_PYTHON = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
           "divide": operator.truediv, "floor_divide": operator.floordiv}
#: ... and on constant tensors
_NUMPY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "divide": np.true_divide, "floor_divide": np.floor_divide}


def _is_scalar(v) -> bool:
    """A Python number or a 0-d constant node (TorchScript's scalars)."""
    return not isinstance(v, Node) or (v.is_const and not v.shape)


def _operands(a, b) -> tuple[Node, Node]:
    """Both operands as nodes: a scalar takes the dtype of the other, a tensor, operand (as
    PyTorch's type promotion keeps a tensor's dtype against a scalar of its kind)."""
    def like(scalar, tensor: Node) -> Node:
        v = np.asarray(_scalar(scalar))
        if v.dtype.kind == "f" and np.dtype(tensor.dtype).kind != "f":
            raise NotImplementedError(f"arithmetic of a {tensor.dtype} tensor with a float "
                                      f"scalar")
        return const(v.astype(tensor.dtype))

    if _is_scalar(a) and not _is_scalar(b):
        return like(a, b), b
    if _is_scalar(b) and not _is_scalar(a):
        return a, like(b, a)
    return a, b


def _arith(op: str, a, b, name: str):
    """``a op b`` with broadcasting, folded now when neither side is computed: Python values
    with Python's operator (a size stays an int), constant nodes with numpy's."""
    if not isinstance(a, Node) and not isinstance(b, Node):
        return _PYTHON[op](a, b)
    if _is_constant(a) and _is_constant(b):
        va, vb = (x.value if isinstance(x, Node) else x for x in (a, b))
        return const(_NUMPY[op](va, vb), name)
    if op == "floor_divide":
        raise NotImplementedError("floor division of computed tensors")
    return call(op, list(_operands(a, b)), name=name)


def _scaled(v, alpha, name: str):
    return v if alpha == 1 else _arith("multiply", v, alpha, f"{name}_alpha")


def _add(a, b, alpha=1, name=""):
    return _arith("add", a, _scaled(b, alpha, name), name)


def _sub(a, b, alpha=1, name=""):
    return _arith("subtract", a, _scaled(b, alpha, name), name)


def _rsub(a, b, alpha=1, name=""):
    return _arith("subtract", b, _scaled(a, alpha, name), name)


def _mul(a, b, name=""):
    return _arith("multiply", a, b, name)


def _div(a, b, rounding_mode=None, name=""):
    if rounding_mode is None:
        return _arith("divide", a, b, name)
    if rounding_mode == "floor":
        return _arith("floor_divide", a, b, name)
    if isinstance(a, Node) or isinstance(b, Node):
        raise NotImplementedError(f"division of tensors with rounding_mode={rounding_mode!r}")
    return int(a / b)  # "trunc" of Python numbers


# ---- neural-network operators ------------------------------------------------------------
def _conv2d(x, w, b, stride, padding, dilation, groups, name=""):
    x, w = _tensor(x, "input"), _tensor(w, "weight")
    if len(x.shape) != 4:
        raise NotImplementedError(f"only 2-D convolutions (NCHW) are supported, input shape "
                                  f"{list(x.shape)}")
    dil = _pair(dilation)
    if isinstance(padding, str):  # conv2d(padding="same" | "valid")
        pad = [0, 0, 0, 0]
        if padding == "same":
            for i, (k, d) in enumerate(zip(w.shape[2:], dil, strict=True)):
                total = d * (k - 1)
                pad[i], pad[i + 2] = total // 2, total - total // 2
        padding4 = tuple(pad)
    else:
        ph, pw = _pair(padding)
        padding4 = (ph, pw, ph, pw)
    inputs = [x, w] + ([_tensor(b, "bias")] if b is not None else [])
    return call("conv2d", inputs, name=name, groups=int(groups), strides=_pair(stride),
                dilation=dil, padding=padding4)


def _convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups,
                 *flags, name=""):
    if transposed:
        raise NotImplementedError("transposed convolutions (conv_transpose2d)")
    return _conv2d(x, w, b, stride, padding, dilation, groups, name=name)


def _dense(x: Node, w: Node, name: str) -> Node:
    """``x @ w.T`` for ``x`` of any rank >= 1 and a 2-D ``w`` (``[out, in]``): the leading
    axes of ``x`` are flattened around a 2-D ``dense``."""
    lead = x.shape[:-1]
    if len(x.shape) != 2:
        x = reshape(x, (_numel(lead), x.shape[-1]), f"{name}_2d")
    y = call("dense", [x, w], name=name if len(lead) == 1 else f"{name}_dense")
    return y if len(lead) == 1 else reshape(y, (*lead, w.shape[0]), name)


def _linear(x, w, b=None, name=""):
    x, w = _tensor(x, "input"), _tensor(w, "weight")
    if b is None:
        return _dense(x, w, name)
    y = _dense(x, w, f"{name}_dense")
    return call("bias_add", [y, _tensor(b, "bias")], name=name, axis=len(y.shape) - 1)


def _matmul(a, b, name=""):
    a, b = _tensor(a), _tensor(b)
    if len(b.shape) != 2 or len(a.shape) < 2:
        raise NotImplementedError(f"matmul of shapes {list(a.shape)} and {list(b.shape)} "
                                  f"(only a right operand of 2 dimensions)")
    if b.is_const:
        return _dense(a, transpose(b, (1, 0), name), name)
    if len(a.shape) != 2:
        raise NotImplementedError(f"matmul of a {len(a.shape)}-D tensor by a computed one")
    return call("matmul", [a, b], name=name)


def _addmm(bias, m1, m2, beta=1, alpha=1, name=""):
    y = _scaled(_matmul(m1, m2, name=f"{name}_mm"), alpha, f"{name}_mm")
    return _arith("add", y, _scaled(bias, beta, f"{name}_bias"), name)


def _t(x, name=""):
    x = _tensor(x)
    return x if len(x.shape) < 2 else transpose(x, (1, 0), name)


def _clip(x, lo, hi, name: str) -> Node:
    lo = float(_F32.min) if lo is None else float(_scalar(lo))
    hi = float(_F32.max) if hi is None else float(_scalar(hi))
    return call("clip", [_tensor(x)], name=name, a_min=lo, a_max=hi)


def _gelu(x, approximate="none", name=""):
    """``x * (0.5 + 0.5 * erf(x / sqrt(2)))``, or with ``approximate="tanh"``
    ``x * (0.5 + 0.5 * tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``: elementwise operators that
    fuse into one kernel."""
    x = _tensor(x)
    if approximate == "tanh":
        c = math.sqrt(2 / math.pi)
        x2 = _arith("multiply", x, x, f"{name}_sq")
        inner = _arith("multiply", x, _arith("add", _arith("multiply", x2, c * 0.044715,
                                                           f"{name}_c3"), c, f"{name}_poly"),
                       f"{name}_inner")
        s = call("tanh", [inner], name=f"{name}_tanh")
    elif approximate == "none":
        s = call("erf", [_arith("multiply", x, 1 / math.sqrt(2), f"{name}_scaled")],
                 name=f"{name}_erf")
    else:
        raise ValueError(f"gelu approximate={approximate!r} is not 'none' or 'tanh'")
    half = _arith("add", _arith("multiply", s, 0.5, f"{name}_half"), 0.5, f"{name}_cdf")
    return _arith("multiply", x, half, name)


def _pool(kind: str, x, kernel, stride, padding, dilation, ceil_mode, count_include_pad,
          name: str) -> Node:
    x = _tensor(x)
    if len(x.shape) != 4:
        raise NotImplementedError(f"only 2-D pooling (NCHW) is supported, input shape "
                                  f"{list(x.shape)}")
    k = _pair(kernel)
    ph, pw = _pair(padding)
    return call(f"{kind}_pool2d", [x], name=name, kernel=k, pool_type=kind,
                strides=_pair(stride) if stride else k, dilation=_pair(dilation),
                padding=(ph, pw, ph, pw), ceil_mode=bool(ceil_mode),
                count_include_pad=bool(count_include_pad))


def _max_pool2d(x, kernel, stride, padding, dilation, ceil_mode, name=""):
    return _pool("max", x, kernel, stride, padding, dilation, ceil_mode, False, name)


def _avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad,
                divisor_override=None, name=""):
    if divisor_override is not None:
        raise NotImplementedError("avg_pool2d with divisor_override")
    return _pool("avg", x, kernel, stride, padding, 1, ceil_mode, count_include_pad, name)


def _adaptive_avg_pool2d(x, output_size, name=""):
    """A global pooling for a 1x1 output; a plain pooling where the output size divides the
    input's; other sizes (overlapping windows of varying size) are not supported."""
    x = _tensor(x)
    if len(x.shape) != 4:
        raise NotImplementedError(f"only 2-D pooling (NCHW) is supported, input shape "
                                  f"{list(x.shape)}")
    h, w = x.shape[2:]
    oh, ow = (s if s is not None else d for s, d in zip(
        output_size if isinstance(output_size, (list, tuple)) else [output_size] * 2,
        (h, w), strict=True))
    if (oh, ow) == (1, 1):
        return call("global_avg_pool2d", [x], name=name)
    if h % oh or w % ow:
        raise NotImplementedError(f"adaptive_avg_pool2d from {h}x{w} to {oh}x{ow} (only "
                                  f"output sizes that divide the input's)")
    k = (h // oh, w // ow)
    return _pool("avg", x, k, k, 0, 1, False, False, name)


def _batch_norm(x, gamma, beta, mean, var, training, momentum, eps, cudnn, name=""):
    x = _tensor(x)
    if training:
        raise NotImplementedError("batch_norm in training mode (call model.eval() before "
                                  "tracing)")
    stats = [_tensor(t, "running statistic") for t in (mean, var)]
    if not all(s.is_const for s in stats) or not all(
            p is None or (isinstance(p, Node) and p.is_const) for p in (gamma, beta)):
        raise NotImplementedError("batch_norm with computed statistics or weights")
    c = x.shape[1]
    g = np.ones(c) if gamma is None else gamma.value
    b = np.zeros(c) if beta is None else beta.value
    return batch_norm_inference(x, g, b, stats[0].value, stats[1].value, float(eps), name)


def _softmax(x, dim, dtype=None, name=""):
    x = _tensor(x)
    if dtype is not None:
        raise NotImplementedError("softmax with a dtype argument")
    return call("softmax", [x], name=name, axis=_axis(dim, len(x.shape)))


def _mean(x, dims, keepdim=False, dtype=None, name=""):
    x = _tensor(x)
    nd = len(x.shape)
    axes = sorted(_axis(d, nd) for d in (dims if isinstance(dims, (list, tuple)) else [dims]))
    if nd != 4 or axes != [2, 3] or dtype is not None:
        raise NotImplementedError(f"mean over dims {dims} of a {nd}-D tensor (only the "
                                  f"spatial dims (2, 3) of NCHW)")
    return spatial_mean(x, bool(keepdim), name)


# ---- shapes and data movement ------------------------------------------------------------
def _view(x, shape, name=""):
    x = _tensor(x)
    return reshape(x, _resolved(list(shape), _numel(x.shape)), name)


def _flatten(x, start_dim=0, end_dim=-1, name=""):
    x = _tensor(x)
    nd = len(x.shape)
    if nd == 0:
        return reshape(x, (1,), name)
    s, e = _axis(start_dim, nd), _axis(end_dim, nd)
    if (s, e) == (1, nd - 1) and not x.is_const:
        return call("flatten", [x], name=name)
    shape = x.shape[:s] + (_numel(x.shape[s:e + 1]),) + x.shape[e + 1:]
    return reshape(x, shape, name)


def _unsqueeze(x, dim, name=""):
    x = _tensor(x)
    shape = list(x.shape)
    shape.insert(_axis(dim, len(shape) + 1), 1)
    return reshape(x, tuple(shape), name)


def _squeeze(x, dim=None, name=""):
    x = _tensor(x)
    nd = len(x.shape)
    dims = range(nd) if dim is None else [_axis(d, nd) for d in
                                          (dim if isinstance(dim, (list, tuple)) else [dim])]
    drop = {d for d in dims if x.shape[d] == 1}
    return reshape(x, tuple(s for i, s in enumerate(x.shape) if i not in drop), name)


def _permute(x, dims, name=""):
    x = _tensor(x)
    nd = len(x.shape)
    return transpose(x, tuple(_axis(d, nd) for d in dims), name)


def _transpose(x, dim0, dim1, name=""):
    x = _tensor(x)
    perm = list(range(len(x.shape)))
    a, b = _axis(dim0, len(perm)), _axis(dim1, len(perm))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, tuple(perm), name)


def _cat(tensors, dim=0, name=""):
    xs = [_tensor(t) for t in tensors]
    a = _axis(dim, len(xs[0].shape))
    if all(x.is_const for x in xs):
        return const(np.concatenate([x.value for x in xs], a), name)
    return call("concatenate", xs, name=name, axis=a)


def _strided_slice(x: Node, dim: int, begin: int, end: int, step: int, name: str) -> Node:
    attrs = {"begin": (begin,), "end": (end,), "strides": (step,), "axes": (dim,)}
    if x.is_const:
        return const(np_strided_slice(x.value, attrs), name)
    return call("strided_slice", [x], name=name, **attrs)


def _slice(x, dim=0, start=None, end=None, step=1, name=""):
    x = _tensor(x)
    d = _axis(dim, len(x.shape))
    if int(step) < 1:
        raise ValueError(f"slice step {step} must be positive")
    begin, stop, _ = slice(start, end, int(step)).indices(x.shape[d])
    return _strided_slice(x, d, begin, max(stop, begin), int(step), name)


def _select(x, dim, index, name=""):
    x = _tensor(x)
    d = _axis(dim, len(x.shape))
    i = _axis(int(index), x.shape[d])
    y = _strided_slice(x, d, i, i + 1, 1, f"{name}_slice")
    return reshape(y, x.shape[:d] + x.shape[d + 1:], name)


def _size(x, dim=None, name=""):
    shape = list(_tensor(x).shape)
    return shape if dim is None else shape[_axis(dim, len(shape))]


def _identity(x, *ignored, name=""):
    return x


def _unary(op: str) -> Callable:
    return lambda x, name="": call(op, [_tensor(x)], name=name)


def _compare(fn: Callable) -> Callable:
    """A comparison of Python values (scripted modules' rank and ``None`` checks)."""
    def convert(a, b, name=""):
        if isinstance(a, Node) or isinstance(b, Node):
            raise NotImplementedError("comparisons of tensors")
        return fn(a, b)
    return convert


#: aten operator -> converter(*arguments, name=...)
CONVERTERS: dict[str, Callable] = {
    "aten::_convolution": _convolution,
    "aten::convolution": _convolution,
    "aten::conv2d": _conv2d,
    "aten::linear": _linear,
    "aten::addmm": _addmm,
    "aten::matmul": _matmul,
    "aten::mm": _matmul,
    "aten::t": _t,
    "aten::relu": _unary("relu"),
    "aten::sigmoid": _unary("sigmoid"),
    "aten::tanh": _unary("tanh"),
    "aten::gelu": _gelu,
    "aten::relu6": lambda x, name="": _clip(x, 0.0, 6.0, name),
    "aten::hardtanh": lambda x, lo=-1.0, hi=1.0, name="": _clip(x, lo, hi, name),
    "aten::clamp": lambda x, lo=None, hi=None, name="": _clip(x, lo, hi, name),
    "aten::clip": lambda x, lo=None, hi=None, name="": _clip(x, lo, hi, name),
    "aten::leaky_relu": lambda x, slope=0.01, name="": call(
        "leaky_relu", [_tensor(x)], name=name, alpha=float(slope)),
    "aten::max_pool2d": _max_pool2d,
    "aten::avg_pool2d": _avg_pool2d,
    "aten::adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "aten::batch_norm": _batch_norm,
    "aten::add": _add,
    "aten::sub": _sub,
    "aten::rsub": _rsub,
    "aten::mul": _mul,
    "aten::div": _div,
    "aten::floor_divide": lambda a, b, name="": _arith("floor_divide", a, b, name),
    "aten::floordiv": lambda a, b, name="": _arith("floor_divide", a, b, name),
    "aten::softmax": _softmax,
    "aten::mean": _mean,
    "aten::view": _view,
    "aten::reshape": _view,
    "aten::flatten": _flatten,
    "aten::unsqueeze": _unsqueeze,
    "aten::squeeze": _squeeze,
    "aten::permute": _permute,
    "aten::transpose": _transpose,
    "aten::cat": _cat,
    "aten::slice": _slice,
    "aten::select": _select,
    "aten::dropout": _identity,
    "aten::feature_dropout": _identity,
    "aten::alpha_dropout": _identity,
    "aten::contiguous": _identity,
    "aten::detach": _identity,
    "aten::clone": _identity,
    # sizes and scalars: Python values
    "aten::size": _size,
    "aten::dim": lambda x, name="": len(_tensor(x).shape),
    "aten::Int": lambda v, name="": int(_scalar(v)),
    "aten::Float": lambda v, name="": float(_scalar(v)),
    "aten::ScalarImplicit": lambda v, name="": _scalar(v),
    "aten::len": lambda v, name="": len(v),
    "aten::__getitem__": lambda v, i, name="": v[i],
    "aten::eq": _compare(operator.eq),
    "aten::ne": _compare(operator.ne),
    "aten::lt": _compare(operator.lt),
    "aten::le": _compare(operator.le),
    "aten::gt": _compare(operator.gt),
    "aten::ge": _compare(operator.ge),
    "aten::__is__": _compare(operator.is_),
    "aten::__isnot__": _compare(operator.is_not),
    "aten::__not__": lambda v, name="": not v,
    "aten::format": lambda fmt, *args, name="": fmt.format(*args),
}
