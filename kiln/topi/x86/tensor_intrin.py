"""A tensor intrinsic for CPU GEMM: an ``mr x nr`` block of ``C += A @ B`` computed by a
hand-written C micro-kernel (TVM's ``topi/x86/tensor_intrin.py`` in spirit).

:func:`gemm_block_intrin` declares the block's computation ``c[i, j] = sum_k a[i, k] *
b[k, j]`` (``a``: ``mr x kc`` rows of stride ``lda``; ``b``: a packed ``kc x nr`` panel,
contiguous; ``c``: ``mr x nr`` rows of stride ``ldc``) with a reset (``c = 0``) and an update
(``c += a @ b``) that call the micro-kernel; :func:`gemm_block_source` is the kernel's C,
to link into the module with ``s[C].pragma(axis, "import_c", source)``.

The kernel keeps the ``mr x nr`` block of C in vector registers for the whole ``kc`` loop:
per step, ``nr / lanes`` loads of the B panel, ``mr`` broadcasts of A and ``mr * nr / lanes``
fused multiply-adds. It is written with the intrinsics of the vector width the CPU
description reports (``kiln.target.current_cpu()``, read when the source is made): AVX-512
(``__m512``) or AVX2 with FMA (``__m256``); other CPUs get the same kernel in plain C.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln import te, tir
from kiln.ir.stmt import Evaluate, seq
from kiln.target import current_cpu
from kiln.target.cpu import CPUInfo


@dataclass(frozen=True)
class _VectorISA:
    """The C spelling of one vector width's float32 intrinsics."""

    name: str
    lanes: int
    type: str
    prefix: str  # _mm512 / _mm256


_AVX512 = _VectorISA("avx512", 16, "__m512", "_mm512")
_AVX2 = _VectorISA("avx2", 8, "__m256", "_mm256")


def _vector_isa(cpu: CPUInfo) -> _VectorISA | None:
    if "avx512f" in cpu.features:
        return _AVX512
    if {"avx2", "fma"} <= cpu.features:
        return _AVX2
    return None


def default_block(cpu: CPUInfo | None = None) -> tuple[int, int]:
    """``(mr, nr)`` of the micro-kernel for ``cpu`` (this machine by default): 6 rows of 4
    vectors with AVX-512 (24 accumulators of its 32 registers), 6 rows of 2 vectors with
    AVX2 (12 of 16). Measured on an AVX-512 Xeon, N=768 and 1536: 6 x 64 beat 8 x 32,
    6 x 48 and 6 x 32 by 15-40%."""
    isa = _vector_isa(cpu or current_cpu())
    if isa is None:
        return 4, 16
    return 6, (4 if isa is _AVX512 else 2) * isa.lanes


def kernel_names(mr: int, nr: int) -> tuple[str, str]:
    """The C names of the reset and update kernels of an ``mr x nr`` block."""
    return f"kiln_gemm_reset_{mr}x{nr}", f"kiln_gemm_update_{mr}x{nr}"


def gemm_block_source(mr: int, nr: int, cpu: CPUInfo | None = None) -> str:
    """The C of the reset and update kernels of an ``mr x nr`` float32 block (module
    docstring), with the vector intrinsics of ``cpu`` (this machine by default)."""
    reset, update = kernel_names(mr, nr)
    isa = _vector_isa(cpu or current_cpu())
    head = (f"static int {reset}(float *c, int ldc) {{\n"
            f"  for (int i = 0; i < {mr}; ++i) for (int j = 0; j < {nr}; ++j) "
            f"c[i * ldc + j] = 0.0f;\n  return 0;\n}}\n"
            f"static int {update}(float *c, const float *a, const float *b, int kc, "
            f"int lda, int ldc) {{\n")
    if isa is None or nr % isa.lanes != 0:
        return head + (f"  for (int k = 0; k < kc; ++k) for (int i = 0; i < {mr}; ++i) {{\n"
                       f"    float x = a[i * lda + k];\n"
                       f"    for (int j = 0; j < {nr}; ++j) c[i * ldc + j] += x * b[k * {nr} "
                       f"+ j];\n  }}\n  return 0;\n}}\n")
    return "#include <immintrin.h>\n" + head + _vector_update_body(mr, nr, isa)


def _vector_update_body(mr: int, nr: int, isa: _VectorISA) -> str:
    p, t, nv = isa.prefix, isa.type, nr // isa.lanes
    acc = [[f"c{i}_{v}" for v in range(nv)] for i in range(mr)]
    lines = [f"  {t} {acc[i][v]} = {p}_loadu_ps(c + {i} * ldc + {v * isa.lanes});"
             for i in range(mr) for v in range(nv)]
    lines += ["  #pragma GCC unroll 4", "  for (int k = 0; k < kc; ++k) {"]
    lines += [f"    {t} b{v} = {p}_loadu_ps(b + k * {nr} + {v * isa.lanes});"
              for v in range(nv)]
    for i in range(mr):
        lines.append(f"    {t} a{i} = {p}_set1_ps(a[{i} * lda + k]);")
        lines += [f"    {acc[i][v]} = {p}_fmadd_ps(a{i}, b{v}, {acc[i][v]});"
                  for v in range(nv)]
    lines.append("  }")
    lines += [f"  {p}_storeu_ps(c + {i} * ldc + {v * isa.lanes}, {acc[i][v]});"
              for i in range(mr) for v in range(nv)]
    return "\n".join(lines) + "\n  return 0;\n}\n"



def block_bodies(reset_name: str, update_name: str, cc, *update_args):
    """The three bodies of a register-block intrinsic on the output buffer ``cc``: (reset
    then update, reset, update), calling ``reset_name(c, ldc)`` and ``update_name(c,
    *update_args, ldc)``."""
    reset = tir.call_extern("int32", reset_name, cc.access_ptr("w"), cc.strides[0])
    update = tir.call_extern("int32", update_name, cc.access_ptr("rw"), *update_args,
                             cc.strides[0])
    return seq(Evaluate(reset), Evaluate(update)), reset, update

def gemm_block_intrin(mr: int, nr: int, kc: int) -> te.TensorIntrin:
    """The tensor intrinsic of an ``mr x nr`` block over ``kc`` reduction steps: body
    (reset, then update), reset and update (module docstring)."""
    a = te.placeholder((mr, kc), name="a")
    b = te.placeholder((kc, nr), name="b")
    k = te.reduce_axis((0, kc), name="k")
    c = te.compute((mr, nr), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    binds = {
        a: tir.decl_buffer(a.shape, a.dtype, "a", strides=[te.var("lda"), 1], offset_factor=1),
        b: tir.decl_buffer(b.shape, b.dtype, "b", offset_factor=1),
        c: tir.decl_buffer(c.shape, c.dtype, "c", strides=[te.var("ldc"), 1], offset_factor=1),
    }
    reset_name, update_name = kernel_names(mr, nr)

    def intrin_func(ins, outs):
        aa, bb = ins
        return block_bodies(reset_name, update_name, outs[0], aa.access_ptr("r"),
                            bb.access_ptr("r"), kc, aa.strides[0])

    return te.decl_tensor_intrin(c.op, intrin_func, name=f"gemm_{mr}x{nr}x{kc}", binds=binds)


__all__ = ["block_bodies", "default_block", "gemm_block_intrin", "gemm_block_source",
           "kernel_names"]
