"""Row-blocked kernels: a fused group over a symbolic leading dimension compiled as static
kernels of a few row counts, which the graph executor runs over the rows it is given.

A group is *row-separable* when every tensor of it that is not a constant (its external
inputs, its nodes) has the same symbolic variable as its leading dimension (the batch of a
CNN, the sequence of a transformer's MLP) and static dimensions elsewhere, and each of its
operators computes output row ``i`` from input row ``i`` alone (convolutions, pooling,
dense layers, elementwise and broadcast operators, layout transforms, flatten, and the
injective operators that leave the leading axis alone). Such a group is specialised to
``R`` rows for each ``R`` of :func:`row_counts` (the hand schedules of the op strategy
then apply: every shape is static) and run as ``n // R`` blocks of the largest count, then
the remainder by the smaller ones (the 1-row kernel last, so every ``n`` is covered).
Each block takes the kernels a build for its row count takes: a 3x3 convolution where
Winograd pays only from several images on (small feature maps, whose images share the
tiles' batched product, ``topi.nn.winograd_tile``) is Winograd's in a block of
:data:`_IMAGE_BLOCK` images and the direct convolution in a single image's block.

A packed dense (``dense_pack``, from the x86 layout pass) is not row-wise here on purpose:
its kernel takes any number of rows in one call (the last, partial block of rows inside
the kernel), where each row block's call would stream all of its weights again; a group
with one is left to the op strategy's symbolic kernel. The row blocks remain for the
operators whose hand schedules need static shapes (convolutions, pooling, an unpacked
``dense``).

Guarantee: running the blocks over rows ``[0, n)`` computes what the group computes for
``n`` rows (its operators never mix rows); a group that is not row-separable is left to
the op strategy's symbolic kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kiln.ir.expr import PrimExpr, Var
from kiln.target import Target
from kiln.target.memory import host_memory

from .alter_layout import packed_to_winograd, packed_winograd_tile
from .graph import Node, call
from .strategy import Implementation, select_implementation
from .transform import Group

#: operators whose output row ``i`` reads only row ``i`` of their tensor inputs, given the
#: checks of :func:`_keeps_rows` on their attributes
_ROW_WISE = {"conv2d", "conv2d_NCHWc", "depthwise_conv2d_NCHWc", "conv2d_winograd_NCHWc",
             "dense", "bias_add", "add", "subtract", "multiply", "divide", "relu", "sigmoid",
             "tanh", "erf", "leaky_relu", "clip", "max_pool2d", "avg_pool2d",
             "global_avg_pool2d", "layout_transform", "flatten", "reshape", "softmax",
             "transpose", "concatenate", "strided_slice"}

#: a row holding at least this many output elements gets a 1-row kernel (its kernel is
#: parallel within the row), and a block of :data:`_IMAGE_BLOCK` rows too where that pays
#: (:func:`_image_block_pays`); smaller rows (a transformer's tokens) get blocks of
#: :data:`_SMALL_ROW_BLOCKS` rows, so a long sequence runs few kernel calls
_LARGE_ROW = 4096
_SMALL_ROW_BLOCKS = (64, 8, 1)
_IMAGE_BLOCK = 8


@dataclass(frozen=True)
class RowBlocks:
    """A group's kernels by row count (largest first), over the symbolic dimension
    ``var``; each kernel's ``inputs`` are the graph's nodes (and the constants of its own
    block, such as a Winograd kernel's transformed weights) in its argument order."""

    var: str
    blocks: list[tuple[int, Implementation]]
    group: Group

    @property
    def implementation(self) -> Implementation:
        """The largest block's kernel, standing for the group (its external inputs and
        output are the graph's symbolic nodes)."""
        return replace(self.blocks[0][1], group=self.group)

    def step(self, tensor: Callable[[Node], int]) -> dict:
        """The plan's ``rows`` entry of the group's step: the variable and, per block, its
        row count, kernel and arguments (``tensor`` numbers a node in the plan)."""
        outputs = [tensor(o) for o in self.group.outputs]
        return {"var": self.var, "kernels": [
            [r, impl.func.name, [tensor(i) for i in impl.inputs] + outputs]
            for r, impl in self.blocks]}


def row_var(group: Group) -> Var | None:
    """The symbolic leading dimension over which ``group`` is row-separable, else None."""
    tensors = [i for n in group.nodes for i in n.inputs if not i.is_const] + group.nodes
    lead = tensors[0].shape[0] if tensors[0].shape else None
    if not isinstance(lead, Var):
        return None
    for t in tensors:
        if not t.shape or t.shape[0] is not lead or not all(
                isinstance(d, int) for d in t.shape[1:]):
            return None
    if not all(n.op in _ROW_WISE and _keeps_rows(n, lead) for n in group.nodes):
        return None
    return lead


def _keeps_rows(n: Node, lead: Var) -> bool:
    """Whether ``n``'s attributes leave the leading axis alone."""
    a = n.attrs
    if n.op == "reshape":
        return a["newshape"][0] is lead
    if n.op == "transpose":
        return a["axes"][0] == 0
    if n.op in ("softmax", "concatenate", "bias_add"):
        return a.get("axis", -1 if n.op == "softmax" else 1) % len(n.shape) != 0
    if n.op == "strided_slice":
        return 0 not in a["axes"]
    return not any(isinstance(v, PrimExpr) for v in a.values())


def row_counts(group: Group) -> tuple[int, ...]:
    """The row counts ``group`` is compiled for, largest first, ending with 1."""
    row = 1
    for d in group.output.shape[1:]:
        row *= d
    if row < _LARGE_ROW:
        return _SMALL_ROW_BLOCKS
    return (_IMAGE_BLOCK, 1) if _image_block_pays(group) else (1,)


def _image_block_pays(group: Group) -> bool:
    """Whether a block of :data:`_IMAGE_BLOCK` images beats single images: a convolution of
    ``group`` is Winograd's for the block and not for one image (small maps, whose images
    share the tiles' batched product), or its constants do not fit the L2 cache (a single
    image's kernel streams them from farther out once per image, the block's once per
    block: ResNet-18's 256-channel 3x3 convolutions, 2.4 MB of weights)."""
    if any(packed_winograd_tile(n, _IMAGE_BLOCK) for n in group.nodes):
        return True
    consts = {i.uid: i.value.nbytes for n in group.nodes for i in n.inputs if i.is_const}
    l2 = next((c.size_bytes for c in host_memory().caches if c.name == "L2"), 0)
    return 0 < l2 < sum(consts.values())


def specialize_rows(group: Group, lead: Var, rows: int) -> tuple[Group, dict[int, Node]]:
    """``group`` with its leading dimension ``lead`` set to ``rows`` (a packed convolution
    Winograd's where it pays for ``rows`` images), and, by the uid of each of the copy's
    external inputs, the graph node it stands for."""
    memo: dict[int, Node] = {}
    origin: dict[int, Node] = {}

    def node(i: Node) -> Node:
        if i.uid not in memo:
            if i.is_const:
                memo[i.uid] = i
            else:  # an external input: a static stand-in of ``rows`` rows
                memo[i.uid] = Node("input", shape=(rows, *i.shape[1:]), dtype=i.dtype,
                                   name=i.name, layout=i.layout)
                origin[memo[i.uid].uid] = i
        return memo[i.uid]

    nodes = []
    for n in group.nodes:
        attrs = dict(n.attrs)
        if n.op == "reshape":
            attrs["newshape"] = [rows, *attrs["newshape"][1:]]
        c = call(n.op, [node(i) for i in n.inputs], name=n.name, **attrs)
        c.layout = n.layout
        m = packed_winograd_tile(c, rows)
        if m:
            c = packed_to_winograd(c, m)
        memo[n.uid] = c
        nodes.append(c)
    return Group(nodes=nodes, anchor_pattern=group.anchor_pattern), origin


def row_blocks(group: Group, name: str, target: Target) -> RowBlocks | None:
    """The row-blocked kernels of ``group`` on a CPU ``target`` (named ``<name>_r<R>``), or
    None when the group is not row-separable (or the target is a GPU)."""
    lead = row_var(group) if target.is_cpu else None
    if lead is None:
        return None
    blocks = []
    for rows in row_counts(group):
        copy, origin = specialize_rows(group, lead, rows)
        impl = select_implementation(copy, f"{name}_r{rows}", target)
        blocks.append((rows, replace(impl, inputs=[origin.get(i.uid, i) for i in impl.inputs])))
    return RowBlocks(lead.name, blocks, group)
