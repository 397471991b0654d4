"""What the CUDA backend generates: kernels, launch dimensions, memory scopes, barriers, the
lowered IR of GPU schedules. No GPU needed (NVRTC only where a test compiles)."""

from __future__ import annotations

import re

import pytest

import kiln
from kiln import te

from . import cuda_workloads as W
from .cuda_workloads import build_cuda, have_nvrtc


def _kernels(mod, name="default_function"):
    return mod.get_function(name).split.kernels


def _source(mod) -> str:
    return mod.imported_modules[0].get_source()


def test_vector_add_kernel():
    w = W.vector_add(1024)
    mod = build_cuda(w.sched, w.args)
    src = _source(mod)
    assert ('extern "C" __global__ void __launch_bounds__(64) default_function_kernel0('
            "const float* __restrict__ A, const float* __restrict__ B, "
            "float* __restrict__ C) {") in src
    assert ("C[((((int)blockIdx.x) * 64) + ((int)threadIdx.x))] = "
            "(A[((((int)blockIdx.x) * 64) + ((int)threadIdx.x))] + "
            "B[((((int)blockIdx.x) * 64) + ((int)threadIdx.x))]);") in src
    (k,) = _kernels(mod)
    assert [int(g) for g in k.grid] == [16, 1, 1] and [int(b) for b in k.block] == [64, 1, 1]
    assert mod.type_key == "cuda_host" and mod.imported_modules[0].type_key == "cuda"
    assert "default_function_kernel0<<<(16, 1, 1), (64, 1, 1)>>>(A, B, C)" in mod.get_source()


def test_guard_for_uneven_split():
    w = W.vector_add(1000)
    src = _source(build_cuda(w.sched, w.args))
    assert "< 1000)), 1)) {" in src


def test_symbolic_shape_is_a_kernel_parameter():
    w = W.vector_add_symbolic()
    mod = build_cuda(w.sched, w.args)
    assert "float* __restrict__ C, int n) {" in _source(mod)
    (k,) = _kernels(mod)
    assert str(k.grid[0]) == "floordiv((n + 127), 128)"


def test_lowered_matmul_shared_memory():
    """Bound inference relaxes the shared tiles over the threads of a block (16x16 tiles, not
    one row per thread) and the cooperative fetch binds the same thread axes again."""
    w = W.matmul_shared(64, 16)
    text = str(kiln.lower(w.sched, w.args, simple_mode=True))
    assert "allocate A.shared[float32 * 256]" in text
    assert "allocate B.shared[float32 * 256]" in text
    assert 'storage_scope = "shared"' in text and 'storage_scope = "local"' in text
    assert text.count("// attr [threadIdx.x] thread_extent = 16") == 3
    assert ("A.shared[((threadIdx.y*16) + threadIdx.x)] = "
            "A[((((threadIdx.y*64) + (blockIdx.y*1024)) + threadIdx.x) + (k.outer*16))]") in text


def test_matmul_shared_kernel_and_barriers():
    w = W.matmul_shared(64, 16)
    src = _source(build_cuda(w.sched, w.args))
    assert "__shared__ __align__(16) float A_shared[256];" in src
    assert "__shared__ __align__(16) float B_shared[256];" in src
    assert "float C_local[1];" in src
    body = src[src.index("for (int k_outer"):]
    # a barrier before the tiles are overwritten, after each fetch; none doubled up
    assert body.count("__syncthreads();") == 3
    assert body.index("__syncthreads();") < body.index("A_shared[(")
    assert body.rindex("__syncthreads();") < body.index("for (int k_inner")
    assert not re.search(r"__syncthreads\(\);\s*__syncthreads\(\);", src)
    (k,) = _kernels(build_cuda(w.sched, w.args))
    assert k.shared_bytes == 2 * 256 * 4 and k.threads_per_block == 256


def test_distinct_thread_axes_share_one_variable():
    """The book binds fresh te.thread_axis objects per stage: one threadIdx per kernel."""
    from kiln.ir.functor import post_order_visit

    w = W.matmul_book(n=64)
    func = kiln.lower(w.sched, w.args, name="mm")["mm"]
    nodes: dict[str, set] = {}

    def visit(n):
        if getattr(n, "attr_key", None) == "thread_extent":
            nodes.setdefault(n.node.thread_tag, set()).add(id(n.node))

    post_order_visit(func.body, visit)
    assert len(nodes["threadIdx.x"]) == 1 and len(nodes["threadIdx.y"]) == 1
    (k,) = _kernels(build_cuda(w.sched, w.args))
    assert [int(b) for b in k.block] == [16, 16, 1]


