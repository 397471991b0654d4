"""Clear errors of the CUDA backend: schedules it cannot run, bad arguments, no GPU.

None of these needs a GPU; the schedule errors need neither NVRTC (they are raised while
splitting host and device code, before anything is compiled).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te

from . import cuda_emulator
from .cuda_workloads import build_cuda, have_nvrtc


def _vector_add(n=1024):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    return te.create_schedule(C.op), A, B, C


def _bound_vector_add(n=1024, factor=64):
    s, A, B, C = _vector_add(n)
    bx, tx = s[C].split(C.op.axis[0], factor=factor)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, A, B, C


def test_no_binding():
    s, A, B, C = _vector_add()
    with pytest.raises(kiln.ScheduleError, match="(?i)did you forget to bind"):
        build_cuda(s, [A, B, C])


def test_one_stage_not_bound():
    A = te.placeholder((256,), name="A")
    B = te.compute((256,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((256,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(kiln.ScheduleError, match="store to 'B'.*Did you forget to bind"):
        build_cuda(s, [A, C])


def test_too_many_threads_in_one_dimension():
    s, A, B, C = _bound_vector_add(4096, factor=2048)
    with pytest.raises(kiln.ScheduleError, match="threadIdx.x has extent 2048.*1024"):
        build_cuda(s, [A, B, C])


def test_too_many_threads_per_block():
    A = te.placeholder((64, 64), name="A")
    C = te.compute((64, 64), lambda i, j: A[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.y"))
    s[C].bind(C.op.axis[1], te.thread_axis("threadIdx.x"))
    with pytest.raises(kiln.ScheduleError, match=r"too many threads per block: 64 x 64 x 1 = "
                                                 r"4096 threads.*at most 1024"):
        build_cuda(s, [A, C])


def test_too_much_shared_memory():
    n = 256
    A = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[C], bx)  # a 64 x 256 float tile: 64 KiB
    with pytest.raises(kiln.ScheduleError, match="too much shared memory: .* 65536 bytes"):
        build_cuda(s, [A, C])


def test_shared_stage_outside_kernel():
    s, A, B, C = _bound_vector_add()
    s.cache_read(A, "shared", [C])  # left at the root: no block owns it
    with pytest.raises(kiln.ScheduleError, match="storage scope 'shared'.*outside every kernel"):
        build_cuda(s, [A, B, C])


def test_inner_binding_larger_than_outer():
    n = 64
    A = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    bx, tx = s[C].split(C.op.axis[0], factor=8)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[C], tx)
    y, x = s[AS].op.axis
    xo, xi = s[AS].split(x, nparts=32)
    s[AS].bind(xo, te.thread_axis("threadIdx.x"))  # 32 threads inside an 8-thread loop
    with pytest.raises(kiln.ScheduleError, match="extent 32 is nested inside a loop bound to "
                                                 "threadIdx.x with extent 8"):
        kiln.lower(s, [A, C])


def test_parallel_inside_kernel():
    A = te.placeholder((64, 64), name="A")
    C = te.compute((64, 64), lambda i, j: A[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].parallel(C.op.axis[1])
    with pytest.raises(kiln.ScheduleError, match="parallel inside a CUDA kernel"):
        build_cuda(s, [A, C])


def test_unknown_thread_tag():
    s, A, B, C = _vector_add()
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.w"))
    with pytest.raises(kiln.ScheduleError, match="unknown thread tag 'threadIdx.w'"):
        build_cuda(s, [A, B, C])


# ---- arguments (checked on the host, before any launch: no GPU needed) ---------------------
def test_cpu_array_to_cuda_function():
    s, A, B, C = _bound_vector_add()
    mod = build_cuda(s, [A, B, C])
    a, b, c = (kiln.nd.array(np.zeros(1024, "float32")) for _ in range(3))
    with pytest.raises(kiln.TVMError, match=r"Argument arg0\.device_type \(A\) has an "
                                            r"unsatisfied constraint: expected a cuda tensor, "
                                            r"got device type 1"):
        mod(a, b, c)


def test_argument_count_and_kind():
    s, A, B, C = _bound_vector_add()
    mod = build_cuda(s, [A, B, C])
    with pytest.raises(kiln.TVMError, match="expected 3 arguments, got 2"):
        mod(1, 2)
    with pytest.raises(kiln.TVMError, match=r"arg0 \(A\): expected a tensor \(NDArray\), got "
                                            r"type code 2"):
        mod(1.5, 2, 3)


@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
def test_shape_and_dtype_checks():
    s, A, B, C = _bound_vector_add()
    emu = cuda_emulator.Emulated(build_cuda(s, [A, B, C]))
    ok = np.zeros(1024, "float32")
    with pytest.raises(kiln.TVMError, match=r"Argument arg1\.shape\[0\] has an unsatisfied "
                                            r"constraint: expected 1024, got 1000"):
        emu(ok, np.zeros(1000, "float32"), ok.copy())
    with pytest.raises(kiln.TVMError, match=r"arg2\.dtype is expected to be float32 \(C\)"):
        emu(ok, ok.copy(), np.zeros(1024, "float64"))
    with pytest.raises(kiln.TVMError, match=r"arg0\.ndim is expected to equal 1, got 2"):
        emu(np.zeros((32, 32), "float32"), ok.copy(), ok.copy())


@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
def test_symbolic_shape_binding_and_mismatch():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    emu = cuda_emulator.Emulated(build_cuda(s, [A, B]))
    a, b = np.arange(70, dtype="float32"), np.zeros(70, "float32")
    emu(a, b)
    np.testing.assert_allclose(b, a + 1)
    with pytest.raises(kiln.TVMError, match=r"arg1\.shape\[0\] has an unsatisfied constraint"):
        emu(a, np.zeros(71, "float32"))


def test_no_gpu_allocation_error():
    if kiln.cuda(0).exist:
        pytest.skip("a GPU is present")
    with pytest.raises(kiln.TVMError, match="(?i)cuda"):
        kiln.nd.empty((4,), "float32", kiln.cuda(0))


def test_nvrtc_reports_compile_errors():
    if not have_nvrtc():
        pytest.skip("NVRTC bindings not installed")
    from kiln.codegen.cuda_backend import compile_source

    with pytest.raises(kiln.CompileError, match="NVRTC failed to compile.*sm_80"):
        compile_source('extern "C" __global__ void k() { undefined_thing(); }', "sm_80")
