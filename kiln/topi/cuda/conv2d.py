"""CUDA ``conv2d_nchw``: TVM's direct-convolution schedule as the AutoTVM template
``conv2d_nchw.cuda``.

Each block computes a tile of output channels x rows x columns of one image; the tile is split
three times along each of the three axes (``tile_f``, ``tile_y``, ``tile_x``: block, virtual
thread, thread, inner). For every ``tile_rc`` slice of input channels and ``tile_ry`` x
``tile_rx`` window slice the block's threads copy the input window and the filters it needs
into shared memory together (cooperative fetching), then each thread accumulates its outputs
in registers (``local``)::

    blockIdx.z: image x channel tiles   blockIdx.y: row tiles   blockIdx.x: column tiles
      vthread (vf, vy, vx)   threadIdx.z / .y / .x (tf, ty, tx)
        out.local[fi, yi, xi] = 0
        for rco, ryo, rxo:
          pad(data).shared[...] = ...; kernel.shared[...] = ...   // all threads, then barrier
          for rci, ryi, rxi   for fi, yi, xi:  out.local += data.shared * kernel.shared
        out[...] = epilogue(out.local)

Knobs (TVM's names): ``tile_f``, ``tile_y``, ``tile_x`` (4-way splits), ``tile_rc``,
``tile_ry``, ``tile_rx`` (2-way splits), ``auto_unroll_max_step`` and ``unroll_explicit``
(1: the register tile and the inner reduction loops are unrolled in the schedule; 0: only
what ``auto_unroll_max_step`` unrolls). A config whose block has more threads than the target
allows, or whose shared tiles exceed its shared memory per block (48 KB static), is rejected
(``InstantiationError``) before lowering.

``conv2d_nchw`` / ``schedule_conv2d_nchw(outs)`` are TVM's ``topi.cuda`` pair: the schedule
asks the current dispatch context for the config of the convolution's workload (inside
``autotvm.apply_history_best(log)`` a tuned one; elsewhere the fallback config, which suits
ResNet's 3x3 layers; a config the current target cannot run gets ``schedule_per_thread``). An
elementwise epilogue of the output's shape (bias, ReLU) is fused into the store.
"""

from __future__ import annotations

import math

from kiln import autotvm, te
from kiln.autotvm.task.space import InstantiationError, OtherOptionEntity, SplitEntity
from kiln.target import Target
from kiln.te.tensor import ComputeOp, Operation

from .. import nn
from ..utils import all_ops, as_list, get_const_tuple, traverse_inline
from . import conv2d_gemm
from .block_tile import check_block_limits, local_accumulator
from .per_thread import schedule_per_thread

CONV2D_NCHW = "conv2d_nchw.cuda"

#: the fallback config's factors (block, vthread, thread, inner; the block part is computed)
#: and reduction slices, shrunk to divisors of each axis by ``fallback_split``: ResNet's
#: 56/28/14/7-pixel maps get 8 or 7 thread rows and columns
_FALLBACK_SPLITS = {"tile_f": [-1, 2, 4, 2], "tile_y": [-1, 1, 8, 1], "tile_x": [-1, 1, 8, 2],
                    "tile_rc": [-1, 8], "tile_ry": [-1, 1], "tile_rx": [-1, 3]}


def conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype="float32"):
    """``topi.nn.conv2d_nchw`` whose output carries its tuning workload (``attrs["workload"]``,
    the key :func:`schedule_conv2d_nchw` looks tuned configs up by)."""
    out = nn.conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype)
    out.op.attrs["workload"] = (CONV2D_NCHW, *autotvm.task.args_to_workload(
        (data, kernel, strides, padding, dilation, out_dtype)))
    return out


def _workload_of(conv: Operation) -> tuple:
    """The workload of a convolution made by :func:`conv2d_nchw` (or, for one made by
    ``topi.nn.conv2d_nchw``, from its attributes)."""
    if "workload" in conv.attrs:
        return conv.attrs["workload"]
    pad = conv.input_tensors[0]
    data = pad.op.input_tensors[0] if "pad" in (pad.op.tag or "") else pad
    return (CONV2D_NCHW, *autotvm.task.args_to_workload(
        (data, conv.input_tensors[1], conv.attrs["strides"], conv.attrs["padding"],
         conv.attrs["dilation"], conv.output(0).dtype)))


