"""Logical and bitwise graph operators (TVM's relay ops of the same names).

* ``logical_and``, ``logical_or``, ``logical_xor``, ``logical_not``: bool tensors, a bool
  result;
* ``bitwise_and``, ``bitwise_or``, ``bitwise_xor``, ``bitwise_not``: integer or bool tensors
  (on bools, the logical operators), a result of their dtype;
* ``left_shift``, ``right_shift``: integer tensors (``right_shift`` is arithmetic for signed
  types; a shift by the type's width or more is undefined, as in C and TVM).

Type relation: two operands broadcast as numpy's (topi's ``broadcast_shape``; shapes that do
not broadcast are a ValueError) and must have one dtype, as TVM's ``BroadcastRel``. A dtype
outside the operator's set, or two dtypes, is a TypeError naming both; the graph names the
node (``relay.graph.call``). Constant folding evaluates each with numpy's function of the
same name. :data:`BINARY` and :data:`UNARY` are merged into ``relay.op.OPS``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln import te, topi
from kiln.ir import dtype as dt

#: what an operator's compute takes: (the dtype test, its name in messages)
_Kind = tuple[Callable[[str], bool], str]
_LOGICAL: _Kind = (dt.is_bool, "bool")
_BITWISE: _Kind = (dt.is_integer, "integer or bool")
_SHIFT: _Kind = (lambda d: dt.is_int(d) or dt.is_uint(d), "integer")


def _check_dtypes(ts: list[te.Tensor], kind: _Kind) -> None:
    """Raise TypeError unless every operand has one dtype of ``kind``."""
    allowed, what = kind
    dtypes = [str(t.dtype) for t in ts]
    if not all(allowed(d) for d in dtypes):
        raise TypeError(f"operands must be {what} tensors, got {' and '.join(dtypes)}")
    if len(set(dtypes)) > 1:
        raise TypeError(f"operands must have one dtype, got {' and '.join(dtypes)}; cast one "
                        f"of them first")


def _compute(fn: Callable, kind: _Kind) -> Callable:
    """The relay compute ``(tensors, attrs) -> tensor`` of topi's ``fn`` with its checks."""
    def compute(ts: list[te.Tensor], a: dict) -> te.Tensor:
        _check_dtypes(ts, kind)
        return fn(*ts)

    return compute


def _np(fn: Callable) -> Callable:
    """The constant-folding evaluation ``(values, attrs) -> value`` of numpy's ``fn``."""
    return lambda v, a: fn(*v)


#: binary operators: name -> (compute, numpy evaluation)
BINARY: dict[str, tuple[Callable, Callable]] = {
    "logical_and": (_compute(topi.logical_and, _LOGICAL), _np(np.logical_and)),
    "logical_or": (_compute(topi.logical_or, _LOGICAL), _np(np.logical_or)),
    "logical_xor": (_compute(topi.not_equal, _LOGICAL), _np(np.logical_xor)),
    "bitwise_and": (_compute(topi.bitwise_and, _BITWISE), _np(np.bitwise_and)),
    "bitwise_or": (_compute(topi.bitwise_or, _BITWISE), _np(np.bitwise_or)),
    "bitwise_xor": (_compute(topi.bitwise_xor, _BITWISE), _np(np.bitwise_xor)),
    "left_shift": (_compute(topi.left_shift, _SHIFT), _np(np.left_shift)),
    "right_shift": (_compute(topi.right_shift, _SHIFT), _np(np.right_shift)),
}

#: unary operators: name -> (compute, numpy evaluation)
UNARY: dict[str, tuple[Callable, Callable]] = {
    "logical_not": (_compute(topi.logical_not, _LOGICAL), _np(np.logical_not)),
    "bitwise_not": (_compute(topi.bitwise_not, _BITWISE), _np(np.invert)),
}
