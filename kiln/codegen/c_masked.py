"""Masked vector loads and stores in generated C.

A loop of run-time extent ``r`` that ``kiln.tir.vectorize`` vectorized with lane masks (the
remainder of a ``tail="predicate"`` split) reads and writes ``W``-lane vectors whose
``Load`` / ``Store`` carry a predicate, ``ramp(0, 1, W) < r``. A contiguous one becomes a
call of a helper, ``kiln_mask_load_float32x16(p, m)`` / ``kiln_mask_store_float32x16(p, m,
v)``: the CPU's masked move where the compiler targets one (AVX-512's ``vmovups`` with a
mask register for 16 float32 or 8 float64 lanes, AVX's ``vmaskmovps`` / ``vmaskmovpd``
for 8 / 4), else a loop over the lanes. The vectorizer masks contiguous vectors only.

Guarantee: a lane whose mask is 0 neither reads nor writes memory; it loads as 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.stmt import Store

from .c_types import c_scalar, mask_dtype, vector_name

if TYPE_CHECKING:
    from .codegen_c import CSourceWriter

#: the x86 masked moves by vector dtype: (preprocessor test, load, store) as C templates of
#: ``p`` (the address), ``m`` (the mask vector, integer lanes of the element's width) and
#: ``v`` (the stored vector)
_INTRINSICS = {
    "float32x16": ("defined(__AVX512F__)",
                   "_mm512_maskz_loadu_ps(_mm512_test_epi32_mask((__m512i)m, (__m512i)m), p)",
                   "_mm512_mask_storeu_ps(p, _mm512_test_epi32_mask((__m512i)m, (__m512i)m), "
                   "(__m512)v)"),
    "float64x8": ("defined(__AVX512F__)",
                  "_mm512_maskz_loadu_pd(_mm512_test_epi64_mask((__m512i)m, (__m512i)m), p)",
                  "_mm512_mask_storeu_pd(p, _mm512_test_epi64_mask((__m512i)m, (__m512i)m), "
                  "(__m512d)v)"),
    "float32x8": ("defined(__AVX__)", "_mm256_maskload_ps(p, (__m256i)m)",
                  "_mm256_maskstore_ps(p, (__m256i)m, (__m256)v)"),
    "float64x4": ("defined(__AVX__)", "_mm256_maskload_pd(p, (__m256i)m)",
                  "_mm256_maskstore_pd(p, (__m256i)m, (__m256d)v)"),
}

_INCLUDE_KEY = "kiln_immintrin"
_INCLUDE = "#if defined(__AVX__)\n#include <immintrin.h>\n#endif"


def _mask(w: CSourceWriter, predicate: E.PrimExpr, dtype: str) -> str:
    """C text of the predicate as a mask of ``dtype``'s element width."""
    m, mt = w._mask(predicate)
    it = w.need_vector(mask_dtype(dtype))
    return m if mt == it else f"__builtin_convertvector({m}, {it})"


def _helper(w: CSourceWriter, dtype: str, which: str) -> str:
    """The name of the masked ``which`` ("load" or "store") helper for ``dtype`` vectors,
    defined on first use."""
    name = vector_name(dtype)
    fn = f"kiln_mask_{which}_{name}"
    if fn in w.helpers:
        return fn
    t, it, st = w.need_vector(dtype), w.need_vector(mask_dtype(dtype)), c_scalar(dtype)
    lanes = dt.lanes(dtype)
    if which == "load":
        head = f"static inline {t} {fn}(const {st}* p, {it} m) {{"
        loop = (f"{t} v; for (int k = 0; k < {lanes}; ++k) v[k] = m[k] ? p[k] : ({st})0; "
                f"return v;")
    else:
        head = f"static inline void {fn}({st}* p, {it} m, {t} v) {{"
        loop = f"for (int k = 0; k < {lanes}; ++k) if (m[k]) p[k] = v[k];"
    fast = _INTRINSICS.get(name)
    if fast is None:
        w.helpers[fn] = f"{head} {loop} }}"
        return fn
    w.helpers.setdefault(_INCLUDE_KEY, _INCLUDE)
    test, load, store = fast
    call = f"return ({t}){load};" if which == "load" else f"{store};"
    w.helpers[fn] = f"{head}\n#if {test}\n  {call}\n#else\n  {loop}\n#endif\n}}"
    return fn


def _base(w: CSourceWriter, index: E.PrimExpr) -> str:
    """C text of the first element of a contiguous vector index."""
    if not (isinstance(index, E.Ramp) and isinstance(index.stride, E.IntImm)
            and index.stride.value == 1):
        raise NotImplementedError("C codegen: a predicated gather or scatter (kiln.tir."
                                  "vectorize masks contiguous vectors only)")
    return w.expr(index.base)


def masked_load(w: CSourceWriter, e: E.Load, buf: str) -> str:
    """C for the contiguous vector load ``e`` of ``buf`` under its predicate."""
    base = _base(w, e.index)
    return f"{_helper(w, e.dtype, 'load')}({buf} + {base}, {_mask(w, e.predicate, e.dtype)})"


def write_masked_store(w: CSourceWriter, s: Store, buf: str, value: str) -> None:
    """Emit the contiguous vector store ``s`` (its value's C text ``value``) under its
    predicate."""
    dtype = s.value.dtype
    base = _base(w, s.index)
    w.emit(f"{_helper(w, dtype, 'store')}({buf} + {base}, {_mask(w, s.predicate, dtype)}, "
           f"{value});")


__all__ = ["masked_load", "write_masked_store"]
