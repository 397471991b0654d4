"""Tail strategies of ``split(..., tail=...)`` (kiln/te/split_tail.py, issue 19): each one's
lowered form, its legality checks, and correctness for n in {0, 1, f-1, f, f+1, large} with
one module built for a symbolic n (numpy reference)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import te
from kiln.errors import ScheduleError
from kiln.ir.transform import PassContext
from kiln.te.split_tail import legal_tails

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda, run_on_gpu

STRATEGIES = ["guard", "partition", "predicate", "shift_inwards", "pad", "dispatch"]


def _sizes(f: int) -> list[int]:
    return sorted({0, 1, max(f - 1, 0), f, f + 1, 100 * f + 3})


def vector_add(tail: str | None, factor: int, vectorize: bool, n=None):
    """``B = A*2 + 1`` over a symbolic n, split by ``factor`` with ``tail``; with
    ``tail="pad"`` the split stage is an intermediate ``T`` (pad needs one)."""
    n = te.var("n") if n is None else n
    A = te.placeholder((n,), name="A")
    if tail == "pad":
        T = te.compute((n,), lambda i: A[i] * 2.0, name="T")
        B = te.compute((n,), lambda i: T[i] + 1.0, name="B")
    else:
        B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
        T = B
    s = te.create_schedule(B.op)
    _, inner = s[T].split(T.op.axis[0], factor=factor, tail=tail)
    if vectorize:
        s[T].vectorize(inner)
    return s, [A, B]


def _check(s, args, sizes) -> None:
    f = kiln.build(s, args)
    for n in sizes:
        a = np.random.rand(n).astype("float32")
        b = kiln.nd.array(np.full(n, -7, "float32"))
        f(kiln.nd.array(a), b)
        np.testing.assert_allclose(b.numpy(), a * 2 + 1, rtol=1e-6)


def _text(s, args) -> str:
    return str(kiln.lower(s, args, simple_mode=True))


@pytest.mark.parametrize("tail", STRATEGIES)
def test_every_strategy_correct_for_edge_sizes(tail):
    s, args = vector_add(tail, 8, vectorize=True)
    _check(s, args, _sizes(8))


@pytest.mark.slow
@settings(max_examples=30)
@given(tail=st.sampled_from(STRATEGIES), factor=st.integers(1, 9), vectorize=st.booleans(),
       const=st.one_of(st.none(), st.integers(1, 40)))
def test_random_strategy_factor_and_extent(tail, factor, vectorize, const):
    s, args = vector_add(tail, factor, vectorize, n=const)
    _check(s, args, [const] if const is not None else _sizes(factor))


def test_guard_keeps_one_loop_with_likely():
    text = _text(*vector_add("guard", 8, vectorize=False))
    assert text.count("for (i.outer") == 1 and "likely" in text


def test_partition_cuts_constant_extent_even_when_partition_const_loop_is_off():
    with PassContext(config={"tir.LoopPartition": {"partition_const_loop": False}}):
        default = _text(*vector_add(None, 8, vectorize=False, n=100))
        forced = _text(*vector_add("partition", 8, vectorize=False, n=100))
    assert default.count("for (i.outer") == 1
    assert "for (i.outer, 0, 12)" in forced and forced.count("likely") == 1


def test_predicate_tail_is_a_remainder_loop_without_test():
    text = _text(*vector_add("predicate", 8, vectorize=True))
    assert "ramp" in text  # full tiles vectorized
    assert "likely" not in text
    assert "for (i.inner, 0, (n - (i.outer*8)))" in text


def test_shift_inwards_has_no_test_and_versions_a_symbolic_extent():
    text = _text(*vector_add("shift_inwards", 8, vectorize=True))
    assert "if ((8 <= n))" in text and "min((i.outer*8), (n - 8))" in text
    const = _text(*vector_add("shift_inwards", 8, vectorize=True, n=100))
    assert "likely" not in const and "8 <= " not in const and "92" in const


def test_shift_inwards_below_the_factor_falls_back_to_the_guard():
    s, args = vector_add("shift_inwards", 8, vectorize=False, n=5)
    assert "min(" not in _text(s, args)
    _check(s, args, [5])


def test_pad_rounds_the_intermediate_up_and_stores_without_test():
    text = _text(*vector_add("pad", 8, vectorize=True))
    assert "allocate T[float32 * (floordiv((n + 7), 8)*8)]" in text
    produce_t = text.split("produce T")[1].split("produce B")[0]
    assert "likely" not in produce_t


def _widths(widths: tuple[int, ...]) -> PassContext:
    """Dispatch splits take ``widths`` instead of the cost model's choice."""
    return PassContext(config={"tir.DispatchRemainder": {"widths": widths}})


