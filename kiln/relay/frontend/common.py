"""Graph-building steps that more than one importer needs, written once: each takes and
returns :class:`~kiln.relay.graph.Node` values, folds constant operands at import where the
result is a constant, and leaves the operand checks to the importer that calls it.
"""

from __future__ import annotations

import numpy as np

from ..graph import Node, call, const


def transpose(x: Node, axes: tuple[int, ...], name: str) -> Node:
    """``x`` with its axes permuted; a constant is transposed now (a weight of ``dense``)."""
    if x.is_const:
        return const(np.ascontiguousarray(np.transpose(x.value, axes)), f"{x.name}_T")
    return call("transpose", [x], name=name, axes=tuple(axes))


def reshape(x: Node, shape: tuple[int, ...], name: str) -> Node:
    """``x`` reshaped to ``shape`` (resolved: no ``-1``); a constant is reshaped now."""
    if x.is_const:
        return const(x.value.reshape(shape), name)
    return call("reshape", [x], name=name, newshape=tuple(shape))


def batch_norm_inference(x: Node, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray,
                         var: np.ndarray, eps: float, name: str) -> Node:
    """Inference batch normalization over axis 1 with constant statistics:
    ``x * scale[c] + shift[c]``, a multiply by a ``[C, 1, ...]`` constant and a ``bias_add``
    (which ``fold_batch_norm`` folds into a preceding convolution)."""
    g, b, m, v = (np.asarray(a, dtype=np.float64) for a in (gamma, beta, mean, var))
    scale = g / np.sqrt(v + eps)
    shift = b - m * scale
    cshape = (-1,) + (1,) * (len(x.shape) - 2)
    y = call("multiply", [x, const(scale.astype(x.dtype).reshape(cshape), f"{name}_scale")],
             name=f"{name}_scale")
    return call("bias_add", [y, const(shift.astype(x.dtype), f"{name}_shift")], name=name,
                axis=1)


def spatial_mean(x: Node, keepdims: bool, name: str) -> Node:
    """The mean of an NCHW tensor over its spatial axes (2, 3), as a global average pooling
    (then a reshape to ``[N, C]`` unless ``keepdims``)."""
    y = call("global_avg_pool2d", [x], name=name if keepdims else f"{name}_pool")
    if keepdims:
        return y
    return call("reshape", [y], name=name, newshape=tuple(x.shape[:2]))
