"""Schedules never change results: random computations under random legal schedules.

Hypothesis draws a computation (elementwise, broadcast, reduction, padding stencil, a two-stage
pipeline) over constant or symbolic shapes (``te.var`` n and m, bound when the kernel runs),
then a random sequence of legal primitives on its stages, builds it and compares with a numpy
reference; over symbolic shapes, one build is also run at every n in ``EDGE_SIZES`` (0, 1,
f-1, f, f+1 and a large n for every split factor f drawn, each split with a random tail
strategy). Every build must also take less than ``BUILD_BUDGET_S`` of CPU time, kiln's and the C
compiler's (issue 19: a kernel over symbolic shapes builds in well under a second; CPU time,
not wall time, so that a busy machine does not fail it, while a pass that multiplies code
fails it by far). The examples are the same
on every run (derandomized); their number is the Hypothesis profile's (tests/conftest.py;
KILN_HYPOTHESIS_PROFILE=thorough for a long fuzz run). ``KILN_FUZZ_SEED=k`` draws the examples
of seed ``k`` instead, so that a long run can go in chunks of different schedules
(docs/reliability.md has the command and the figures).
"""

from __future__ import annotations

import os
import resource
import time

import numpy as np
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

import kiln
from kiln import te
from kiln.arith import evaluate
from kiln.ir.transform import PassContext
from kiln.te.split_tail import legal_tails

#: CPU seconds any drawn schedule may take to build (lowering, target passes, C compiler)
BUILD_BUDGET_S = 20.0


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the C compiler)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime
#: a long run's chunk: the seed of its examples (unset: the derandomized suite examples)
FUZZ_SEED = os.environ.get("KILN_FUZZ_SEED")


def _fuzz_seeded(test):
    """``test`` with the examples of :data:`FUZZ_SEED` when it is set."""
    return seed(int(FUZZ_SEED))(test) if FUZZ_SEED else test


# ---- computations: (tensors, output, intermediate stages, numpy reference) -----------------
def elementwise(n, m):
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((n, m), name="B")
    T = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="T")
    C = te.compute((n, m), lambda i, j: T[i, j] + B[i, j], name="C")
    return [A, B], C, [T], lambda a, b: a * 2 + b


def broadcast(n, m):
    A = te.placeholder((n, 1), name="A")
    B = te.placeholder((1, m), name="B")
    C = te.compute((n, m), lambda i, j: A[i, 0] - B[0, j], name="C")
    return [A, B], C, [], lambda a, b: a - b


def reduction(n, m):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="C")
    return [A], C, [], lambda a: (a * a).sum(axis=1)


def matmul(n, m):
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((m, n), name="B")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B], C, [], lambda a, b: a @ b


def stencil(n, m):
    A = te.placeholder((n, m), name="A")
    P = te.compute((n + 2, m + 2), lambda i, j: te.if_then_else(
        te.any(i < 1, i >= n + 1, j < 1, j >= m + 1), 0.0, A[i - 1, j - 1]), name="P")
    C = te.compute((n, m), lambda i, j: P[i, j] + P[i + 1, j + 1] + P[i + 2, j + 2], name="C")

    def ref(a):
        rows, cols = a.shape
        p = np.pad(a, 1)
        return p[:rows, :cols] + p[1:rows + 1, 1:cols + 1] + p[2:, 2:]

    return [A], C, [P], ref


def maxpool_row(n, m):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, 3), name="k")
    C = te.compute((n, m - 2), lambda i, j: te.max(A[i, j + k], axis=k), name="C")
    return [A], C, [], lambda a: np.maximum(np.maximum(a[:, :-2], a[:, 1:-1]), a[:, 2:])


KINDS = [elementwise, broadcast, reduction, matmul, stencil, maxpool_row]


# ---- random legal schedules ------------------------------------------------------------
def _free(stage) -> list:
    """The stage's data-parallel leaves with no loop kind or thread binding yet."""
    return [iv for iv in stage.leaf_iter_vars if iv.iter_type == kiln.IterVar.DataPar and (
        iv not in stage.iter_var_attrs or not stage.iter_var_attrs[iv].kind)]


