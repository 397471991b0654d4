"""CUDA matrix products as AutoTVM templates: ``dense_large_batch.cuda`` (``topi.cuda.dense``,
weight ``[N, K]``) and ``matmul.cuda`` (the SGEMM ``C = A @ B``, ``B`` ``[K, N]``).

Both use one schedule, the two-level tiling of the assignment's GEMM
(examples/assignment/gemm_gpu.py) with TVM's virtual threads: a block computes a
``tile_y`` x ``tile_x`` tile of C; for every ``tile_k`` slice of the reduction its threads
copy the A and B panels into shared memory together, and each thread accumulates
``vthread x inner`` rows by as many columns in registers from A and B values held in
registers::

    blockIdx.y / blockIdx.x: tiles of C
      vthread (vy, vx)  threadIdx.y / threadIdx.x (ty, tx)
        C.local[yi, xi] = 0
        for ko:  A.shared[...], B.shared[...] = ...        // all threads, then barrier
          for ki:  A.local[yi] = A.shared[..]; B.local[xi] = B.shared[..]
                   C.local[yi, xi] += A.local[yi] * B.local[xi]
        C[...] = epilogue(C.local[yi, xi])

Knobs: ``tile_y``, ``tile_x`` (4-way: block, vthread, thread, inner; at most 2 virtual threads,
8-32 threads (fewer only for axes without such a divisor), 8 inner, 256 rows or columns a
block), ``tile_k`` (2-way: slices of at most 32, multiples of 4 where the reduction is),
``auto_unroll_max_step`` and ``vectorize_fetch`` (4: each thread copies runs of 4 consecutive
elements; the loop is marked vectorized, kiln's CUDA code generator emits it as a 4-step
loop). The space holds the
assignment's schedule (16 x 16 threads of 4 x 4, slices of 16: the fallback of
``matmul.cuda``) and the 128 x 128 tiles of 8 x 8 per thread (``[-1, 2, 16, 4]``). A config
using more threads or shared memory than the target has is rejected (``InstantiationError``).

``schedule_dense(outs)`` asks the dispatch context for the config of the dense's workload
(tuned inside ``apply_history_best``, the fallback otherwise); a bias add or other elementwise
epilogue is fused into the store; a config the current target cannot run gets
``schedule_per_thread``, and so does a dense read by several outputs.
"""

from __future__ import annotations

from kiln import autotvm, te
from kiln.autotvm.task.space import InstantiationError, OtherOptionEntity, SplitEntity
from kiln.target import Target
from kiln.te.tensor import Operation

from .. import nn
from ..utils import all_ops, as_list, get_const_tuple, traverse_inline
from .block_tile import check_block_limits, local_accumulator
from .per_thread import schedule_per_thread

DENSE = "dense_large_batch.cuda"
MATMUL = "matmul.cuda"

#: the fallback config: the assignment's GEMM schedule (16 x 16 threads, 4 x 4 each, k by 16)
_FALLBACK = {"tile_y": [-1, 1, 16, 4], "tile_x": [-1, 1, 16, 4], "tile_k": [-1, 16]}


def _tile_filter(length: int):
    """Which 4-way splits of an output axis of ``length`` the space keeps: at least as many
    threads as the largest divisor of ``length`` up to 8 (7 on ResNet's 7x7 maps)."""
    fewest = max(d for d in range(1, min(8, length) + 1) if length % d == 0)

    def keep(e: SplitEntity) -> bool:
        _, vthread, threads, inner = e.size
        return (vthread <= 2 and fewest <= threads <= 32 and inner <= 8
                and vthread * threads * inner <= 256)

    return keep


