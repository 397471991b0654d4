"""A bf16 tensor intrinsic for x86: an ``mr x nr`` block of ``C += A @ B`` with bfloat16
operands and float32 accumulation, computed by a C micro-kernel on AMX-BF16 tiles
(``_tile_dpbf16ps``) or AVX-512 BF16 vectors (``_mm512_dpbf16_ps``).

bf16 values are carried as their bits in ``uint16`` tensors (TVM's legalized bf16 storage);
:func:`to_float32` and :func:`round_to_bf16` are the exact conversions in TIR (C helpers of
the runtime header). The intrinsic (:func:`bf16_gemm_intrin`) declares

    c[i, j] = sum_{k2, p} f32(a[i, 2*k2 + p]) * f32(b[k2, j, p])        (i < mr, j < nr)

``a``: ``mr`` rows of ``2*kc2`` bf16 values (the weights of ``mr`` output channels), row
stride ``lda``; ``b``: ``nr`` columns (pixels) in the pair-interleaved ("VNNI") layout both
instructions read: for each pair of reduction steps ``k2``, the ``nr`` columns' two values
side by side, stride ``ldb`` between pairs; ``c``: float32 rows of stride ``ldc``. The
micro-kernel (:func:`bf16_gemm_source`):

* AMX-BF16 (``amx-tile`` + ``amx-bf16``; ``mr`` at most 32, any ``nr``, ``2*kc2`` a
  multiple of :data:`K_ALIGN`): the columns in chunks of 32 (the last one ragged, with
  its own tile configuration), each chunk in up to 2 x 2 float32 accumulator tiles, per 32
  reduction steps one tile of ``a`` per 16 rows and one of ``b`` per 16 columns, one
  ``tdpbf16ps`` per accumulator tile (up to 16 x 16 x 32 multiply-adds). Linux grants the
  tiles per process on request; where it refuses, the AVX-512 path runs the block in
  pieces of at most 32 columns and :data:`MAX_ACCUMULATORS` accumulators;
* AVX-512 BF16: the block in ``mr * ceil(nr / 16)`` zmm accumulators; per pair of steps
  ``ceil(nr / 16)`` vectors of ``b``, each row's pair of ``a`` values broadcast (32 bits),
  one ``vdpbf16ps`` (32 multiply-adds) per accumulator.

Products of bf16 values are exact in float32 and summed in float32 (both instructions round
to nearest even and treat denormal inputs and outputs as zero). :func:`check_bf16_cpu` is
the one place that says whether a CPU can run it, :func:`uses_amx` which path it takes.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import TVMError
from kiln.target import current_cpu
from kiln.target.cpu import CPUInfo

from .tensor_intrin import block_bodies

#: float32 lanes of one zmm accumulator: the block's column granularity
LANES = 16
#: the CPU feature (GCC's ``-m`` name) the micro-kernel needs
BF16_FEATURE = "avx512bf16"
#: the features of its AMX path
AMX_FEATURES = frozenset({"amx-tile", "amx-bf16"})
#: the reduction length must be a multiple of this (one row of an AMX tile: 32 bf16 values)
K_ALIGN = 32
#: accumulators of one AVX-512 block at most (of the 32 registers; the rest hold the panel)
MAX_ACCUMULATORS = 24


def check_bf16_cpu(cpu: CPUInfo | None = None, what: str = "bf16 kernels") -> None:
    """Raise a ``TVMError`` naming the missing instructions unless ``cpu`` (the current
    target's by default) has AVX-512 BF16: bf16 is never emulated. ``what`` names the
    caller in the message."""
    cpu = cpu or current_cpu()
    if BF16_FEATURE not in cpu.features:
        have = ", ".join(sorted(cpu.features)) or "none"
        raise TVMError(f"{what}: bf16 needs a CPU with AVX-512 BF16 (avx512_bf16: "
                       f"vdpbf16ps); the target's CPU is {cpu.isa} with features [{have}]. "
                       f"Compile in float32 (precision='fp32'), or for a target whose CPU "
                       f"has it (the default target on such a machine)")


def to_float32(bits) -> tir.PrimExpr:
    """The float32 value of the bf16 ``bits`` (a ``uint16`` expression); exact."""
    return tir.call_pure_extern("float32", "kiln_f32_from_bf16", bits)


def round_to_bf16(value) -> tir.PrimExpr:
    """The bits (``uint16``) of the float32 ``value`` rounded to bf16, to nearest even."""
    return tir.call_pure_extern("uint16", "kiln_bf16_from_f32", value)


def uses_amx(cpu: CPUInfo | None = None) -> bool:
    """Whether the micro-kernel computes with AMX tiles on ``cpu`` (the current target's by
    default): AMX-BF16 (Sapphire Rapids and later)."""
    return AMX_FEATURES <= (cpu or current_cpu()).features


def kernel_names(mr: int, nr: int) -> tuple[str, str]:
    """The C names of the reset and update kernels of an ``mr x nr`` bf16 block."""
    return f"kiln_bf16_gemm_reset_{mr}x{nr}", f"kiln_bf16_gemm_update_{mr}x{nr}"


def _tiles(n: int) -> list[int]:
    """``n`` rows or columns (at most 32) as AMX tiles of at most 16."""
    return [16] * (n // 16) + ([n % 16] if n % 16 else [])


def _vector_update(name: str, mr: int, nr: int) -> list[str]:
    """The AVX-512 BF16 update: ``mr * ceil(nr / 16)`` zmm accumulators, one ``vdpbf16ps``
    per accumulator and pair of reduction steps; a last partial vector under a mask."""
    nv = -(-nr // LANES)
    tail = nr % LANES

    def load(v: int, what: str, ptr: str) -> str:
        if v == nv - 1 and tail:
            return f"_mm512_maskz_loadu_{what}(tail, {ptr})"
        return f"_mm512_loadu_{what}({ptr})"

    def store(i: int, v: int) -> str:
        ptr = f"c + {i} * ldc + {v * LANES}"
        if v == nv - 1 and tail:
            return f"  _mm512_mask_storeu_ps({ptr}, tail, c{i}_{v});"
        return f"  _mm512_storeu_ps({ptr}, c{i}_{v});"

    lines = [f"static int {name}({_SIGNATURE}) {{"]
    if tail:
        lines.append(f"  const __mmask16 tail = (__mmask16)((1u << {tail}) - 1u);")
    lines += [f"  __m512 c{i}_{v} = {load(v, 'ps', f'c + {i} * ldc + {v * LANES}')};"
              for i in range(mr) for v in range(nv)]
    lines.append("  for (int k = 0; k < kc2; ++k) {")
    panel = [f"b + k * ldb + {2 * v * LANES}" for v in range(nv)]
    lines += [f"    __m512bh b{v} = (__m512bh){load(v, 'epi32', panel[v])};" for v in range(nv)]
    for i in range(mr):
        lines += [f"    int32_t p{i}; memcpy(&p{i}, a + {i} * lda + 2 * k, 4);",
                  f"    __m512bh a{i} = (__m512bh)_mm512_set1_epi32(p{i});"]
        lines += [f"    c{i}_{v} = _mm512_dpbf16_ps(c{i}_{v}, a{i}, b{v});" for v in range(nv)]
    lines.append("  }")
    lines += [store(i, v) for i in range(mr) for v in range(nv)]
    return lines + ["  return 0;", "}"]


#: what every AMX kernel shares, defined once per library
AMX_COMMON = """#ifndef KILN_AMX_COMMON
#define KILN_AMX_COMMON
#include <unistd.h>
#include <sys/syscall.h>
/* Linux grants a process the AMX tile state on request (arch_prctl ARCH_REQ_XCOMP_PERM for
 * XTILEDATA); where it refuses, the kernels take their AVX-512 BF16 path. */
static int kiln_amx_permitted(void) {
  static int state = -1;
  if (state < 0) state = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return state;
}
typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16];
                 uint8_t rows[16]; } kiln_tile_config;
