"""Illegal schedules raise kiln.ScheduleError naming the primitive, stage, axis and rule."""

from __future__ import annotations

import pytest

import kiln
from kiln import te


def two_stage():
    A = te.placeholder((16, 16), name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((16, 16), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((16, 16), lambda i, j: A[i, j] - 1.0, name="D")
    k = te.reduce_axis((0, 16), name="k")
    R = te.compute((16,), lambda i: te.sum(A[i, k], axis=k), name="R")
    s = te.create_schedule([C.op, D.op, R.op])
    return s, A, B, C, D, R


def test_reorder_axis_of_another_stage():
    s, A, B, C, D, R = two_stage()
    with pytest.raises(kiln.ScheduleError, match=r"reorder on stage 'C'.*belongs to stage 'B'"):
        s[C].reorder(B.op.axis[1], C.op.axis[0])


def test_split_fused_away_axis():
    s, A, B, C, D, R = two_stage()
    i, j = C.op.axis
    s[C].fuse(i, j)
    with pytest.raises(kiln.ScheduleError, match=r"split on stage 'C': axis 'i' was already"):
        s[C].split(i, factor=4)


def test_fuse_non_adjacent():
    s, A, B, C, D, R = two_stage()
    i, j = C.op.axis
    s[C].reorder(j, i)
    with pytest.raises(kiln.ScheduleError, match="adjacent"):
        s[C].fuse(i, j)


def test_compute_at_non_consumer():
    s, A, B, C, D, R = two_stage()
    with pytest.raises(kiln.ScheduleError, match=r"stage 'D' does not consume 'B'"):
        s[B].compute_at(s[D], D.op.axis[0])


def test_compute_at_axis_outside_consumer():
    s, A, B, C, D, R = two_stage()
    with pytest.raises(kiln.ScheduleError, match=r"is not a loop of stage 'C'"):
        s[B].compute_at(s[C], D.op.axis[0])


def test_vectorize_reduction_axis():
    s, A, B, C, D, R = two_stage()
    with pytest.raises(kiln.ScheduleError, match=r"vectorize on stage 'R': axis 'k' is a red"):
        s[R].vectorize(R.op.reduce_axis[0])


def test_parallel_reduction_axis():
    s, A, B, C, D, R = two_stage()
    with pytest.raises(kiln.ScheduleError, match="rfactor"):
        s[R].parallel(R.op.reduce_axis[0])


def test_split_needs_one_of_factor_nparts():
    s, A, B, C, D, R = two_stage()
    with pytest.raises(kiln.ScheduleError, match="exactly one of factor= or nparts="):
        s[C].split(C.op.axis[0])
    with pytest.raises(kiln.ScheduleError, match="must be positive"):
        s[C].split(C.op.axis[0], factor=0)


def test_inline_output_or_reduction():
    s, A, B, C, D, R = two_stage()
    with pytest.raises(kiln.ScheduleError, match="is an output"):
        s[C].compute_inline()


def test_schedule_placeholder():
    s, A, B, C, D, R = two_stage()
    with pytest.raises(kiln.ScheduleError, match="placeholder"):
        s[A].compute_inline()


def test_bind_gpu_thread_on_cpu_target():
    s, A, B, C, D, R = two_stage()
    bx = te.thread_axis("blockIdx.x")
    s[C].bind(C.op.axis[0], bx)
    with pytest.raises(kiln.ScheduleError, match="GPU thread 'blockIdx.x' but the target is a CPU"):
        kiln.build(s, [A, C, D, R], target="llvm")


def test_tensor_not_in_schedule():
    s, A, B, C, D, R = two_stage()
    X = te.placeholder((3,), name="X")
    with pytest.raises(kiln.ScheduleError, match="not part of this schedule"):
        s[X]


def test_missing_input_argument():
    s, A, B, C, D, R = two_stage()
    with pytest.raises(kiln.TVMError, match="input tensor 'A'"):
        kiln.lower(s, [C, D, R])


def test_unbound_variable():
    n = te.var("n")
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + n, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(kiln.TVMError, match="variable 'n'"):
        kiln.lower(s, [A, B])
