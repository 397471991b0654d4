"""x86 schedules of products of two activations: ``matmul`` and ``batch_matmul``.

Both operands are computed at run time (attention's ``q kᵀ`` and ``softmax(...) v``, BERT's
and ViT's batched heads), so nothing is packed at compile time, and any dimension may be
symbolic (a dynamic sequence length, docs/dynamic.md). One plan for every such product
whose right operand is row-major (``[B, M, K] x [B, K, N]``, the layout the ONNX importer
emits, and the 2-D ``[M, K] x [K, N]``; ``transpose_a`` too)::

    for (b, 0, B)                                parallel: b, or else i.outer
      for (i.outer, 0, ceil(M/MB))
        for (j.outer, 0, ceil(N/NB))
          C.local[MB, NB] = 0
          for (k, 0, K)
            unrolled (i, 0, MB)  unrolled (v, 0, NB/lanes)  vectorized (l, 0, lanes)
              C.local[i, v*lanes + l] += A[b, i, k] * B[b, k, v*lanes + l]   (broadcast A)
          C[b, block] = epilogue(C.local)

* a register block of :func:`gemm_block`'s ``MB`` rows x ``NB`` columns (two of the
  target's vectors, read at run time) is accumulated in a local cache over the whole
  reduction: per ``k``, one broadcast element of ``A`` per row and one vector load of
  ``B`` per column vector;
* the batch runs in parallel when it has a block for every thread, else the row blocks;
  a symbolic row count's tail block is a branch of that one parallel loop
  (``kiln.tir.loop_partition`` cuts a parallel loop of symbolic extent inside its body), so
  a call forks the threads once, and over symbolic sizes only when the product's work
  reaches ``4 * PARALLEL_MIN_ELEMS`` at run time (:func:`._common.parallel_when`: a short
  sequence runs in the calling thread, as a small static product does);
* an epilogue of the same shape (attention's ``/ sqrt(d)``, a bias, an activation) is
  computed from the block before it is stored;
* a dimension the block does not divide, or a symbolic one, is split with a tail strategy
  (``kiln.te.split_tail``) per dimension: the rows with ``"partition"``, the columns of a
  block with ``"guard"`` (a constant column count) or ``"predicate"`` (a symbolic one).
  Distinct strategies put their checks in distinct guards, so that ``loop_partition``
  cuts each dimension on its own (one guard over both could be cut along neither): the
  full blocks run guard-free, and a row tail becomes a loop bounded by the rows left,
  still vectorized along the columns. A column tail's block keeps its guard when the
  bound is a constant, which the C compiler turns into masked or fully unrolled vector
  code; with a run-time bound it compiles that guard to scalar code (a 500 x 64 x 500
  product over a symbolic size then took 7x the time of its static build), so a symbolic
  column count gets ``"predicate"``'s remainder instead: the whole vectors of the tail,
  then one vector whose loads of ``B`` and of the block and whose stores are masked (the
  C backend's masked tail), so the block is vector code for every column count (at 500
  columns 0.8x the static build's time, at 7 about half the scalar remainder's; the
  accumulators of that last vector stay in memory). The pragma ``specialize_remainder``
  (``kiln.tir.specialize_remainder``) compiles a tail block once per value of its run-time
  count, so that its loops are constant (the C compiler unrolls them and keeps the
  block in registers): a symbolic column count's tail block once per number of whole
  vectors it has (0, 1, and 2, which the analyzer cannot rule out), its masked vector
  then at a constant column (``q kᵀ``: 1.25x -> 1.18x its static build at 500, 1.6x ->
  1.2x at 7); a symbolic row
  count's tail block once per number of rows left where the columns are a constant
  (``softmax(...) v``). With symbolic columns too (``q kᵀ``) the rows are not: each of
  their 7 copies would hold the columns' blocks (563 -> 1379 lines of C, a build of 3 ->
  13 s) for 7% at 7 rows. The strategies are fixed
  by this rule, not by the cost model's ``tail="auto"``: what matters is that the rows'
  and the columns' strategies differ, which a choice per split cannot see, and how the C
  compiler treats each tail, which the model does not describe.

A product with ``transpose_b=True`` (``B`` as ``[B, N, K]``, topi's default) and static
shapes takes the dot plan of :mod:`.dense`, which vectorizes along ``k``; with symbolic
shapes it takes the plan above, whose loads of ``B`` then gather across the lanes.

Guarantee: the schedule computes exactly the product (and its epilogue) for every value of
the symbolic dimensions, 0 included.
"""

from __future__ import annotations

from kiln import te
from kiln.ir.expr import IntImm
from kiln.te.tensor import Operation
from kiln.tir.specialize_remainder import PRAGMA

from ..utils import get_const_int, is_const_int
from ._common import (
    PARALLEL_MIN_ELEMS,
    inline_injective,
    is_pow2,
    lanes,
    num_threads,
    parallel_when,
    vector_registers,
    work_expr,
)
from .dense import _dot_plan  # the plan along k, dense's (module docstring)
from .injective import anchored_schedule, schedule_injective_from_existing

#: vectors of columns in a register block: each broadcast element of ``A`` feeds two FMAs
BLOCK_VECTORS = 2
#: most rows in a register block (AVX-512; AVX2's 16 registers hold 6)
MAX_BLOCK_ROWS = 8

#: the tail strategy of the rows (module docstring)
ROW_TAIL = "partition"
#: the tail strategy of a block's columns, by whether their count is a constant (module
#: docstring)
COLUMN_TAIL = {True: "guard", False: "predicate"}


