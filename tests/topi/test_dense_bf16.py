"""bf16 dense of ``topi.x86.dense_bf16`` against float64 numpy references.

Tolerances, stated per check:

* against float64 on the bf16-rounded operands (what the kernels compute: exact products,
  float32 sums): ``|y - ref| <= 1e-5 * (|x| @ |w|) + 1e-6``, float32 summation error of up
  to a few thousand terms;
* against float64 on the unrounded float32 operands: ``|y - ref| <= 2**-7 * (|x| @ |w|)``
  (each operand rounded to 8 significant bits: a relative error of at most ``2**-9`` each).

Both micro-kernel paths run where the host has them: AMX-BF16 tiles (``tdpbf16ps``) and
AVX-512 BF16 vectors (``vdpbf16ps``, forced on an AMX host by hiding the AMX features, and
by pinning the target to a Cooper Lake CPU); a target without AVX-512 BF16 is refused.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.target import current_cpu
from kiln.topi.x86 import bf16_intrin
from kiln.topi.x86 import dense_bf16 as D
from kiln.topi.x86.bf16 import np_from_bf16_bits, np_to_bf16_bits

from .test_bf16 import (  # noqa: F401 - path is a fixture
    _rounded,
    path,
    refuse_amx_tiles,
    requires_bf16,
)


def _check(y: np.ndarray, x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> None:
    """``y`` (``x @ w.T + bias``) against both references (module doc)."""
    exact = _rounded(x) @ _rounded(w).T + bias
    scale = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T
    assert np.all(np.abs(y - exact) <= 1e-5 * scale + 1e-6)
    unrounded = x.astype(np.float64) @ w.astype(np.float64).T + bias
    assert np.all(np.abs(y - unrounded) <= 2.0 ** -7 * scale)


def _run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, data_dtype: str = "float32",
         target: str | None = None) -> tuple[np.ndarray, str]:
    """The dense of ``x`` (given as bf16 bits where ``data_dtype`` is ``uint16``) by ``w``
    plus ``b``, built for ``target``; returns the output and the kernel's C source."""
    n = w.shape[0]
    packed = D.pack_dense_weight(w)
    data = np_to_bf16_bits(x) if data_dtype == "uint16" else x
    X = te.placeholder(x.shape, data_dtype, name="x")
    W = te.placeholder(packed.shape, "uint16", name="w")
    Bb = te.placeholder((n,), name="b")
    with kiln.target.Target(target or "llvm"):
        out = D.dense_bf16(X, W, None if b is None else Bb, n)
        args = [X, W, out] if b is None else [X, W, Bb, out]
        f = kiln.build(D.schedule_dense_bf16(out), args, target=target or "llvm")
    y = kiln.nd.empty(out.shape)
    arrays = [kiln.nd.array(data), kiln.nd.array(packed)]
    f(*arrays, *([] if b is None else [kiln.nd.array(b)]), y)
    return y.numpy(), f.get_source()


def test_weight_is_packed_in_panels_of_pairs_of_reduction_steps():
    """``[N, K]`` -> ``[N/nr, K'/2, nr, 2]``: per panel of a block's ``nr`` columns and pair
    of steps, each column's two weights side by side (the VNNI-2 layout of the ``b``
    operand), ``K`` padded with zeros to 32."""
    w = np.arange(3 * 5, dtype=np.float32).reshape(3, 5)  # [N=3, K=5]: one panel of 3
    p = D.pack_dense_weight(w)
    assert p.shape == (1, 16, 3, 2) and p.dtype == np.uint16
    assert np_from_bf16_bits(p[0, 1, 2]).tolist() == [w[2, 2], w[2, 3]]
    assert np_from_bf16_bits(p[0, 2, 0]).tolist() == [w[0, 4], 0.0] and not p[0, 3:].any()
    w = np.random.default_rng(0).standard_normal((128, 40)).astype(np.float32)
    p = D.pack_dense_weight(w)  # two panels of 64 columns
    assert p.shape == (2, 32, 64, 2)
    assert p[1, 7, 5, 1] == np_to_bf16_bits(w[64 + 5, 2 * 7 + 1])


def test_blocks():
    """``(mr, nr)``: 32 rows (fewer rows: all of them), columns a divisor of the outputs up
    to 64 with the fewest vectors of 16 per column."""
    assert D.dense_blocks(128, 768) == (32, 64)
    assert D.dense_blocks(197, 3072) == (32, 64)  # ViT's tokens: the last block padded
    assert D.dense_blocks(1, 1000) == (1, 40)
    assert D.dense_blocks(7, 48) == (7, 48)
    assert D.dense_blocks(4, 37) == (4, 37)