def define_matmul_space(cfg, i, j, k, contiguous: tuple[int, int],
                        fallback: dict[str, list[int]] | None = None) -> None:
    """The knobs of the tiled product over output axes ``i``, ``j`` and reduction ``k``;
    ``contiguous`` are the lengths of the two operands' innermost axes (a 4-wide fetch needs
    both divisible by 4). A fallback config takes ``fallback``'s splits (the assignment's
    schedule by default), shrunk to divisors of the axes."""
    for name, axis in (("tile_y", i), ("tile_x", j)):
        length = int(axis.dom.extent.value)
        cfg.define_split(name, axis, num_outputs=4, filter=_tile_filter(length))
    by_four = int(k.dom.extent.value) % 4 == 0
    cfg.define_split("tile_k", k, num_outputs=2,
                     filter=lambda e: e.size[1] <= 32 and (e.size[1] % 4 == 0 or not by_four))
    cfg.define_knob("auto_unroll_max_step", [64, 512, 1500])
    cfg.define_knob("vectorize_fetch", [1, 4] if all(c % 4 == 0 for c in contiguous) else [1])
    if cfg.is_fallback:
        for name, axis in (("tile_y", i), ("tile_x", j), ("tile_k", k)):
            cfg.fallback_split(name, (fallback or _FALLBACK)[name], int(axis.dom.extent.value))
        cfg["auto_unroll_max_step"] = OtherOptionEntity(64)


def _threads(split: SplitEntity) -> int:
    return split.size[2]


def _block(split: SplitEntity) -> int:
    return split.size[1] * split.size[2] * split.size[3]


