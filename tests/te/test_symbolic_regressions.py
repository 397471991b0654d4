"""Regressions found by the symbolic schedule fuzzer (tests/te/test_schedule_property.py):
each schedule as the fuzzer drew it, built once for a symbolic ``n`` and checked against
numpy at every ``n`` of ``SIZES``. They build with ``sanitize="undefined"``, which needs no
preloaded runtime and turns on kiln's bound checks: an out-of-bounds store to an allocation
raises ``TVMError`` and a division by zero ends the process with a UBSan report, instead of
the silent heap corruption the plain build had."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln import te

#: the extents every regression runs at: empty, below, at and past the splits' factors
SIZES = (0, 1, 2, 3, 7, 8, 9, 31)


def _leaf(stage, name: str):
    return next(iv for iv in stage.leaf_iter_vars if iv.var.name == name)


def _check(s, args, ref, shapes, m: int) -> None:
    """Build once, then compare with ``ref`` at every n of :data:`SIZES`."""
    mod = kiln.build(s, args, sanitize="undefined")
    rng = np.random.default_rng(0)
    for n in SIZES:
        arrays = [rng.standard_normal(shape(n, m)).astype("float32") for shape in shapes]
        expected = ref(*arrays)
        out = kiln.nd.empty(expected.shape, "float32")
        mod(*[kiln.nd.array(a) for a in arrays], out)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4,
                                   err_msg=f"n={n}, m={m}")


def test_nparts_pad_of_an_rfactor_stage_computed_at_a_row():
    """``maxpool_row(n, m); rfactor(split(k, 2).inner); pragma(j, auto_unroll_max_step, 0);
    parallel(i); bind(j, vthread); split_nparts(j, 1, tail='auto'); unroll(k.inner);
    split_nparts(i, 4, tail='pad'); C.rf.compute_at(i); split(j, 7, tail='partition')``:
    C.rf's row i has extent 1 at the loop it is computed at, and its padded split stores
    four tiles of one row, but the buffer was rounded up to tiles of ceil(1/4) = 1 row: one
    row allocated, four stored (heap corruption)."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, 3), name="k")
    C = te.compute((n, m - 2), lambda i, j: te.max(A[i, j + k], axis=k), name="C")
    s = te.create_schedule(C.op)
    _, ki = s[C].split(k, factor=2)
    rf = s.rfactor(C, ki)
    s[C].pragma(_leaf(s[C], "j"), "auto_unroll_max_step", 0)
    s[C].parallel(_leaf(s[C], "i"))
    s[C].bind(_leaf(s[C], "j"), te.thread_axis("vthread"))
    s[rf].split(_leaf(s[rf], "j"), nparts=1, tail="auto")
    s[rf].unroll(_leaf(s[rf], "k.inner"))
    s[rf].split(_leaf(s[rf], "i"), nparts=4, tail="pad")
    s[rf].compute_at(s[C], _leaf(s[C], "i"))
    s[C].split(_leaf(s[C], "j"), factor=7, tail="partition")
    _check(s, [A, C], lambda a: np.maximum(np.maximum(a[:, :-2], a[:, 1:-1]), a[:, 2:]),
           [lambda n, m: (n, m)], m=6)


def test_nparts_pad_of_a_symbolic_extent_does_not_divide_by_it():
    """``matmul(n, m); rfactor(split(k, 2).inner); reorder(i, j, k.inner.v); parallel(i);
    bind(j, vthread); split_nparts(j, 1, tail='pad'); split(j, 1, tail='dispatch')``: the
    padded split's tile is ceil(n/1) = n wide, and rounding n up to tiles of n divided by n,
    ``floordiv(-1, n)*n*n*2 + n*n*4`` once simplified: a division by zero at n = 0."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((m, n), name="B")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    _, ki = s[C].split(k, factor=2)
    rf = s.rfactor(C, ki)
    s[C].reorder(_leaf(s[C], "i"), _leaf(s[C], "j"), _leaf(s[C], "k.inner.v"))
    s[C].parallel(_leaf(s[C], "i"))
    s[C].bind(_leaf(s[C], "j"), te.thread_axis("vthread"))
    s[rf].split(_leaf(s[rf], "j"), nparts=1, tail="pad")
    s[C].split(_leaf(s[C], "j"), factor=1, tail="dispatch")
    assert "floordiv" not in _allocation(s, [A, B, C], "C.rf")
    _check(s, [A, B, C], lambda a, b: a @ b, [lambda n, m: (n, m), lambda n, m: (m, n)], m=5)


def test_partition_of_a_loop_around_a_fused_one_does_not_divide_by_its_extent():
    """``reduction(n, m); rfactor(split(k, 5).inner); unroll(i); tile(i, k.inner.v, 7, 8);
    reorder(i.inner, k.inner.v.inner, k.inner.v.outer, i.outer); parallel(i.inner);
    vectorize(i.outer); fuse(k.inner, i); reorder(k.outer, k.inner.i.fused);
    tile(k.outer, k.inner.i.fused, 1, 1)`` (C.rf): the guard ``k.outer*5 + floordiv(fused,
    n) < m`` under the fused loop of extent 5n cut the loop of ``k.outer`` at
    ``floordiv(m - floordiv(-1, n) - 1, 5)``, evaluated before the fused loop: a division by
    zero at n = 0, where the fused loop is empty (``kiln.tir.loop_partition``)."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    _, ki = s[C].split(k, factor=5)
    rf = s.rfactor(C, ki)
    s[C].unroll(_leaf(s[C], "i"))
    s[C].tile(_leaf(s[C], "i"), _leaf(s[C], "k.inner.v"), 7, 8)
    s[C].reorder(*(_leaf(s[C], v) for v in ("i.inner", "k.inner.v.inner", "k.inner.v.outer",
                                              "i.outer")))
    s[C].parallel(_leaf(s[C], "i.inner"))
    s[C].vectorize(_leaf(s[C], "i.outer"))
    s[rf].fuse(_leaf(s[rf], "k.inner"), _leaf(s[rf], "i"))
    s[rf].reorder(_leaf(s[rf], "k.outer"), _leaf(s[rf], "k.inner.i.fused"))
    s[rf].tile(_leaf(s[rf], "k.outer"), _leaf(s[rf], "k.inner.i.fused"), 1, 1)
    assert "floordiv(-1, n)" not in str(kiln.lower(s, [A, C]))
    _check(s, [A, C], lambda a: (a * a).sum(axis=1), [lambda n, m: (n, m)], m=3)


