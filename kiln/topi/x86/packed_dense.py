"""Dense with weights packed at compile time (TVM's ``topi.x86.dense_pack``).

A dense layer's constant weight ``[N, K]`` is packed once, when the graph is compiled
(:func:`pack_dense_weight`, called by the x86 layout pass), into ``[ceil(N/nb), K, nb]``:
for each panel of ``nb`` output columns, the ``K`` rows of its weights, each row ``nb``
contiguous floats. ``nb`` (:func:`dense_pack_block`) is a whole number of SIMD registers
of the target CPU (two vectors of float32: 32 columns with AVX-512, 16 with AVX2), read
from ``kiln.target.current_cpu`` when the graph is compiled. A panel short of ``N``
columns is padded with zeros, which no output reads.

:func:`schedule_dense_pack` runs the product as a register-blocked micro-kernel: ``mb``
rows x ``nb`` columns of accumulators (``mb x vo`` vector registers, ``vo = nb / lanes``)
over the whole reduction; per step of ``k`` it loads ``vo`` contiguous weight vectors and
broadcasts ``mb`` elements of ``data``. The elementwise epilogue of a fused group (bias,
relu, GELU's ``erf``, a residual add) is computed from the accumulators, once per block.
The column panels run in parallel (each thread streams only its own panels' weights, which
stay in L2 while every row block passes over them), or the row blocks when there are too
few panels for the threads. The row count may be symbolic (a sequence length known at run
time): :func:`dense_pack` computes whole blocks of ``mb`` rows, the last one reading row
``M - 1`` again for the rows past ``M`` (a clamped index, no test in the loops), and only
the first ``M`` rows are stored, so one call covers any number of rows (0 included) at
the speed of full blocks.

Guarantee: ``dense_pack(data, pack_dense_weight(w, nb), bias, units=N)`` computes
``data @ w.T + bias`` (the reduction in order of ``k``, as ``topi.nn.dense``).
"""

from __future__ import annotations

import numpy as np

from kiln import te
from kiln.ir import dtype as dt

from .. import tag
from ..nn.conv2d import _cast
from ..nn.dense import _add_bias
from ..utils import as_list, get_const_int, get_const_tuple, is_const_int
from ._common import (
    find_anchor,
    inline_injective,
    lanes,
    num_threads,
    vector_registers,
    worth_parallel,
)
from .injective import schedule_injective_from_existing

#: vector registers of output columns in a packed panel (``nb = VECTORS x lanes``): two
#: weight vectors per step of ``k`` feed ``2 mb`` FMAs
VECTORS = 2

#: the most rows of a register block: 8 rows x 2 vectors (16 accumulators) measured
#: 1.02-1.5x faster than 6 x 2, 4 x 4 and 3 x 4, and 1.07-1.16x faster than 12 x 2 and
#: 14 x 2 on BERT/ViT shapes but one (AVX-512, 1 thread; docs/performance.md)
MAX_ROWS = 8


def dense_pack_block(units: int, dtype: str = "float32") -> int:
    """Output columns per packed panel of a dense with ``units`` outputs: :data:`VECTORS`
    SIMD registers of ``dtype`` (one when ``units`` fits a single register)."""
    width = lanes(dtype)
    return width * (VECTORS if units > width else 1)


