"""Integer promotion in the C backend: where a narrow integer result is cut back to its type.

C computes ``int8``/``uint8``/``int16``/``uint16`` arithmetic in ``int`` (the integer
promotions), so the C text of ``a + b`` on ``uint8`` may hold 256 or -1, where kiln (as TVM)
gives every intermediate its dtype: it wraps modulo ``2**bits``. The low ``bits`` bits of such
a value are always right, so an expression *carries high bits* (:func:`carries_high_bits`)
harmlessly until an operation whose result depends on them reads it: a right shift, a
division or modulo, a comparison, a cast to a wider type or to a float, min/max, a function
call. The C writer (``CSourceWriter.operand``, shared by the CUDA writer) casts such an
operand back to its C type there and nowhere else: a store into a narrow buffer, a typed
local and a typed helper parameter already truncate, and ``+``/``-``/``*`` chains need the
cut only at the end.

Multiplication and left shift of a narrow type are computed in ``uint32``
(``CSourceWriter.widened_left``): ``uint16`` 65535 * 65535 overflows ``int`` (undefined
behaviour in C), and so do long chains of 8-bit products; unsigned arithmetic wraps, with the
same low bits. Vector lanes (GCC vector extensions) compute in their element type and need
none of this.
"""

from __future__ import annotations

from kiln.ir import dtype as dt
from kiln.ir import expr as E

#: intrinsics whose result carries high bits when an argument does (bitwise ops pass them on)
_PASS_HIGH_BITS = ("bitwise_and", "bitwise_or", "bitwise_xor")


def _is_int_or_uint(dtype: str) -> bool:
    return dt.is_int(dtype) or dt.is_uint(dtype)


def is_narrow_int(dtype: str) -> bool:
    """Whether ``dtype`` is a scalar integer type narrower than C's ``int`` (8 or 16 bits)."""
    return dt.lanes(dtype) == 1 and _is_int_or_uint(dtype) and dt.bits(dtype) < 32


def carries_high_bits(e: E.PrimExpr) -> bool:
    """Whether the C text of ``e`` (a narrow integer expression) may hold a value outside its
    dtype's range: the result of ``+ - * << ~`` in the promoted type, a signed division
    (``-128 / -1``), and a bitwise op, select or let whose operand carries them. Loads,
    variables, constants, casts and ``min``/``max`` (typed helpers) never do."""
    if not is_narrow_int(e.dtype):
        return False
    if isinstance(e, E.Add | E.Sub | E.Mul):
        return True
    if isinstance(e, E.Div | E.FloorDiv):
        return dt.is_int(e.dtype)
    if isinstance(e, E.Select):
        return carries_high_bits(e.true_value) or carries_high_bits(e.false_value)
    if isinstance(e, E.Let):
        return carries_high_bits(e.body)
    if isinstance(e, E.Call):
        if e.op in ("shift_left", "bitwise_not"):
            return True
        if e.op in _PASS_HIGH_BITS:
            return any(carries_high_bits(a) for a in e.args)
        if e.op == "tvm_if_then_else":
            return any(carries_high_bits(a) for a in e.args[1:])
    return False


def needs_cut_before_cast(src: str, dst: str) -> bool:
    """Whether a cast from ``src`` to ``dst`` reads more than the low ``bits(src)`` bits: a
    cast to a float, to bool, or to a wider integer type."""
    return not (_is_int_or_uint(dst) and dt.bits(dst) <= dt.bits(src))


__all__ = ["is_narrow_int", "carries_high_bits", "needs_cut_before_cast"]