def define_conv2d_space(cfg, conv: Operation) -> None:
    """TVM's knobs of the direct CUDA convolution on ``cfg`` (a fallback config takes
    :data:`_FALLBACK_SPLITS` fitted to the shape)."""
    _, f, y, x = conv.axis
    rc, ry, rx = conv.reduce_axis
    for name, axis in (("tile_f", f), ("tile_y", y), ("tile_x", x)):
        cfg.define_split(name, axis, num_outputs=4)
    for name, axis in (("tile_rc", rc), ("tile_ry", ry), ("tile_rx", rx)):
        cfg.define_split(name, axis, num_outputs=2)
    cfg.define_knob("auto_unroll_max_step", [0, 512, 1500])
    cfg.define_knob("unroll_explicit", [0, 1])
    if cfg.is_fallback:
        extents = dict(zip(("tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry", "tile_rx"),
                           (int(a.dom.extent.value) for a in (f, y, x, rc, ry, rx)),
                           strict=True))
        for name, factors in _FALLBACK_SPLITS.items():
            cfg.fallback_split(name, factors, extents[name])
        cfg["auto_unroll_max_step"] = OtherOptionEntity(1500)
        cfg["unroll_explicit"] = OtherOptionEntity(1)


def _block_tile(split: SplitEntity) -> int:
    return math.prod(split.size[1:])


def check_conv2d_config(cfg, conv: Operation) -> None:
    """Reject a config whose block exceeds the thread or shared-memory limits: the shared
    tiles are the input window of ``tile_rc`` x ``tile_ry`` x ``tile_rx`` taps under the
    block's output tile, and the filters of its channels for those taps."""
    sh, sw = conv.attrs["strides"]
    dh, dw = conv.attrs["dilation"]
    threads = math.prod(cfg[k].size[2] for k in ("tile_f", "tile_y", "tile_x"))
    rci, ryi, rxi = (cfg[k].size[1] for k in ("tile_rc", "tile_ry", "tile_rx"))
    bf, by, bx = (_block_tile(cfg[k]) for k in ("tile_f", "tile_y", "tile_x"))
    window = rci * ((by - 1) * sh + (ryi - 1) * dh + 1) * ((bx - 1) * sw + (rxi - 1) * dw + 1)
    itemsize = 8 if conv.output(0).dtype == "float64" else 4
    check_block_limits(cfg, threads, itemsize * (window + bf * rci * ryi * rxi))


