"""The assignment's FPGA part: the full 1-D convolution on VTA
(examples/assignment/conv1d_fpga.py), bit-exact against numpy on the simulator."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import kiln.vta as vta
from kiln.vta.isa import GemmInsn

_PATH = Path(__file__).resolve().parents[2] / "examples" / "assignment" / "conv1d_fpga.py"
_spec = importlib.util.spec_from_file_location("kiln_example_conv1d_fpga", _PATH)
fpga = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fpga)

RNG = np.random.default_rng(11)


def _int8(n):
    return RNG.integers(-128, 128, n).astype(np.int8)


def _small_blocks(make):
    """A step's scheduler with blocks of 2 output tiles, so that small sizes have several."""
    if make is fpga.make_conv1d_fpga_scheduler:
        return make
    return lambda M, N, **kw: make(M, N, block=2, **kw)


@pytest.mark.parametrize("name", list(fpga.VARIANTS))
@pytest.mark.parametrize("M, N", [(40, 7), (5, 40), (1, 1), (83, 16), (20, 260)])
def test_every_step_is_bit_exact(name, M, N):
    """Every schedule at sizes with partial tiles, M < N, a single element, a whole kernel
    tile and more kernel tiles (17) than VTA's DMA could pad; the default shift (no
    clipping) and a small one (clipping)."""
    a, w = _int8(M), _int8(N)
    for shift in (None, 3):
        b, _ = fpga.run_conv1d_fpga(_small_blocks(fpga.VARIANTS[name]), a, w, shift=shift)
        ref = fpga.conv1d_fpga_reference(a, w, fpga.output_shift(M, N) if shift is None
                                         else shift)
        np.testing.assert_array_equal(b, ref)


@pytest.mark.parametrize("M, N", [(1, 1), (16, 16), (37, 5), (3, 50)])
def test_packed_gemm_is_the_full_convolution(M, N):
    """The formulation alone, in numpy: ``C[p] = sum_k Apad[p + k] @ Wk[k]^T`` over the
    packed input and kernel is ``np.convolve`` in int32."""
    a, w = _int8(M), _int8(N)
    D, P = fpga.conv1d_tiles(M, N).taps, fpga.conv1d_tiles(M, N).outputs
    Apad = fpga.pack_input(a, N)[:, 0].astype(np.int32)
    Wk = fpga.pack_kernel(w).astype(np.int32)
    assert Apad.shape == (P + D - 1, 16) and Wk.shape == (D, 16, 16)
    C = sum(Apad[k:k + P] @ Wk[k].T for k in range(D))
    np.testing.assert_array_equal(fpga.unpack_output(C, M, N),
                                  np.convolve(a.astype(np.int32), w.astype(np.int32)))


def test_float_problem_through_quantization():
    """A float convolution quantized to int8 (calibrated shift), run on VTA and scaled back,
    is within one output step of numpy's float answer plus the input rounding."""
    a = RNG.standard_normal(200).astype(np.float32)
    w = RNG.standard_normal(24).astype(np.float32)
    (qa, sa), (qw, sw) = fpga.quantize(a), fpga.quantize(w)
    peak = int(np.abs(np.convolve(qa.astype(np.int32), qw.astype(np.int32))).max())
    shift = max(0, peak.bit_length() - 7)
    b, _ = fpga.run_conv1d_fpga(fpga.make_conv1d_fpga_scheduler_folded, qa, qw, shift=shift)
    step = sa * sw * 2 ** shift
    rounding = (np.abs(a).sum() * sw + np.abs(w).sum() * sa) / 2  # inputs off by half a step
    err = np.abs(b.astype(np.float64) * step - np.convolve(a, w))
    assert err.max() <= step + rounding
    assert err.max() < 0.05 * np.abs(np.convolve(a, w)).max()


def test_optimizations_cut_traffic_instructions_and_cycles():
    """Deterministic simulator counts at the CPU part's size (4096 x 128): the blocked
    schedule loads the kernel once, folding makes a block's GEMMs one instruction, and each
    step takes fewer simulated cycles than the one before (the baseline is left out: it
    takes ~1 s to simulate; its counts are in docs/vta.md)."""
    M, N = 4096, 128
    a, w = _int8(M), _int8(N)
    tiles = fpga.conv1d_tiles(M, N)
    stats = {name: fpga.run_conv1d_fpga(fpga.VARIANTS[name], a, w)[1]
             for name in ("blocked", "folded", "vthread")}
    kernel_bytes = tiles.taps * 16 * 16
    assert all(s["wgt_load_nbytes"] == kernel_bytes for s in stats.values())
    assert all(s["gemm_counter"] >= tiles.outputs * tiles.taps for s in stats.values())
    env = vta.get_env()
    gemms = {}
    for name in ("blocked", "folded"):
        s, A, W, B = fpga.VARIANTS[name](M, N)
        prog = vta.build(s, [A, W, B], "ext_dev", env.target_host).program
        gemms[name] = sum(isinstance(x, GemmInsn) and not x.reset_reg for x in prog.insns)
    blocks, _ = fpga.output_blocks(tiles.outputs, 64)
    assert gemms["folded"] == blocks < gemms["blocked"]
    assert stats["blocked"]["cycles"] > stats["folded"]["cycles"] > stats["vthread"]["cycles"]


@pytest.mark.parametrize("outputs, block, vthreads, expected", [
    (264, 64, 1, (5, 53)), (264, 64, 2, (6, 44)), (7, 2, 2, (4, 2)), (1, 64, 2, (2, 1))])
def test_output_blocks_cover_the_output_evenly(outputs, block, vthreads, expected):
    """Whole blocks, a multiple of the virtual threads, padding less than a tile each."""
    blocks, size = fpga.output_blocks(outputs, block, vthreads)
    assert (blocks, size) == expected
    assert 0 <= blocks * size - outputs < blocks


def test_configuration_without_square_tiles_is_refused():
    odd = vta.get_env({"LOG_BATCH": 1})
    with pytest.raises(NotImplementedError, match="BATCH 1"):
        fpga.conv1d_tiles(10, 3, odd)
