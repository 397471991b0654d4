"""The layout pass's rules for 8-bit tensors (TVM's ConvertLayout of ``qnn.conv2d``): a
chain int8 convolution -> (requantization, residual ``qnn.add``, 8-bit max pooling) -> int8
convolution keeps its activations in the blocked uint8/int8 layout the micro-kernels read,
with ``layout_transform`` only at the chain's ends.

What the rules guarantee (run by :func:`kiln.relay.alter_layout.alter_op_layout`):

* every ``qnn.conv2d`` whose output channels are a multiple of 16 writes ``NCHW{b}c``,
  ``b`` = :func:`int8_block` (64, an AMX tile row, where the CPU computes with AMX-INT8
  tiles; else 16, one block of the micro-kernel's accumulators): its epilogue stores each
  pixel's 16 channels contiguous instead of scattering them over 16 channel planes;
* a ``qnn.conv2d`` reads its input in the block its producer wrote when that block is a
  multiple of 4 (the kernels' dot-product step; in place where it needs no padding), else
  NCHW (the 3-channel stem: the kernel copies it into its own blocks);
* ``qnn.quantize`` / ``qnn.dequantize`` with per-tensor parameters and ``qnn.add`` run in
  the layout of their blocked input (max pooling and the float elementwise operators
  already do: :mod:`.alter_layout`).

The values are unchanged, bit for bit: only where each byte is stored changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.topi.x86.int8_intrin import AMX_IC_BLOCK, IC_BLOCK, OC_BLOCK, uses_amx

from .graph import Node, call

if TYPE_CHECKING:
    from .alter_layout import _Packer


def int8_block(channels: int) -> int:
    """The channel block of an int8 convolution's output of ``channels`` channels on the
    current target: a tile row (64) where its consumers compute with AMX tiles, else the
    16 channels of an accumulator block; 0 (NCHW) where 16 does not divide ``channels``."""
    if channels % OC_BLOCK:
        return 0
    return AMX_IC_BLOCK if uses_amx(channels) else OC_BLOCK


def _conv(p: _Packer, n: Node) -> bool:
    x = n.inputs[0]
    ob = int8_block(n.shape[1])
    if not ob or len(x.shape) != 4:
        return False
    ib = p.blk(x) if p.blk(x) % IC_BLOCK == 0 else 0
    consts = [p.new[i.uid] for i in n.inputs[1:]]
    p.put(n, call(n.op, [p.get(x, ib), *consts], name=n.name,
                  **{**n.attrs, "out_layout": f"NCHW{ob}c"}), ob)
    return True


def _per_tensor(n: Node) -> bool:
    """Whether a ``qnn.quantize`` / ``qnn.dequantize`` has 0-d (per-tensor) parameters."""
    return all(i.is_const and i.value.ndim == 0 for i in n.inputs[1:])


def _elementwise(p: _Packer, n: Node) -> bool:
    """A per-tensor ``qnn.quantize`` / ``qnn.dequantize`` or a ``qnn.add`` in the layout of
    its first blocked tensor input."""
    tensors = n.inputs[:2] if n.op == "qnn.add" else n.inputs[:1]
    blocks = [p.blk(i) for i in tensors if len(i.shape) == 4 and p.blk(i)]
    if not blocks or (n.op != "qnn.add" and not _per_tensor(n)):
        return False
    ins = [p.get(i, blocks[0]) for i in tensors] + [p.new[i.uid] for i in n.inputs[len(tensors):]]
    p.put(n, call(n.op, ins, name=n.name, **n.attrs), blocks[0])
    return True


#: operator -> its rule: rebuilds the node in a blocked layout and returns True, or False
#: (the pass then keeps it NCHW)
QNN_RULES = {"qnn.conv2d": _conv, "qnn.quantize": _elementwise,
             "qnn.dequantize": _elementwise, "qnn.add": _elementwise}

__all__ = ["QNN_RULES", "int8_block"]