def _loop_primitives(draw, stage, log) -> None:
    """0-4 of split (factor or nparts, with any legal tail strategy), tile, fuse, reorder,
    unroll, pragma on ``stage``."""
    for _ in range(draw(st.integers(0, 4))):
        leaves = stage.leaf_iter_vars
        action = draw(st.sampled_from(
            ["split", "split_nparts", "tile", "fuse", "reorder", "unroll", "pragma"]))
        if action in ("split", "split_nparts"):
            iv = draw(st.sampled_from(leaves))
            f = draw(st.integers(1, 9))
            tail = draw(st.sampled_from([None, "auto", *legal_tails(stage, iv)]))
            if action == "split":
                stage.split(iv, factor=f, tail=tail)
            else:
                stage.split(iv, nparts=f, tail=tail)
            log.append(f"{action}({iv.var.name}, {f}, tail={tail!r})")
        elif action == "tile" and len(leaves) >= 2:
            k = draw(st.integers(0, len(leaves) - 2))
            fx, fy = draw(st.integers(1, 9)), draw(st.integers(1, 9))
            x, y = leaves[k], leaves[k + 1]  # tile splits them in the list ``leaves`` is
            stage.tile(x, y, fx, fy)
            log.append(f"tile({x.var.name}, {y.var.name}, {fx}, {fy})")
        elif action == "fuse" and len(leaves) >= 2:
            k = draw(st.integers(0, len(leaves) - 2))
            a, b = leaves[k], leaves[k + 1]
            if a.iter_type == b.iter_type:
                stage.fuse(a, b)
                log.append(f"fuse({a.var.name}, {b.var.name})")
        elif action == "reorder" and len(leaves) >= 2:
            order = draw(st.permutations(leaves))
            stage.reorder(*order)
            log.append(f"reorder({', '.join(v.var.name for v in order)})")
        elif action == "unroll":
            iv = draw(st.sampled_from(leaves))
            stage.unroll(iv)
            log.append(f"unroll({iv.var.name})")
        elif action == "pragma":
            iv = draw(st.sampled_from(leaves))
            step = draw(st.sampled_from([0, 4, 16]))
            stage.pragma(iv, "auto_unroll_max_step", step)
            log.append(f"pragma({iv.var.name}, auto_unroll_max_step, {step})")


def _place(draw, s, t, consumer, log) -> None:
    """Compute the stage of ``t`` at the root, inline (not a reduction) or at a loop of
    ``consumer``; a root stage of two or more dimensions may get a storage_align."""
    choices = ["root", "at"] + ([] if t.op.reduce_axis else ["inline"])
    choice = draw(st.sampled_from(choices))
    if choice == "inline":
        s[t].compute_inline()
        log.append(f"{t.name}.compute_inline()")
    elif choice == "at":
        iv = draw(st.sampled_from(consumer.leaf_iter_vars))
        s[t].compute_at(consumer, iv)
        log.append(f"{t.name}.compute_at({iv.var.name})")
    elif len(t.op.axis) >= 2 and draw(st.booleans()):
        factor = draw(st.integers(1, 8))
        offset = draw(st.integers(0, factor - 1))
        s[t].storage_align(t.op.axis[0], factor, offset)
        log.append(f"{t.name}.storage_align(axis0, {factor}, {offset})")


