"""``s[T].prefetch(tensor, var, offset)``: the ``prefetch_scope`` attribute in the loop nest, the
``inject_prefetch`` pass's ``prefetch`` calls (one per cache line of the region iteration
``var + offset`` reads), ``__builtin_prefetch`` in C, nothing in CUDA, the primitive's errors,
and the same results with and without prefetch; what a loop prefetches after the schedule
changed what it reads (cache_read copies, inlined stages, hybrid stages) and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import te
from kiln.errors import ScheduleError

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda, run_on_gpu


def _row_sum(n: int = 128, m: int = 112, factor: int = 16):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, _ = s[C].split(k, factor=factor)
    return A, C, s, ko


def _lowered(s, args, phase: int | None = None) -> str:
    """The lowered text, or the IR a user pass sees at ``phase``."""
    if phase is None:
        return str(kiln.lower(s, args, simple_mode=True))
    seen: list[str] = []

    def record(stmt):
        seen.append(str(stmt))
        return stmt

    with kiln.transform.PassContext(config={"tir.add_lower_pass": [(phase, record)]}):
        kiln.lower(s, args)
    return seen[0]


def test_prefetch_scope_attribute_before_injection():
    A, C, s, ko = _row_sum()
    s[C].prefetch(A, ko, 1)
    text = _lowered(s, [A, C], phase=0)
    assert "// attr [A] prefetch_scope = 1" in text
    assert "prefetch(" not in text.replace("prefetch_scope", "")


def test_prefetch_calls_after_injection():
    """16 float32 of the next k.outer block: one cache line, one call, none past the end."""
    A, C, s, ko = _row_sum()
    s[C].prefetch(A, ko, 1)
    text = _lowered(s, [A, C])
    assert "prefetch_scope" not in text
    assert "if ((k.outer < 6)) {" in text
    assert "prefetch(tvm_address_of(A[(((i*112) + (k.outer*16)) + 16)]), 0, 3, 1)" in text


def test_one_call_per_cache_line_of_the_region():
    """A packed weight panel [K, nb] of the next panel: K rows x nb/16 lines."""
    A = te.placeholder((12, 64), name="A")
    W = te.placeholder((4, 64, 32), name="W")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((12, 128), lambda i, j: te.sum(A[i, k] * W[j // 32, k, j % 32], axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=32)
    s[C].reorder(jo, i, ji)
    s[C].prefetch(W, jo, 1)
    text = _lowered(s, [A, W, C])
    assert "for (prefetch.W.1, 0, 64) {" in text
    assert "for (prefetch.W.2, 0, 2) {" in text
    assert "W[((((j.outer*2048) + (prefetch.W.1*32)) + (prefetch.W.2*16)) + 2048)]" in text


def test_c_source_calls_builtin_prefetch_and_results_hold():
    A, C, s, ko = _row_sum()
    s[C].prefetch(A, ko, 2)
    f = kiln.build(s, [A, C], "llvm")
    assert "__builtin_prefetch(" in f.get_source()
    a = np.random.default_rng(0).random((128, 112), dtype="float32")
    c = kiln.nd.empty((128,))
    f(kiln.nd.array(a), c)
    np.testing.assert_allclose(c.numpy(), a.sum(1), rtol=1e-5)


def test_tensor_read_by_a_stage_computed_inside():
    """The loop's body reads the tensor through a stage computed at it (dense_pack's
    accumulator tile): allowed, and prefetched."""
    A, C, _, _ = _row_sum()
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, _ = s[C].split(C.op.axis[0], factor=8)
    s[CL].compute_at(s[C], io)
    s[C].prefetch(A, io, 1)
    text = _lowered(s, [A, C])
    assert "for (prefetch.A.0, 0, 8) {" in text and "for (prefetch.A.1, 0, 7) {" in text


def test_var_of_another_stage_is_refused():
    A, C, s, _ = _row_sum()
    B = te.compute((128,), lambda i: C[i] * 2, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="prefetch on stage 'B': axis 'i' is not an axis"):
        s[B].prefetch(A, C.op.axis[0], 1)


def test_tensor_not_read_is_refused():
    A, C, s, ko = _row_sum()
    X = te.placeholder((128, 112), name="X")
    with pytest.raises(ScheduleError, match="'X' is not read by this stage.*they read A"):
        s[C].prefetch(X, ko, 1)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 9), m=st.integers(1, 40), factor=st.integers(1, 9),
       offset=st.integers(-3, 12), inner=st.booleans())
def test_results_do_not_change(n, m, factor, offset, inner):
    """Any loop, offset (past either end included), split with or without a tail: the same
    outputs as without prefetch."""
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k] * 2, axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=factor)
    s[C].prefetch(A, ki if inner else ko, offset)
    f = kiln.build(s, [A, C], "llvm")
    a = np.random.default_rng(n * m).random((n, m), dtype="float32")
    c = kiln.nd.empty((n,))
    f(kiln.nd.array(a), c)
    np.testing.assert_allclose(c.numpy(), 2 * a.sum(1), rtol=1e-5)


def _gpu_row_sum():
    A, C, s, ko = _row_sum(n=64, m=96)
    i = C.op.axis[0]
    bx, tx = s[C].split(i, factor=32)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].prefetch(A, ko, 1)
    a = np.random.default_rng(1).random((64, 96), dtype="float32")
    return s, [A, C], [a, np.zeros(64, "float32")], a.sum(1)


@pytest.mark.slow
@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
def test_emulated_cuda_kernel_results_hold():
    s, args, inputs, want = _gpu_row_sum()
    cuda_emulator.Emulated(build_cuda(s, args))(*inputs)
    np.testing.assert_allclose(inputs[1], want, rtol=1e-5)


def test_cuda_source_has_no_prefetch():
    """A CPU cache hint: the kernel gets none (and NVRTC compiles it, where installed)."""
    s, args, _, _ = _gpu_row_sum()
    assert "prefetch" not in build_cuda(s, args).imported_modules[0].get_source()


@pytest.mark.gpu
def test_cuda_prefetch_on_gpu():
    s, args, inputs, want = _gpu_row_sum()
    _, out = run_on_gpu(s, args, inputs)
    np.testing.assert_allclose(out, want, rtol=1e-5)


# ---- what the loop reads: hybrid stages, cache_read copies, inlined stages ---------------------
@te.hybrid.script
def _hybrid_row_sum(a):
    c = output_tensor((a.shape[0],), "float32")  # noqa: F821
    for i in range(a.shape[0]):
        c[i] = 0.0
        for k in range(a.shape[1]):
            c[i] = c[i] + a[i, k]
    return c


def test_hybrid_stage_is_prefetched_and_results_hold():
    """A hybrid function's loop gets its prefetch too (8 lines of the next row of 128)."""
    A = te.placeholder((64, 128), name="A")
    C = _hybrid_row_sum(A)
    s = te.create_schedule(C.op)
    s[C].prefetch(A, C.op.axis[0], 1)
    text = _lowered(s, [A, C])
    assert "if ((i < 63)) {" in text and "for (prefetch.A.1, 0, 8) {" in text
    f = kiln.build(s, [A, C], "llvm")
    assert "__builtin_prefetch(" in f.get_source()
    a = np.random.default_rng(2).random((64, 128), dtype="float32")
    c = kiln.nd.empty((64,))
    f(kiln.nd.array(a), c)
    np.testing.assert_allclose(c.numpy(), a.sum(1), rtol=1e-5)


