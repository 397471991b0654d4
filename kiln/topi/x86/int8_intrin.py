"""An int8 convolution tensor intrinsic for x86: ``rows`` output pixels by
:data:`OC_BLOCK` output channels of ``uint8 x int8 -> int32`` products over the whole
reduction, computed by a C micro-kernel with the target's dot-product instructions.

The intrinsic (:func:`conv_int8_intrin`) declares, for one output row segment::

    c[x, j] = sum_{q, ry, rx, i} int32(p[q, ry*dh, x*sw + rx*dw, i])
                                 * int32(w[q*cb/4 + i/4, ry, rx, j, i%4])  (x < rows, j < 16)

``p``: the padded input in blocks of ``cb`` channels side by side per pixel (``[C/cb, H',
W', cb]`` uint8; ``cb`` 4: the 32 bits one ``vpdpbusd`` broadcasts, or 64: a row of an AMX
tile, :func:`channel_block`), strides ``ldq`` between blocks and ``ldh`` between rows;
``w``: the weight of 16 output channels packed ``[C/4, KH, KW, 16, 4]`` int8 (contiguous:
:func:`kiln.topi.x86.int8.pack_conv2d_weight`); ``c``: ``rows x 16`` int32, contiguous. The
micro-kernel (:func:`conv_int8_source`), by the target's CPU description
(:func:`kernel_for`):

* AMX-INT8 (``amx-tile`` + ``amx-int8``, 64-channel blocks): up to 2 int32 accumulator
  tiles of 16 pixels x 16 channels, one ``tdpbusd`` (16 x 16 x 64 multiply-adds) per tile,
  64 input channels and kernel tap; Linux grants the tiles per process on request (as for
  bf16), and where it refuses, the AVX-512 VNNI kernel runs on the same layout;
* AVX-512 VNNI (``avx512vnni``): one zmm accumulator per pixel (16 channels), per 4 input
  channels and tap one 64-byte load of ``w`` and per pixel one ``vpdpbusd`` on the pixel's
  4 channels broadcast (64 multiply-adds);
* AVX-VNNI (``avxvnni``: AVX2 machines with VNNI): the same on two ymm per pixel;
* AVX2: ``vpmaddwd`` on operands widened to int16 (exact, where AVX2's ``vpmaddubsw``
  saturates int16), four ymm accumulators of pair sums per pixel, added at the end;
* otherwise: portable C loops.

All paths are exact (int32 sums of products of at most ``255 * 128``): they give the same
bits.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.target import current_cpu
from kiln.target.cpu import CPUInfo

from .bf16_intrin import AMX_COMMON

#: output channels of one block: the int32 lanes of a zmm register, the columns of a tile
OC_BLOCK = 16
#: input channels of one dot-product step (``vpdpbusd``: 4 products per int32 lane)
IC_BLOCK = 4
#: input channels of one AMX step: a tile row of 64 bytes
AMX_IC_BLOCK = 64
#: the features of the AMX path
AMX_FEATURES = frozenset({"amx-tile", "amx-int8"})


def kernel_kind(cpu: CPUInfo | None = None) -> str:
    """The vector micro-kernel's instruction set on ``cpu`` (the current target's by
    default): ``"avx512vnni"``, ``"avxvnni"``, ``"avx2"`` or ``"generic"``."""
    features = (cpu or current_cpu()).features
    return next((k for k in ("avx512vnni", "avxvnni", "avx2") if k in features), "generic")


def uses_amx(channels: int, cpu: CPUInfo | None = None) -> bool:
    """Whether a convolution of ``channels`` input channels computes with AMX-INT8 tiles on
    ``cpu`` (the current target's by default): AMX-INT8 and AVX-512 VNNI (its fallback
    where the OS denies the tiles), and whole tile rows of channels."""
    cpu = cpu or current_cpu()
    return AMX_FEATURES <= cpu.features and kernel_kind(cpu) == "avx512vnni" and \
        channels % AMX_IC_BLOCK == 0


def kernel_for(cb: int, cpu: CPUInfo | None = None) -> str:
    """The micro-kernel of a convolution whose padded input has ``cb`` channels per pixel,
    on ``cpu`` (the current target's by default): ``"amx"`` (AMX tiles, the AVX-512 VNNI
    kernel where the OS denies them) for blocks of 64 on a CPU with AMX-INT8, else
    :func:`kernel_kind`'s vector kernel (which reads any ``cb``)."""
    cpu = cpu or current_cpu()
    return "amx" if cb == AMX_IC_BLOCK and uses_amx(cb, cpu) else kernel_kind(cpu)