def apply_random_schedule(draw, s, out, inter, log):
    """Apply random legal primitives; append a line per primitive to ``log``.

    Covers split (factor, nparts), tile, fuse, reorder, unroll, pragma, parallel, vectorize,
    bind (vthread), cache_read, cache_write, rfactor, compute_at, compute_inline, compute_root
    and storage_align.
    """
    reads = [t for t in out.op.input_tensors if t not in inter]
    cached_read = None
    if reads and draw(st.booleans()):
        src = draw(st.sampled_from(reads))
        cached_read = s.cache_read(src, "local", [out])
        log.append(f"cache_read({src.name}, local)")
    reduce_axes = list(out.op.reduce_axis)
    rf = None
    if reduce_axes and draw(st.booleans()):
        f = draw(st.integers(1, 5))
        _, ki = s[out].split(reduce_axes[0], factor=f)
        rf = s.rfactor(out, ki)
        log.append(f"rfactor(split({reduce_axes[0].var.name}, {f}).inner)")
    cache = None
    if rf is None and draw(st.booleans()):
        cache = s.cache_write(out, "local")
        log.append("cache_write(local)")
    stage = s[out]
    _loop_primitives(draw, stage, log)
    data_par = [iv for iv in stage.leaf_iter_vars if iv.iter_type == kiln.IterVar.DataPar]
    if data_par and draw(st.booleans()):
        stage.parallel(data_par[0])
        log.append(f"parallel({data_par[0].var.name})")
    inner = stage.leaf_iter_vars[-1]
    if inner.iter_type == kiln.IterVar.DataPar and draw(st.booleans()) and (
            inner not in stage.iter_var_attrs or not stage.iter_var_attrs[inner].kind):
        stage.vectorize(inner)
        log.append(f"vectorize({inner.var.name})")
    free = _free(stage)
    if free and draw(st.booleans()):
        iv = draw(st.sampled_from(free))
        stage.bind(iv, te.thread_axis("vthread"))
        log.append(f"bind({iv.var.name}, vthread)")
    if cache is not None and draw(st.booleans()):
        iv = draw(st.sampled_from(stage.leaf_iter_vars))
        s[cache].compute_at(stage, iv)
        log.append(f"cache.compute_at({iv.var.name})")
    if rf is not None:
        _loop_primitives(draw, s[rf], log)
        _place(draw, s, rf, stage, log)
    # the stage that reads the intermediates and the cached input
    consumer = s[cache] if cache is not None else stage
    for t in inter:
        _place(draw, s, t, consumer, log)
    if cached_read is not None:
        reader = s[rf] if rf is not None else consumer
        _place(draw, s, cached_read, reader, log)


@st.composite
def scheduled_case(draw):
    kind = draw(st.sampled_from(KINDS))
    n, m = draw(st.integers(1, 13)), draw(st.integers(3, 13))
    if draw(st.booleans()):  # symbolic shapes, bound to (n, m) when the kernel runs
        nv, mv = te.var("n"), te.var("m")
        inputs, out, inter, ref = kind(nv, mv)
        sizes = {nv: n, mv: m}
        log: list[str] = [f"{kind.__name__}(n={n}, m={m})"]
    else:
        inputs, out, inter, ref = kind(n, m)
        sizes = {}
        log = [f"{kind.__name__}({n}, {m})"]
    s = te.create_schedule(out.op)
    apply_random_schedule(draw, s, out, inter, log)
    return "; ".join(log), s, inputs, out, ref, sizes


def _shape(t, sizes: dict) -> list[int]:
    return [int(evaluate(d, sizes)) for d in t.shape]


#: the extents a kernel over a symbolic n runs at: every factor the fuzzer draws (1-9) gets
#: n in {0, 1, f-1, f, f+1, large} (issue 19)
EDGE_SIZES = [*range(11), 97]


@st.composite
def symbolic_case(draw):
    """A computation over symbolic n and m under a random legal schedule, then a split of a
    free output loop (no stage attached at it) with a random tail strategy; the widths its
    dispatch splits take (None: the cost model's) and the value of m it runs at."""
    kind = draw(st.sampled_from(KINDS))
    nv, mv = te.var("n"), te.var("m")
    inputs, out, inter, ref = kind(nv, mv)
    log = [f"{kind.__name__}(n, m)"]
    s = te.create_schedule(out.op)
    apply_random_schedule(draw, s, out, inter, log)
    attached = {stage.attach_ivar for stage in s.stages}
    free = [iv for iv in _free(s[out]) if iv not in attached]
    if free:
        iv, f = draw(st.sampled_from(free)), draw(st.integers(1, 9))
        legal = legal_tails(s[out], iv)  # dispatch first: Hypothesis draws it most
        tail = draw(st.sampled_from(sorted([None, "auto", *legal],
                                           key=lambda x: x != "dispatch")))
        s[out].split(iv, factor=f, tail=tail)
        log.append(f"split({iv.var.name}, {f}, tail={tail!r})")
    widths = draw(st.sampled_from([(8, 4, 2), (4, 2), (3,), (2,), (), None]))
    if widths is not None:
        log.append(f"dispatch widths {widths}")
    return "; ".join(log), s, inputs, out, ref, nv, mv, draw(st.integers(3, 9)), widths