def gemm_block(dtype: str) -> tuple[int, int]:
    """``(rows, columns)`` of the register block for ``dtype`` on the current target:
    :data:`BLOCK_VECTORS` vectors of columns and as many rows as leave a register for each
    vector of ``B`` and one for the broadcast, at most :data:`MAX_BLOCK_ROWS` (8 x 32
    float32 with AVX-512's 32 registers, 6 x 16 with AVX2's 16)."""
    rows = (vector_registers() - BLOCK_VECTORS - 1) // BLOCK_VECTORS
    return max(1, min(rows, MAX_BLOCK_ROWS)), BLOCK_VECTORS * lanes(dtype)


def _static(extent) -> int | None:
    return get_const_int(extent) if is_const_int(extent) else None


def _same_shape(a: Operation, b: Operation) -> bool:
    """Whether ``a`` and ``b`` have the same output shape (symbolic dimensions compared as
    expressions)."""
    sa, sb = a.output(0).shape, b.output(0).shape
    return len(sa) == len(sb) and all(str(x) == str(y) for x, y in zip(sa, sb, strict=True))


def _block_tile(extent: int | None, block: int, width: int = 1) -> int:
    """The split factor of a dimension of ``extent`` (None: symbolic) for a block of
    ``block``: the block; for a smaller dimension, its whole vectors of ``width`` (the rest
    a tail block), or all of it when it is narrower than one vector (no tail)."""
    if extent is None or extent >= block:
        return block
    return max(1, extent // width * width if extent >= width else extent)


def _parallel_axis(batch: list, mo):
    """The loop run in parallel: the batch when it has a block for every thread (or is
    symbolic), else the row blocks (inside the batch loop). Never the two fused: the rows'
    guard on a fused loop cannot be cut, and would stay in every block."""
    if batch:
        extent = _static(batch[0].dom.extent)
        if extent is None or extent >= num_threads():
            return batch[0]
    return mo


def _vectorize_columns(stage: te.Stage, axis, width: int):
    """Split ``axis`` (a block's columns) into vectors of ``width`` lanes; returns the
    loop over the vectors. The lanes are vectorized when ``width`` is a power of two."""
    vectors, lane = stage.split(axis, factor=width)
    if is_pow2(width):
        stage.vectorize(lane)
    return vectors


def _block_columns(stage: te.Stage, axis, nb: int, static: bool):
    """The columns of a block (``axis``, ``nb`` of them) split as one tile with the columns'
    tail strategy (:data:`COLUMN_TAIL`; ``static``: the column count is a constant), which
    claims the loops inside the block."""
    _, columns = stage.split(axis, factor=nb, tail=COLUMN_TAIL[static])
    return columns


def _schedule_gemm(s: te.Schedule, outs: list[te.Tensor], op: Operation) -> None:
    """The register-blocked plan of the module docstring for anchor ``op`` (whose output
    may be followed by an elementwise epilogue)."""
    inline_injective(s, outs)
    out = outs[0].op
    epilogue = out is not op and _same_shape(out, op) and not out.reduce_axis
    if epilogue:
        top, inner = s[out], op.output(0)
    else:
        inner = s.cache_write(op.output(0), "local")
        top = s[op.output(0)]
    shape, dtype = op.output(0).shape, op.output(0).dtype
    mb, nb = gemm_block(dtype)
    columns = _static(shape[-1])
    mb = _block_tile(_static(shape[-2]), mb)
    nb = _block_tile(columns, nb, lanes(dtype))
    width = min(nb, lanes(dtype))
    *batch, m, n = top.op.axis
    mo, mi = top.split(m, factor=mb, tail=ROW_TAIL)
    if _static(shape[-2]) is None and columns is not None:  # module docstring
        top.pragma(mo, PRAGMA, mb)
    no, ni = top.split(n, factor=nb)
    if columns is None:  # module docstring
        top.pragma(no, PRAGMA, nb // width)
    top.reorder(*batch, mo, no, mi, ni)
    parallel_when(top, _parallel_axis(batch, mo), work_expr(op), 4 * PARALLEL_MIN_ELEMS)
    _vectorize_columns(top, _block_columns(top, ni, nb, columns is not None), width)
    cs = s[inner]
    cs.compute_at(top, no)
    *_, ci, cj = cs.op.axis
    (k,) = cs.op.reduce_axis
    # a split of the block's rows (one tile) puts their check in the rows' guard
    _, ci = cs.split(ci, factor=mb, tail=ROW_TAIL)
    cj = _block_columns(cs, cj, nb, columns is not None)
    cs.reorder(k, ci, cj)
    vectors = _vectorize_columns(cs, cj, width)
    cs.unroll(ci)
    cs.unroll(vectors)
    for t in outs:
        if t.op is not op and not (epilogue and t.op is out):
            schedule_injective_from_existing(s, t)


def _schedule_product(outs, tag: str) -> te.Schedule:
    """The schedule of the product tagged ``tag`` among ``outs`` (module docstring)."""
    s, outs, op = anchored_schedule(outs, (tag,))
    if op is None:
        return s
    attrs = op.attrs or {}
    static = all(isinstance(d, IntImm) for d in op.output(0).shape)
    if static and attrs.get("transpose_b", False) and not attrs.get("transpose_a", False):
        if _dot_plan(s, outs, op):
            return s
    _schedule_gemm(s, outs, op)
    return s


def schedule_matmul(outs) -> te.Schedule:
    """topi.matmul (optionally with a bias and an elementwise epilogue)."""
    return _schedule_product(outs, "matmul")


def schedule_batch_matmul(outs) -> te.Schedule:
    """batch_matmul (optionally with an elementwise epilogue)."""
    return _schedule_product(outs, "batch_matmul")


__all__ = ["schedule_matmul", "schedule_batch_matmul", "gemm_block"]