def test_pad_of_a_stage_computed_in_its_consumers_tail_reads_inside_the_input():
    """``reduction(n, m); rfactor(split(k, 2).inner); tile(i, k.inner.v, 7, 2);
    split(i, 5, tail='pad') (C.rf); C.rf.compute_at(k.inner.v.inner)`` (the fuzzer's
    example of seed 3, shrunk): C.rf is computed for row i of C's tile, also in the tile's
    guarded tail, where i >= n. Its padded axis was clamped to that row alone, so the tail
    read row i of A, past its end; it is clamped into A's rows too (``pad_value``)."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    _, ki = s[C].split(k, factor=2)
    rf = s.rfactor(C, ki)
    s[C].tile(_leaf(s[C], "i"), _leaf(s[C], "k.inner.v"), 7, 2)
    s[rf].split(_leaf(s[rf], "i"), factor=5, tail="pad")
    s[rf].compute_at(s[C], _leaf(s[C], "k.inner.v.inner"))
    _check(s, [A, C], lambda a: (a * a).sum(axis=1), [lambda n, m: (n, m)], m=3)


def test_a_stage_computed_inside_a_padded_tile_is_bounded_for_the_clamped_reads():
    """``reduction(n, m); cache_read(A, local); rfactor(split(k, 1).inner);
    split(k.inner, 2, tail='pad') (C.rf); A.local.compute_at(k.inner.inner)`` (seed 3,
    shrunk): the padding of C.rf reads A.local at its clamped column, but bound inference
    gave A.local the region of the unclamped one, a column to the right: a read at index -1.
    Bound inference now clamps a padded consumer's axes as its body does."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    AL = s.cache_read(A, "local", [C])
    _, ki = s[C].split(k, factor=1)
    rf = s.rfactor(C, ki)
    s[rf].split(_leaf(s[rf], "k.inner"), factor=2, tail="pad")
    s[AL].compute_at(s[rf], _leaf(s[rf], "k.inner.inner"))
    s[C].split(_leaf(s[C], "i"), factor=1, tail="dispatch")
    _check(s, [A, C], lambda a: (a * a).sum(axis=1), [lambda n, m: (n, m)], m=3)


def _allocation(s, args, name: str) -> str:
    """The size expression of buffer ``name``'s allocation in the lowered program."""
    found = re.search(rf"allocate {re.escape(name)}\[float32 \* (.*)\]\n", str(kiln.lower(s, args)))
    assert found, f"no allocation of {name}"
    return found.group(1)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8])
def test_nparts_pad_allocates_every_tile(size):
    """An ``nparts=4`` padded split stores 4*ceil(size/4) elements, more than ``size``
    rounded up to tiles of ceil(size/4) when size < 4."""
    A = te.placeholder((size,), name="A")
    T = te.compute((size,), lambda i: A[i] * 2.0, name="T")
    B = te.compute((size,), lambda i: T[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[T].split(T.op.axis[0], nparts=4, tail="pad")
    assert _allocation(s, [A, B], "T") == str(4 * -(-size // 4))
    mod = kiln.build(s, [A, B], sanitize="undefined")
    a = np.arange(size, dtype="float32")
    b = kiln.nd.empty((size,), "float32")
    mod(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), a * 2 + 1)