@pytest.mark.slow
@_fuzz_seeded
@settings(derandomize=True)
@given(scheduled_case())
def test_random_schedule_matches_numpy(case):
    name, s, inputs, out, ref, sizes = case
    start = _cpu_seconds()
    mod = kiln.build(s, inputs + [out])
    took = _cpu_seconds() - start
    assert took < BUILD_BUDGET_S, (
        f"{name}: the build took {took:.1f} CPU-s, over the {BUILD_BUDGET_S:.0f} s budget; "
        f"KILN_DEBUG=1 shows the IR after each pass (look for a pass that multiplies code)")
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(_shape(t, sizes)).astype("float32") for t in inputs]
    result = kiln.nd.empty(_shape(out, sizes), "float32")
    mod(*[kiln.nd.array(a) for a in arrays], result)
    np.testing.assert_allclose(result.numpy(), ref(*arrays), rtol=1e-4, atol=1e-4,
                               err_msg=f"{name}\n{kiln.lower(s, inputs + [out])}")


@pytest.mark.slow
@_fuzz_seeded
@settings(derandomize=True)
@given(symbolic_case())
def test_one_build_is_correct_for_every_extent(case):
    """Built once for a symbolic n, correct at every n of ``EDGE_SIZES``."""
    name, s, inputs, out, ref, nv, mv, m, widths = case
    start = _cpu_seconds()
    fixed = {} if widths is None else {"tir.DispatchRemainder": {"widths": widths}}
    with PassContext(config=fixed):
        mod = kiln.build(s, inputs + [out])
    took = _cpu_seconds() - start
    assert took < BUILD_BUDGET_S, f"{name}: the build took {took:.1f} CPU-s"
    rng = np.random.default_rng(0)
    for n in EDGE_SIZES:
        sizes = {nv: n, mv: m}
        arrays = [rng.standard_normal(_shape(t, sizes)).astype("float32") for t in inputs]
        result = kiln.nd.empty(_shape(out, sizes), "float32")
        mod(*[kiln.nd.array(a) for a in arrays], result)
        np.testing.assert_allclose(result.numpy(), ref(*arrays), rtol=1e-4, atol=1e-4,
                                   err_msg=f"{name}, n={n}, m={m}")


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_default_schedule_matches_numpy(kind):
    inputs, out, _, ref = kind(7, 9)
    s = te.create_schedule(out.op)
    mod = kiln.build(s, inputs + [out])
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal([int(d) for d in t.shape]).astype("float32") for t in inputs]
    result = kiln.nd.empty([int(d) for d in out.shape], "float32")
    mod(*[kiln.nd.array(a) for a in arrays], result)
    np.testing.assert_allclose(result.numpy(), ref(*arrays), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("factor", [1, 7, 16, 128])
def test_rfactor_sum(factor):
    n, m = 13, 100
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=factor)
    BF = s.rfactor(B, ki)
    s[BF].parallel(BF.op.axis[0])
    mod = kiln.build(s, [A, B])
    a = np.random.default_rng(2).standard_normal((n, m)).astype("float32")
    b = kiln.nd.empty((n,))
    mod(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), a.sum(axis=1), rtol=1e-4, atol=1e-4)


def test_auto_inline_injective():
    inputs, out, inter, ref = elementwise(5, 6)
    s = te.create_schedule(out.op)
    te.schedule.AutoInlineInjective(s)
    assert s[inter[0]].attach_type == "inline"
    text = str(kiln.lower(s, inputs + [out]))
    assert "produce T" not in text
    mod = kiln.build(s, inputs + [out])
    a, b = (np.ones((5, 6), "float32") for _ in range(2))
    c = kiln.nd.empty((5, 6))
    mod(kiln.nd.array(a), kiln.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), ref(a, b))
