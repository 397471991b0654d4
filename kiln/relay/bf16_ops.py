"""The bf16 operators of kiln's graph IR, rows of the operator table ``op.OPS``, made by
:func:`kiln.relay.mixed_precision.to_mixed_precision` (docs/precision.md):

* ``conv2d_bf16(x, weight_bits[, bias], kernel_size, channels, strides, padding,
  dilation[, out_layout])``: float32 in (NCHW, or ``NCHW{b}c``: its rank says which) and
  out (``out_layout``, NCHW by default; ``NCHW{b}c`` for a direct convolution, as the
  layout pass sets it: :mod:`.bf16_layout`), the weight packed as bf16 bits for the kernel
  its shape and strides select (``kiln.topi.x86.bf16.pack_conv2d_weight``: direct or
  im2col);
* ``dense_bf16(x, weight_bits[, bias], units)``: ``[M, K]`` float32 in, ``[M, units]`` out,
  the weight packed by ``kiln.topi.x86.dense_bf16.pack_dense_weight``;
* ``bf16_round(x)``: float32 ``x`` rounded to bf16 (to nearest even), as its bits
  (``uint16``); elementwise, so it fuses into the tail of the kernel computing ``x``.

The first two compute in bf16 with float32 accumulation (``kiln.topi.x86.bf16``); a
``conv2d_bf16`` also takes its data as bf16 bits (from ``bf16_round``).
"""

from __future__ import annotations

import re

from kiln import te
from kiln.topi.x86 import bf16, dense_bf16
from kiln.topi.x86.bf16_intrin import round_to_bf16


def _bias(ts: list[te.Tensor]) -> te.Tensor | None:
    return ts[2] if len(ts) > 2 else None


def _out_block(layout: str) -> int:
    """The channel block of ``NCHW{b}c`` (0 for ``NCHW``)."""
    found = re.fullmatch(r"NCHW(?:(\d+)c)?", layout)
    if found is None:
        raise NotImplementedError(f"conv2d_bf16: out_layout {layout!r}; only NCHW or "
                                  f"NCHW{{b}}c")
    return int(found.group(1) or 0)


def conv2d(ts: list[te.Tensor], a: dict) -> te.Tensor:
    """The ``conv2d_bf16`` compute."""
    return bf16.conv2d_bf16_nchw(ts[0], ts[1], _bias(ts), a["kernel_size"], a["channels"],
                                 a["strides"], tuple(a["padding"]), a["dilation"],
                                 _out_block(a.get("out_layout", "NCHW")))


def dense(ts: list[te.Tensor], a: dict) -> te.Tensor:
    """The ``dense_bf16`` compute."""
    return dense_bf16.dense_bf16(ts[0], ts[1], _bias(ts), a["units"])


def bf16_round(ts: list[te.Tensor], a: dict) -> te.Tensor:
    """The ``bf16_round`` compute."""
    x = ts[0]
    return te.compute(x.shape, lambda *i: round_to_bf16(x(*i)), name="T_bf16_round",
                      tag="elemwise")
