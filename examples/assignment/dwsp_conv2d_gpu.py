"""The course assignment's depthwise convolution on GPU (seed 000, "2D Depthwise Separable").

``inp`` (B, C, H, W) convolved channel by channel with ``ker`` (C, 1, K, K) (PyTorch's
depthwise weight layout; ``conv2d(inp, ker, padding=K // 2, groups=C)``), stride 1, zero
padding ``K // 2``. Both functions take ``(B, C, H, W, K)`` and return
``s, inp, ker, out`` for ``target="cuda"``.

* ``make_dwsp_conv2d_gpu_scheduler_baseline`` - output rows bound to blocks and columns to
  threads (the schedule of book §5.6's default), reading global memory directly.
* ``make_dwsp_conv2d_gpu_scheduler`` - the optimized schedule (docs/assignment_gpu.md):
  1. **one (image, channel) pair per block row**: ``blockIdx.z`` runs over B*C, each block a
     ``rows x cols`` tile of the output;
  2. **shared memory with cooperative fetching**: the block's ``(rows+K-1) x (cols+K-1)`` input
     window (the padding inlined into this copy) and the channel's K x K taps are copied once
     into shared memory by all threads, then read K*K times;
  3. **register tiling along columns of the tile**: each thread computes ``rows_per_thread``
     outputs of one column in registers, reading the window by columns (book §5.6: fewer bank
     conflicts), each tap loaded once per thread for all its rows;
  4. **unrolling** of the K x K window.

``STEPS`` is the sequence baseline -> 1+2 -> 1+2+3 -> 1-4 that ``kiln report assignment``
measures; ``dwsp_conv2d_gpu_template`` is the AutoTVM template over the tile sizes.
"""

import functools

import kiln as tvm
from kiln import autotvm, te
from kiln.topi.nn import pad


def dwsp_conv2d(B, C, H, W, K):
    inp = te.placeholder((B, C, H, W), name="inp")
    ker = te.placeholder((C, 1, K, K), name="ker")
    p = K // 2
    inp_pad = pad(inp, (0, 0, p, p), (0, 0, p, p), name="inp_pad")
    OH, OW = H + 2 * p - K + 1, W + 2 * p - K + 1
    rkh = te.reduce_axis((0, K), name="rkh")
    rkw = te.reduce_axis((0, K), name="rkw")
    out = te.compute(
        (B, C, OH, OW),
        lambda b, c, h, w: te.sum(inp_pad[b, c, h + rkh, w + rkw] * ker[c, 0, rkh, rkw],
                                  axis=[rkh, rkw]),
        name="out",
    )
    return inp, ker, inp_pad, out


def make_dwsp_conv2d_gpu_scheduler_baseline(B, C, H, W, K):
    inp, ker, inp_pad, out = dwsp_conv2d(B, C, H, W, K)
    s = te.create_schedule(out.op)
    s[inp_pad].compute_inline()
    b, c, h, w = out.op.axis
    s[out].bind(s[out].fuse(b, c, h), te.thread_axis("blockIdx.x"))
    s[out].bind(w, te.thread_axis("threadIdx.x"))
    return s, inp, ker, out


def make_dwsp_conv2d_gpu_scheduler(B, C, H, W, K, rows=32, cols=32, rows_per_thread=4,
                                   unroll=True):
    """Optimizations 1-4; ``rows_per_thread=1`` leaves out the register tiling and
    ``unroll=False`` the unrolling (the intermediate steps of ``STEPS``)."""
    inp, ker, inp_pad, out = dwsp_conv2d(B, C, H, W, K)
    s = te.create_schedule(out.op)
    s[inp_pad].compute_inline()
    OL = s.cache_write(out, "local")
    XS = s.cache_read(inp_pad, "shared", [OL])
    KS = s.cache_read(ker, "shared", [OL])

    b, c, h, w = s[out].op.axis
    bz = s[out].fuse(b, c)
    by, hi = s[out].split(h, factor=rows)
    ty, ih = s[out].split(hi, factor=rows_per_thread)
    bx, tx = s[out].split(w, factor=cols)
    s[out].reorder(bz, by, bx, ty, tx, ih)
    s[out].bind(bz, te.thread_axis("blockIdx.z"))
    s[out].bind(by, te.thread_axis("blockIdx.y"))
    s[out].bind(bx, te.thread_axis("blockIdx.x"))
    s[out].bind(ty, te.thread_axis("threadIdx.y"))
    s[out].bind(tx, te.thread_axis("threadIdx.x"))

    s[OL].compute_at(s[out], tx)
    rkh, rkw = s[OL].op.reduce_axis
    s[OL].reorder(rkh, rkw, *s[OL].op.axis)
    if unroll:
        s[OL].unroll(rkw)

    n_ty = rows // rows_per_thread
    for shared in (XS, KS):
        s[shared].compute_at(s[out], bx)
        fused = s[shared].fuse(*s[shared].op.axis)
        _, t = s[shared].split(fused, factor=n_ty * cols)
        ty_, tx_ = s[shared].split(t, factor=cols)
        s[shared].bind(ty_, te.thread_axis("threadIdx.y"))
        s[shared].bind(tx_, te.thread_axis("threadIdx.x"))
    return s, inp, ker, out


VARIANTS = {
    "baseline": make_dwsp_conv2d_gpu_scheduler_baseline,
    "optimized": make_dwsp_conv2d_gpu_scheduler,
}

STEPS = [
    ("baseline", make_dwsp_conv2d_gpu_scheduler_baseline),
    ("channel tiles, shared memory",
     functools.partial(make_dwsp_conv2d_gpu_scheduler, rows=8, rows_per_thread=1,
                       unroll=False)),
    ("register tiling", functools.partial(make_dwsp_conv2d_gpu_scheduler, unroll=False)),
    ("unrolling", make_dwsp_conv2d_gpu_scheduler),
]


@autotvm.template("assignment.dwsp_conv2d_gpu")
def dwsp_conv2d_gpu_template(B, C, H, W, K):
    """The AutoTVM template: the optimized schedule's tile sizes as knobs."""
    cfg = autotvm.get_config()
    cfg.define_knob("rows", [8, 16, 32])
    cfg.define_knob("cols", [16, 32])
    cfg.define_knob("rows_per_thread", [1, 2, 4])
    cfg.define_knob("unroll", [True, False])
    s, inp, ker, out = make_dwsp_conv2d_gpu_scheduler(
        B, C, H, W, K, cfg["rows"].val, cfg["cols"].val, cfg["rows_per_thread"].val,
        cfg["unroll"].val)
    return s, [inp, ker, out]


if __name__ == "__main__":
    s, inp, ker, out = make_dwsp_conv2d_gpu_scheduler(1, 4, 64, 64, 3)
    print(tvm.lower(s, [inp, ker, out], simple_mode=True))
