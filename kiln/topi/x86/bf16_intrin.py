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

* AMX-BF16 (``amx-tile`` + ``amx-bf16``; any ``mr`` and ``nr``, ``2*kc2`` a multiple of
  :data:`K_ALIGN`): the block in chunks of 32 rows by 32 columns (the last of each ragged,
  with its own tile configuration), each chunk in up to 2 x 2 float32 accumulator tiles,
  per 32 reduction steps one tile of ``a`` per 16 rows and one of ``b`` per 16 columns, one
  ``tdpbf16ps`` per accumulator tile (up to 16 x 16 x 32 multiply-adds). Linux grants the
  tiles per process on request; where it refuses, the AVX-512 path runs the block in
  pieces of at most 32 columns and :data:`MAX_ACCUMULATORS` accumulators;
* AVX-512 BF16: the block in ``mr * ceil(nr / 16)`` zmm accumulators (in such pieces where
  there would be more); per pair of steps ``ceil(nr / 16)`` vectors of ``b``, each row's
  pair of ``a`` values broadcast (32 bits), one ``vdpbf16ps`` (32 multiply-adds) per
  accumulator.

A direct convolution (:func:`bf16_conv_intrin`, :class:`ConvBlock`) runs the same kernels
with the roles of the operands swapped and a reduction of several taps (:data:`Taps`):
``a`` is the block's pixels, each pixel's 32 input channels a 64-byte row of the blocked
input, ``b`` the weight's panel of 32 input channels by the block's output channels, one
tap per kernel position and block of 32 input channels, each moving ``a`` and ``b`` by
constant offsets. Its ``pixels x channels`` accumulators start at zero and are stored
either as they are (``channels_last``: each pixel's channels side by side, as a blocked
``NCHW{b}c`` output reads them) or transposed (:data:`TRANSPOSE_COMMON`: 16 x 16 float32
transposes in zmm registers), so that each channel's pixels are consecutive, as an NCHW
output reads them.

Products of bf16 values are exact in float32 and summed in float32 (both instructions round
to nearest even and treat denormal inputs and outputs as zero). :func:`check_bf16_cpu` is
the one place that says whether a CPU can run it, :func:`uses_amx` which path it takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
    """The bits (``uint16``) of the float32 ``value`` rounded to bf16, to nearest even (a
    NaN stays a quiet NaN): the runtime header's ``kiln_bf16_from_f32`` written lane-wise,
    in integer arithmetic on the value's bits (``reinterpret``, divisions by powers of two)
    and a ``select`` of NaNs, so that ``vectorize`` turns a loop of roundings (a kernel's
    tail writing bf16) into vector code rather than a call per element.

    A NaN is found by ``value != value`` (one float comparison) and quieted by the float
    sum ``value + value`` (x86 returns a NaN operand with its quiet bit set, its sign and
    payload kept: the high half of the sum is the NaN's bf16 bits with bit 6 set); the other
    lanes take the integer rounding. Tested in integer arithmetic on the bits instead (three
    signed comparisons, the quiet bit set by differences of quotients: 18 instead of 12
    vector instructions per 16 lanes), a depthwise convolution writing bf16 in its tail
    took 1.4-1.6x the time of the same kernel writing float32, against 1.2-1.3x now
    (MobileNetV2's 28x28 and 14x14 layers, one thread)."""
    u = tir.reinterpret("uint32", value)

    def c(v: int) -> tir.PrimExpr:
        return tir.const(v, "uint32")

    high = tir.truncdiv(u, c(1 << 16))
    odd = high - tir.truncdiv(high, c(2)) * c(2)  # bit 16: ties go to the even neighbour
    rounded = tir.truncdiv(u + c(0x7FFF) + odd, c(1 << 16))
    quiet = tir.truncdiv(tir.reinterpret("uint32", value + value), c(1 << 16))
    return tir.Select(value != value, quiet, rounded).astype("uint16")


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


