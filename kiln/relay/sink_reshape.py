"""Reshape sinking: a ``reshape`` between an operator and its elementwise epilogue is moved
below the epilogue, so that fusion (:func:`.transform.fuse_ops`) puts the epilogue in the
producer's kernel.

Importers write a linear layer on a 3-D activation as ``reshape`` to rows, ``dense``,
``reshape`` back, then the bias ``add`` (and GELU, a residual ``add``); the reshape stops
the fusion of the epilogue into the dense kernel (an injective operator does not join a
complex-out-fusable group). This pass rewrites ``op(reshape(y), c, ...)`` to
``reshape(op(y, c', ...))`` for an elementwise or broadcast operator (no axis attribute)
when every other operand can be given ``y``'s shape:

* another ``reshape`` of a tensor of ``y``'s shape (it is dropped);
* a tensor that broadcasts along trailing axes the reshape keeps (a bias ``[N]`` or
  ``[1, 1, N]`` with ``y`` ``[M, N]``; an attention mask ``[B, 1, 1, S]`` with scores
  ``[B * H, S, S]``), or a scalar: it is reshaped to those axes;
* a tensor of the operator's shape (a residual): it is reshaped to ``y``'s shape, a copy
  the memory plan makes a view of the same storage (:func:`.transform.view_groups`).

A ``reshape`` of a ``reshape`` becomes one ``reshape``, a ``reshape`` to its input's shape
disappears, and the reshapes of one tensor to one shape are one node.

Guarantee: the graph computes the same values (elementwise operators commute with a reshape
of all their operands); graphs with symbolic shapes are unchanged.
"""

from __future__ import annotations

import math

from .graph import Graph, Node, call, const
from .op import BROADCAST, pattern
from .transform import rewrite


def sink_reshape(graph: Graph) -> Graph:
    """``graph`` with reshapes moved below the elementwise operators that follow them."""
    if not all(n.is_static for n in graph.nodes):
        return graph
    reshapes = _Reshapes()

    def fn(n: Node, xs: list[Node]) -> Node | None:
        if n.op == "reshape":
            return reshapes.get(xs[0], n.shape, n.name)
        if n.is_const or n.is_input or pattern(n.op) > BROADCAST or "axis" in n.attrs:
            return None
        src = next((x for x in xs if x.op == "reshape" and x.shape == n.shape), None)
        if src is None:
            return None
        y = src.inputs[0]
        operands = [_operand(x, n.shape, y.shape, reshapes) for x in xs]
        if any(o is None for o in operands):
            return None
        out = call(n.op, operands, **n.attrs)
        if out.shape != y.shape:  # an operand broadcast the result to a larger shape
            return None
        return reshapes.get(out, n.shape, n.name)

    return rewrite(graph, fn)


class _Reshapes:
    """One ``reshape`` node per (tensor, shape): the reshapes of one tensor to one shape
    (the rows of a layer norm's output for three projections) are one node."""

    def __init__(self) -> None:
        self.made: dict[tuple[int, tuple[int, ...]], Node] = {}

    def get(self, x: Node, shape: tuple[int, ...], name: str = "") -> Node:
        """``x`` reshaped to ``shape`` (a reshape of a reshape reads the first's input)."""
        if x.op == "reshape":
            x = x.inputs[0]
        if x.shape == shape:
            return x
        key = (x.uid, tuple(shape))
        if key not in self.made:
            self.made[key] = call("reshape", [x], name=name, newshape=tuple(shape))
        return self.made[key]


def _operand(x: Node, shape: tuple[int, ...], to: tuple[int, ...],
             reshapes: _Reshapes) -> Node | None:
    """``x``, an operand of an elementwise operator of ``shape``, as an operand of the same
    operator on ``to`` (the shape before the reshape), or None."""
    if x.op == "reshape" and x.shape == shape and x.inputs[0].shape == to:
        return x.inputs[0]
    if x.shape == shape:
        if x.is_const:
            return const(x.value.reshape(to), f"{x.name}_reshaped")
        return reshapes.get(x, to)
    if len(x.shape) > len(shape):
        return None
    keep = _common_suffix(shape, to)
    padded = (1,) * (len(shape) - len(x.shape)) + tuple(x.shape)
    if math.prod(padded[:len(shape) - keep]) != 1:
        return None  # broadcasts along an axis the reshape changes
    kept = padded[len(shape) - keep:]
    return const(x.value.reshape(kept), x.name) if x.is_const else reshapes.get(x, kept)


def _common_suffix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[-1 - k] == b[-1 - k]:
        k += 1
    return k


__all__ = ["sink_reshape"]