def pack_dense_weight(weight: np.ndarray, nb: int) -> np.ndarray:
    """``[N, K]`` -> ``[ceil(N/nb), K, nb]``, the last panel padded with zeros."""
    n, k = weight.shape
    panels = -(-n // nb)
    padded = np.zeros((panels * nb, k), weight.dtype)
    padded[:n] = weight
    return np.ascontiguousarray(padded.reshape(panels, nb, k).transpose(0, 2, 1))


def dense_pack_rows(nb: int, dtype: str = "float32") -> int:
    """Rows of a register block of a packed dense whose panels are ``nb`` columns:
    :data:`MAX_ROWS`, fewer where the CPU's vector registers do not hold ``rows x vo``
    accumulators, ``vo`` weight vectors and a broadcast (6 with AVX2's 16 registers)."""
    vo = max(1, nb // lanes(dtype))
    return max(1, min(MAX_ROWS, (vector_registers() - vo - 2) // vo))


def dense_pack(data, packed_weight, bias=None, out_dtype=None, units=None):
    """``out[i, j] = sum_k data[i, k] * packed_weight[j // nb, k, j % nb] (+ bias[j])``:
    data ``[M, K]`` (``M`` may be symbolic), the weight packed by :func:`pack_dense_weight`
    ``[N/nb, K, nb]``, ``units`` the output columns ``N`` (default every packed column).

    The product (tag ``"dense_pack"``) is computed over whole panels of columns and whole
    register blocks of rows (:func:`dense_pack_rows`; ``M`` itself when it is a constant
    they divide or a constant below one block): rows past ``M`` read row ``M - 1`` of
    ``data`` and columns past ``N`` the zeros of the last panel, so no block needs a test;
    an injective stage takes the first ``M x N``; the bias add is a ``"broadcast"`` stage."""
    if data.ndim != 2 or packed_weight.ndim != 3:
        raise ValueError("dense_pack: data must be 2-D and the packed weight 3-D")
    out_dtype = dt.normalize(out_dtype or data.dtype)
    m, kd = data.shape
    panels, kw, nb = get_const_tuple(packed_weight.shape)
    if is_const_int(kd) and get_const_int(kd) != kw:
        raise ValueError(f"dense_pack: inner dimensions differ ({get_const_int(kd)} vs {kw})")
    units = panels * nb if units is None else units
    if not (panels - 1) * nb < units <= panels * nb:
        raise ValueError(f"dense_pack: {units} units do not fill {panels} panels of {nb}")
    mb = dense_pack_rows(nb, out_dtype)
    whole = is_const_int(m) and (get_const_int(m) % mb == 0 or get_const_int(m) < mb)
    rows = m if whole else te.indexdiv(m + (mb - 1), mb) * mb
    k = te.reduce_axis((0, kd), name="k")

    def row(i):
        return i if whole else te.min(i, m - 1)

    out = te.compute(
        (rows, panels * nb),
        lambda i, j: te.sum(_cast(data[row(i), k], out_dtype)
                            * _cast(packed_weight[j // nb, k, j % nb], out_dtype), axis=k),
        name="T_dense_pack", tag="dense_pack", attrs={"row_block": mb, "units": units})
    if not whole or units < panels * nb:
        out = te.compute((m, units), lambda i, j: out[i, j], name="T_dense_pack_crop",
                         tag=tag.INJECTIVE)
    return _add_bias(out, bias, out_dtype)


def dense_pack_plan(op) -> dict:
    """The block sizes of a packed dense: ``mb`` rows (the compute's ``row_block``, or its
    rows when fewer) x ``nb`` columns of accumulators, and the outer loop that runs in
    parallel (``"columns"``: the panels, when there are at least two per thread, else
    ``"rows"``)."""
    _, _, nb = get_const_tuple(op.input_tensors[1].shape)
    mb = op.attrs["row_block"]
    rows = op.output(0).shape[0]
    if is_const_int(rows):
        mb = max(1, min(mb, get_const_int(rows)))
    panels = -(-get_const_int(op.output(0).shape[1]) // nb)
    return {"mb": mb, "nb": nb, "vo": max(1, nb // lanes(op.output(0).dtype)),
            "parallel": "columns" if panels >= 2 * num_threads() else "rows"}


def _reads_rows(out: te.Operation, op: te.Operation) -> bool:
    """Whether ``out`` (an elementwise epilogue of ``op``, or the stage cropping it) is a
    matrix of ``op``'s ``units`` columns, so that it can be blocked as ``op`` is."""
    shape = out.output(0).shape
    return not out.reduce_axis and len(shape) == 2 and is_const_int(shape[1]) and \
        get_const_int(shape[1]) == op.attrs["units"]


def _blocked_stages(s, outs, op) -> tuple[te.Stage, te.Tensor]:
    """``(stage blocked into register tiles, tensor computed per tile)``: the output that
    reads ``op`` (:func:`_reads_rows`) and ``op`` itself in a local buffer, else ``op`` and
    a local cache of it (the other outputs scheduled as injective stages)."""
    inline_injective(s, outs)
    out = outs[0].op
    if out is not op and _reads_rows(out, op):
        s[op].set_scope("local")
        inner, top = op.output(0), s[out]
    else:
        inner, top = s.cache_write(op.output(0), "local"), s[op]
    for t in outs:
        if t.op is not op and t.op is not top.op:
            schedule_injective_from_existing(s, t)
    return top, inner


def schedule_dense_pack_block(s, outs, op, plan: dict | None = None) -> None:
    """Schedule the packed dense ``op`` (and its epilogue) in ``s`` by ``plan`` (default
    :func:`dense_pack_plan`)."""
    plan = plan or dense_pack_plan(op)
    mb, nb, vo = plan["mb"], plan["nb"], plan["vo"]
    width = nb // vo
    top, inner = _blocked_stages(s, outs, op)
    i, j = top.op.axis
    io, ii = top.split(i, factor=mb)
    jo, ji = top.split(j, factor=nb)
    outer = [jo, io] if plan["parallel"] == "columns" else [io, jo]
    top.reorder(*outer, ii, ji)
    if worth_parallel(op):
        top.parallel(outer[0])
    _, jl = top.split(ji, factor=width)
    top.vectorize(jl)
    cs = s[inner]
    cs.compute_at(top, outer[1])
    ci, cj = cs.op.axis
    (k,) = cs.op.reduce_axis
    cjv, cjl = cs.split(cj, factor=width)
    cs.reorder(k, ci, cjv, cjl)
    cs.unroll(ci)
    cs.unroll(cjv)
    cs.vectorize(cjl)


def schedule_dense_pack(outs):
    """dense_pack, with its bias and elementwise epilogue (TVM's
    ``topi.x86.schedule_dense_pack``)."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    op = find_anchor(outs, ("dense_pack",))
    if op is None:
        for t in outs:
            schedule_injective_from_existing(s, t)
        return s
    schedule_dense_pack_block(s, outs, op)
    return s


__all__ = ["dense_pack", "schedule_dense_pack", "schedule_dense_pack_block", "pack_dense_weight",
           "dense_pack_block", "dense_pack_rows", "dense_pack_plan"]
