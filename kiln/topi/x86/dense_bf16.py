"""bf16 dense for x86: ``[..., K] x [N, K]^T + bias`` with bfloat16 operands and float32
accumulation, the product and its elementwise epilogue in one parallel loop.

The weight is rounded to bf16 (to nearest even) and packed once, at compile time
(:func:`pack_dense_weight`), into the pair-interleaved ("VNNI-2") layout the bf16
instructions read as their ``b`` operand, by panels of a block's ``nr`` columns: ``[N/nr,
K'/2, nr, 2]``, for each pair of reduction steps the panel's columns' two values side by
side (``K'`` = ``K`` padded with zeros to a multiple of 32,
:func:`.bf16.aligned_reduction`). The data rows are the ``a`` operand as they are,
row-major ``[M', K']`` bf16: float32 data is rounded into them by one parallel stage
(``T_bf16_rows``); bf16 data (``uint16`` bits, from a ``bf16_round`` fused into the
producer's tail) is read in place where no padding is needed. The accumulator
``acc[i, j] = sum_k f32(rows[i, k]) * f32(W[k, j])`` (float32, the output's layout: rows by
columns) is computed in blocks of ``mr x nr`` (:func:`dense_blocks`) by one call of the
micro-kernel of :mod:`.bf16_intrin` per block (AMX-BF16 tiles, or AVX-512 BF16 vectors),
from zero over the whole reduction; each block's epilogue (the bias, and whatever
elementwise operators fusion put after the dense: GELU, a residual add, a rounding to bf16)
reads it while it is in cache, vectorized over 16 columns. Rows past ``M`` (the last block
of a row count that ``mr`` does not divide: ViT's 197 tokens) repeat row ``M - 1`` and are
never stored.

Guarantee: each output equals the float32 dense on the bf16-rounded operands up to float32
summation error; the schedule (:func:`schedule_dense_bf16`) needs AVX-512 BF16
(:func:`.bf16_intrin.check_bf16_cpu` raises otherwise).
"""

from __future__ import annotations

import math

import numpy as np

from kiln import te, tir
from kiln.target import current_cpu
from kiln.topi.utils import all_ops, as_list, get_const_tuple

from .bf16 import aligned_reduction, np_to_bf16_bits
from .bf16_intrin import (
    LANES,
    bf16_block_compute,
    bf16_rows_source,
    check_bf16_cpu,
    round_to_bf16,
    to_float32,
)

#: rows of the accumulator per block: one AMX chunk (two tiles of 16 rows)
ROW_BLOCK = 32
#: columns of the accumulator per block at most (two AMX chunks of 32)
MAX_COLUMN_BLOCK = 64


