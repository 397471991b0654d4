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


def _converter(op: str):
    """The converter of an ONNX operator that is relay's elementwise ``op``."""
    def convert(self, xs, at, name):
        return _elementwise(op, xs, name)
    convert.__doc__ = f"ONNX operator as relay's ``{op}``."
    return convert


class LogicalConverters:
    """Converters of the logical and bitwise ONNX operators (a mixin of the importer)."""

    And = _converter("logical_and")
    Or = _converter("logical_or")
    Xor = _converter("logical_xor")
    Not = _converter("logical_not")
    BitwiseAnd = _converter("bitwise_and")
    BitwiseOr = _converter("bitwise_or")
    BitwiseXor = _converter("bitwise_xor")
    BitwiseNot = _converter("bitwise_not")

    def BitShift(self, xs, at, name):  # noqa: N802
        direction = at.get("direction", b"")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction not in _SHIFTS:
            raise OnnxImportError(f"BitShift direction {direction!r} is not 'LEFT' or 'RIGHT'")
        return _elementwise(_SHIFTS[direction], xs, name)