def test_partial_cooperative_fetch_is_guarded():
    w = W.matmul_partial_fetch()
    text = str(kiln.lower(w.sched, w.args, simple_mode=True))
    assert "if (likely((threadIdx.y < 2)))" in text
    assert "if (likely((threadIdx.x < 4)))" in text


def test_vthreads_are_injected_into_one_thread():
    """2x2x2 virtual threads: one shared fetch per block, 8 private accumulator copies."""
    w = W.conv_vthread()
    src = _source(build_cuda(w.sched, w.args))
    assert "vc" not in src and "vh" not in src and "vw" not in src
    assert "float Y_local[32];" in src  # 4 per virtual thread x 8 virtual threads
    assert src.count("float PaddedX_shared[720];") == 1  # shared by the virtual threads
    assert src.count("i0_i1_fused_i2_fused_inner_inner_inner < 12;") == 1  # fetched once
    (k,) = _kernels(build_cuda(w.sched, w.args))
    assert [int(g) for g in k.grid] == [1, 2, 2] and [int(b) for b in k.block] == [8, 4, 2]


def test_float16_uses_cuda_fp16():
    w = W.softplus_fp16()
    src = _source(build_cuda(w.sched, w.args))
    assert src.startswith("#include <cuda_fp16.h>")
    assert "const half* __restrict__ A, half* __restrict__ B" in src
    assert "((half)logf((float)(" in src and "((half)expf((float)(" in src


def test_math_intrinsics():
    w = W.intrinsics()
    src = _source(build_cuda(w.sched, w.args))
    for fn in ("sqrtf(", "tanhf(", "expf(", "kiln_max("):
        assert fn in src


def test_vectorize_becomes_lane_loop():
    w = W.vectorized()
    src = _source(build_cuda(w.sched, w.args))
    assert "#pragma unroll" in src and "for (int lane = 0; lane < 4; ++lane)" in src


def test_two_kernels_and_a_workspace():
    w = W.two_kernels()
    mod = build_cuda(w.sched, w.args)
    src = _source(mod)
    assert "default_function_kernel0(const float* __restrict__ A, float* __restrict__ B)" in src
    assert "default_function_kernel1(float* __restrict__ C, const float* __restrict__ B)" in src
    assert "allocate B[float32 * 1024]" in mod.get_source()


def test_auto_unroll_pragma():
    w = W.unroll_pragma()
    src = _source(build_cuda(w.sched, w.args))
    assert "#pragma unroll\n    for (int k_inner" in src


def test_cpu_target_still_rejects_bindings():
    w = W.vector_add()
    with pytest.raises(kiln.ScheduleError, match="target is a CPU"):
        kiln.build(w.sched, w.args, target="llvm")


@pytest.mark.skipif(not have_nvrtc(), reason=W.NVRTC_MISSING)
def test_ptx_and_explicit_arch():
    w = W.vector_add()
    mod = kiln.build(w.sched, w.args, target="cuda -arch=sm_90")
    dev = mod.imported_modules[0]
    assert dev.arch == "sm_90"
    assert ".target sm_90" in dev.get_source("ptx")
    assert ".visible .entry default_function_kernel0" in dev.get_source("ptx")


def test_shared_memory_allocation_respects_relaxation_only_for_shared():
    """A local cache attached inside threadIdx loops stays per thread (not relaxed)."""
    n = 64
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    AL = s.cache_read(A, "local", [B])
    i, j = B.op.axis
    s[B].bind(i, te.thread_axis("blockIdx.x"))
    s[B].bind(j, te.thread_axis("threadIdx.x"))
    s[AL].compute_at(s[B], j)
    text = str(kiln.lower(s, [A, B], simple_mode=True))
    assert "allocate A.local[float32 * 1]" in text


def test_kernel_beyond_int32_indexes_in_int64():
    """2^31 + 5 elements (docs/codegen.md "Index types"): the split loops are int64, so the
    thread indices are cast to ``long long`` before the index arithmetic."""
    n = 2**31 + 5
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=256)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    mod = build_cuda(s, [A, B, C])
    src = _source(mod)
    index = "((((long long)(((int)blockIdx.x))) * 256LL) + ((long long)(((int)threadIdx.x))))"
    assert f"C[{index}] = (A[{index}] + B[{index}]);" in src
    assert f"if (__builtin_expect(!!(({index} < 2147483653LL)), 1))" in src
    (k,) = _kernels(mod)
    assert int(k.grid[0]) == 8388609
    if have_nvrtc():
        assert ".visible .entry default_function_kernel0" in mod.imported_modules[0].get_source(
            "ptx")