def schedule_direct_cuda(cfg, s, conv: Operation) -> None:
    """Schedule convolution ``conv`` (and the output that reads it, if it is not the
    output itself) in ``s`` with ``cfg``: TVM's ``schedule_direct_cuda``."""
    define_conv2d_space(cfg, conv)
    check_conv2d_config(cfg, conv)
    pad_data, kernel = conv.input_tensors
    if isinstance(pad_data.op, ComputeOp) and s[pad_data].attach_type != "inline":
        s[pad_data].compute_inline()
    output, local = local_accumulator(s, conv)
    data_shared = s.cache_read(pad_data, "shared", [local])
    kernel_shared = s.cache_read(kernel, "shared", [local])

    n, f, y, x = s[output].op.axis
    kernel_scope, n = s[output].split(n, nparts=1)
    bf, vf, tf, fi = cfg["tile_f"].apply(s, output, f)
    by, vy, ty, yi = cfg["tile_y"].apply(s, output, y)
    bx, vx, tx, xi = cfg["tile_x"].apply(s, output, x)
    bf = s[output].fuse(n, bf)
    s[output].reorder(bf, by, bx, vf, vy, vx, tf, ty, tx, fi, yi, xi)
    for axis, tag in ((bf, "blockIdx.z"), (by, "blockIdx.y"), (bx, "blockIdx.x"),
                      (vf, "vthread"), (vy, "vthread"), (vx, "vthread"),
                      (tf, "threadIdx.z"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[output].bind(axis, te.thread_axis(tag))
    s[local].compute_at(s[output], tx)

    n, f, y, x = s[local].op.axis
    rc, ry, rx = s[local].op.reduce_axis
    rco, rci = cfg["tile_rc"].apply(s, local, rc)
    ryo, ryi = cfg["tile_ry"].apply(s, local, ry)
    rxo, rxi = cfg["tile_rx"].apply(s, local, rx)
    s[local].reorder(rco, ryo, rxo, rci, ryi, rxi, n, f, y, x)
    if cfg["unroll_explicit"].val:
        for axis in (rci, ryi, rxi, f, y, x):
            s[local].unroll(axis)

    for load in (data_shared, kernel_shared):  # cooperative fetching by the block's threads
        s[load].compute_at(s[local], rxo)
        fused = s[load].fuse(*s[load].op.axis)
        tz, fused = s[load].split(fused, nparts=cfg["tile_f"].size[2])
        ty, fused = s[load].split(fused, nparts=cfg["tile_y"].size[2])
        tx, fused = s[load].split(fused, nparts=cfg["tile_x"].size[2])
        s[load].bind(tz, te.thread_axis("threadIdx.z"))
        s[load].bind(ty, te.thread_axis("threadIdx.y"))
        s[load].bind(tx, te.thread_axis("threadIdx.x"))

    s[output].pragma(kernel_scope, "auto_unroll_max_step", cfg["auto_unroll_max_step"].val)
    out_n, out_c, out_h, out_w = get_const_tuple(conv.output(0).shape)
    _, in_c, kh, kw = get_const_tuple(kernel.shape)
    cfg.add_flop(2 * out_n * out_c * out_h * out_w * in_c * kh * kw)


def schedule_conv2d_nchw_cfg(cfg, outs):
    """``outs`` (a ``conv2d_nchw``, possibly followed by an elementwise epilogue) scheduled
    with ``cfg``; other operators get :func:`schedule_per_thread`."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    convs: list[Operation] = []

    def visit(op: Operation) -> None:
        if op.tag == "conv2d_nchw":
            convs.append(op)

    traverse_inline(s, outs[0].op, visit)
    if len(outs) != 1 or len(convs) != 1:
        return schedule_per_thread(outs)
    schedule_direct_cuda(cfg, s, convs[0])
    return s


def schedule_conv2d_nchw(outs):
    """TVM's ``topi.cuda.schedule_conv2d_nchw``: the direct schedule with the config the
    current dispatch context has for the convolution's workload (the fallback config
    outside ``apply_history_best``); a convolution computed by
    :func:`~kiln.topi.cuda.conv2d_gemm.conv2d_nchw_implicit_gemm` gets its tiled GEMM
    schedule the same way."""
    outs = as_list(outs)
    if conv2d_gemm.is_implicit_gemm(outs):
        cfg = autotvm.DispatchContext.current().query(Target.current(),
                                                      conv2d_gemm.implicit_gemm_workload(outs))
        try:
            return conv2d_gemm.schedule_conv2d_implicit_gemm_cfg(cfg, outs)
        except InstantiationError:
            return schedule_per_thread(outs)
    convs = [op for op in all_ops(outs) if op.tag == "conv2d_nchw"]
    if len(convs) != 1:
        return schedule_per_thread(outs)
    cfg = autotvm.DispatchContext.current().query(Target.current(), _workload_of(convs[0]))
    try:
        return schedule_conv2d_nchw_cfg(cfg, outs)
    except InstantiationError:  # a block the current target cannot run
        return schedule_per_thread(outs)


@autotvm.template(CONV2D_NCHW)
def conv2d_nchw_template(data, kernel, strides, padding, dilation, out_dtype):
    """The tuning template: :func:`conv2d_nchw` scheduled with the task's config."""
    out = conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype)
    s = schedule_conv2d_nchw_cfg(autotvm.get_config(), [out])
    return s, [data, kernel, out]


__all__ = ["CONV2D_NCHW", "conv2d_nchw", "schedule_conv2d_nchw", "schedule_conv2d_nchw_cfg",
           "schedule_direct_cuda", "define_conv2d_space",
           "conv2d_nchw_template"]
