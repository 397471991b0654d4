"""Loop-nest analysis: the loop execution procedure of a lowered function, as numbers.

:func:`analyze` walks a lowered statement (flat buffers, after ``kiln.lower``) and returns
its loop tree: for every loop its kind (serial, parallel, vectorized, unrolled, a GPU thread),
its trip count, how many times it is entered, the instructions of its body per iteration
(arithmetic, loads, stores, branches, calls; a vector operation counts once per vector
register it spans) and the memory accesses under it (buffer, index, element size, lanes,
how many times each runs). Trip counts of symbolic extents come from ``binding`` (a variable
or its name to a number), else ``default_extent``; an extent that depends on an outer loop
takes that loop's middle value (a tail loop ``for (o, floordiv(n, 8), 1)`` has one value,
exact). A branch whose condition is ``likely(...)`` is taken; another is evaluated when its
condition is known, else taken half the time.

Nothing here is specific to a machine but the vector width (to count vector instructions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kiln.arith import Analyzer, evaluate
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import collect_vars, substitute

_MATH_COST = 10.0  # instructions of a math call (exp, sqrt, ...)
_CALL_COST = 50.0  # instructions of an opaque call (packed function, extern)


@dataclass
class Work:
    """Instructions of straight-line code, per execution."""

    arith: float = 0.0
    loads: float = 0.0
    stores: float = 0.0
    branches: float = 0.0
    calls: float = 0.0

    def add(self, other: Work, weight: float = 1.0) -> None:
        self.arith += other.arith * weight
        self.loads += other.loads * weight
        self.stores += other.stores * weight
        self.branches += other.branches * weight
        self.calls += other.calls * weight


@dataclass(eq=False)
class Access:
    """One load or store: where it is and how often it runs."""

    buffer: E.Var
    index: E.PrimExpr
    elem_bytes: int
    lanes: int
    store: bool
    count: float  # executions in the whole function
    path: tuple  # the enclosing loops, outermost first (the root first)


@dataclass(eq=False)
class Loop:
    """One loop of the tree (the root is the function body, one trip)."""

    name: str
    kind: str  # root, serial, parallel, vectorized, unrolled, thread
    trips: float
    entered: float  # times the loop starts
    var: E.Var | None = None
    work: Work = field(default_factory=Work)  # its own body, per iteration
    children: list[Loop] = field(default_factory=list)
    accesses: list[Access] = field(default_factory=list)  # directly in its body
    simple: bool = True  # no branch, call, math function or inner loop in its body
    const_trips: bool = True  # the extent is a number (not a symbolic run-time extent)

    def walk(self):
        """This loop and every loop under it, outermost first."""
        yield self
        for c in self.children:
            yield from c.walk()

    def subtree_accesses(self) -> list[Access]:
        return [a for loop in self.walk() for a in loop.accesses]


_KINDS = {S.ForKind.SERIAL: "serial", S.ForKind.PARALLEL: "parallel",
          S.ForKind.VECTORIZED: "vectorized", S.ForKind.UNROLLED: "unrolled"}


class _Walker:
    def __init__(self, vector_bytes: int, binding: dict, default_extent: int):
        self.vector_bytes = vector_bytes
        self.binding = binding
        self.default_extent = default_extent
        self.env: dict = {}

    # ---- values -----------------------------------------------------------------------------
    def value(self, e: E.PrimExpr) -> float | None:
        """``e`` with loop variables at their representative values and free variables
        from the binding; None when it cannot be evaluated."""
        for _ in range(16):
            try:
                return float(evaluate(e, self.env))
            except KeyError:
                missing = [v for v in collect_vars(e) if v not in self.env]
                if not missing:
                    return None
                for v in missing:
                    self.env[v] = self._free(v)
            except (NotImplementedError, ZeroDivisionError, TypeError, ValueError):
                return None
        return None

    def _free(self, v: E.Var) -> int:
        if v in self.binding:
            return int(self.binding[v])
        return int(self.binding.get(v.name, self.default_extent))

    # ---- expressions ------------------------------------------------------------------------
    def instr(self, dtype: str) -> float:
        size = dt.lanes(dtype) * max(dt.bits(dtype), 8) // 8
        return float(max(1, math.ceil(size / self.vector_bytes)))

    def expr(self, e, loop: Loop, count: float, work: Work, path: tuple) -> None:
        if isinstance(e, E.IntImm | E.FloatImm | E.StringImm | E.Var | E.Ramp):
            return
        if isinstance(e, E.Broadcast):
            self.expr(e.value, loop, count, work, path)
            return
        if isinstance(e, E.Load):
            lanes = dt.lanes(e.dtype)
            contiguous = isinstance(e.index, E.Ramp) and _is_one(e.index.stride)
            work.loads += self.instr(e.dtype) if lanes == 1 or contiguous else lanes
            loop.accesses.append(Access(e.buffer_var, e.index, _elem_bytes(e.dtype), lanes,
                                        False, count, path))
            return
        if isinstance(e, E.Call):
            if e.op == "likely":
                self.expr(e.args[0], loop, count, work, path)
                return
            if e.op in ("tvm_if_then_else", "if_then_else"):
                work.arith += self.instr(e.dtype)
            elif e.op.startswith(("tvm_", "call_")) or e.op in ("tir.call_packed",):
                work.calls += _CALL_COST
            else:  # a math function: no vector form the C compiler knows
                work.arith += _MATH_COST * self.instr(e.dtype)
                loop.simple = False
            for a in e.args:
                if isinstance(a, E.PrimExpr):
                    self.expr(a, loop, count, work, path)
            return
        if isinstance(e, E.Add | E.Sub) and isinstance(e.b, E.Mul) and \
                dt.is_float(e.dtype):  # a fused multiply-add
            work.arith += self.instr(e.dtype)
            for x in (e.a, e.b.a, e.b.b):
                self.expr(x, loop, count, work, path)
            return
        if isinstance(e, E.BinaryOp | E.Select | E.Cast | E.Not | E.Let):
            work.arith += self.instr(e.dtype)
        for f in getattr(e, "_fields", ()):
            x = getattr(e, f)
            if isinstance(x, E.PrimExpr):
                self.expr(x, loop, count, work, path)

    # ---- statements -------------------------------------------------------------------------
    def stmt(self, s, loop: Loop, count: float, weight: float, path: tuple) -> None:
        """Add ``s`` (run ``weight`` times per iteration of ``loop``, ``count`` times in
        all) to ``loop``."""
        if s is None:
            return
        if isinstance(s, S.For):
            self.for_loop(s, loop, count, path)
        elif isinstance(s, S.SeqStmt):
            for x in s.seq:
                self.stmt(x, loop, count, weight, path)
        elif isinstance(s, S.Store):
            w = Work(stores=self.instr(s.value.dtype) if dt.lanes(s.value.dtype) == 1
                     or (isinstance(s.index, E.Ramp) and _is_one(s.index.stride))
                     else float(dt.lanes(s.value.dtype)))
            loop.accesses.append(Access(s.buffer_var, s.index, _elem_bytes(s.value.dtype),
                                        dt.lanes(s.value.dtype), True, count, path))
            self.expr(s.value, loop, count, w, path)
            loop.work.add(w, weight)
        elif isinstance(s, S.IfThenElse):
            self.branch(s, loop, count, weight, path)
        elif isinstance(s, S.AttrStmt):
            self.attr(s, loop, count, weight, path)
        elif isinstance(s, S.LetStmt):
            w = Work()
            self.expr(s.value, loop, count, w, path)
            loop.work.add(w, weight)
            self.env[s.var] = self.value(s.value) or 0
            self.stmt(s.body, loop, count, weight, path)
        elif isinstance(s, S.Evaluate):
            w = Work()
            self.expr(s.value, loop, count, w, path)
            loop.work.add(w, weight)
        else:
            for f in getattr(s, "_fields", ()):
                x = getattr(s, f)
                if isinstance(x, S.Stmt):
                    self.stmt(x, loop, count, weight, path)

    def branch(self, s: S.IfThenElse, loop: Loop, count: float, weight: float, path) -> None:
        cond = s.condition
        if isinstance(cond, E.Call) and cond.op == "likely":
            p = 1.0
        else:
            v = self.value(cond)
            p = 0.5 if v is None else float(bool(v))
        w = Work(branches=1.0)
        self.expr(cond, loop, count, w, path)
        loop.work.add(w, weight)
        loop.simple = False
        if p > 0:
            self.stmt(s.then_case, loop, count * p, weight * p, path)
        if p < 1:
            self.stmt(s.else_case, loop, count * (1 - p), weight * (1 - p), path)

    def attr(self, s: S.AttrStmt, loop: Loop, count: float, weight: float, path) -> None:
        if s.attr_key == "thread_extent":
            trips = self.value(s.value) or 1.0
            child = Loop(getattr(getattr(s.node, "var", None), "name", "thread"), "thread",
                         trips, count)
            loop.children.append(child)
            loop.simple = False
            self.stmt(s.body, child, count * trips, 1.0, path + (child,))
            return
        self.stmt(s.body, loop, count, weight, path)

    def for_loop(self, s: S.For, loop: Loop, count: float, path) -> None:
        extent = self.value(s.extent)
        trips = max(0.0, extent if extent is not None else float(self.default_extent))
        lo = self.value(s.min) or 0.0
        self.env[s.loop_var] = int(lo + max(trips - 1, 0) // 2)
        child = Loop(s.loop_var.name, _KINDS.get(s.kind, "serial"), trips, count,
                     var=s.loop_var, const_trips=isinstance(s.extent, E.IntImm))
        loop.children.append(child)
        loop.simple = False
        self.stmt(s.body, child, count * trips, 1.0, path + (child,))


def _is_one(e) -> bool:
    return isinstance(e, E.IntImm) and e.value == 1


def _elem_bytes(dtype: str) -> int:
    return max(1, dt.bits(dtype) // 8)


def stride_of(index: E.PrimExpr, var: E.Var, analyzer: Analyzer) -> int | None:
    """Elements between the addresses of consecutive values of ``var`` (0 when ``index``
    does not depend on it), or None when not affine in it."""
    if isinstance(index, E.Ramp):
        index = index.base
    if var not in collect_vars(index):
        return 0
    step = analyzer.simplify(substitute(index, {var: var + 1}) - index)
    return abs(step.value) if isinstance(step, E.IntImm) else None


def analyze(body: S.Stmt, vector_bytes: int, binding: dict | None = None,
            default_extent: int = 1024) -> Loop:
    """The loop tree of ``body`` (module docstring)."""
    root = Loop("<function>", "root", 1.0, 1.0)
    _Walker(vector_bytes, dict(binding or {}), default_extent).stmt(body, root, 1.0, 1.0,
                                                                    (root,))
    return root


__all__ = ["Work", "Access", "Loop", "analyze", "stride_of"]