def pack_dense_weight(w_nk: np.ndarray) -> np.ndarray:
    """A dense ``[N, K]`` float weight as the bf16 bits ``[N/nr, K'/2, nr, 2]``: panels of
    the ``nr`` columns of a block (:func:`dense_blocks`), each for each pair of reduction
    steps its columns' two weights side by side (zeros pad ``K`` to ``K'``,
    :func:`.bf16.aligned_reduction`). A panel is contiguous: the rows of a weight tile are
    ``4 nr`` bytes apart, not ``4 N`` (a multiple of 4 KiB for BERT's 3072 outputs, where
    every row of a tile would fall in one set of the L1 cache)."""
    n, k = w_nk.shape
    nr = dense_blocks(1, n)[1]
    padded = np.zeros((n, aligned_reduction(k)), np.float32)
    padded[:, :k] = w_nk
    panels = padded.reshape(n // nr, nr, -1, 2).transpose(0, 2, 1, 3)
    return np_to_bf16_bits(np.ascontiguousarray(panels))


def dense_blocks(rows: int, columns: int) -> tuple[int, int]:
    """``(mr, nr)``: the accumulator's block of a dense of ``rows`` data rows and ``columns``
    outputs. ``mr`` is :data:`ROW_BLOCK` (the rows themselves when fewer; the last block may
    be padded); ``nr`` a divisor of ``columns`` up to :data:`MAX_COLUMN_BLOCK` with the
    fewest vectors of 16 per column, then the widest (64 for BERT's 768 and 3072 outputs, 40
    for 1000)."""
    widths = [d for d in range(1, MAX_COLUMN_BLOCK + 1) if columns % d == 0]
    nr = min(widths, key=lambda d: (-(-d // LANES) / d, -d))
    return min(rows, ROW_BLOCK), nr


def dense_bf16(data: te.Tensor, packed: te.Tensor, bias: te.Tensor | None,
               units: int) -> te.Tensor:
    """``[..., K] x [N, K]^T + bias[N]`` (``N = units``; the leading dimensions of ``data``
    taken as ``M`` rows: a transformer's ``[batch, seq, K]``) in bf16 with float32
    accumulation; ``data`` float32 or bf16 bits (``uint16``), the weight from
    :func:`pack_dense_weight`. Float32 ``[..., N]`` out (module doc)."""
    *lead, k = get_const_tuple(data.shape)
    m = int(np.prod(lead, dtype=np.int64))
    kp = aligned_reduction(k)
    mr, nr = dense_blocks(lead[-1], units)
    want = (units // nr, kp // 2, nr, 2)
    if tuple(get_const_tuple(packed.shape)) != want:
        raise ValueError(f"dense_bf16: the packed weight {get_const_tuple(packed.shape)} is "
                         f"not that of {units} outputs of {k} reduction steps "
                         f"({want}, pack_dense_weight)")
    padded = m - lead[-1] + -(-lead[-1] // mr) * mr
    a = _rows(data, lead, k, kp, padded)
    k2 = te.reduce_axis((0, kp // 2), name="k2")
    p = te.reduce_axis((0, 2), name="p")
    acc = te.compute((padded, units), lambda i, j: te.sum(
        to_float32(a[i, 2 * k2 + p]) * to_float32(packed[j // nr, k2, j % nr, p]),
        axis=[k2, p]),
        name="T_dense_bf16_acc", tag="dense_bf16")
    shape = (*lead, units)
    if bias is None:
        return te.compute(shape, lambda *i: acc[_ravel(i[:-1], lead), i[-1]],
                          name="T_dense_bf16", tag="injective")
    return te.compute(shape, lambda *i: acc[_ravel(i[:-1], lead), i[-1]] + bias[i[-1]],
                      name="T_dense_bf16", tag="broadcast")


def _rows(data: te.Tensor, lead: list[int], k: int, kp: int, padded: int) -> te.Tensor:
    """The ``a`` operand ``[padded, kp]`` of bf16 bits: ``data`` itself where it is 2-D bf16
    needing no padding, else ``T_bf16_rows``: each row rounded (row ``M - 1`` again past
    ``M``), zeros past ``k``."""
    m = int(np.prod(lead, dtype=np.int64))
    if data.dtype == "uint16" and len(lead) == 1 and (m, k) == (padded, kp):
        return data

    def value(i, c):
        row = _unravel(tir.min(i, m - 1) if padded > m else i, lead)
        x = data[(*row, tir.min(c, k - 1) if kp > k else c)]
        bits = x if x.dtype == "uint16" else round_to_bf16(x)
        return tir.if_then_else(c < k, bits, tir.const(0, "uint16")) if kp > k else bits

    return te.compute((padded, kp), value, name="T_bf16_rows", tag="injective")


def _ravel(index, shape) -> tir.PrimExpr:
    """The row-major flat index of ``index`` in ``shape``."""
    flat = index[0]
    for i, n in zip(index[1:], shape[1:], strict=True):
        flat = flat * n + i
    return flat


def _unravel(flat, shape) -> list:
    """The row-major index in ``shape`` of the flat index ``flat``."""
    index = []
    for n in reversed(shape[1:]):
        index.append(flat % n)
        flat = flat // n
    return [flat, *reversed(index)]


def block_name(mr: int, nr: int) -> str:
    """The C name of the micro-kernel of an ``mr x nr`` accumulator block."""
    return f"kiln_bf16_dense_{mr}x{nr}"


def dense_block_intrin(mr: int, nr: int, kc2: int) -> te.TensorIntrin:
    """The tensor intrinsic of an ``mr x nr`` accumulator block over ``2 * kc2`` reduction
    steps, from zero, in one call of :func:`block_name`'s kernel:

        c[i, j] = sum_{k2, p} f32(a[i, 2*k2 + p]) * f32(b[k2, j, p])

    ``a`` rows ``lda`` apart, ``b`` pair rows ``ldb`` apart, ``c`` rows ``ldc`` apart
    (:func:`.bf16_intrin.bf16_block_compute`)."""
    c, binds = bf16_block_compute(mr, nr, kc2)

    def intrin_func(ins, outs):
        aa, bb = ins
        cc = outs[0]
        return tir.call_extern("int32", block_name(mr, nr), cc.access_ptr("w"),
                               aa.access_ptr("r"), bb.access_ptr("r"), kc2, aa.strides[0],
                               bb.strides[0], cc.strides[0]), None, None

    return te.decl_tensor_intrin(c.op, intrin_func, name=f"bf16_dense_{mr}x{nr}x{kc2}",
                                 binds=binds)


def schedule_dense_bf16(outs) -> te.Schedule:
    """Schedule of :func:`dense_bf16` and its elementwise tail: the rounded rows (where the
    data is float32) in one parallel loop, vectorized over 16 columns, then one parallel
    loop over the output's ``mr x nr`` blocks (:func:`dense_blocks`), column panels outer
    (a thread's consecutive blocks share a panel of the weight), each computing its
    accumulator block with the micro-kernel and then the epilogue from it, vectorized over
    16 columns (fewer where they do not divide ``nr``)."""
    check_bf16_cpu(what="schedule_dense_bf16")
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    acc = next((op for op in all_ops(outs) if getattr(op, "tag", "") == "dense_bf16"), None)
    if acc is None:
        raise NotImplementedError("schedule_dense_bf16: no dense_bf16 operation in the outputs")
    rows = acc.input_tensors[0].op
    out = outs[0]
    # a tail rounded to bf16 (uint16 out): its float values computed once per block, then
    # rounded, rather than recomputed for each use of their bits in the rounding
    rounded = out.op.input_tensors[0].op if out.dtype == "uint16" else None
    for op in all_ops(outs):
        if op not in (acc, rows, out.op, rounded) and isinstance(op, te.ComputeOp):
            s[op].compute_inline()
    mr, nr = dense_blocks(*get_const_tuple(out.shape)[-2:])
    if isinstance(rows, te.ComputeOp):  # rounded 16 lanes at a time, as the tails are
        row, column = s[rows].op.axis
        s[rows].parallel(row)
        s[rows].vectorize(s[rows].split(column, factor=LANES)[1])
    top = s[out]
    *lead, column = top.op.axis
    io, ii = top.split(lead[-1], factor=mr)
    jo, ji = top.split(column, factor=nr)
    top.reorder(jo, *lead[:-1], io, ii, ji)
    task = top.fuse(jo, *lead[:-1], io)
    top.parallel(task)
    width = math.gcd(nr, LANES)  # the vectors that divide the block's columns
    if width > 1:
        top.vectorize(top.split(ji, factor=width)[1])
    s[acc].compute_at(top, task)
    if rounded is not None:
        s[rounded].compute_at(top, task)
        if width > 1:
            s[rounded].vectorize(s[rounded].split(s[rounded].op.axis[-1], factor=width)[1])
    kc2 = get_const_tuple(acc.input_tensors[1].shape)[1]
    s[acc].tensorize(s[acc].op.axis[0], dense_block_intrin(mr, nr, kc2))
    top.pragma(task, "import_c", bf16_rows_source(block_name(mr, nr), mr, nr,
                                                  current_cpu()))
    return s


__all__ = ["ROW_BLOCK", "MAX_COLUMN_BLOCK", "pack_dense_weight", "dense_blocks", "dense_bf16",
           "block_name", "dense_block_intrin", "schedule_dense_bf16"]
