"""Layer norms written out by exporters combined into one ``layer_norm`` operator.

Before ONNX opset 17 (and in hand-written models) a layer norm is
``d = x - mean(x); y = d / sqrt(mean(d * d) + eps) * gamma + beta`` over trailing axes:
ReduceMean, Sub, Pow 2 (imported as ``d * d``), ReduceMean, Add, Sqrt, Div, then Mul and
Add by constants. Fused by patterns alone that is five kernels (two reductions, the
deviation, its square, the normalization); as one ``layer_norm`` it is one kernel whose
schedule computes each row's sums inside the row's iteration (``topi.x86``).

Guarantee: the rewritten graph computes the same function (up to rounding): a match needs
both means over the same trailing axes with ``keepdims``, the same deviation node in the
square and the division, a constant scalar ``eps``, and constant ``gamma`` / ``beta`` that
broadcast along the normalized axes only. Anything else is left as it is.
"""

from __future__ import annotations

import numpy as np

from .graph import Graph, Node, call, const
from .transform import rewrite


def combine_layer_norm(graph: Graph) -> Graph:
    """``graph`` with each decomposed layer norm (and its constant scale and shift) as one
    ``layer_norm`` operator."""
    users = graph.users()

    def single_user(n: Node) -> bool:
        return len(users.get(n.uid, [])) == 1

    def fn(n: Node, xs: list[Node]) -> Node | None:
        if n.op == "divide":
            return _normalize(*xs)
        if n.op in ("multiply", "add") and len(xs) == 2:
            for k in (0, 1):
                if xs[k].op == "layer_norm" and single_user(n.inputs[k]):
                    return _affine(n.op, xs[k], xs[1 - k])
        return None

    return rewrite(graph, fn)


def _normalize(d: Node, s: Node) -> Node | None:
    """``layer_norm(x, 1, 0)`` for ``d / s`` with ``d = x - mean(x)`` and
    ``s = sqrt(mean(d * d) + eps)``, else None."""
    if d.op != "subtract" or s.op != "sqrt" or s.inputs[0].op != "add":
        return None
    x, m = d.inputs
    axes = _trailing_mean_axes(m, x)
    if axes is None:
        return None
    v, eps = s.inputs[0].inputs
    if v.is_const:
        v, eps = eps, v
    if not eps.is_const or eps.value.size != 1 or _trailing_mean_axes(v, None) != axes:
        return None
    sq = v.inputs[0]
    if not (sq.op == "multiply" and sq.inputs[0] is d and sq.inputs[1] is d):
        return None
    norm = tuple(x.shape[a] for a in axes)
    ones, zeros = np.ones(norm, x.dtype), np.zeros(norm, x.dtype)
    return call("layer_norm", [x, const(ones, "ln_gamma"), const(zeros, "ln_beta")],
                axis=axes, epsilon=float(eps.value.reshape(())))


def _trailing_mean_axes(m: Node, x: Node | None) -> tuple[int, ...] | None:
    """The axes of ``m = mean(x, axes, keepdims=True)`` when they are the trailing axes of
    ``x`` (any input when ``x`` is None), else None."""
    if m.op != "mean" or not m.attrs.get("keepdims") or (x is not None and m.inputs[0] is not x):
        return None
    nd = len(m.inputs[0].shape)
    axes = tuple(a % nd for a in m.attrs["axis"])
    return axes if axes and axes == tuple(range(nd - len(axes), nd)) else None


def _affine(op: str, ln: Node, c: Node) -> Node | None:
    """``ln * c`` or ``ln + c`` as one ``layer_norm`` (``c`` a constant over the normalized
    axes), else None."""
    x, gamma, beta = ln.inputs
    norm = gamma.shape
    if not (c.is_const and gamma.is_const and beta.is_const) or len(c.shape) > len(ln.shape):
        return None
    lead = len(ln.shape) - len(norm)
    padded = (1,) * (len(ln.shape) - len(c.shape)) + tuple(c.shape)
    if any(d != 1 for d in padded[:lead]):
        return None
    value = np.broadcast_to(c.value.reshape(padded[lead:]), norm).astype(ln.dtype)
    if op == "multiply":
        gamma, beta = const(gamma.value * value, "ln_gamma"), const(beta.value * value,
                                                                     "ln_beta")
    else:
        beta = const(beta.value + value, "ln_beta")
    return call("layer_norm", [x, gamma, beta], **ln.attrs)


__all__ = ["combine_layer_norm"]