def test_dispatch_runs_16_wide_then_an_8_wide_path_then_a_scalar_tail():
    with _widths((8,)):
        text = _text(*vector_add("dispatch", 16, vectorize=True))
    assert "B[ramp((i.outer*16), 1, 16)]" in text
    assert "if ((8 <= (n - (i.outer*16))))" in text and "B[ramp((i.outer*16), 1, 8)]" in text
    assert "for (i.inner, ((floordiv(n, 8)*8) - (i.outer*16)), floormod(n, 8))" in text
    assert "likely" not in text


@pytest.mark.parametrize("widths", [(8,), (4, 2), (8, 4, 2), (2,)])
def test_dispatch_paths_correct_for_every_remainder(widths):
    s, args = vector_add("dispatch", 16, vectorize=True)
    with _widths(widths):
        _check(s, args, sorted({*_sizes(16), *range(2, 16), 3 * 16 + 13}))


def test_dispatch_on_a_reduction_stage_and_an_inner_axis():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * A[k % n, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=8, tail="dispatch")
    jo, ji = s[C].split(C.op.axis[1], factor=8, tail="dispatch")
    s[C].reorder(io, jo, k, ii, ji)
    s[C].vectorize(ji)
    with _widths((4,)):
        f = kiln.build(s, [A, C])
    for rows in (0, 1, 7, 8, 9, 21):
        cols = max(rows, 1)
        a = np.random.rand(rows, cols).astype("float32")
        c = kiln.nd.array(np.zeros((rows, cols), "float32"))
        f(kiln.nd.array(a), c)
        ref = a @ a[np.arange(cols) % max(rows, 1)] if rows else np.zeros((0, cols))
        np.testing.assert_allclose(c.numpy(), ref, rtol=1e-5)


def _gpu_dispatch():
    """``B = A*2 + 1`` over a symbolic n on a GPU: blocks of 64 threads, each thread a tile
    of 16 split with ``tail="dispatch"`` (its remainder in 8- and 4-wide paths)."""
    s, args = vector_add("dispatch", 16, vectorize=False)
    B = args[-1]
    outer = s[B].leaf_iter_vars[0]
    bx, tx = s[B].split(outer, factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, args


@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
def test_dispatch_in_a_cuda_kernel_on_the_emulator():
    s, args = _gpu_dispatch()
    with _widths((8, 4)):
        mod = build_cuda(s, args)
    assert "i_inner_l8" in mod.imported_modules[0].get_source()
    for n in (1, 15, 16, 17, 16 * 64 + 13):
        a = np.random.rand(n).astype("float32")
        b = np.zeros(n, "float32")
        cuda_emulator.Emulated(mod)(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


@pytest.mark.gpu
def test_dispatch_in_a_cuda_kernel_on_a_gpu():
    s, args = _gpu_dispatch()
    a = np.random.rand(16 * 64 + 13).astype("float32")
    with _widths((8, 4)):
        _, b = run_on_gpu(s, args, [a, np.zeros_like(a)])
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_default_split_is_unchanged_by_the_option():
    assert _text(*vector_add(None, 8, True)) == _text(*_default_vector_add())


def _default_vector_add():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(inner)
    return s, [A, B]


def test_two_strategies_in_one_stage():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=3, tail="guard")
    _, ji = s[B].split(B.op.axis[1], factor=4, tail="predicate")
    f = kiln.build(s, [A, B])
    for shape in [(0, 0), (1, 1), (2, 3), (4, 5), (7, 9)]:
        a = np.random.rand(*shape).astype("float32")
        b = kiln.nd.array(np.zeros(shape, "float32"))
        f(kiln.nd.array(a), b)
        np.testing.assert_allclose(b.numpy(), a + 1)


def test_reduction_with_predicate_and_partition_tails():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=4, tail="predicate")
    s[C].split(k, factor=3, tail="partition")
    f = kiln.build(s, [A, C])
    for shape in [(0, 2), (1, 1), (3, 2), (4, 3), (9, 7)]:
        a = np.random.rand(*shape).astype("float32")
        c = kiln.nd.array(np.zeros(shape[0], "float32"))
        f(kiln.nd.array(a), c)
        np.testing.assert_allclose(c.numpy(), a.sum(axis=1), rtol=1e-5)


# ---- legality ---------------------------------------------------------------------------------
def _reduction():
    A = te.placeholder((10, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    C = te.compute((10,), lambda i: te.sum(A[i, k], axis=k), name="C")
    return A, C, k


def test_shift_inwards_of_a_reduction_is_refused():
    _, C, k = _reduction()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="shift_inwards.*reduces"):
        s[C].split(C.op.axis[0], factor=3, tail="shift_inwards")
    with pytest.raises(ScheduleError, match="shift_inwards"):
        s[C].split(k, factor=3, tail="shift_inwards")


def test_dispatch_of_a_reduction_axis_is_refused():
    _, C, k = _reduction()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="tail='dispatch'.*reduction axis"):
        s[C].split(k, factor=4, tail="dispatch")


