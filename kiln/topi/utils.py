"""Helpers shared by the operators and schedules: constant shapes, index arithmetic, DAG
traversal."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln.ir.expr import IntImm, IterVar, PrimExpr
from kiln.ir.op import convert, floordiv, floormod
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
    "simplify", "is_const_int", "get_const_int", "get_const_tuple", "const_shape", "prod",
    "ravel_index", "unravel_index", "normalize_axis", "input_tensors", "as_list", "all_ops",
    "traverse_inline", "find_tagged",
]
