"""The layout pass's rules for bf16 convolutions (TVM's ConvertLayout of a bf16
``conv2d``): a chain of bf16 convolutions with the float32 operators between them
(bias, residual ``add``, relu, max pooling, the ``bf16_round`` of a tensor that only bf16
convolutions read) keeps its activations in the blocked ``NCHW{b}c`` layout, with
``layout_transform`` only at the chain's ends.

What the rules guarantee (run by :func:`kiln.relay.alter_layout.alter_op_layout`):

* every direct ``conv2d_bf16`` (``kiln.topi.x86.bf16.is_direct``) writes ``NCHW{b}c``,
  ``b`` = :func:`bf16_block`: 16, one zmm of float32, the block the float32 kernels on
  the same (AVX-512) CPU write, so that a chain meets them without transforms. Its
  micro-kernel's ``pixels x channels`` accumulators are stored as they are (each pixel's
  16 channels contiguous) instead of transposed into channel planes;
* every ``conv2d_bf16`` reads its input in the layout its producer wrote, NCHW or any
  ``NCHW{b}c``: the kernel's packing copy (into the micro-kernel's ``[C/32, H', W', 32]``
  for a direct convolution) reads the blocked input as runs of channels, with no
  transpose and no separate ``layout_transform``;
* ``bf16_round`` runs in the layout of its input (elementwise), so a bf16 activation is
  stored blocked; the float32 operators between convolutions already follow their blocked
  inputs (:mod:`.alter_layout`). Every stride and kernel runs direct, 1x1 and strided
  layers too (their input split into planes by the packing copy); only convolutions whose
  channels do not fit the blocks (input channels not a multiple of 32, output channels not
  of 16: im2col) still write NCHW.

The values are unchanged, bit for bit: only where each value is stored changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.topi.x86.bf16 import is_direct
from kiln.topi.x86.bf16_intrin import LANES

from .graph import Node, call

if TYPE_CHECKING:
    from .alter_layout import _Packer


def bf16_block(n: Node) -> int:
    """The channel block a ``conv2d_bf16`` node writes: :data:`LANES` (16) for a direct
    convolution whose output channels it divides, else 0 (NCHW)."""
    x, a = n.inputs[0], n.attrs
    channels = a["channels"]
    weight_shape = (channels, x.shape[1], *a["kernel_size"])
    return LANES if is_direct(weight_shape, a["strides"]) and channels % LANES == 0 else 0


def _conv(p: _Packer, n: Node) -> bool:
    x = n.inputs[0]
    if len(x.shape) != 4:
        return False
    ob = bf16_block(n)
    out_layout = f"NCHW{ob}c" if ob else "NCHW"
    consts = [p.new[i.uid] for i in n.inputs[1:]]
    p.put(n, call(n.op, [p.get(x, p.blk(x)), *consts], name=n.name,
                  **{**n.attrs, "out_layout": out_layout}), ob)
    return True


def _round(p: _Packer, n: Node) -> bool:
    """``bf16_round`` in the layout of its input."""
    x = n.inputs[0]
    b = p.blk(x)
    if not b:
        return False
    p.put(n, call(n.op, [p.get(x, b)], name=n.name, **n.attrs), b)
    return True


#: operator -> its rule: rebuilds the node in a blocked layout and returns True, or False
#: (the pass then keeps it NCHW)
BF16_RULES = {"conv2d_bf16": _conv, "bf16_round": _round}

__all__ = ["BF16_RULES", "bf16_block"]