#: ``(a, b)`` element offsets of the reduction's taps: a block sums, per tap, ``kc2`` pairs of
#: reduction steps of ``a + a_offset`` by ``b + b_offset``
Taps = tuple[tuple[int, int], ...]
#: a plain GEMM block: one tap at no offset
GEMM_TAPS: Taps = ((0, 0),)
#: how a block's update writes ``c``: ``"add"`` adds the block to what ``c`` holds (a GEMM
#: block after its reset), ``"transposed"`` stores the block, starting at zero, as
#: ``c[j * ldc + i]``, ``"rows"`` stores it, starting at zero, as ``c[i * ldc + j]``
Store = Literal["add", "transposed", "rows"]


def _tap_loop(taps: Taps, indent: str) -> list[str]:
    """C opening the loop over ``taps`` (closed by the caller): ``at`` and ``bt`` point at
    the tap's operands."""
    a_off = ", ".join(str(a) for a, _ in taps)
    b_off = ", ".join(str(b) for _, b in taps)
    return [f"{indent}static const int ta[{len(taps)}] = {{{a_off}}}, tb[{len(taps)}] = "
            f"{{{b_off}}};",
            f"{indent}for (int t = 0; t < {len(taps)}; ++t) {{",
            f"{indent}  const uint16_t *at = a + ta[t], *bt = b + tb[t];"]


