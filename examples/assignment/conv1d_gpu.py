"""The course assignment's 1-D convolution on GPU (seed 000, "1D Convolution on GPU").

B = A * W, the full convolution (``np.convolve(A, W)``): A has M elements, W has N, B has
M + N - 1. Both functions take ``(M, N)`` and return ``s, A, W, B`` for ``target="cuda"``.

* ``make_conv1d_gpu_scheduler_baseline`` - the compute as handed out (one reduction over all
  M + N - 1 positions guarded by if_then_else) with the least a GPU needs: the output split
  into blocks of 256 threads and bound.
* ``make_conv1d_gpu_scheduler`` - the optimized schedule (docs/assignment_gpu.md):
  1. **padding**: a zero-padded ``Apad`` so the reduction runs over the N taps of W only, with
     no condition in the inner loop; the padding is inlined into the shared-memory fetch;
  2. **shared memory and cooperative fetching**: for each chunk of ``kt`` taps, a block copies
     the ``threads * per_thread + kt - 1`` input elements and the ``kt`` taps it needs into
     shared memory, every thread fetching a part; the N taps are processed chunk by chunk, so
     any N fits in 48 KiB;
  3. **register tiling**: each thread accumulates ``per_thread`` outputs in registers
     (``cache_write(B, "local")``), each loaded tap reused ``per_thread`` times; the outputs
     of a thread are ``threads`` apart (virtual threads), so a warp reads consecutive words
     of shared memory and stores consecutive outputs;
  4. **unrolling**: the inner tap loop is unrolled (``unroll``), every register index a
     constant.

``STEPS`` is the sequence baseline -> 1 -> 1+2 -> 1+2+3 -> 1-4 that ``kiln report
assignment`` measures; ``conv1d_gpu_template`` is the AutoTVM template over the sizes.
"""

import functools
import sys
from pathlib import Path

import kiln as tvm
from kiln import autotvm, te

# the computes are the CPU example's (examples/ is not a package: import it from its folder)
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from conv1d_cpu import conv1d_full, conv1d_padded  # noqa: E402


def make_conv1d_gpu_scheduler_baseline(M, N, threads=256):
    A, W, B = conv1d_full(M, N)
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=threads)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, A, W, B


def make_conv1d_gpu_scheduler_padded(M, N, threads=256):
    """Optimization 1 alone: the padded compute (N taps, no condition), ``Apad`` inlined,
    the outputs bound as in the baseline."""
    A, W, Apad, B = conv1d_padded(M, N, pad_name="Apad")
    s = te.create_schedule(B.op)
    s[Apad].compute_inline()
    bx, tx = s[B].split(B.op.axis[0], factor=threads)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, A, W, B


def make_conv1d_gpu_scheduler(M, N, threads=128, per_thread=8, kt=64, unroll=True):
    """Optimizations 1-4; ``per_thread=1`` leaves out the register tiling and
    ``unroll=False`` the unrolling (the intermediate steps of ``STEPS``)."""
    A, W, Apad, B = conv1d_padded(M, N, pad_name="Apad")
    s = te.create_schedule(B.op)
    s[Apad].compute_inline()
    BL = s.cache_write(B, "local")
    AS = s.cache_read(Apad, "shared", [BL])
    WS = s.cache_read(W, "shared", [BL])

    # a block computes threads * per_thread outputs; thread t the outputs t, t + threads,
    # t + 2 * threads, ... (virtual threads): neighbouring threads read neighbouring words of
    # shared memory (no bank conflicts) and store neighbouring outputs (coalesced)
    bx, xi = s[B].split(B.op.axis[0], factor=threads * per_thread)
    vx, tx = s[B].split(xi, factor=threads)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(vx, te.thread_axis("vthread"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[BL].compute_at(s[B], tx)

    (k,) = s[BL].op.reduce_axis
    ko, ki = s[BL].split(k, factor=min(kt, N))
    s[BL].reorder(ko, ki, *s[BL].op.axis)
    if unroll:
        s[BL].unroll(ki)
    for shared in (AS, WS):
        s[shared].compute_at(s[BL], ko)
        _, t = s[shared].split(s[shared].op.axis[0], factor=threads)
        s[shared].bind(t, te.thread_axis("threadIdx.x"))
    return s, A, W, B


VARIANTS = {
    "baseline": make_conv1d_gpu_scheduler_baseline,
    "optimized": make_conv1d_gpu_scheduler,
}

STEPS = [
    ("baseline", make_conv1d_gpu_scheduler_baseline),
    ("padding", make_conv1d_gpu_scheduler_padded),
    ("shared memory", functools.partial(make_conv1d_gpu_scheduler, per_thread=1,
                                        unroll=False)),
    ("register tiling", functools.partial(make_conv1d_gpu_scheduler, unroll=False)),
    ("unrolling", make_conv1d_gpu_scheduler),
]


@autotvm.template("assignment.conv1d_gpu")
def conv1d_gpu_template(M, N):
    """The AutoTVM template: the optimized schedule's sizes as knobs."""
    cfg = autotvm.get_config()
    cfg.define_knob("threads", [64, 128, 256])
    cfg.define_knob("per_thread", [1, 2, 4, 8, 16])
    cfg.define_knob("kt", [16, 32, 64])
    cfg.define_knob("unroll", [True, False])
    s, A, W, B = make_conv1d_gpu_scheduler(M, N, cfg["threads"].val, cfg["per_thread"].val,
                                           cfg["kt"].val, cfg["unroll"].val)
    return s, [A, W, B]

if __name__ == "__main__":
    s, A, W, B = make_conv1d_gpu_scheduler(1000, 100)
    print(tvm.lower(s, [A, W, B], simple_mode=True))
