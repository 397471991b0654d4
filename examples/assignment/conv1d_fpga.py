"""The course assignment's 1-D convolution on the FPGA (seed 000's third device), on kiln's
VTA target and its simulator (docs/vta.md).

B = A * W, the full convolution of examples/assignment/conv1d_cpu.py: A has M elements, W
has N, B has M + N - 1 and B[n] = sum_j A[j] W[n - j] (``np.convolve(A, W)``).

**Arithmetic.** VTA multiplies int8 by int8 into int32 accumulators and stores int8, so
the accelerator computes ``B = clip(conv(A, W) >> shift, -128, 127)`` with A and W int8:
the products are summed exactly in int32 (no overflow while ``128 * 128 * min(M, N) <
2**31``), then requantized to int8 on the ALU (``>> shift``, ``max``, ``min``), as VTA's
tutorials do. :func:`conv1d_fpga_reference` is numpy's answer, bit for bit. A float problem
maps to it by symmetric quantization (:func:`quantize`): ``a ~ sa * qa`` and ``w ~ sw * qw``
with ``sa = max|a| / 127`` (likewise ``sw``) and ``qa``, ``qw`` int8 in ``[-127, 127]``;
then ``conv(a, w) ~ sa * sw * conv(qa, qw)``, exactly accumulated, and an output ``qb``
stands for ``sa * sw * 2**shift * qb`` (``>>`` rounds toward minus infinity, so the
output errs by less than one step, ``sa * sw * 2**shift``). The shift is fixed when the
kernel is compiled: :func:`output_shift` takes the worst case of ``min(M, N)`` products,
which never clips; calibrating it on sample data (the largest ``|conv(qa, qw)|`` seen)
gives a smaller shift and more precision, as VTA's quantization flow does.

**The GEMM formulation.** VTA's only multiply is its GEMM core: a 1 x 16 input tile times a
16 x 16 weight tile into a 1 x 16 accumulator tile (``env.gemm``). With T = 16, output
n = T p + o and input j = T q + i,

    B[T p + o] = sum_d sum_i A[T (p - d) + i] * W[T d + o - i],

so output tile p is a sum of ``D = (N + T - 2) // T + 1`` GEMMs: input tile ``p - d`` times
the *Toeplitz tile* ``Wt[d][o, i] = W[T d + o - i]`` (0 outside ``[0, N)``). The kernel
is laid out as the ``D`` Toeplitz tiles in reverse order (:func:`pack_kernel`) and the input
as tiles with ``D - 1`` zero tiles in front and zeros after (:func:`pack_input`), so that
``C[p] = sum_k Apad[p + k] @ Wk[k]^T``. Both are layout transforms in numpy, as VTA's
tutorials pack their data and kernels: VTA's DMA moves whole tiles and cannot expand W,
and its padding frame has at most 15 tiles a side, fewer than ``D - 1`` once N > 241.
:func:`unpack_output` flattens the output tiles and drops the tail.

Every ``make_conv1d_fpga_scheduler*`` function takes ``(M, N)`` and returns ``s, A, W, B``
for ``vta.build`` (B: ``(P, 1, 16)``, A: ``(P + D - 1, 1, 16)``, W: ``(D, 16, 16)``, all
int8; P is the ``ceil((M+N-1)/16)`` output tiles, rounded up to whole blocks by the blocked
schedules, :func:`output_blocks`):

* ``make_conv1d_fpga_scheduler`` - the baseline: one output tile at a time, each loading
  the D input tiles and the D kernel tiles it needs, then a GEMM reset, one GEMM
  instruction over the D kernel tiles, the three ALU passes and a store.
* ``make_conv1d_fpga_scheduler_blocked`` - optimization 1, reuse in the on-chip buffers:
  the kernel is loaded once, and output blocks of ``block`` tiles load their input window
  (``block + D - 1`` tiles) once, instead of D tiles per output tile.
* ``make_conv1d_fpga_scheduler_folded`` - optimization 2, micro-op folding: the reduction
  over kernel tiles goes outside the output tiles of a block, so a block's GEMMs are one
  instruction (``iter_out`` over kernel tiles, ``iter_in`` over output tiles, one micro-op)
  instead of one per output tile.
* ``make_conv1d_fpga_scheduler_vthread`` - optimization 3, latency hiding: consecutive
  blocks alternate between two virtual threads, so one block's input loads and stores
  overlap the other's GEMMs.

``VARIANTS`` maps a short name to each; ``STEPS`` is the same sequence in order. Run
:func:`run_conv1d_fpga` to pack, build, run on the simulator and unpack;
``python examples/assignment/conv1d_fpga.py`` prints each step's simulated cycles.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

import kiln.vta as vta
from kiln import te


def tile_size(env: vta.Environment) -> int:
    """Elements per tile of ``env``'s GEMM, which must be a matrix-vector product with
    square weight tiles (``BATCH`` 1, ``BLOCK_IN == BLOCK_OUT``)."""
    if env.BATCH != 1 or env.BLOCK_IN != env.BLOCK_OUT:
        raise NotImplementedError(
            f"conv1d on VTA needs BATCH 1 and BLOCK_IN == BLOCK_OUT, this configuration has "
            f"BATCH {env.BATCH}, BLOCK_IN {env.BLOCK_IN}, BLOCK_OUT {env.BLOCK_OUT}")
    return env.BLOCK_OUT


def kernel_tiles(N: int, t: int) -> int:
    """D, the Toeplitz tiles of an N-tap kernel: ``t d + o - i`` meets ``[0, N)`` for
    ``d < D``."""
    return (N + t - 2) // t + 1


class Conv1dTiles(NamedTuple):
    """The tiles of a full 1-D convolution of M by N elements, ``t`` elements per tile:
    ``outputs`` tiles of B, ``taps`` (D) kernel tiles."""

    M: int
    N: int
    t: int

    @property
    def outputs(self) -> int:
        return -(-(self.M + self.N - 1) // self.t)

    @property
    def taps(self) -> int:
        return kernel_tiles(self.N, self.t)


def conv1d_tiles(M: int, N: int, env: vta.Environment | None = None) -> Conv1dTiles:
    """The tiling of an M x N convolution on ``env`` (default ``vta.get_env()``)."""
    if M < 1 or N < 1:
        raise ValueError(f"conv1d needs M, N >= 1, got M={M}, N={N}")
    return Conv1dTiles(M, N, tile_size(env or vta.get_env()))


def pack_input(a: np.ndarray, N: int, outputs: int | None = None,
               env: vta.Environment | None = None) -> np.ndarray:
    """A (M,) int8 as the input tiles the GEMMs of an N-tap convolution read, shape
    ``(outputs + D - 1, 1, t)``: D - 1 zero tiles, A, zeros (``outputs``, B's tiles,
    defaults to ``ceil((M+N-1)/t)``)."""
    tiles = conv1d_tiles(a.size, N, env)
    outputs = outputs or tiles.outputs
    out = np.zeros((outputs + tiles.taps - 1) * tiles.t, np.int8)
    front = (tiles.taps - 1) * tiles.t
    out[front:front + a.size] = a
    return out.reshape(-1, 1, tiles.t)


def pack_kernel(w: np.ndarray, env: vta.Environment | None = None) -> np.ndarray:
    """W (N,) int8 as the reversed Toeplitz tiles ``Wk[k][o, i] = W[t (D-1-k) + o - i]``
    (0 outside ``[0, N)``), shape ``(D, t, t)``."""
    t = tile_size(env or vta.get_env())
    D = kernel_tiles(w.size, t)
    o, i = np.meshgrid(np.arange(t), np.arange(t), indexing="ij")
    j = t * (D - 1 - np.arange(D))[:, None, None] + o - i
    inside = (j >= 0) & (j < w.size)
    return np.where(inside, w[np.clip(j, 0, w.size - 1)], 0).astype(np.int8)


def unpack_output(b: np.ndarray, M: int, N: int) -> np.ndarray:
    """The output tiles as the M + N - 1 elements of B."""
    return b.reshape(-1)[:M + N - 1]


def output_shift(M: int, N: int) -> int:
    """The default shift: the smallest that brings every sum of ``min(M, N)`` products of
    int8 in ``[-127, 127]`` (what :func:`quantize` gives) into int8, so that clipping
    changes nothing."""
    return max(0, (127 * 127 * min(M, N)).bit_length() - 7)


def quantize(x: np.ndarray) -> tuple[np.ndarray, float]:
    """Symmetric int8 quantization: ``(q, scale)`` with ``x ~ scale * q``, q in
    ``[-127, 127]``."""
    scale = float(np.max(np.abs(x))) / 127 or 1.0
    return np.clip(np.rint(x / scale), -127, 127).astype(np.int8), scale


def conv1d_fpga_reference(a: np.ndarray, w: np.ndarray, shift: int) -> np.ndarray:
    """What the accelerator computes, with numpy: ``clip(conv(a, w) >> shift)`` as int8."""
    acc = np.convolve(a.astype(np.int64), w.astype(np.int64)).astype(np.int32)
    return np.clip(acc >> shift, -128, 127).astype(np.int8)


def conv1d_gemm(M: int, N: int, shift: int | None = None,
                env: vta.Environment | None = None, outputs: int | None = None):
    """The compute: ``A, W, A_buf, W_buf, C_buf, alu, B`` (``alu`` the three ALU stages
    ``>> shift``, ``max(., -128)``, ``min(., 127)``; ``shift`` defaults to
    :func:`output_shift`). ``outputs`` (at least the tiles of B) pads B with tiles past the
    end, so that a schedule's blocks divide it (they read zeros of the padded input)."""
    env = env or vta.get_env()
    tiles = conv1d_tiles(M, N, env)
    t, D, P = tiles.t, tiles.taps, max(outputs or 0, tiles.outputs)
    shift = output_shift(M, N) if shift is None else shift
    A = te.placeholder((P + D - 1, 1, t), name="A", dtype=env.inp_dtype)
    W = te.placeholder((D, t, t), name="W", dtype=env.wgt_dtype)
    A_buf = te.compute(A.shape, lambda *i: A(*i), "A_buf")
    W_buf = te.compute(W.shape, lambda *i: W(*i), "W_buf")
    k = te.reduce_axis((0, D), "k")
    i = te.reduce_axis((0, t), "i")
    C_buf = te.compute(
        (P, 1, t),
        lambda p, b, o: te.sum(A_buf[p + k, b, i].astype(env.acc_dtype)
                               * W_buf[k, o, i].astype(env.acc_dtype), axis=[k, i]),
        name="C_buf")
    lo, hi = -(1 << (env.OUT_WIDTH - 1)), (1 << (env.OUT_WIDTH - 1)) - 1
    C_shr = te.compute(C_buf.shape, lambda *x: C_buf(*x) >> shift, name="C_shr")
    C_max = te.compute(C_buf.shape, lambda *x: te.max(C_shr(*x), lo), name="C_max")
    C_min = te.compute(C_buf.shape, lambda *x: te.min(C_max(*x), hi), name="C_min")
    B = te.compute(C_buf.shape, lambda *x: C_min(*x).astype(env.out_dtype), name="B")
    return A, W, A_buf, W_buf, C_buf, (C_shr, C_max, C_min), B


