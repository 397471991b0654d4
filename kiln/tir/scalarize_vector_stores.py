"""Vector stores in GPU kernels become unrolled loops of scalar stores.

Guarantee: after this pass no ``Store`` in the kernel body has a vector value or index; a
store of ``lanes`` lanes (``ramp``/``xN(..)`` from ``vectorize``) becomes an unrolled loop
over a new ``lane`` variable storing one element per iteration, each vector operand replaced
by its lane (``ramp(b, s, n)`` → ``b + lane*s``, ``xN(v)`` → ``v``). CUDA C has no vector
arithmetic of arbitrary width; NVCC vectorizes the unrolled lanes where it can.
"""

from __future__ import annotations

from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import Mutator


def _scalar(e: E.PrimExpr, lane: E.Var) -> E.PrimExpr:
    if dt.lanes(e.dtype) == 1:
        return e
    if isinstance(e, E.Ramp):
        return e.base + lane * e.stride
    if isinstance(e, E.Broadcast):
        return e.value
    if isinstance(e, E.Load):
        return E.Load(dt.element_of(e.dtype), e.buffer_var, _scalar(e.index, lane))
    if isinstance(e, E.Cast):
        return E.Cast(dt.element_of(e.dtype), _scalar(e.value, lane))
    if isinstance(e, E.CmpOp):
        return type(e)(_scalar(e.a, lane), _scalar(e.b, lane))
    if isinstance(e, E.BinaryOp):
        return type(e)(_scalar(e.a, lane), _scalar(e.b, lane), dt.element_of(e.dtype))
    if isinstance(e, E.Not):
        return E.Not(_scalar(e.a, lane))
    if isinstance(e, E.Select):
        return E.Select(_scalar(e.condition, lane), _scalar(e.true_value, lane),
                        _scalar(e.false_value, lane))
    if isinstance(e, E.Call):
        return E.Call(dt.element_of(e.dtype), e.op, [_scalar(a, lane) for a in e.args])
    if isinstance(e, E.Let):
        return E.Let(e.var, _scalar(e.value, lane), _scalar(e.body, lane))
    raise NotImplementedError(f"CUDA codegen: cannot scalarize vector {type(e).__name__}")


class _Scalarizer(Mutator):
    def visit_Store(self, s: S.Store):
        lanes = dt.lanes(s.value.dtype)
        if lanes == 1 and dt.lanes(s.index.dtype) == 1:
            return s
        lanes = max(lanes, dt.lanes(s.index.dtype))
        lane = E.Var("lane", "int32")
        store = S.Store(s.buffer_var, _scalar(s.value, lane), _scalar(s.index, lane))
        return S.For(lane, 0, lanes, S.ForKind.UNROLLED, store)


def scalarize_vector_stores(body: S.Stmt) -> S.Stmt:
    """Every vector store of ``body`` as an unrolled loop of scalar stores (module docstring)."""
    return _Scalarizer().visit(body)