def channel_block(channels: int, cpu: CPUInfo | None = None) -> int:
    """The input channels side by side per pixel in the padded input (``[C/cb, H', W',
    cb]``): a tile row (64) for AMX, else one dot-product step (4)."""
    return AMX_IC_BLOCK if uses_amx(channels, cpu) else IC_BLOCK


#: the most pixels one micro-kernel call computes, by kernel kind (its accumulators must
#: fit the vector registers beside the weight and the broadcast input; AMX: two tiles)
MAX_ROWS = {"amx": 32, "avx512vnni": 14, "avxvnni": 6, "avx2": 2, "generic": 8}


def row_block(width: int, kind: str) -> int:
    """The pixels of one micro-kernel call of ``kind`` for an output row of ``width``: its
    largest divisor within :data:`MAX_ROWS`."""
    return max(d for d in range(1, min(width, MAX_ROWS[kind]) + 1) if width % d == 0)


def weight_at(w: te.Tensor, prefix: tuple, q, ry, rx, j, i, cb: int) -> tir.PrimExpr:
    """The packed weight (``[..., C/4, KH, KW, 16, 4]``) of channel ``i`` of the
    ``cb``-channel block ``q``; one expression for the kernel and the intrinsic."""
    if cb == IC_BLOCK:
        return w[(*prefix, q, ry, rx, j, i)]
    return w[(*prefix, q * (cb // IC_BLOCK) + i // IC_BLOCK, ry, rx, j, i % IC_BLOCK)]


def kernel_name(rows: int, blocks: int, kernel: tuple[int, int], stride: int,
                dilation: tuple[int, int], cb: int, kind: str) -> str:
    """The C name of one micro-kernel (its shape is compiled in)."""
    (kh, kw), (dh, dw) = kernel, dilation
    return f"kiln_conv_int8_{kind}_{rows}x{blocks}x{cb}x{kh}x{kw}_s{stride}_d{dh}x{dw}"


_SIGNATURE = "int32_t *c, const uint8_t *p, const int8_t *w, int ldq, int ldh"


def _taps(c4: int, kh: int, kw: int, dh: int, dw: int, cb: int, body: list[str]) -> list[str]:
    """The loops over 4-channel steps and kernel taps around ``body``, which sees ``wt``
    (the tap's 64 weight bytes) and ``px`` (the step's 4 channels of the first pixel)."""
    qb = cb // IC_BLOCK
    return [f"  for (int q = 0; q < {c4}; ++q)",
            f"  for (int ry = 0; ry < {kh}; ++ry)",
            f"  for (int rx = 0; rx < {kw}; ++rx) {{",
            f"    const int8_t *wt = w + ((q * {kh} + ry) * {kw} + rx) * 64;",
            f"    const uint8_t *px = p + (q / {qb}) * ldq + (q % {qb}) * 4"
            f" + ry * {dh} * ldh + rx * {dw * cb};",
            *body, "  }"]


def _pixel(r: int, step: int) -> str:
    return f"int32_t x{r}; memcpy(&x{r}, px + {r * step}, 4);"


def _vnni(rows: int, step: int, wide: bool) -> tuple[list[str], list[str], list[str]]:
    """``vpdpbusd`` on zmm (``wide``: one accumulator per pixel) or ymm (two): the
    declarations, the loop body and the stores. ``step``: bytes between pixels."""
    if wide:
        vec, zero, load, bcast, dp, store = ("__m512i", "_mm512_setzero_si512()",
                                             "_mm512_loadu_si512", "_mm512_set1_epi32",
                                             "_mm512_dpbusd_epi32", "_mm512_storeu_si512")
    else:
        vec, zero, load, bcast, dp, store = ("__m256i", "_mm256_setzero_si256()",
                                             "_mm256_loadu_si256", "_mm256_set1_epi32",
                                             "_mm256_dpbusd_avx_epi32", "_mm256_storeu_si256")
    nv = 1 if wide else 2
    decls = [f"  {vec} a{r}_{v} = {zero};" for r in range(rows) for v in range(nv)]
    body = [f"    {vec} w{v} = {load}((const void *)(wt + {32 * v}));" for v in range(nv)]
    for r in range(rows):
        body += [f"    {_pixel(r, step)} {vec} b{r} = {bcast}(x{r});"]
        body += [f"    a{r}_{v} = {dp}(a{r}_{v}, b{r}, w{v});" for v in range(nv)]
    stores = [f"  {store}((void *)(c + {r * 16 + v * 16 // nv}), a{r}_{v});"
              for r in range(rows) for v in range(nv)]
    return decls, body, stores


def _avx2(rows: int, step: int) -> tuple[list[str], list[str], list[str]]:
    """``vpmaddwd`` on int16-widened operands: per pixel 4 ymm of 8 int32 partial sums
    (channels ``4v .. 4v+3``, two pair sums each), added pairwise at the end."""
    decls = [f"  __m256i a{r}_{v} = _mm256_setzero_si256();"
             for r in range(rows) for v in range(4)]
    body = [f"    __m256i w{v} = _mm256_cvtepi8_epi16(_mm_loadu_si128("
            f"(const __m128i *)(wt + {16 * v})));" for v in range(4)]
    for r in range(rows):
        body += [f"    {_pixel(r, step)} __m256i b{r} = _mm256_broadcastq_epi64("
                 f"_mm_cvtepu8_epi16(_mm_cvtsi32_si128(x{r})));"]
        body += [f"    a{r}_{v} = _mm256_add_epi32(a{r}_{v}, _mm256_madd_epi16(b{r}, w{v}));"
                 for v in range(4)]
    stores = ["  int32_t t[8];"]
    for r in range(rows):
        for v in range(4):
            stores += [f"  _mm256_storeu_si256((__m256i *)t, a{r}_{v});",
                       f"  for (int j = 0; j < 4; ++j) c[{r * 16 + 4 * v} + j] = "
                       "t[2 * j] + t[2 * j + 1];"]
    return decls, body, stores


def _generic(rows: int, step: int) -> tuple[list[str], list[str], list[str]]:
    """Portable C: the accumulators in an array."""
    body = [f"    for (int r = 0; r < {rows}; ++r)",
            "    for (int j = 0; j < 16; ++j)",
            "    for (int i = 0; i < 4; ++i)",
            f"      acc[r][j] += (int32_t)px[r * {step} + i] * (int32_t)wt[j * 4 + i];"]
    return ([f"  int32_t acc[{rows}][16];", "  memset(acc, 0, sizeof acc);"], body,
            ["  memcpy(c, acc, sizeof acc);"])


def _vector_kernel(name: str, kind: str, rows: int, c4: int, kh: int, kw: int, sw: int,
                   dh: int, dw: int, cb: int) -> list[str]:
    step = sw * cb
    if kind in ("avx512vnni", "avxvnni"):
        decls, body, stores = _vnni(rows, step, wide=kind == "avx512vnni")
    elif kind == "avx2":
        decls, body, stores = _avx2(rows, step)
    else:
        decls, body, stores = _generic(rows, step)
    return [f"static int {name}({_SIGNATURE}) {{", *decls,
            *_taps(c4, kh, kw, dh, dw, cb, body), *stores, "  return 0;", "}"]


def _amx_kernel(name: str, rows: int, c4: int, kh: int, kw: int, sw: int, dh: int,
                dw: int) -> list[str]:
    """AMX-INT8: the ``rows`` pixels as up to 2 int32 tiles of at most 16 x 16 (tmm0-1);
    per 64 input channels and kernel tap one tile of the pixels' channels per accumulator
    (tmm2-3, rows ``stride * 64`` bytes apart) and one of the weight (tmm4: 16 rows of 4
    channels by 16 outputs, a tap's rows ``KH*KW*64`` bytes apart), one ``tdpbusd`` per
    accumulator tile (up to 16 x 16 x 64 multiply-adds). The tile configuration is kept
    between calls (``ldtilecfg`` only where the thread's current one differs: another
    kernel's, or none after a ``tilerelease``)."""
    tiles = [16] * (rows // 16) + ([rows % 16] if rows % 16 else [])
    lines = [f"static int {name}({_SIGNATURE}) {{",
             "  kiln_tile_config cfg; memset(&cfg, 0, sizeof cfg); cfg.palette = 1;"]
    for t, r in enumerate(tiles):
        lines.append(f"  cfg.rows[{t}] = {r}; cfg.colsb[{t}] = 64; "
                     f"cfg.rows[{2 + t}] = {r}; cfg.colsb[{2 + t}] = 64;")
    # the tiles stay configured between calls (loading a configuration is slow): loaded
    # again only where this thread's current one differs (another kernel's, or none)
    lines += ["  cfg.rows[4] = 16; cfg.colsb[4] = 64;",
              "  kiln_tile_config current; _tile_storeconfig(&current);",
              "  if (memcmp(&current, &cfg, sizeof cfg)) _tile_loadconfig(&cfg);"]
    lines += [f"  _tile_zero({t});" for t in range(len(tiles))]
    lines += [f"  for (int qb = 0; qb < {c4 // 16}; ++qb)",
              f"  for (int ry = 0; ry < {kh}; ++ry)",
              f"  for (int rx = 0; rx < {kw}; ++rx) {{",
              f"    const uint8_t *px = p + qb * ldq + ry * {dh} * ldh + rx * {dw * 64};",
              f"    _tile_loadd(4, w + ((qb * {16 * kh} + ry) * {kw} + rx) * 64, {kh * kw * 64});"]
    for t in range(len(tiles)):
        lines += [f"    _tile_loadd({2 + t}, px + {16 * t * sw * 64}, {sw * 64});",
                  f"    _tile_dpbusd({t}, {2 + t}, 4);"]
    lines.append("  }")
    lines += [f"  _tile_stored({t}, c + {16 * 16 * t}, 64);" for t in range(len(tiles))]
    return lines + ["  return 0;", "}"]


def conv_int8_source(rows: int, c4: int, kernel: tuple[int, int], stride: int,
                     dilation: tuple[int, int], cb: int, cpu: CPUInfo | None = None) -> str:
    """The C of the micro-kernel of :func:`conv_int8_intrin` for ``cpu`` (the current
    target's by default; module docstring): ``rows`` pixels ``stride`` apart along the row,
    ``c4`` steps of 4 input channels in blocks of ``cb`` (:func:`channel_block`),
    ``kernel`` ``(KH, KW)`` taps ``dilation`` apart. With AMX (``cb`` 64), a dispatcher
    takes the tile kernel where the OS grants the tiles, else the AVX-512 VNNI kernel on
    runs of at most 14 pixels."""
    kind = kernel_for(cb, cpu)
    (kh, kw), (dh, dw) = kernel, dilation
    shape = (c4, kh, kw, stride, dh, dw, cb)
    head = ["#include <string.h>"] + (["#include <immintrin.h>"] if kind != "generic" else [])
    name = kernel_name(rows, c4, kernel, stride, dilation, cb, kind)
    if kind != "amx":
        return "\n".join(head + _vector_kernel(name, kind, rows, *shape)) + "\n"
    sub = row_block(rows, "avx512vnni")
    runs = [f"  {name}_vec(c + {16 * k * sub}, p + {k * sub * stride * cb}, w, ldq, ldh);"
            for k in range(rows // sub)]
    lines = head + [AMX_COMMON, *_vector_kernel(f"{name}_vec", "avx512vnni", sub, *shape),
                    *_amx_kernel(f"{name}_amx", rows, c4, kh, kw, stride, dh, dw),
                    f"static int {name}({_SIGNATURE}) {{",
                    f"  if (kiln_amx_permitted()) return {name}_amx(c, p, w, ldq, ldh);",
                    *runs, "  return 0;", "}"]
    return "\n".join(lines) + "\n"


def conv_int8_intrin(rows: int, c4: int, kernel: tuple[int, int], stride: int,
                     dilation: tuple[int, int], cb: int) -> te.TensorIntrin:
    """The tensor intrinsic of ``rows`` output pixels by :data:`OC_BLOCK` channels over the
    whole reduction (module docstring), calling the micro-kernel of the current target."""
    (kh, kw), (dh, dw) = kernel, dilation
    width = (rows - 1) * stride + (kw - 1) * dw + 1
    blocks = c4 * IC_BLOCK // cb
    p = te.placeholder((blocks, (kh - 1) * dh + 1, width, cb), dtype="uint8", name="p")
    w = te.placeholder((c4, kh, kw, OC_BLOCK, IC_BLOCK), dtype="int8", name="w")
    rq = te.reduce_axis((0, blocks), name="rq")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    ri = te.reduce_axis((0, cb), name="ri")
    c = te.compute((rows, OC_BLOCK), lambda x, j: te.sum(
        p[rq, ry * dh, x * stride + rx * dw, ri].astype("int32")
        * weight_at(w, (), rq, ry, rx, j, ri, cb).astype("int32"), axis=[rq, ry, rx, ri]),
        name="c")
    binds = {
        p: tir.decl_buffer(p.shape, p.dtype, "p", strides=[te.var("ldq"), te.var("ldh"), cb, 1],
                           offset_factor=1),
        w: tir.decl_buffer(w.shape, w.dtype, "w", offset_factor=1),
        c: tir.decl_buffer(c.shape, c.dtype, "c", offset_factor=1),
    }
    name = kernel_name(rows, c4, kernel, stride, dilation, cb, kernel_for(cb))

    def intrin_func(ins, outs):
        pp, ww = ins
        call = tir.call_extern("int32", name, outs[0].access_ptr("w"), pp.access_ptr("r"),
                               ww.access_ptr("r"), pp.strides[0], pp.strides[1])
        return call, None, None

    return te.decl_tensor_intrin(c.op, intrin_func, name=name, binds=binds)


__all__ = ["OC_BLOCK", "IC_BLOCK", "AMX_IC_BLOCK", "AMX_FEATURES", "MAX_ROWS", "kernel_kind",
           "uses_amx", "kernel_for", "channel_block", "row_block", "weight_at", "kernel_name",
           "conv_int8_source", "conv_int8_intrin"]
