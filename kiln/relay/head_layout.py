"""Attention's head transposes folded into the packed dense layers around them.

Importers write multi-head attention as a linear layer, ``reshape`` to ``[B, S, H, D]`` and
``transpose`` to the heads' layout (queries and values ``[B, H, S, D]``, keys
``[B, H, D, S]``) for the batched matmuls, and the attention result transposed back
``[B, S, H, D]`` and reshaped to rows for the output projection. Each transpose is a copy
kernel. After the x86 layout pass (the dense layers are ``dense_pack``), this pass gives
them to the dense layers (``topi.x86.packed_dense.HeadLayout``):

* ``transpose(reshape(e(dense_pack(x, w)), [B, S, H, D]), axes)``, ``e`` a chain of
  elementwise or broadcast operators whose other operands are constants over the columns
  (the bias) or scalars, becomes ``e'(dense_pack(x, w, out_layout=((B, S, H, D), axes)))``:
  the dense stores its result in the heads' layout, its epilogue computed there (the
  constants permuted alike). Applies when the head size is a multiple of a panel of
  columns (the weight packed again into narrower panels where the head size is not a
  multiple of the layout pass's) and each tensor of the chain has no other user.
* ``dense_pack(reshape(transpose(y, axes), [M, K]), w)``, ``y`` 4-D, becomes
  ``dense_pack(y, w, data_layout=...)``: the dense reads the heads where they are.

The reshapes left between the dense layers and the batched matmuls only merge leading
axes: views, not kernels (``transform.view_groups``).

Guarantee: the graph computes the same values (a permutation of where the dense reads and
writes, the same sums in the same order); graphs with symbolic shapes are unchanged.
"""

from __future__ import annotations

import numpy as np

from kiln.topi.x86 import lanes
from kiln.topi.x86.packed_dense import HeadLayout, repack_dense_weight

from .graph import Graph, Node, call, const
from .op import BROADCAST, pattern
from .transform import rewrite


def fold_head_transpose(graph: Graph) -> Graph:
    """``graph`` with the head transposes around its packed dense layers folded into them."""
    if not all(n.is_static for n in graph.nodes):
        return graph
    graph = rewrite(graph, _read_heads)
    users, outputs = graph.users(), {o.uid for o in graph.outputs}

    def single_user(n: Node) -> bool:
        return len(users.get(n.uid, [])) == 1 and n.uid not in outputs

    return rewrite(graph, lambda n, xs: _store_heads(n, xs, single_user))


def _permutation(n: Node) -> tuple[int, ...] | None:
    """The axes of a 4-D ``transpose``, else None."""
    if n.op != "transpose" or len(n.shape) != 4:
        return None
    axes = n.attrs.get("axes")
    return tuple(int(a) % 4 for a in axes) if axes is not None else (3, 2, 1, 0)


def _read_heads(n: Node, xs: list[Node]) -> Node | None:
    """A ``dense_pack`` over ``reshape(transpose(y))`` reading ``y`` in its head layout."""
    if n.op != "dense_pack" or "data_layout" in n.attrs or xs[0].op != "reshape":
        return None
    t = xs[0].inputs[0]
    axes = _permutation(t)
    if axes is None:
        return None
    y, (m, k) = t.inputs[0], xs[0].shape
    b, s, h, d = t.shape
    if b * s != m or h * d != k:
        return None
    inverse = tuple(int(a) for a in np.argsort(axes))
    layout = HeadLayout((b, s, h, d), inverse)
    if layout.shape != tuple(y.shape):
        return None
    return call("dense_pack", [y, *xs[1:]], name=n.name, **n.attrs, data_layout=layout.attr)


def _store_heads(n: Node, xs: list[Node], single_user) -> Node | None:
    """The epilogue chain of a ``dense_pack`` in the head layout of ``n``, a transpose of
    its result, else None."""
    axes = _permutation(n)
    if (axes is None or xs[0].op != "reshape" or not single_user(n.inputs[0])
            or _epilogue_chain(n.inputs[0].inputs[0], single_user) is None):
        return None  # (the users are those of the graph before: checked on its nodes)
    split = tuple(xs[0].shape)
    dense, epilogue = _epilogue_chain(xs[0].inputs[0], lambda _: True)
    if (tuple(dense.shape) != (split[0] * split[1], split[2] * split[3])
            or "out_layout" in dense.attrs):
        return None
    weight = _panels_within_heads(dense, split[3])
    if weight is None:
        return None
    layout = HeadLayout(split, axes)
    out = call("dense_pack", [dense.inputs[0], weight, *dense.inputs[2:]], name=dense.name,
               **dense.attrs, out_layout=layout.attr)
    for e in epilogue:
        operands = [_permuted(x, layout) if x.is_const else out for x in e.inputs]
        out = call(e.op, operands, name=e.name, **e.attrs)
    return out


def _panels_within_heads(dense: Node, head: int) -> Node | None:
    """The packed weight of ``dense`` in panels that ``head`` columns hold a whole number
    of: its own, else the widest narrower whole number of vectors (packed again); None
    when none fits."""
    weight = dense.inputs[1]
    nb = weight.shape[2]
    if head % nb == 0:
        return weight
    width = lanes(dense.dtype)
    narrower = next((w for w in range(nb - width, 0, -width) if head % w == 0), None)
    if narrower is None or not weight.is_const:
        return None
    return const(repack_dense_weight(weight.value, dense.attrs["units"], narrower),
                 f"{weight.name}_as{narrower}")


def _epilogue_chain(x: Node, single_user) -> tuple[Node, list[Node]] | None:
    """``(dense_pack, [elementwise operators from it to x])`` when ``x`` is the end of such a
    chain: each operator with one non-constant operand (the previous one), its constants
    broadcast to the matrix (a bias, a scalar); each tensor of the chain used only by the
    next (``x`` only by one node)."""
    epilogue = []
    if not single_user(x):
        return None
    while x.op != "dense_pack":
        ins = [i for i in x.inputs if not i.is_const]
        if (pattern(x.op) > BROADCAST or "axis" in x.attrs or len(ins) != 1
                or not all(_over_columns(c, x.shape) for c in x.inputs if c.is_const)):
            return None
        epilogue.append(x)
        x = ins[0]
        if not single_user(x):
            return None
    return x, epilogue[::-1]


def _over_columns(c: Node, shape: tuple[int, int]) -> bool:
    """Whether the constant ``c`` broadcasts to the matrix ``shape``."""
    if len(c.shape) > 2:
        return False
    padded = (1,) * (2 - len(c.shape)) + tuple(c.shape)
    return all(p in (1, n) for p, n in zip(padded, shape, strict=True))


def _permuted(c: Node, layout: HeadLayout) -> Node:
    """The constant ``c`` of an epilogue on the matrix, for the same epilogue in
    ``layout``."""
    r, k = (1,) * (2 - len(c.shape)) + tuple(c.shape)
    b, s, h, d = layout.split
    split = (b if r > 1 else 1, s if r > 1 else 1, h if k > 1 else 1, d if k > 1 else 1)
    value = np.ascontiguousarray(c.value.reshape(split).transpose(layout.axes))
    return const(value, f"{c.name}_heads")


__all__ = ["fold_head_transpose"]