def test_pad_of_an_output_or_an_argument_is_refused():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    T = te.compute((n,), lambda i: A[i] * 2.0, name="T")
    B = te.compute((n,), lambda i: T[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="pad.*output"):
        s[B].split(B.op.axis[0], factor=8, tail="pad")
    s[T].split(T.op.axis[0], factor=8, tail="pad")
    with pytest.raises(ScheduleError, match="pad.*argument"):
        kiln.lower(s, [A, T, B])


def test_unknown_tail_is_refused():
    s, _ = _default_vector_add()
    B = s.stages[-1]
    with pytest.raises(ScheduleError, match="unknown tail strategy 'round'"):
        B.split(B.leaf_iter_vars[0], factor=2, tail="round")


def test_legal_tails_for_an_autotvm_knob():
    A, C, k = _reduction()
    s = te.create_schedule(C.op)
    assert legal_tails(s[C], C.op.axis[0]) == ["guard", "partition", "predicate",
                                               "dispatch"]
    assert legal_tails(s[C], k) == ["guard", "partition", "predicate"]
    s2, _ = _default_vector_add()
    B = s2.stages[-1]
    assert legal_tails(B, B.leaf_iter_vars[0]) == ["guard", "partition", "predicate",
                                                   "shift_inwards", "dispatch"]


def test_tail_knob_in_an_autotvm_template():
    from kiln import autotvm

    @autotvm.template("test_split_tail_knob")
    def vector_add_tuned(n):
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
        s = te.create_schedule(B.op)
        cfg = autotvm.get_config()
        cfg.define_knob("tail", legal_tails(s[B], B.op.axis[0]))
        s[B].split(B.op.axis[0], factor=8, tail=cfg["tail"].val)
        return s, [A, B]

    task = autotvm.task.create("test_split_tail_knob", (21,), "llvm")
    assert [c["tail"].val for c in task.config_space] == ["guard", "partition", "predicate",
                                                           "shift_inwards", "dispatch"]
    for config in task.config_space:
        _check(*task.instantiate(config), [21])


# ---- the loop marks, in loop_partition alone ---------------------------------------------------
def _marked_tail(extra_store: bool):
    """``for (i, 0, 8) [remainder] { if (likely(o*8 + i < n)) B[...] = 1; [C[i] = 2] }`` inside
    the tail iteration ``o = floordiv(n, 8)``."""
    from kiln.ir import expr as E
    from kiln.ir import stmt as S

    n, o, i = E.Var("n", "int32"), E.Var("o", "int32"), E.Var("i", "int32")
    b, c = E.Var("B", "handle"), E.Var("C", "handle")
    store = S.Store(b, E.FloatImm("float32", 1.0), o * 8 + i)
    body = S.IfThenElse(E.Call("bool", "likely", [o * 8 + i < n]), store)
    if extra_store:
        body = S.SeqStmt([body, S.Store(c, E.FloatImm("float32", 2.0), i)])
    inner = S.For(i, 0, 8, S.ForKind.SERIAL, body, annotations=(("tail", "remainder"),))
    return S.LetStmt(o, n // 8, inner)


def test_a_remainder_loop_takes_the_guard_as_its_bound():
    from kiln.tir.loop_partition import loop_partition

    text = str(loop_partition(_marked_tail(extra_store=False)))
    assert "likely" not in text and "for (i, 0, max(min((n - (o*8)), 8), 0))" in text


def test_a_remainder_loop_with_other_stores_is_cut_instead():
    from kiln.tir.loop_partition import loop_partition

    text = str(loop_partition(_marked_tail(extra_store=True)))
    # past the cut the guard fails: the tail loop keeps the other store only
    assert text.count("for (i,") == 2 and "likely" not in text and text.count("B[") == 1


def test_shift_inwards_with_a_stage_computed_inside_keeps_guards():
    """A local cache computed inside a shift_inwards split is bounded for the unshifted
    tile, so the stage keeps the default guard and the result stays exact (found by the
    sanitized schedule fuzzer as an out-of-bounds write of C.local)."""
    import numpy as np

    import kiln
    from kiln import te

    n = te.var("n")
    A = te.placeholder((n, 6), name="A")
    C = te.compute((n, 6), lambda i, j: A[i, j] * 2.0 + 1.0, name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, ii = s[C].split(C.op.axis[0], 4, tail="shift_inwards")
    s[CL].compute_at(s[C], ii)
    mod = kiln.build(s, [A, C])
    for size in (1, 3, 4, 5, 11):
        a = np.random.default_rng(size).standard_normal((size, 6)).astype("float32")
        c = kiln.nd.empty((size, 6), "float32")
        mod(kiln.nd.array(a), c)
        np.testing.assert_allclose(c.numpy(), a * 2 + 1, rtol=1e-6, err_msg=str(size))