def output_blocks(outputs: int, block: int, vthreads: int = 1) -> tuple[int, int]:
    """``(blocks, tiles per block)`` covering ``outputs`` tiles in blocks of at most
    ``block``, the number of blocks a multiple of ``vthreads``, the blocks as even as
    possible: B is padded to ``blocks * tiles`` so that no loop has a tail (a tail costs
    instructions of its own, and kiln's VTA lowering does not take every virtual-thread
    loop with a tail)."""
    blocks = -(-outputs // block)
    blocks = -(-blocks // vthreads) * vthreads
    return blocks, -(-outputs // blocks)


def _schedule(M: int, N: int, *, shift: int | None, env: vta.Environment | None,
              block: int | None = None, fold: bool = False, vthreads: int = 1):
    """The schedules of this module: ``block`` None is the baseline (everything per output
    tile); else the kernel at the root, input windows, GEMMs and ALU per block of at most
    ``block`` output tiles (:func:`output_blocks`), the kernel-tile loop outside the output
    tiles when ``fold``, and blocks over ``vthreads`` virtual threads."""
    env = env or vta.get_env()
    outputs = conv1d_tiles(M, N, env).outputs
    if block is not None:
        blocks, block = output_blocks(outputs, block, vthreads)
        outputs = blocks * block
    A, W, A_buf, W_buf, C_buf, alu, B = conv1d_gemm(M, N, shift, env, outputs)
    s = te.create_schedule(B.op)
    s[A_buf].set_scope(env.inp_scope)
    s[W_buf].set_scope(env.wgt_scope)
    for stage in (C_buf, *alu):
        s[stage].set_scope(env.acc_scope)

    p, b, _ = s[B].op.axis
    if block is None:  # baseline: one output tile, with its inputs and kernel, at a time
        at, store = p, b
        s[W_buf].compute_at(s[B], at)
    else:
        at, store = s[B].split(p, factor=block)
        if vthreads > 1:
            _, at = s[B].split(at, factor=vthreads)
            s[B].bind(at, te.thread_axis("cthread"))
    for stage in (A_buf, C_buf, *alu):
        s[stage].compute_at(s[B], at)

    cp, cb, co = s[C_buf].op.axis
    k, i = s[C_buf].op.reduce_axis
    s[C_buf].reorder(*((k, cp) if fold else (cp, k)), cb, co, i)
    s[C_buf].tensorize(cb, env.gemm)
    s[A_buf].pragma(s[A_buf].op.axis[0], env.dma_copy)
    s[W_buf].pragma(s[W_buf].op.axis[0], env.dma_copy)
    for stage in alu:
        s[stage].pragma(s[stage].op.axis[0], env.alu)
    s[B].pragma(store, env.dma_copy)
    return s, A, W, B


def make_conv1d_fpga_scheduler(M: int, N: int, shift: int | None = None,
                               env: vta.Environment | None = None):
    """The baseline: per output tile, load its D input and D kernel tiles, GEMM, requantize,
    store. Returns ``s, A, W, B``."""
    return _schedule(M, N, shift=shift, env=env)


def make_conv1d_fpga_scheduler_blocked(M: int, N: int, block: int = 64, shift: int | None = None,
                                       env: vta.Environment | None = None):
    """Optimization 1: the kernel loaded once, the input window once per ``block`` output
    tiles."""
    return _schedule(M, N, shift=shift, env=env, block=block)


def make_conv1d_fpga_scheduler_folded(M: int, N: int, block: int = 64, shift: int | None = None,
                                      env: vta.Environment | None = None):
    """Optimizations 1-2: a block's GEMMs folded into one instruction (kernel tiles outer,
    output tiles inner)."""
    return _schedule(M, N, shift=shift, env=env, block=block, fold=True)


def make_conv1d_fpga_scheduler_vthread(M: int, N: int, block: int = 64, vthreads: int = 2,
                                       shift: int | None = None,
                                       env: vta.Environment | None = None):
    """Optimizations 1-3: blocks alternate between ``vthreads`` virtual threads, so loads
    and stores of one overlap the GEMMs of the other."""
    return _schedule(M, N, shift=shift, env=env, block=block, fold=True, vthreads=vthreads)


VARIANTS = {
    "baseline": make_conv1d_fpga_scheduler,
    "blocked": make_conv1d_fpga_scheduler_blocked,
    "folded": make_conv1d_fpga_scheduler_folded,
    "vthread": make_conv1d_fpga_scheduler_vthread,
}

STEPS = list(VARIANTS.items())


def run_conv1d_fpga(make, a: np.ndarray, w: np.ndarray, shift: int | None = None,
                    env: vta.Environment | None = None) -> tuple[np.ndarray, dict[str, int]]:
    """Build ``make(M, N)`` with ``vta.build``, run it on the simulator on int8 ``a``, ``w``
    and return ``(B, stats)``: the M + N - 1 int8 outputs and ``simulator.stats()``."""
    env = env or vta.get_env()
    M, N = a.size, w.size
    s, A, W, B = make(M, N, shift=shift, env=env)
    f = vta.build(s, [A, W, B], "ext_dev", env.target_host, name="conv1d")
    out = np.zeros([int(d) for d in B.shape], np.int8)
    vta.testing.simulator.clear_stats()
    f(pack_input(a, N, out.shape[0], env), pack_kernel(w, env), out)
    return unpack_output(out, M, N), vta.testing.simulator.stats()


if __name__ == "__main__":
    M, N = 4096, 128
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, M).astype(np.int8)
    w = rng.integers(-128, 128, N).astype(np.int8)
    expected = conv1d_fpga_reference(a, w, output_shift(M, N))
    base = None
    for name, make in STEPS:
        b, stats = run_conv1d_fpga(make, a, w)
        assert np.array_equal(b, expected), name
        base = base or stats["cycles"]
        print(f"{name:10s} {stats['cycles']:9d} cycles  {base / stats['cycles']:5.2f}x  "
              f"{stats['insn_counter']:6d} instructions  "
              f"GEMM utilization {stats['gemm_busy_cycles'] / stats['cycles']:.1%}")
