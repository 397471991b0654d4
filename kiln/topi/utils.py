"""Helpers shared by the operators and schedules: constant shapes, index arithmetic, DAG
traversal; under TVM's names (``topi.utils``) where TVM has them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from kiln import te
from kiln.ir.expr import FloatImm, IntImm, IterVar, PrimExpr, Select
from kiln.ir.op import const, convert, floordiv, floormod, logical_and
from kiln.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor

from . import tag as _tag


def simplify(e):
    """Simplify an integer expression with kiln's arithmetic analyzer."""
    from kiln.arith import Analyzer

    return Analyzer().simplify(convert(e))


def is_const_int(x) -> bool:
    if isinstance(x, int) and not isinstance(x, bool):
        return True
    if isinstance(x, IntImm):
        return True
    if isinstance(x, PrimExpr):
        return isinstance(simplify(x), IntImm)
    return False


def get_const_int(x) -> int:
    """The Python int value of ``x`` (an int or a constant integer expression)."""
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    if isinstance(x, IterVar):
        raise ValueError(f"expected a constant integer, got the axis {x.var.name}")
    e = simplify(convert(x))
    if not isinstance(e, IntImm):
        raise ValueError(f"expected a constant integer, got {e}")
    return int(e.value)


def get_const_tuple(shape) -> tuple:
    """A shape as a tuple of ints; symbolic dimensions stay expressions."""
    out = []
    for s in shape:
        if is_const_int(s):
            out.append(get_const_int(s))
        else:
            out.append(s)
    return tuple(out)


def equal_const_int(expr, value: int) -> bool:
    """Whether ``expr`` is a constant integer equal to ``value``."""
    return is_const_int(expr) and get_const_int(expr) == value


def get_const_float(x) -> float:
    """The Python float value of ``x`` (a number or a constant expression)."""
    if isinstance(x, int | float) and not isinstance(x, bool):
        return float(x)
    e = simplify(convert(x)) if isinstance(x, PrimExpr) else x
    if not isinstance(e, IntImm | FloatImm):
        raise ValueError(f"expected a constant number, got {e}")
    return float(e.value)


def get_float_tuple(in_tuple) -> tuple[float, ...]:
    """A tuple of constant numbers as Python floats."""
    return tuple(get_const_float(x) for x in in_tuple)


def const_shape(shape, what: str = "shape") -> tuple[int, ...]:
    """A shape that must be fully constant (raises ValueError naming ``what`` otherwise)."""
    out = get_const_tuple(shape)
    for s in out:
        if not isinstance(s, int):
            raise ValueError(f"{what} must be constant, got {list(out)}")
    return out


def prod(xs):
    out = 1
    for x in xs:
        out = out * x
    return out


def ceil_div(a, b):
    """``ceil(a / b)`` of non-negative integers (ints or expressions)."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return floordiv(a + b - 1, b)


def get_max_power2_factor(n: int, max_value: int | None = None) -> int:
    """The largest power of two dividing ``n`` (at most ``max_value``)."""
    x = 1
    while n % (2 * x) == 0 and (max_value is None or 2 * x <= max_value):
        x *= 2
    return x


def is_empty_shape(shape) -> bool:
    """Whether a shape has a (constant) zero dimension."""
    return any(equal_const_int(s, 0) for s in shape)


class InvalidShapeError(ValueError):
    """A shape an operator cannot take (TVM's ``topi.utils.InvalidShapeError``)."""


def const_vector(vector, name: str = "const_vector"):
    """A 1-D tensor holding the constants of ``vector`` (a compute of nested selects, so it
    needs no argument)."""
    return _const_tensor(np.asarray(vector), name)


def const_matrix(matrix, name: str = "const_matrix"):
    """A 2-D tensor holding the constants of ``matrix`` (a compute of nested selects)."""
    return _const_tensor(np.asarray(matrix), name)


def _const_tensor(values: np.ndarray, name: str):
    dtype = str(values.dtype)

    def select(*idx):
        now = const(0, dtype)
        for pos in np.ndindex(values.shape):
            hit = functools.reduce(logical_and, [i == p for i, p in zip(idx, pos, strict=True)])
            now = Select(hit, const(values[pos].item(), dtype), now)
        return now

    return te.compute(values.shape, select, name=name)


def ravel_index(indices: Sequence, shape: Sequence):
    """Row-major flat index of ``indices`` in ``shape``."""
    idx = None
    for i, (x, n) in enumerate(zip(indices, shape, strict=True)):
        idx = x if i == 0 else idx * n + x
    return idx if idx is not None else 0


def unravel_index(idx, shape: Sequence) -> list:
    """Row-major multi-index of flat ``idx`` in ``shape`` (floordiv/floormod)."""
    out = []
    for n in reversed(shape):
        if is_const_int(n) and get_const_int(n) == 1:
            out.append(0)
            continue
        out.append(floormod(idx, n))
        idx = floordiv(idx, n)
    return list(reversed(out))


def normalize_axis(axis, ndim: int, allow_none: bool = True) -> list[int]:
    """Axes as a sorted list of non-negative ints (``None`` means all axes)."""
    if axis is None:
        if not allow_none:
            raise ValueError("axis must be given")
        return list(range(ndim))
    axes = [axis] if isinstance(axis, int) else list(axis)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of range for a tensor of {ndim} dimensions")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {axes}")
    return sorted(out)


def input_tensors(op) -> list[Tensor]:
    """The tensors ``op`` reads (``op.input_tensors``, a property as in TVM)."""
    it = op.input_tensors
    return list(it() if callable(it) else it)


def as_list(outs) -> list[Tensor]:
    """``outs`` (a tensor, an operation, or a list of them) as a list of tensors."""
    if isinstance(outs, Tensor):
        return [outs]
    if isinstance(outs, Operation):
        return list(outs.outputs)
    out = []
    for o in outs:
        out.extend(as_list(o))
    return out


def all_ops(outs) -> list[Operation]:
    """Every operation reachable from ``outs``, producers before consumers."""
    order: list[Operation] = []
    seen: set[int] = set()

    def visit(op):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in input_tensors(op):
            visit(t.op)
        order.append(op)

    for t in as_list(outs):
        visit(t.op)
    return order


def traverse_inline(s, final_op: Operation, callback: Callable[[Operation], None]) -> None:
    """Inline every injective stage reachable from ``final_op`` (except outputs) and call
    ``callback(op)`` on every compute operation, consumers first, each once."""
    visited: set[int] = set()

    def visit(op):
        if id(op) in visited:
            return
        visited.add(id(op))
        if isinstance(op, PlaceholderOp):
            return
        if _tag.is_injective(op.tag) and isinstance(op, ComputeOp) and not op.reduce_axis:
            st = s[op]
            if not st.is_output and st.attach_type == "root":
                st.compute_inline()
        callback(op)
        for t in input_tensors(op):
            visit(t.op)

    visit(final_op)


def find_tagged(outs, predicate) -> list[Operation]:
    """Operations reachable from ``outs`` whose tag satisfies ``predicate``."""
    return [op for op in all_ops(outs) if predicate(getattr(op, "tag", "") or "")]


__all__ = [
    "simplify", "is_const_int", "get_const_int", "get_const_tuple", "equal_const_int",
    "get_const_float", "get_float_tuple", "const_shape", "prod", "ceil_div",
    "get_max_power2_factor", "is_empty_shape", "InvalidShapeError", "const_vector",
    "const_matrix", "ravel_index", "unravel_index", "normalize_axis", "input_tensors", "as_list",
    "all_ops", "traverse_inline", "find_tagged",
]