@pytest.mark.parametrize("prefetch_first", [True, False])
def test_cache_read_copy_at_root_is_prefetched(prefetch_first):
    """After (or before) ``cache_read`` of the named tensor, the stage reads the copy: the
    copy is prefetched."""
    A, C, s, ko = _row_sum()
    if prefetch_first:
        s[C].prefetch(A, ko, 1)
    s.cache_read(A, "global", [C])
    if not prefetch_first:
        s[C].prefetch(A, ko, 1)
    text = _lowered(s, [A, C])
    assert "prefetch(tvm_address_of(A.global[(((i*112) + (k.outer*16)) + 16)]), 0, 3, 1)" in text


@pytest.mark.parametrize("named", ["A", "A.local"])
def test_copy_computed_inside_the_loop_prefetches_its_source(named):
    """The copy is written in the loop's body: the tensor it reads there is prefetched, the
    original or the copy named."""
    A, C, s, ko = _row_sum()
    AL = s.cache_read(A, "local", [C])
    s[AL].compute_at(s[C], ko)
    s[C].prefetch(A if named == "A" else AL, ko, 1)
    text = _lowered(s, [A, C])
    assert "prefetch(tvm_address_of(A[(((i*112) + (k.outer*16)) + 16)]), 0, 3, 1)" in text


def _row_sum_through_b():
    """``C[i] = sum_k B[i, k]`` with ``B = 2 A`` (to be inlined), ``k`` split by 16."""
    A, _, _, _ = _row_sum()
    k = te.reduce_axis((0, 112), name="k")
    B = te.compute(A.shape, lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((128,), lambda i: te.sum(B[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, _ = s[C].split(k, factor=16)
    return A, B, C, s, ko


def test_tensor_read_through_an_inlined_stage():
    A, B, C, s, ko = _row_sum_through_b()
    s[B].compute_inline()
    s[C].prefetch(A, ko, 1)
    assert "prefetch(tvm_address_of(A[(((i*112) + (k.outer*16)) + 16)])" in _lowered(s, [A, C])


def test_inlined_tensor_is_refused_at_lowering():
    A, B, C, s, ko = _row_sum_through_b()
    s[C].prefetch(B, ko, 1)
    s[B].compute_inline()
    with pytest.raises(ScheduleError, match=r"prefetch of 'B' on stage 'C', loop 'k.outer': "
                                            r"'B' is computed inline.*the loop reads A"):
        kiln.lower(s, [A, C])


def test_tensor_read_only_outside_the_loop_is_refused_at_lowering():
    """``B`` reads ``A`` at loop ``i``, outside ``k.outer``: that loop's body reads only
    ``B``."""
    A = te.placeholder((128, 112), name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j] * 2, name="B")
    k = te.reduce_axis((0, 112), name="k")
    C = te.compute((128,), lambda i: te.sum(B[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, _ = s[C].split(k, factor=16)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].prefetch(A, ko, 1)
    with pytest.raises(ScheduleError, match=r"loop 'k.outer': the loop's body does not read "
                                            r"'A' or a copy of it \(cache_read\); it reads B"):
        kiln.lower(s, [A, C])


def test_scan_stage_refuses_prefetch():
    m, n = 8, 16
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    scan = te.scan(init, update, state, inputs=[X])
    s = te.create_schedule(scan.op)
    with pytest.raises(ScheduleError, match="prefetch: stage 'scan' is a te.scan"):
        s[scan].prefetch(X, scan.op.scan_axis, 1)
