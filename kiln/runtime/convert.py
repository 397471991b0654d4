"""``tvm.runtime.convert``: Python values to kiln's IR values."""

from __future__ import annotations

from typing import Any

__all__ = ["convert"]


def convert(value: Any) -> Any:
    """An IR value for ``value``: ints, floats and bools become constants (``IntImm`` int32 /
    ``FloatImm`` float32 / ``bool``), lists and tuples are converted element-wise (a list),
    dicts value-wise; IR nodes, tensors and strings are returned as they are."""
    from kiln.ir.expr import PrimExpr
    from kiln.ir.op import const

    if isinstance(value, bool):
        return const(value, "bool")
    if isinstance(value, int):
        return const(value, "int32" if -(2**31) <= value < 2**31 else "int64")
    if isinstance(value, float):
        return const(value, "float32")
    if isinstance(value, (list, tuple)):
        return [convert(v) for v in value]
    if isinstance(value, dict):
        return {k: convert(v) for k, v in value.items()}
    if isinstance(value, (PrimExpr, str)) or value is None:
        return value
    return value
