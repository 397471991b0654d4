"""The C form of kiln's bound checks (``tir.instrument_bound_checkers``).

``kiln_check_index(first, span, extent, "A")`` (kiln/tir/instrument_bound_checkers.py)
becomes a call of the C helper of the same name, which returns ``first`` when the elements
``first`` to ``first + span`` lie in ``[0, extent)``; otherwise it records the first
violation in the compute function's ``KilnBoundCheck`` (atomically: the checks run in
OpenMP loops too) and returns an index inside the buffer. A function holding checks
declares its record first and, when it ends, turns a recorded violation into the packed
call's error (``kiln_set_error``, return -1), so the caller gets a ``TVMError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import Stmt
from kiln.tir.instrument_bound_checkers import CHECK_INDEX

from .c_types import c_scalar

if TYPE_CHECKING:
    from .codegen_c import CSourceWriter

__all__ = ["HELPER", "render_check_index", "has_bound_checks", "prologue", "epilogue"]

_RECORD = "kiln_bc"

#: the C helper, added once to a source that holds a check
HELPER = r"""
typedef struct { int failed; int64_t lo, hi, extent; const char* buffer; } KilnBoundCheck;

static inline int64_t kiln_check_index(int64_t first, int64_t span, int64_t extent,
                                       const char* buffer, KilnBoundCheck* bc) {
  int64_t lo = span < 0 ? first + span : first, hi = span < 0 ? first : first + span;
  if (__builtin_expect(lo >= 0 && hi < extent, 1)) return first;
  if (!__atomic_exchange_n(&bc->failed, 1, __ATOMIC_RELAXED)) {
    bc->lo = lo; bc->hi = hi; bc->extent = extent; bc->buffer = buffer;
  }
  return span < 0 ? -span : 0;
}

static int32_t kiln_bound_check_error(const KilnBoundCheck* bc, const char* kernel) {
  if (bc->lo == bc->hi)
    kiln_set_error("Out of bounds: kernel %s accessed buffer %s at index %lld, outside its "
                   "%lld elements [0, %lld)", kernel, bc->buffer, (long long)bc->lo,
                   (long long)bc->extent, (long long)bc->extent);
  else
    kiln_set_error("Out of bounds: kernel %s accessed buffer %s at indices %lld to %lld, "
                   "outside its %lld elements [0, %lld)", kernel, bc->buffer,
                   (long long)bc->lo, (long long)bc->hi, (long long)bc->extent,
                   (long long)bc->extent);
  return -1;
}
"""


def render_check_index(call: E.Call, w: CSourceWriter) -> str:
    """C text of the check ``call`` in writer ``w``; a vector index is checked lane by
    lane."""
    w.helpers.setdefault(CHECK_INDEX, HELPER)
    first, span, extent, name = call.args
    buffer = '"' + name.value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    ext = f"(int64_t)({w.expr(extent)})"
    lanes = dt.lanes(call.dtype)
    if lanes == 1:
        return (f"(({c_scalar(call.dtype)})kiln_check_index((int64_t)({w.expr(first)}), "
                f"{w.expr(span)}, {ext}, {buffer}, &{_RECORD}))")
    vt, ix = w.need_vector(call.dtype), w.fresh("ix")
    checks = " ".join(f"{ix}[{k}] = kiln_check_index({ix}[{k}], 0, {ext}, {buffer}, "
                      f"&{_RECORD});" for k in range(lanes))
    return f"({{ {vt} {ix} = {w.expr(first)}; {checks} {ix}; }})"


def has_bound_checks(body: Stmt) -> bool:
    """Whether ``body`` holds a bound check."""
    calls: list[E.Call] = []

    def visit(node) -> None:
        if isinstance(node, E.Call) and node.op == CHECK_INDEX:
            calls.append(node)

    post_order_visit(body, visit)
    return bool(calls)


def prologue() -> str:
    """The first statement of a function holding checks: its violation record."""
    return f"  KilnBoundCheck {_RECORD} = {{0}};"


def epilogue(kernel: str) -> str:
    """The last statement before the function's ``return 0``: report a violation."""
    return f'  if ({_RECORD}.failed) return kiln_bound_check_error(&{_RECORD}, "{kernel}");'