def _vector_update(name: str, mr: int, nr: int, taps: Taps = GEMM_TAPS,
                   store: Store = "add") -> list[str]:
    """The AVX-512 BF16 update: ``mr * ceil(nr / 16)`` zmm accumulators, one ``vdpbf16ps``
    per accumulator, tap and pair of reduction steps; a last partial vector under a mask.
    ``store`` (:data:`Store`): ``"transposed"`` through :data:`TRANSPOSE_COMMON`."""
    nv = -(-nr // LANES)
    tail = nr % LANES

    def load(v: int, what: str, ptr: str) -> str:
        if v == nv - 1 and tail:
            return f"_mm512_maskz_loadu_{what}(tail, {ptr})"
        return f"_mm512_loadu_{what}({ptr})"

    def store_vector(i: int, v: int) -> str:
        ptr = f"c + {i} * ldc + {v * LANES}"
        if v == nv - 1 and tail:
            return f"  _mm512_mask_storeu_ps({ptr}, tail, c{i}_{v});"
        return f"  _mm512_storeu_ps({ptr}, c{i}_{v});"

    lines = [f"static int {name}({_SIGNATURE}) {{"]
    if tail:
        lines.append(f"  const __mmask16 tail = (__mmask16)((1u << {tail}) - 1u);")
    first = (lambda i, v: load(v, 'ps', f'c + {i} * ldc + {v * LANES}')) if store == "add" \
        else (lambda i, v: "_mm512_setzero_ps()")
    lines += [f"  __m512 c{i}_{v} = {first(i, v)};" for i in range(mr) for v in range(nv)]
    lines += _tap_loop(taps, "  ")
    lines.append("    for (int k = 0; k < kc2; ++k) {")
    panel = [f"bt + k * ldb + {2 * v * LANES}" for v in range(nv)]
    lines += [f"      __m512bh b{v} = (__m512bh){load(v, 'epi32', panel[v])};"
              for v in range(nv)]
    for i in range(mr):
        lines += [f"      int32_t p{i}; memcpy(&p{i}, at + {i} * lda + 2 * k, 4);",
                  f"      __m512bh a{i} = (__m512bh)_mm512_set1_epi32(p{i});"]
        lines += [f"      c{i}_{v} = _mm512_dpbf16_ps(c{i}_{v}, a{i}, b{v});"
                  for v in range(nv)]
    lines += ["    }", "  }"]
    if store == "transposed":
        lines += [f"  float s[{mr * 2 * LANES}];",
                  *[f"  _mm512_storeu_ps(s + {i * 2 * LANES + v * LANES}, c{i}_{v});"
                    for i in range(mr) for v in range(nv)],
                  f"  kiln_bf16_store_t(c, ldc, s, {mr}, {nr});"]
    else:
        lines += [store_vector(i, v) for i in range(mr) for v in range(nv)]
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


def _transpose_common() -> str:
    """:data:`TRANSPOSE_COMMON`'s C: ``kiln_bf16_t16`` transposes a block of at most 16 x 16
    float32 in zmm registers (unpack, then 128-bit lane shuffles), ``kiln_bf16_store_t``
    an ``m x n`` block (``m``, ``n`` at most 32, rows of ``s`` 32 apart) by such blocks."""
    lines = ["#ifndef KILN_BF16_TRANSPOSE", "#define KILN_BF16_TRANSPOSE",
             "/* d[j * ldd + i] = s[i * lds + j] for i < m, j < n (both at most 16) */",
             "static inline void kiln_bf16_t16(float *d, int ldd, const float *s, int lds, "
             "int m, int n) {",
             "  const __mmask16 rows = (__mmask16)((1u << m) - 1u), "
             "cols = (__mmask16)((1u << n) - 1u);",
             *[f"  __m512 r{i} = {i} < m ? _mm512_maskz_loadu_ps(cols, s + {i} * lds) "
               ": _mm512_setzero_ps();" for i in range(16)]]
    for i in range(0, 16, 2):
        lines += [f"  __m512 t{i} = _mm512_unpacklo_ps(r{i}, r{i + 1}), "
                  f"t{i + 1} = _mm512_unpackhi_ps(r{i}, r{i + 1});"]
    for g in range(0, 16, 4):  # u[g + e]: rows g..g+3, element e of each 128-bit lane
        lines += [f"  __m512 u{g} = _mm512_shuffle_ps(t{g}, t{g + 2}, 0x44), "
                  f"u{g + 1} = _mm512_shuffle_ps(t{g}, t{g + 2}, 0xEE), "
                  f"u{g + 2} = _mm512_shuffle_ps(t{g + 1}, t{g + 3}, 0x44), "
                  f"u{g + 3} = _mm512_shuffle_ps(t{g + 1}, t{g + 3}, 0xEE);"]
    for e in range(4):  # output row 4L + e: lane L of u[e], u[4+e], u[8+e], u[12+e]
        lines += [f"  __m512 v{e} = _mm512_shuffle_f32x4(u{e}, u{4 + e}, 0x88), "
                  f"w{e} = _mm512_shuffle_f32x4(u{8 + e}, u{12 + e}, 0x88), "
                  f"x{e} = _mm512_shuffle_f32x4(u{e}, u{4 + e}, 0xDD), "
                  f"y{e} = _mm512_shuffle_f32x4(u{8 + e}, u{12 + e}, 0xDD);"]
        rows = {e: f"_mm512_shuffle_f32x4(v{e}, w{e}, 0x88)",
                4 + e: f"_mm512_shuffle_f32x4(x{e}, y{e}, 0x88)",
                8 + e: f"_mm512_shuffle_f32x4(v{e}, w{e}, 0xDD)",
                12 + e: f"_mm512_shuffle_f32x4(x{e}, y{e}, 0xDD)"}
        lines += [f"  if ({j} < n) _mm512_mask_storeu_ps(d + {j} * ldd, rows, {row});"
                  for j, row in sorted(rows.items())]
    lines += ["}",
              "static void kiln_bf16_store_t(float *c, int ldc, const float *s, int m, "
              "int n) {",
              "  for (int i = 0; i < m; i += 16)",
              "    for (int j = 0; j < n; j += 16)",
              "      kiln_bf16_t16(c + j * ldc + i, ldc, s + i * 32 + j, 32, "
              "m - i < 16 ? m - i : 16, n - j < 16 ? n - j : 16);",
              "}", "#endif"]
    return "\n".join(lines)


#: the C that stores a block's accumulators transposed (``c[j * ldc + i]``), defined once
#: per library
TRANSPOSE_COMMON = _transpose_common()


def _chunks(n: int, size: int) -> list[tuple[int, int, int]]:
    """``n`` rows or columns as ``(start, stop, size)`` runs of chunks: of ``size``, then
    the ragged rest."""
    full, tail = divmod(n, size)
    return [(0, full * size, size)] * bool(full) + [(full * size, n, tail)] * bool(tail)


def _vector_blocks(name: str, mr: int, nr: int, taps: Taps = GEMM_TAPS,
                   store: Store = "add") -> list[str]:
    """The AVX-512 BF16 update of an ``mr x nr`` block of any size (the AMX kernels' path
    where the OS refuses the tiles, and a convolution's on AVX-512 alone): column chunks of
    32 (the last one ragged) by row chunks of as many rows as keep the accumulators within
    :data:`MAX_ACCUMULATORS` (the last one ragged), each a :func:`_vector_update`."""
    kernels, body = [], []
    for start, stop, width in _chunks(nr, 2 * LANES):
        budget = MAX_ACCUMULATORS // -(-width // LANES)
        for first, last, rows in _chunks(mr, budget):
            kernel = f"{name}_{rows}x{width}"
            kernels += _vector_update(kernel, rows, width, taps, store)
            body += [f"  for (int j = {start}; j < {stop}; j += {width})",
                     f"    for (int i = {first}; i < {last}; i += {rows})",
                     f"      {kernel}({_block_c(store)}, a + i * lda, b + 2 * j, kc2, lda, "
                     "ldb, ldc);"]
    return [*kernels, f"static int {name}({_SIGNATURE}) {{", *body, "  return 0;", "}"]


def _amx_chunk(name: str, mr: int, width: int, taps: Taps, store: Store) -> list[str]:
    """A C function computing ``mr`` rows by ``width`` (at most 32) columns of the block with
    the tiles configured by :func:`_amx_config`: up to 2 x 2 float32 accumulator tiles
    (tmm0-3), per tap and 32 reduction steps a tile of ``a`` per row tile (tmm4-5) and of
    ``b`` per column tile (tmm6-7), one ``tdpbf16ps`` per accumulator tile. ``store`` as in
    :func:`_vector_update`."""
    rows, cols = _tiles(mr), _tiles(width)
    acc = {(r, c): r * len(cols) + c for r in range(len(rows)) for c in range(len(cols))}
    a_tile = {r: len(acc) + r for r in range(len(rows))}
    b_tile = {c: len(acc) + len(rows) + c for c in range(len(cols))}
    lines = [f"static void {name}({_SIGNATURE}) {{"]
    lines += [f"  _tile_zero({t});" if store != "add" else
              f"  _tile_loadd({t}, c + {16 * r} * ldc + {16 * c}, ldc * 4);"
              for (r, c), t in acc.items()]
    lines += _tap_loop(taps, "  ")
    lines.append("    for (int k = 0; k < kc2; k += 16) {")
    lines += [f"      _tile_loadd({t}, at + {16 * r} * lda + 2 * k, lda * 2);"
              for r, t in a_tile.items()]
    lines += [f"      _tile_loadd({t}, bt + k * ldb + {32 * c}, ldb * 2);"
              for c, t in b_tile.items()]
    lines += [f"      _tile_dpbf16ps({t}, {a_tile[r]}, {b_tile[c]});"
              for (r, c), t in acc.items()]
    lines += ["    }", "  }"]
    if store == "transposed":
        lines += [f"  float s[{mr * 2 * LANES}];",
                  *[f"  _tile_stored({t}, s + {16 * r * 2 * LANES + 16 * c}, {8 * LANES});"
                    for (r, c), t in acc.items()],
                  f"  kiln_bf16_store_t(c, ldc, s, {mr}, {width});"]
    else:
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


def _amx_update(name: str, mr: int, nr: int, taps: Taps, store: Store) -> list[str]:
    """The AMX-BF16 update of an ``mr x nr`` block of any size: row chunks of 32 by column
    chunks of 32 (:func:`_chunks`, the last of each ragged) by :func:`_amx_chunk`, each
    chunk shape with its own tile configuration."""
    chunks = [(rows, cols) for rows in _chunks(mr, 2 * LANES) for cols in _chunks(nr, 2 * LANES)]
    lines = [line for (_, _, h), (_, _, w) in chunks
             for line in _amx_chunk(f"{name}_{h}x{w}", h, w, taps, store)]
    lines += [f"static int {name}({_SIGNATURE}) {{", "  kiln_tile_config cfg;"]
    for (first, last, h), (start, stop, w) in chunks:
        lines += _amx_config(h, w)
        lines += [f"  for (int i = {first}; i < {last}; i += {h})",
                  f"    for (int j = {start}; j < {stop}; j += {w})",
                  f"      {name}_{h}x{w}({_block_c(store)}, a + i * lda, b + 2 * j, kc2, "
                  "lda, ldb, ldc);"]
    return lines + ["  _tile_release();", "  return 0;", "}"]


_SIGNATURE = ("float *c, const uint16_t *a, const uint16_t *b, int kc2, int lda, int ldb, "
              "int ldc")


def _block_c(store: Store) -> str:
    """C: where the block's piece at row ``i``, column ``j`` starts in ``c``."""
    return "c + j * ldc + i" if store == "transposed" else "c + i * ldc + j"


def _update_source(update: str, mr: int, nr: int, taps: Taps, cpu: CPUInfo | None,
                   store: Store = "add") -> list[str]:
    """The C of the update kernel ``update`` of an ``mr x nr`` block summed over ``taps``
    for ``cpu`` (the current target's by default): with AMX tiles where it has AMX-BF16
    (``2*kc2`` a multiple of :data:`K_ALIGN`), falling back to AVX-512 BF16 pieces in a
    process the OS denies the tiles; else AVX-512 BF16 alone, in pieces where the block has
    more than :data:`MAX_ACCUMULATORS` vectors. ``store`` as in :func:`_vector_update`."""
    head = [TRANSPOSE_COMMON] if store == "transposed" else []
    if not uses_amx(cpu):
        fits = mr * -(-nr // LANES) <= MAX_ACCUMULATORS
        vector = _vector_update if fits else _vector_blocks
        return head + vector(update, mr, nr, taps, store)
    return [*head, AMX_COMMON, *_vector_blocks(f"{update}_avx512", mr, nr, taps, store),
            *_amx_update(f"{update}_amx", mr, nr, taps, store),
            f"static int {update}({_SIGNATURE}) {{",
            f"  return (kiln_amx_permitted() ? {update}_amx : {update}_avx512)"
            "(c, a, b, kc2, lda, ldb, ldc);", "}"]


def bf16_gemm_source(mr: int, nr: int, cpu: CPUInfo | None = None) -> str:
    """The C of the reset and update kernels of an ``mr x nr`` block (module docstring) for
    ``cpu`` (the current target's by default), which :func:`check_bf16_cpu` accepts."""
    reset, update = kernel_names(mr, nr)
    lines = ["#include <immintrin.h>",
             f"static int {reset}(float *c, int ldc) {{",
             f"  for (int i = 0; i < {mr}; ++i) for (int j = 0; j < {nr}; ++j) "
             "c[i * ldc + j] = 0;", "  return 0;", "}",
             *_update_source(update, mr, nr, GEMM_TAPS, cpu)]
    return "\n".join(lines) + "\n"


def bf16_rows_source(name: str, mr: int, nr: int, cpu: CPUInfo | None = None) -> str:
    """The C of kernel ``name``, ``int name(c, a, b, kc2, lda, ldb, ldc)``: an ``mr x nr``
    block of ``a @ b`` (module docstring) from zero over the whole reduction, stored as
    rows ``c[i * ldc + j]`` (no reset, ``c`` not read), for ``cpu`` (the current target's
    by default), which :func:`check_bf16_cpu` accepts."""
    return "\n".join(["#include <immintrin.h>",
                      *_update_source(name, mr, nr, GEMM_TAPS, cpu, "rows")]) + "\n"


def bf16_block_compute(mr: int, nr: int, kc2: int) -> tuple[te.Tensor, dict]:
    """The computation a bf16 micro-kernel replaces, ``c[i, j] = sum_{k2, p} f32(a[i, 2*k2
    + p]) * f32(b[k2, j, p])`` over an ``mr x nr`` block and ``2 * kc2`` reduction steps,
    and the buffers it binds (``a`` rows ``lda`` apart, ``b`` pair rows ``ldb`` apart,
    ``c`` rows ``ldc`` apart): ``(c, binds)``."""
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
    return c, binds


def bf16_gemm_intrin(mr: int, nr: int, kc2: int) -> te.TensorIntrin:
    """The tensor intrinsic of an ``mr x nr`` block over ``2 * kc2`` reduction steps: body
    (reset, then update), reset and update (module docstring)."""
    c, binds = bf16_block_compute(mr, nr, kc2)
    reset_name, update_name = kernel_names(mr, nr)

    def intrin_func(ins, outs):
        aa, bb = ins
        return block_bodies(reset_name, update_name, outs[0], aa.access_ptr("r"),
                            bb.access_ptr("r"), kc2, aa.strides[0], bb.strides[0])

    return te.decl_tensor_intrin(c.op, intrin_func, name=f"bf16_gemm_{mr}x{nr}x{kc2}",
                                 binds=binds)


#: input channels side by side per pixel in a direct convolution's blocked input (one
#: AMX tile row: 32 bf16 values, 64 bytes)
CHANNEL_BLOCK = 32


def tap_position(r, dilation: int, stride: int) -> tuple:
    """Where kernel tap ``r`` (an int or an expression) of a direct convolution reads the
    phase-split input (:class:`ConvBlock`): ``(phase, offset)``, the padded input's row (or
    column) ``y * stride + r * dilation`` being row ``y + offset`` of phase ``phase``'s
    plane; ``(0, r * dilation)`` for stride 1, so that its expressions stay those of an
    unsplit input."""
    if stride == 1:
        return 0, r * dilation
    return r * dilation % stride, r * dilation // stride


def phase_count(kernel: int, dilation: int, stride: int) -> int:
    """The phases of one axis of a direct convolution's input (:class:`ConvBlock`): the
    residues ``r * dilation % stride`` of its taps span ``0 .. phase_count - 1``."""
    return max(tap_position(r, dilation, stride)[0] for r in range(kernel)) + 1


@dataclass(frozen=True)
class ConvBlock:
    """One call of a direct convolution's micro-kernel: ``oc`` output channels of ``rows x
    ow`` output pixels, over the ``kernel`` taps (``dilation`` apart, ``strides``) and
    ``cblocks`` blocks of :data:`CHANNEL_BLOCK` input channels, read straight from the
    blocked input ``[cblocks, phases, in_rows, width, 32]`` and the weight panel ``[KH, KW,
    cblocks, 16, oc, 2]``.

    A strided input is split into ``phases`` planes (space to depth): plane ``(py, px)``
    holds the padded input's rows ``y * sh + py`` and columns ``x * sw + px``, so that each
    tap reads one plane at stride 1 (:func:`tap_position`); stride 1 has one plane, the
    padded input itself, and a 1x1 stride-2 kernel one, its even rows and columns.
    ``width = ow + (KW-1)*dw // sw``: a plane's rows whole.

    As the GEMM micro-kernel sees it: ``a`` is the ``pixels x 32`` matrix of the block's
    pixels (row ``y``, pixel ``x`` at ``y * width + x``: the ``width - ow`` positions between
    two rows are computed too and never read), one pixel's channels a 64-byte row; ``b``
    one 32-channel panel of the weight, ``oc`` channel pairs per row; the accumulator
    ``pixels x oc``. Each ``(tap, channel block)`` is a tap of the update (:data:`Taps`):
    ``a`` moved to the tap's plane, by its pixels and the channel block, ``b`` to its panel.
    ``channels_last``: the accumulator is stored ``[rows, width, oc]`` as it is (for a
    blocked output), else transposed, ``[oc, rows, width]`` (for an NCHW one)."""

    oc: int
    rows: int
    ow: int
    kernel: tuple[int, int]
    dilation: tuple[int, int]
    cblocks: int
    channels_last: bool = False
    strides: tuple[int, int] = (1, 1)

    @property
    def phases(self) -> tuple[int, int]:
        """The planes of the split input along rows and columns."""
        return (phase_count(self.kernel[0], self.dilation[0], self.strides[0]),
                phase_count(self.kernel[1], self.dilation[1], self.strides[1]))

    @property
    def width(self) -> int:
        return self.ow + tap_position(self.kernel[1] - 1, self.dilation[1], self.strides[1])[1]

    @property
    def in_rows(self) -> int:
        return self.rows + tap_position(self.kernel[0] - 1, self.dilation[0],
                                        self.strides[0])[1]

    @property
    def pixels(self) -> int:
        return (self.rows - 1) * self.width + self.ow

    @property
    def taps(self) -> Taps:
        (kh, kw), (dh, dw), (sh, sw) = self.kernel, self.dilation, self.strides
        planes = self.phases[0] * self.phases[1]
        plane = self.in_rows * self.width * CHANNEL_BLOCK

        def a_offset(ry: int, rx: int, cb: int) -> int:
            (py, oy), (px, ox) = tap_position(ry, dh, sh), tap_position(rx, dw, sw)
            phase = py * self.phases[1] + px
            return (cb * planes + phase) * plane + (oy * self.width + ox) * CHANNEL_BLOCK

        return tuple((a_offset(ry, rx, cb),
                      ((ry * kw + rx) * self.cblocks + cb) * CHANNEL_BLOCK * self.oc)
                     for ry in range(kh) for rx in range(kw) for cb in range(self.cblocks))

    @property
    def name(self) -> str:
        """The C name of its micro-kernel (the shape compiled in)."""
        (kh, kw), (dh, dw), (sh, sw) = self.kernel, self.dilation, self.strides
        return (f"kiln_bf16_conv_{self.oc}x{self.rows}x{self.ow}_k{kh}x{kw}_d{dh}x{dw}"
                f"_c{self.cblocks}" + f"_s{sh}x{sw}" * ((sh, sw) != (1, 1))
                + "_nhwc" * self.channels_last)


def bf16_conv_source(block: ConvBlock, cpu: CPUInfo | None = None) -> str:
    """The C of the micro-kernel of a convolution ``block`` (:class:`ConvBlock`): its
    ``pixels x oc`` accumulator summed over its taps, stored into ``c[pixel * ldc + j]``
    where ``block.channels_last``, else transposed into ``c[j * ldc + pixel]``
    (:func:`_update_source`)."""
    store: Store = "rows" if block.channels_last else "transposed"
    lines = ["#include <immintrin.h>",
             *_update_source(block.name, block.pixels, block.oc, block.taps, cpu, store)]
    return "\n".join(lines) + "\n"


def direct_sum(a: te.Tensor, b: te.Tensor, j, y, x, block: ConvBlock, a_lead: tuple = (),
               b_lead: tuple = ()) -> tir.PrimExpr:
    """The reduction of a direct convolution (:class:`ConvBlock`: its kernel, dilation,
    strides and channel blocks) at output channel ``j``, pixel ``(y, x)``:

        sum_{ry, rx, cb, k2, p} f32(a[cb, phase, y + oy, x + ox, 2*k2 + p])
                                * f32(b[ry, rx, cb, k2, j, p])

    with ``(phase, oy, ox)`` the taps' planes and offsets (:func:`tap_position`), ``a``
    and ``b`` indexed after ``a_lead`` / ``b_lead``: the one expression that the
    convolution's compute and its tensor intrinsic share."""
    (kh, kw), (dh, dw), (sh, sw) = block.kernel, block.dilation, block.strides
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    cb = te.reduce_axis((0, block.cblocks), name="cb")
    k2 = te.reduce_axis((0, CHANNEL_BLOCK // 2), name="k2")
    p = te.reduce_axis((0, 2), name="p")
    (py, oy), (px, ox) = tap_position(ry, dh, sh), tap_position(rx, dw, sw)
    phase = py * block.phases[1] + px if block.phases != (1, 1) else 0
    return te.sum(to_float32(a[(*a_lead, cb, phase, y + oy, x + ox, 2 * k2 + p)])
                  * to_float32(b[(*b_lead, ry, rx, cb, k2, j, p)]), axis=[ry, rx, cb, k2, p])


def bf16_conv_intrin(block: ConvBlock) -> te.TensorIntrin:
    """The tensor intrinsic of a convolution ``block`` (:class:`ConvBlock`):
    ``c[j, y, x] = direct_sum(a, b, j, y, x)`` (:func:`direct_sum`; ``c[y, x, j]`` where
    ``block.channels_last``). ``a`` and ``b`` dense; ``c``'s rows ``width`` pixels apart
    (the accumulator's ``storage_align``), so that the pixels are consecutive as the
    micro-kernel stores them: each pixel's ``oc`` channels side by side where
    ``block.channels_last``, else each channel's pixels, channels ``ldc`` apart. The
    whole reduction in one call, no reset."""
    kh, kw = block.kernel
    half = CHANNEL_BLOCK // 2
    a = te.placeholder((block.cblocks, block.phases[0] * block.phases[1], block.in_rows,
                        block.width, CHANNEL_BLOCK), dtype="uint16", name="a")
    b = te.placeholder((kh, kw, block.cblocks, half, block.oc, 2), dtype="uint16", name="b")

    def value(j, y, x):
        return direct_sum(a, b, j, y, x, block)

    if block.channels_last:
        c = te.compute((block.rows, block.ow, block.oc), lambda y, x, j: value(j, y, x),
                       name="c")
        c_strides = [block.width * block.oc, block.oc, 1]
    else:
        c = te.compute((block.oc, block.rows, block.ow), value, name="c")
        c_strides = [te.var("ldc"), block.width, 1]
    binds = {
        a: tir.decl_buffer(a.shape, a.dtype, "a", offset_factor=1),
        b: tir.decl_buffer(b.shape, b.dtype, "b", offset_factor=1),
        c: tir.decl_buffer(c.shape, c.dtype, "c", strides=c_strides, offset_factor=1),
    }

    def intrin_func(ins, outs):
        aa, bb = ins
        cc = outs[0]
        ldc = block.oc if block.channels_last else cc.strides[0]
        return tir.call_extern("int32", block.name, cc.access_ptr("w"), aa.access_ptr("r"),
                               bb.access_ptr("r"), half, CHANNEL_BLOCK, 2 * block.oc,
                               ldc), None, None

    return te.decl_tensor_intrin(c.op, intrin_func, name=block.name, binds=binds)


__all__ = ["LANES", "BF16_FEATURE", "AMX_FEATURES", "K_ALIGN", "MAX_ACCUMULATORS",
           "check_bf16_cpu", "uses_amx", "to_float32", "round_to_bf16", "kernel_names",
           "bf16_gemm_source", "bf16_gemm_intrin", "CHANNEL_BLOCK", "ConvBlock",
           "bf16_conv_source", "bf16_conv_intrin", "direct_sum", "tap_position", "phase_count"]