#endif"""


def _column_chunks(nr: int) -> list[tuple[int, int, int]]:
    """``nr`` columns as ``(start, stop, width)`` runs of chunks: of 32 columns (two tiles or
    two vectors), then the ragged rest."""
    full, tail = divmod(nr, 2 * LANES)
    return [(0, full * 2 * LANES, 2 * LANES)] * bool(full) + [(full * 2 * LANES, nr, tail)] * \
        bool(tail)


def _vector_blocks(name: str, mr: int, nr: int) -> list[str]:
    """The AVX-512 BF16 update of an ``mr x nr`` block of any size (the AMX kernels' path
    where the OS refuses the tiles): column chunks of 32 (the last one ragged) by row chunks
    of as many rows as keep the accumulators within :data:`MAX_ACCUMULATORS`, each a
    :func:`_vector_update`."""
    kernels, body = [], []
    for start, stop, width in _column_chunks(nr):
        rows = max(d for d in range(1, MAX_ACCUMULATORS // -(-width // LANES) + 1)
                   if mr % d == 0)
        kernel = f"{name}_{rows}x{width}"
        kernels += _vector_update(kernel, rows, width)
        body += [f"  for (int j = {start}; j < {stop}; j += {width})",
                 f"    for (int i = 0; i < {mr}; i += {rows})",
                 f"      {kernel}(c + i * ldc + j, a + i * lda, b + 2 * j, kc2, lda, ldb, ldc);"]
    return [*kernels, f"static int {name}({_SIGNATURE}) {{", *body, "  return 0;", "}"]


def _amx_chunk(name: str, mr: int, width: int) -> list[str]:
    """A C function computing ``mr`` rows by ``width`` (at most 32) columns of the block with
    the tiles configured by :func:`_amx_config`: up to 2 x 2 float32 accumulator tiles
    (tmm0-3), per 32 reduction steps a tile of ``a`` per row tile (tmm4-5) and of ``b`` per
    column tile (tmm6-7), one ``tdpbf16ps`` per accumulator tile."""
    rows, cols = _tiles(mr), _tiles(width)
    acc = {(r, c): r * len(cols) + c for r in range(len(rows)) for c in range(len(cols))}
    a_tile = {r: len(acc) + r for r in range(len(rows))}
    b_tile = {c: len(acc) + len(rows) + c for c in range(len(cols))}
    lines = [f"static void {name}({_SIGNATURE}) {{"]
    lines += [f"  _tile_loadd({t}, c + {16 * r} * ldc + {16 * c}, ldc * 4);"
              for (r, c), t in acc.items()]
    lines.append("  for (int k = 0; k < kc2; k += 16) {")
    lines += [f"    _tile_loadd({t}, a + {16 * r} * lda + 2 * k, lda * 2);"
              for r, t in a_tile.items()]
    lines += [f"    _tile_loadd({t}, b + k * ldb + {32 * c}, ldb * 2);" for c, t in b_tile.items()]
    lines += [f"    _tile_dpbf16ps({t}, {a_tile[r]}, {b_tile[c]});" for (r, c), t in acc.items()]
    lines.append("  }")
    lines += [f"  _tile_stored({t}, c + {16 * r} * ldc + {16 * c}, ldc * 4);"
              for (r, c), t in acc.items()]
    return lines + ["}"]


def _amx_config(mr: int, width: int) -> list[str]:
    """C statements loading the tile configuration of :func:`_amx_chunk` ``(mr, width)``."""
    rows, cols = _tiles(mr), _tiles(width)
    acc = [(r, c) for r in range(len(rows)) for c in range(len(cols))]
    config = [f"cfg.rows[{t}] = {rows[r]}; cfg.colsb[{t}] = {4 * cols[c]};"
              for t, (r, c) in enumerate(acc)]
    config += [f"cfg.rows[{len(acc) + r}] = {n}; cfg.colsb[{len(acc) + r}] = 64;"
               for r, n in enumerate(rows)]
    config += [f"cfg.rows[{len(acc) + len(rows) + c}] = 16; "
               f"cfg.colsb[{len(acc) + len(rows) + c}] = {4 * n};" for c, n in enumerate(cols)]
    return ["  memset(&cfg, 0, sizeof cfg); cfg.palette = 1;", *[f"  {c}" for c in config],
            "  _tile_loadconfig(&cfg);"]


def _amx_update(name: str, mr: int, nr: int) -> list[str]:
    """The AMX-BF16 update of an ``mr x nr`` block (``mr`` at most 32, any ``nr``): the
    column chunks (:func:`_column_chunks`) by :func:`_amx_chunk`, each chunk width with its
    own tile configuration."""
    chunks = _column_chunks(nr)
    lines = [line for _, _, width in chunks for line in _amx_chunk(f"{name}_{width}", mr, width)]
    lines += [f"static int {name}({_SIGNATURE}) {{", "  kiln_tile_config cfg;"]
    for start, stop, width in chunks:
        lines += _amx_config(mr, width)
        lines += [f"  for (int j = {start}; j < {stop}; j += {width})",
                  f"    {name}_{width}(c + j, a, b + 2 * j, kc2, lda, ldb, ldc);"]
    return lines + ["  _tile_release();", "  return 0;", "}"]


_SIGNATURE = ("float *c, const uint16_t *a, const uint16_t *b, int kc2, int lda, int ldb, "
              "int ldc")


def bf16_gemm_source(mr: int, nr: int, cpu: CPUInfo | None = None) -> str:
    """The C of the reset and update kernels of an ``mr x nr`` block (module docstring) for
    ``cpu`` (the current target's by default), which :func:`check_bf16_cpu` accepts: with
    AMX tiles where it has AMX-BF16 (``mr`` at most 32, the reduction a multiple of
    :data:`K_ALIGN`), falling back to the AVX-512 BF16 update in a process the OS denies
    the tiles; else the AVX-512 BF16 update alone."""
    reset, update = kernel_names(mr, nr)
    lines = ["#include <immintrin.h>",
             f"static int {reset}(float *c, int ldc) {{",
             f"  for (int i = 0; i < {mr}; ++i) for (int j = 0; j < {nr}; ++j) "
             "c[i * ldc + j] = 0;", "  return 0;", "}"]
    if not uses_amx(cpu):
        return "\n".join(lines + _vector_update(update, mr, nr)) + "\n"
    lines += [AMX_COMMON, *_vector_blocks(f"{update}_avx512", mr, nr),
              *_amx_update(f"{update}_amx", mr, nr),
              f"static int {update}({_SIGNATURE}) {{",
              f"  return (kiln_amx_permitted() ? {update}_amx : {update}_avx512)"
              "(c, a, b, kc2, lda, ldb, ldc);", "}"]
    return "\n".join(lines) + "\n"


def bf16_gemm_intrin(mr: int, nr: int, kc2: int) -> te.TensorIntrin:
    """The tensor intrinsic of an ``mr x nr`` block over ``2 * kc2`` reduction steps: body
    (reset, then update), reset and update (module docstring)."""
    a = te.placeholder((mr, 2 * kc2), dtype="uint16", name="a")
    b = te.placeholder((kc2, nr, 2), dtype="uint16", name="b")
    k2 = te.reduce_axis((0, kc2), name="k2")
    p = te.reduce_axis((0, 2), name="p")
    c = te.compute((mr, nr), lambda i, j: te.sum(
        to_float32(a[i, 2 * k2 + p]) * to_float32(b[k2, j, p]), axis=[k2, p]), name="c")
    binds = {
        a: tir.decl_buffer(a.shape, a.dtype, "a", strides=[te.var("lda"), 1], offset_factor=1),
        b: tir.decl_buffer(b.shape, b.dtype, "b", strides=[te.var("ldb"), 2, 1],
                           offset_factor=1),
        c: tir.decl_buffer(c.shape, c.dtype, "c", strides=[te.var("ldc"), 1], offset_factor=1),
    }
    reset_name, update_name = kernel_names(mr, nr)

    def intrin_func(ins, outs):
        aa, bb = ins
        return block_bodies(reset_name, update_name, outs[0], aa.access_ptr("r"),
                            bb.access_ptr("r"), kc2, aa.strides[0], bb.strides[0])

    return te.decl_tensor_intrin(c.op, intrin_func, name=f"bf16_gemm_{mr}x{nr}x{kc2}",
                                 binds=binds)


__all__ = ["LANES", "BF16_FEATURE", "AMX_FEATURES", "K_ALIGN", "MAX_ACCUMULATORS",
           "check_bf16_cpu", "uses_amx", "to_float32", "round_to_bf16", "kernel_names",
           "bf16_gemm_source", "bf16_gemm_intrin"]
