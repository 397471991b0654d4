"""Dense with weights packed at compile time (TVM's ``topi.x86.dense_pack``).

A dense layer's constant weight ``[N, K]`` is packed once, when the graph is compiled
(:func:`pack_dense_weight`, called by the x86 layout pass), into ``[ceil(N/nb), K, nb]``:
for each panel of ``nb`` output columns, the ``K`` rows of its weights, each row ``nb``
contiguous floats. ``nb`` (:func:`dense_pack_block`) is a whole number of SIMD registers
of the target CPU, read from ``kiln.target.current_cpu`` when the graph is compiled: four
vectors of float32 where the registers hold a block of at least :data:`MIN_ROWS` rows of
them (64 columns with AVX-512's 32 registers, 6 rows), else two (16 columns with AVX2).
A panel short of ``N`` columns is padded with zeros, which no output reads.

:func:`schedule_dense_pack` runs the product as a register-blocked micro-kernel: ``mb``
rows x ``nb`` columns of accumulators (``mb x vo`` vector registers, ``vo = nb / lanes``)
over the whole reduction; per step of ``k`` it loads ``vo`` contiguous weight vectors and
broadcasts ``mb`` elements of ``data``. The elementwise epilogue of a fused group (bias,
relu, GELU's ``erf``, a residual add) is computed from the accumulators, once per block.
The column panels run in parallel (each thread streams only its own panels' weights, which
stay in L2 while every row block passes over them), or the row blocks when there are too
few panels for the threads. The row count may be symbolic (a sequence length known at run
time): one call covers any number of rows (0 included) in whole blocks of ``mb`` rows and
one block of the ``r = M mod mb`` rows left, which the pragma ``specialize_remainder``
(``kiln.tir.specialize_remainder``) compiles once per value of ``r``: a micro-kernel of
exactly ``r`` rows whose accumulators stay in registers, chosen at run time, so no row is
computed twice and no block loops over a run-time row count.

Attention's head layouts (:class:`HeadLayout`) are read and written in place: with
``data_layout`` the data is a 4-D tensor of heads (the attention result ``[B, H, S, D]``)
read as the matrix ``[B*S, H*D]`` (the reduction runs over heads and their ``D`` columns),
and with ``out_layout`` the result is stored as one (queries ``[B, H, S, D]``, keys
transposed ``[B, H, D, S]``): the register blocks are the same, only their loads and stores
are permuted, so no copy kernel transposes the heads (kiln.relay.head_layout).

Guarantee: ``dense_pack(data, pack_dense_weight(w, nb), bias, units=N)`` computes
``data @ w.T + bias`` (the reduction in order of ``k``, as ``topi.nn.dense``); with layouts,
``out_layout.store(dense_pack(data_layout.load(data), ...))`` of the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln import te
from kiln.ir import dtype as dt
from kiln.tir.specialize_remainder import PRAGMA

from .. import tag
from ..nn.conv2d import _cast
from ..nn.dense import _add_bias
from ..utils import get_const_int, get_const_tuple, is_const_int
from ._common import (
    PARALLEL_MIN_ELEMS,
    inline_injective,
    lanes,
    num_threads,
    parallel_when,
    vector_registers,
    work_expr,
    worth_parallel,
)
from .injective import anchored_schedule, schedule_others

#: vector registers of output columns in a packed panel (``nb = vectors x lanes``), widest
#: first: ``v`` weight vectors per step of ``k`` feed ``v mb`` FMAs. 6 rows x 4 vectors (24
#: accumulators) measured 1.1-1.2x faster than 8 x 2 on BERT's and ViT's denses, and
#: 1.0-1.1x faster than 12 x 2, 7 x 4, 8 x 3 and 5 x 4 (AVX-512, 1 thread, CPU time;
#: docs/performance.md)
PANEL_VECTORS = (4, 2)

#: the most rows of a register block (8 x 2 with AVX-512 when the panel is two vectors)
MAX_ROWS = 8

#: the fewest rows a register block of a panel wider than two vectors keeps (below it the
#: broadcasts of the data no longer pay for the weight vectors: AVX2's 16 registers hold
#: 2 rows of 4 vectors, so its panels stay two vectors wide)
MIN_ROWS = 6


def _padded(units: int, nb: int) -> int:
    """The columns that panels of ``nb`` compute for ``units`` outputs."""
    return -(-units // nb) * nb


def dense_pack_block(units: int, dtype: str = "float32") -> int:
    """Output columns per packed panel of a dense with ``units`` outputs: the widest of
    :data:`PANEL_VECTORS` SIMD registers of ``dtype`` whose register block keeps
    :data:`MIN_ROWS` rows and whose last panel pads no more columns than the next
    narrower one's (one register when ``units`` fits a single register)."""
    width = lanes(dtype)
    if units <= width:
        return width
    *wide, narrowest = (v * width for v in PANEL_VECTORS)
    return next((nb for nb in wide if dense_pack_rows(nb, dtype) >= MIN_ROWS
                 and _padded(units, nb) == _padded(units, nb // 2)), narrowest)


def repack_dense_weight(packed: np.ndarray, units: int, nb: int) -> np.ndarray:
    """A weight packed by :func:`pack_dense_weight` (``units`` columns) packed again into
    panels of ``nb`` columns."""
    panels, k, width = packed.shape
    weight = packed.transpose(0, 2, 1).reshape(panels * width, k)[:units]
    return pack_dense_weight(weight, nb)


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
    accumulators, ``vo`` weight vectors and a broadcast (6 with AVX-512's 32 registers and
    4 vectors, or AVX2's 16 and 2 vectors)."""
    vo = max(1, nb // lanes(dtype))
    return max(1, min(MAX_ROWS, (vector_registers() - vo - 2) // vo))


@dataclass(frozen=True)
class HeadLayout:
    """A matrix ``[B*S, H*D]`` stored as the 4-D tensor
    ``transpose(reshape(matrix, split), axes)``: ``split`` is ``(B, S, H, D)`` (rows as batch
    x sequence, columns as heads x head size), ``axes`` the permutation of those four (TVM's
    ``transpose`` axes): ``(0, 2, 1, 3)`` stores ``[B, H, S, D]``, ``(0, 2, 3, 1)``
    ``[B, H, D, S]``. A relay attribute holds it as ``(split, axes)``."""

    split: tuple[int, int, int, int]
    axes: tuple[int, int, int, int]

    @classmethod
    def of(cls, value) -> HeadLayout | None:
        """A layout from its attribute form ``(split, axes)`` (None stays None)."""
        if value is None or isinstance(value, HeadLayout):
            return value
        split, axes = value
        if sorted(axes) != [0, 1, 2, 3] or len(split) != 4:
            raise ValueError(f"HeadLayout: {value!r} is not (B, S, H, D) and a permutation")
        return cls(tuple(int(x) for x in split), tuple(int(a) for a in axes))

    @property
    def attr(self) -> tuple:
        return (self.split, self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        """The stored 4-D shape."""
        return tuple(self.split[a] for a in self.axes)

    @property
    def matrix_shape(self) -> tuple[int, int]:
        """The matrix's shape ``(B*S, H*D)``."""
        b, s, h, d = self.split
        return b * s, h * d

    def stored(self, b, s, h, d) -> list:
        """The stored index of element ``(b, s, h, d)`` of the split matrix."""
        split = (b, s, h, d)
        return [split[a] for a in self.axes]

    def split_index(self, index) -> list:
        """``(b, s, h, d)`` of a stored index."""
        return [index[self.axes.index(p)] for p in range(4)]


def dense_pack(data, packed_weight, bias=None, out_dtype=None, units=None,
               data_layout=None, out_layout=None):
    """``out[i, j] = sum_k data[i, k] * packed_weight[j // nb, k, j % nb] (+ bias[j])``:
    data ``[M, K]`` (``M`` may be symbolic), the weight packed by :func:`pack_dense_weight`
    ``[N/nb, K, nb]``, ``units`` the output columns ``N`` (default every packed column).
    ``data_layout`` / ``out_layout`` (:class:`HeadLayout` or its attribute form): the data
    is / the result is stored in that head layout (static shapes; ``out_layout``'s head
    size a multiple of ``nb``).

    The product (tag ``"dense_pack"``) is computed over whole panels of columns and whole
    register blocks of rows (:func:`dense_pack_rows`; ``M`` itself when it is a constant
    they divide, a constant below one block, or symbolic: the schedule's tail block then
    has the rows left): rows past a constant ``M`` read row ``M - 1`` of ``data`` and
    columns past ``N`` the zeros of the last panel, so no block needs a test; the bias
    add is a ``"broadcast"`` stage and an injective stage takes the first ``M x N`` (or
    stores them in ``out_layout``)."""
    data_layout, out_layout = HeadLayout.of(data_layout), HeadLayout.of(out_layout)
    if packed_weight.ndim != 3 or data.ndim != (4 if data_layout else 2):
        raise ValueError("dense_pack: data must be 2-D (4-D in a head layout) and the packed "
                         "weight 3-D")
    out_dtype = dt.normalize(out_dtype or data.dtype)
    m, kd = data_layout.matrix_shape if data_layout else data.shape
    panels, kw, nb = get_const_tuple(packed_weight.shape)
    if is_const_int(kd) and get_const_int(kd) != kw:
        raise ValueError(f"dense_pack: inner dimensions differ ({get_const_int(kd)} vs {kw})")
    units = panels * nb if units is None else units
    if not (panels - 1) * nb < units <= panels * nb:
        raise ValueError(f"dense_pack: {units} units do not fill {panels} panels of {nb}")
    if out_layout and (out_layout.matrix_shape != (m, units) or out_layout.split[3] % nb):
        raise ValueError(f"dense_pack: out_layout {out_layout.attr} does not store a "
                         f"[{m}, {units}] result in panels of {nb} columns")
    mb = dense_pack_rows(nb, out_dtype)
    rows = _padded_rows(m, mb, out_layout)
    whole = rows is m
    reduce_axes = _reduce_axes(kd, data_layout)
    read = _data_reader(data, m, whole, data_layout)

    out = te.compute(
        (rows, panels * nb),
        lambda i, j: te.sum(_cast(read(i, reduce_axes), out_dtype)
                            * _cast(packed_weight[j // nb, _column(reduce_axes, data_layout),
                                                  j % nb], out_dtype), axis=reduce_axes),
        name="T_dense_pack", tag="dense_pack",
        attrs={"row_block": mb, "units": units,
               **({"out_layout": out_layout.attr} if out_layout else {})})
    if out_layout:
        return _store_heads(_add_bias(out, bias, out_dtype), out_layout)
    if not whole or units < panels * nb:
        out = te.compute((m, units), lambda i, j: out[i, j], name="T_dense_pack_crop",
                         tag=tag.INJECTIVE)
    return _add_bias(out, bias, out_dtype)


def _padded_rows(m, mb: int, out_layout: HeadLayout | None):
    """The rows the product computes: ``m`` when whole register blocks cover it (a constant
    ``m`` that ``mb`` divides or below ``mb``) or it is symbolic (its last block has the
    rows left: :func:`schedule_dense_pack_block`), else up to the last block the stores
    reach (with ``out_layout``, blocks of each batch's sequence)."""
    if out_layout:
        b, s, _, _ = out_layout.split
        return m if s % mb == 0 else (b - 1) * s + -(-s // mb) * mb
    if not is_const_int(m) or get_const_int(m) % mb == 0 or get_const_int(m) < mb:
        return m
    return te.indexdiv(m + (mb - 1), mb) * mb


def _reduce_axes(kd, data_layout: HeadLayout | None) -> list:
    """The reduction: over ``k``, or over the heads and their columns of a head layout."""
    if data_layout:
        _, _, h, d = data_layout.split
        return [te.reduce_axis((0, h), name="kh"), te.reduce_axis((0, d), name="kd")]
    return [te.reduce_axis((0, kd), name="k")]


def _column(reduce_axes: list, data_layout: HeadLayout | None):
    """The data column (the packed weight's row) of a step of the reduction."""
    if data_layout:
        kh, kd = reduce_axes
        return kh * data_layout.split[3] + kd
    return reduce_axes[0]


def _data_reader(data, m, whole: bool, data_layout: HeadLayout | None):
    """``read(i, reduce_axes)``: the data element of row ``i`` (clamped to ``m - 1`` unless
    the rows are ``whole``) at the reduction step."""
    def row(i):
        return i if whole else te.min(i, m - 1)

    if not data_layout:
        return lambda i, ks: data[row(i), ks[0]]
    b, s, _, _ = data_layout.split

    def read(i, ks):
        r = row(i)
        bi, si = (0, r) if b == 1 else (te.indexdiv(r, s), te.indexmod(r, s))
        return data[tuple(data_layout.stored(bi, si, ks[0], ks[1]))]

    return read


def _store_heads(out, layout: HeadLayout):
    """The product's first rows stored in ``layout`` (an injective stage)."""
    _, s, _, d = layout.split

    def value(*index):
        b, si, h, di = layout.split_index(index)
        return out[b * s + si, h * d + di]

    return te.compute(layout.shape, value, name="T_dense_pack_heads", tag=tag.INJECTIVE)


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


def _result_shape(op) -> tuple:
    """The constant shape of ``op``'s result (``[rows, units]``, rows None, or its head
    layout's)."""
    layout = HeadLayout.of(op.attrs.get("out_layout"))
    return layout.shape if layout else (None, op.attrs["units"])


def _reads_rows(out: te.Operation, op: te.Operation) -> bool:
    """Whether ``out`` (an elementwise epilogue of ``op``, or the stage cropping it or
    storing it in its head layout) has the shape of ``op``'s result, so that it can be
    blocked as ``op`` is."""
    shape = out.output(0).shape
    want = _result_shape(op)
    return not out.reduce_axis and len(shape) == len(want) and all(
        w is None or (is_const_int(x) and get_const_int(x) == w)
        for x, w in zip(shape, want, strict=True))


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
    schedule_others(s, outs, op, top.op)
    return top, inner


def _block_tiles(top: te.Stage, op, plan: dict) -> tuple:
    """Split ``top``'s rows by ``mb`` and columns by ``nb`` and order its loops: returns
    ``(outer loops, row loop of a tile, column loop of a tile)``, the outer ones panels
    first (``"columns"``) or row blocks first (``"rows"``). A head layout's loops are its
    batch, sequence, head and head column axes (rows: batch x sequence; columns: heads x
    head columns). A symbolic row count's blocks carry the pragma ``specialize_remainder``:
    its tail block is compiled once per number of rows left (module docstring)."""
    mb, nb = plan["mb"], plan["nb"]
    layout = HeadLayout.of(op.attrs.get("out_layout")) if top.op is not op else None
    if layout is None:
        i, j = top.op.axis
        io, ii = top.split(i, factor=mb)
        jo, ji = top.split(j, factor=nb)
        outer = [jo, io] if plan["parallel"] == "columns" else [io, jo]
        if not is_const_int(i.dom.extent):
            top.pragma(io, PRAGMA, mb)
    else:
        b, si, h, d = layout.split_index(top.op.axis)
        io, ii = top.split(si, factor=mb)
        jo, ji = top.split(d, factor=nb)
        outer = [h, jo, b, io] if plan["parallel"] == "columns" else [b, io, h, jo]
    top.reorder(*outer, ii, ji)
    return outer, ii, ji


def schedule_dense_pack_block(s, outs, op, plan: dict | None = None) -> None:
    """Schedule the packed dense ``op`` (and its epilogue) in ``s`` by ``plan`` (default
    :func:`dense_pack_plan`)."""
    plan = plan or dense_pack_plan(op)
    nb, vo = plan["nb"], plan["vo"]
    width = nb // vo
    top, inner = _blocked_stages(s, outs, op)
    outer, _, ji = _block_tiles(top, op, plan)
    if worth_parallel(op):  # a head layout's (head, panel) or (batch, row block) as one
        parallel_when(top, top.fuse(*outer[:len(outer) // 2]) if len(outer) == 4 else outer[0],
                      work_expr(op), 4 * PARALLEL_MIN_ELEMS)
    _, jl = top.split(ji, factor=width)
    top.vectorize(jl)
    cs = s[inner]
    cs.compute_at(top, outer[-1])
    ci, cj = cs.op.axis
    cjv, cjl = cs.split(cj, factor=width)
    cs.reorder(*cs.op.reduce_axis, ci, cjv, cjl)
    cs.unroll(ci)
    cs.unroll(cjv)
    cs.vectorize(cjl)


def schedule_dense_pack(outs):
    """dense_pack, with its bias and elementwise epilogue (TVM's
    ``topi.x86.schedule_dense_pack``)."""
    s, outs, op = anchored_schedule(outs, ("dense_pack",))
    if op is None:
        return s
    schedule_dense_pack_block(s, outs, op)
    return s


__all__ = ["HeadLayout", "dense_pack", "schedule_dense_pack", "schedule_dense_pack_block",
           "pack_dense_weight", "repack_dense_weight", "dense_pack_block", "dense_pack_rows",
           "dense_pack_plan"]
