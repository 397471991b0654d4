"""Instrument bound checkers: every buffer access of a function checks its index.

TVM's ``InstrumentBoundCheckers``, under its config key: with
``PassContext(config={"tir.instrument_bound_checkers": True})``, or in a sanitized build
(``KILN_SANITIZE``, ``kiln.build(..., sanitize=...)``, kiln/runtime/sanitize.py) unless the
key is ``False``, the index of every ``Load`` and ``Store`` of an argument buffer or an
``allocate`` becomes ``kiln_check_index(first, span, extent, "name")``::

    Before:: B[i] = A[(i + 1)]
    After::  B[kiln_check_index(i, 0, 16, "B")] = A[kiln_check_index((i + 1), 0, 16, "A")]

The elements accessed are ``first`` to ``first + span`` (a vector ``ramp(base, stride,
lanes)`` keeps its ramp and checks its base with ``span = (lanes - 1)*stride``; any other
vector index is checked lane by lane; a strided argument buffer spans
``elem_offset + 1 + sum((n - 1)*stride)`` elements). Guarantee: no checked access touches
memory outside its buffer. The first access out of ``[0, extent)`` is recorded (buffer,
indices, extent), it and every later out-of-bounds access go to element 0 instead, and the
function returns ``TVMError: Out of bounds: kernel default_function accessed buffer A at
index 16, outside its 16 elements [0, 16)`` when it ends (the checks are valid in parallel
loops, where a function cannot return early). The index is computed where the access is,
so an access that a condition skips (padding) is not checked. Without the config the
function is unchanged.
The C backend renders the check (kiln/codegen/c_bound_check.py); a GPU kernel has none
(CUDA's ``compute-sanitizer`` checks device memory).
"""

from __future__ import annotations

import functools
import operator

from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, rebuild
from kiln.ir.stmt import Allocate, Buffer, PrimFunc, Store
from kiln.ir.transform import PassContext
from kiln.runtime.sanitize import requested_sanitizers

__all__ = ["CONFIG_KEY", "CHECK_INDEX", "bound_checks_enabled", "instrument_bound_checkers"]

#: the PassContext config key, as TVM names it
CONFIG_KEY = "tir.instrument_bound_checkers"
#: the intrinsic ``kiln_check_index(first, span, extent, buffer_name)`` -> first (or 0)
CHECK_INDEX = "kiln_check_index"


def bound_checks_enabled(ctx: PassContext) -> bool:
    """Whether ``ctx`` asks for bound checks: its config key if set, else whether the build
    is sanitized."""
    if CONFIG_KEY in ctx.config:
        return bool(ctx.config[CONFIG_KEY])
    return bool(requested_sanitizers(ctx.config))


def instrument_bound_checkers(func: PrimFunc) -> PrimFunc:
    """Every buffer access checks its index and a function that strays out of a buffer
    raises an error naming the buffer, the index and the extent, instead of corrupting
    memory (``tir.instrument_bound_checkers`` or a sanitized build; see module docstring)."""
    if not bound_checks_enabled(PassContext.current()):
        return func
    extents = {buf.data: (buf.name, _flat_extent(buf)) for buf in func.buffer_map.values()}
    return func.with_body(_Instrument(extents).visit(func.body))


def _product(extents) -> E.PrimExpr:
    return functools.reduce(operator.mul, extents, E.IntImm("int64", 1))


def _flat_extent(buf: Buffer) -> E.PrimExpr:
    """The elements from a buffer's data pointer to one past its last: ``prod(shape)`` when
    dense, else ``elem_offset + 1 + sum((n - 1) * stride)`` (``tir.decl_buffer`` strides)."""
    if not buf.strides and buf.elem_offset is None:
        return _product(buf.shape)
    strides = buf.strides or buf.dense_strides()
    last = [(n - 1) * s for n, s in zip(buf.shape, strides, strict=True)]
    offset = buf.elem_offset if buf.elem_offset is not None else E.IntImm("int64", 0)
    return functools.reduce(operator.add, last, offset + 1)


class _Instrument(Mutator):
    """Wrap the index of every access of a known buffer in :data:`CHECK_INDEX`."""

    def __init__(self, extents: dict[E.Var, tuple[str, E.PrimExpr]]):
        super().__init__()
        self.extents = dict(extents)

    def visit_Allocate(self, node: Allocate):
        self.extents[node.buffer_var] = (node.buffer_var.name, _product(node.extents))
        return self.generic_visit(node)

    def visit_Load(self, node: E.Load):
        node = self.generic_visit(node)
        return rebuild(node, index=self._checked(node.buffer_var, node.index))

    def visit_Store(self, node: Store):
        node = self.generic_visit(node)
        return rebuild(node, index=self._checked(node.buffer_var, node.index))

    def _checked(self, buffer_var: E.Var, index: E.PrimExpr) -> E.PrimExpr:
        known = self.extents.get(buffer_var)
        if known is None:
            return index
        name, extent = known
        if isinstance(index, E.Ramp) and isinstance(index.stride, E.IntImm):
            span = E.IntImm(index.base.dtype, (index.lanes - 1) * index.stride.value)
            return rebuild(index, base=_check(index.base, span, extent, name))
        return _check(index, E.IntImm(dt.element_of(index.dtype), 0), extent, name)


def _check(first: E.PrimExpr, span: E.PrimExpr, extent: E.PrimExpr, name: str) -> E.Call:
    return E.Call(first.dtype, CHECK_INDEX, [first, span, extent, E.StringImm(name)])