def schedule_matmul_tiled(cfg, s, op: Operation, *, materialize: bool = False,
                          fallback: dict[str, list[int]] | None = None) -> None:
    """Schedule the 2-D product ``op`` (``C[i, j] = sum_k A[.] * B[.]``, its inputs the
    operands) in ``s`` with ``cfg``. The tiled stage is the output that reads ``op`` when
    ``op`` is not the output itself, or with ``materialize``, ``op`` (written to global
    memory; its consumers are scheduled by the caller). ``fallback``: the splits of a
    fallback config (see :func:`define_matmul_space`)."""
    a, b = op.input_tensors
    i, j = op.axis
    (k,) = op.reduce_axis
    define_matmul_space(cfg, i, j, k, (get_const_tuple(a.shape)[-1],
                                       get_const_tuple(b.shape)[-1]), fallback)
    ty_n, tx_n = _threads(cfg["tile_y"]), _threads(cfg["tile_x"])
    tile_k = cfg["tile_k"].size[1]
    itemsize = 8 if op.output(0).dtype == "float64" else 4
    check_block_limits(cfg, ty_n * tx_n,
                       itemsize * tile_k * (_block(cfg["tile_y"]) + _block(cfg["tile_x"])))
    vec = cfg["vectorize_fetch"].val
    b_rows = tile_k if op.attrs.get("transpose_b") else _block(cfg["tile_x"])
    if vec > 1 and (tile_k % vec or b_rows % vec):
        cfg.raise_error(f"a {vec}-wide fetch needs shared rows of a multiple of {vec} elements")
    if materialize:
        output, local = op.output(0), s.cache_write(op.output(0), "local")
    else:
        output, local = local_accumulator(s, op)
    a_shared = s.cache_read(a, "shared", [local])
    b_shared = s.cache_read(b, "shared", [local])
    a_local = s.cache_read(a_shared, "local", [local])
    b_local = s.cache_read(b_shared, "local", [local])

    y, x = s[output].op.axis
    by, vy, ty, yi = cfg["tile_y"].apply(s, output, y)
    bx, vx, tx, xi = cfg["tile_x"].apply(s, output, x)
    s[output].reorder(by, bx, vy, vx, ty, tx, yi, xi)
    for axis, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (vy, "vthread"),
                      (vx, "vthread"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[output].bind(axis, te.thread_axis(tag))
    s[local].compute_at(s[output], tx)

    ko, ki = cfg["tile_k"].apply(s, local, s[local].op.reduce_axis[0])
    s[local].reorder(ko, ki, *s[local].op.axis)
    s[local].pragma(ki, "auto_unroll_max_step", cfg["auto_unroll_max_step"].val)
    for shared, reg in ((a_shared, a_local), (b_shared, b_local)):
        s[shared].compute_at(s[local], ko)
        s[reg].compute_at(s[local], ki)
        fused = s[shared].fuse(*s[shared].op.axis)  # cooperative fetching
        fused, lanes = s[shared].split(fused, factor=vec)
        fused, ftx = s[shared].split(fused, factor=tx_n)
        _, fty = s[shared].split(fused, factor=ty_n)
        s[shared].bind(fty, te.thread_axis("threadIdx.y"))
        s[shared].bind(ftx, te.thread_axis("threadIdx.x"))
        if vec > 1:
            s[shared].vectorize(lanes)
    m, n = get_const_tuple(op.output(0).shape)
    cfg.add_flop(2 * m * n * get_const_tuple(a.shape)[-1])


def _schedule_product_cfg(cfg, outs, tag: str):
    outs = as_list(outs)
    anchors = [op for op in all_ops(outs) if op.tag == tag]
    if len(outs) != 1 or len(anchors) != 1:
        return schedule_per_thread(outs)
    s = te.create_schedule([t.op for t in outs])
    traverse_inline(s, outs[0].op, lambda op: None)
    schedule_matmul_tiled(cfg, s, anchors[0])
    return s


def schedule_dense_cfg(cfg, outs):
    """``outs`` (a ``dense``, possibly with a bias add or another elementwise epilogue)
    scheduled with ``cfg``."""
    return _schedule_product_cfg(cfg, outs, "dense")


def schedule_matmul_cfg(cfg, outs):
    """``outs`` (a ``matmul``, possibly with an elementwise epilogue) scheduled with
    ``cfg``."""
    return _schedule_product_cfg(cfg, outs, "matmul")


def dense(data, weight, bias=None, out_dtype=None):
    """``topi.nn.dense`` whose product carries its tuning workload (``attrs["workload"]``)."""
    out = nn.dense(data, weight, bias, out_dtype)
    product = next(op for op in all_ops([out]) if op.tag == "dense")
    product.attrs["workload"] = (DENSE, *autotvm.task.args_to_workload(
        (data, weight, bias, out_dtype)))
    return out


def schedule_dense(outs):
    """TVM's ``topi.cuda.schedule_dense``: the tiled schedule with the config the current
    dispatch context has for the dense's workload (the fallback outside
    ``apply_history_best``)."""
    outs = as_list(outs)
    anchors = [op for op in all_ops(outs) if op.tag == "dense"]
    if len(anchors) != 1:
        return schedule_per_thread(outs)
    op = anchors[0]
    workload = op.attrs.get("workload") or (DENSE, *autotvm.task.args_to_workload(
        (*op.input_tensors, None, op.output(0).dtype)))
    cfg = autotvm.DispatchContext.current().query(Target.current(), workload)
    try:
        return schedule_dense_cfg(cfg, outs)
    except InstantiationError:  # a block the current target cannot run
        return schedule_per_thread(outs)


@autotvm.template(DENSE)
def dense_template(data, weight, bias, out_dtype):
    """The tuning template of :func:`dense` (bias: a tensor or None)."""
    out = dense(data, weight, bias, out_dtype)
    s = schedule_dense_cfg(autotvm.get_config(), [out])
    return s, [data, weight, *([bias] if bias is not None else []), out]


@autotvm.template(MATMUL)
def matmul_template(m, k, n, dtype):
    """The SGEMM template: ``C[m, n] = A[m, k] @ B[k, n]``."""
    a = te.placeholder((m, k), name="A", dtype=dtype)
    b = te.placeholder((k, n), name="B", dtype=dtype)
    c = nn.matmul(a, b)
    s = schedule_matmul_cfg(autotvm.get_config(), [c])
    return s, [a, b, c]


__all__ = ["DENSE", "MATMUL", "dense", "schedule_dense", "schedule_dense_cfg",
           "schedule_matmul_cfg", "schedule_matmul_tiled", "define_matmul_space",
           "dense_template", "matmul_template"]
