"""The ONNX importer's logical and bitwise operators: And, Or, Xor, Not (bool tensors),
BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot (opset 18, integer tensors) and BitShift
(opset 11, unsigned tensors, ``direction`` LEFT or RIGHT).

Each becomes the relay operator of ``kiln/relay/bitwise_ops.py`` (``logical_and``,
``bitwise_and``, ``left_shift``...), with numpy broadcasting; on constant operands it is
folded at import with the operator's numpy evaluation. The dtypes kiln compiles for each are
listed in ``onnx_check._OPERAND_DTYPES``.
"""

from __future__ import annotations

from ..graph import Node, call, const
from ..op import OPS
from .onnx_check import OnnxImportError

#: BitShift's ``direction`` -> the relay operator
_SHIFTS = {"LEFT": "left_shift", "RIGHT": "right_shift"}


def _elementwise(op: str, xs: list[Node], name: str) -> Node:
    """Relay ``op`` of ``xs``, folded in numpy when every operand is a constant."""
    if all(x.is_const for x in xs):
        return const(OPS[op][2]([x.value for x in xs], {}), name)
    return call(op, xs, name=name)


class LogicalConverters:
    """Converters of the logical and bitwise ONNX operators (a mixin of the importer)."""

    def And(self, xs, at, name):  # noqa: N802
        return _elementwise("logical_and", xs, name)

    def Or(self, xs, at, name):  # noqa: N802
        return _elementwise("logical_or", xs, name)

    def Xor(self, xs, at, name):  # noqa: N802
        return _elementwise("logical_xor", xs, name)

    def Not(self, xs, at, name):  # noqa: N802
        return _elementwise("logical_not", xs, name)

    def BitwiseAnd(self, xs, at, name):  # noqa: N802
        return _elementwise("bitwise_and", xs, name)

    def BitwiseOr(self, xs, at, name):  # noqa: N802
        return _elementwise("bitwise_or", xs, name)

    def BitwiseXor(self, xs, at, name):  # noqa: N802
        return _elementwise("bitwise_xor", xs, name)

    def BitwiseNot(self, xs, at, name):  # noqa: N802
        return _elementwise("bitwise_not", xs, name)

    def BitShift(self, xs, at, name):  # noqa: N802
        direction = at.get("direction", b"")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction not in _SHIFTS:
            raise OnnxImportError(f"BitShift direction {direction!r} is not 'LEFT' or 'RIGHT'")
        return _elementwise(_SHIFTS[direction], xs, name)