@requires_bf16
@pytest.mark.parametrize("m,k,n,bias", [
    ((3,), 37, 40, True),      # K padded to 64, columns in blocks of 40 (8-lane epilogue)
    ((1,), 64, 1000, True),    # a classifier
    ((40,), 96, 32, False),    # a ragged last block of rows (32 + 8, padded)
    ((2, 35), 64, 48, True),   # [batch, seq, K]: each sequence's blocks, the last padded
    ((70,), 64, 48, False),    # AMX chunks of 32 rows and a ragged one
])
def test_dense_bf16_matches_float64(path, m, k, n, bias):  # noqa: F811 - the fixture
    rng = np.random.default_rng(1)
    x = rng.standard_normal((*m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) if bias else None
    y, _ = _run(x, w, b)
    _check(y, x, w, 0.0 if b is None else b)


@requires_bf16
@pytest.mark.slow
def test_bf16_data_is_read_as_it_is():
    """Data given as bf16 bits (``uint16``, from a ``bf16_round`` in its producer's tail) is
    the ``a`` operand itself (no rounding stage) and gives the bits of the same dense of the
    float32 data it was rounded from."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    w = rng.standard_normal((32, 96)).astype(np.float32)
    y32, src32 = _run(x, w, None)
    y16, src16 = _run(x, w, None, data_dtype="uint16")
    assert np.array_equal(y32, y16)
    assert "T_bf16_rows" in src32 and "T_bf16_rows" not in src16


@requires_bf16
@pytest.mark.slow
def test_a_tail_rounded_to_bf16_is_computed_once_per_block():
    """A fused tail ending in a rounding to bf16 (the next dense reads bf16): its float
    values are a per-block buffer, then rounded, to the bits numpy rounds them to."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    w = rng.standard_normal((48, 64)).astype(np.float32)
    packed = D.pack_dense_weight(w)
    X = te.placeholder(x.shape, name="x")
    W = te.placeholder(packed.shape, "uint16", name="w")
    d = D.dense_bf16(X, W, None, 48)
    relu = te.compute(d.shape, lambda i, j: te.max(d[i, j], 0.0), name="relu", tag="elemwise")
    out = te.compute(d.shape, lambda i, j: bf16_intrin.round_to_bf16(relu[i, j]),
                     name="T_bf16_round", tag="elemwise")
    f = kiln.build(D.schedule_dense_bf16(out), [X, W, out])
    y = kiln.nd.empty(out.shape, "uint16")
    f(kiln.nd.array(x), kiln.nd.array(packed), y)
    float_out, _ = _run(x, w, None)
    assert np.array_equal(y.numpy(), np_to_bf16_bits(np.maximum(float_out, 0)))
    assert "float relu[" in f.get_source()


#: pinned targets: the instructions each one's micro-kernel uses
PINNED = {"llvm -mcpu=sapphirerapids": "_tile_dpbf16ps",
          "llvm -mcpu=cooperlake": "_mm512_dpbf16_ps"}


@requires_bf16
@pytest.mark.slow
@pytest.mark.parametrize("target", PINNED)
def test_pinned_targets_choose_their_instructions(target):
    """A Sapphire Rapids target computes with AMX tiles (falling back to AVX-512 BF16 where
    the OS refuses them), a Cooper Lake one with AVX-512 BF16 alone."""
    if not kiln.target.Target(target).cpu.features <= current_cpu().features:
        pytest.skip(f"this CPU cannot run {target}'s instructions")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 16, 64)).astype(np.float32)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    y, src = _run(x, w, b, target=target)
    _check(y, x, w, b)
    assert PINNED[target] in src
    assert ("_tile_dpbf16ps" in src) == (target.endswith("sapphirerapids"))


@requires_bf16
@pytest.mark.slow
def test_amx_blocks_run_in_avx512_pieces_where_the_os_refuses_the_tiles(monkeypatch):
    """A block of 32 x 48 rows (AMX chunks of 32 columns and a ragged 16) computed by the
    AVX-512 fallback, as in a process Linux denies the tile state."""
    refuse_amx_tiles(monkeypatch)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((70, 64)).astype(np.float32)
    w = rng.standard_normal((48, 64)).astype(np.float32)
    y, _ = _run(x, w, None)
    _check(y, x, w, 0.0)


def test_schedule_refuses_a_cpu_without_bf16():
    with kiln.target.Target("llvm -mcpu=haswell"):
        X = te.placeholder((2, 4), name="x")
        W = te.placeholder(D.pack_dense_weight(np.ones((3, 4), np.float32)).shape, "uint16")
        with pytest.raises(kiln.TVMError, match="avx512_bf16.*avx2"):
            D.schedule_dense_bf16(D.dense_bf16(X, W, None, 3))


def test_a_weight_packed_for_another_shape_is_refused():
    X = te.placeholder((2, 64), name="x")
    W = te.placeholder((1, 64, 3, 2), "uint16")  # 128 reduction steps, not 64
    with pytest.raises(ValueError, match="pack_dense_weight"):
        D.dense_bf16(X, W, None, 3)
