"""Run a lowered loop program for its memory accesses only.

The interpreter walks a ``PrimFunc`` body (``kiln.lower``'s output) and reports every
``Load`` and ``Store`` it would perform, in execution order, to a :class:`Recorder`. No data
is computed: only index, loop-bound and condition expressions are evaluated, so an index or a
condition that depends on a loaded value raises ``NotImplementedError``.

Values are Python ints or numpy integer arrays broadcastable to ``(I, T, V)``:

* ``I``: iterations of an innermost loop, run at once. A loop whose body holds no loop and
  no kernel launch ("flat") binds its variable to ``arange(extent)`` on this axis, so its
  accesses come out in the order the scalar loop makes them (iteration-major).
* ``T``: the lanes of a GPU warp (32 consecutive linearized ``threadIdx``; 1 on a CPU).
* ``V``: the lanes of a vector expression (``ramp``/``x4(...)`` indices).

One *step* is one memory instruction: its vector lanes, and the threads of a warp executing
it, share the step. A ``parallel`` loop runs each OpenMP thread's iterations (the static
schedule: ``n // T`` each, one more for the first ``n % T`` threads) from the same start
step, so the threads' streams lie side by side in time. A GPU kernel runs its blocks in
order and, in each block, its warps in order; conditions and loop bounds that differ between
the lanes of a warp mask lanes off (SIMT divergence).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kiln.errors import TVMError
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.stmt import ACCESS_PTR
from kiln.tir.op import EXTERN_CALL, PACKED_CALL, STACK_ARRAY
from kiln.tir.stmt_functor import pre_order_visit

WARP_SIZE = 32
#: innermost-loop iterations run at once (bounds the size of the arrays)
_CHUNK = 2048
#: calls whose memory effects are invisible in the IR (a pure extern call reads nothing)
_OPAQUE_CALLS = (PACKED_CALL, EXTERN_CALL, ACCESS_PTR, STACK_ARRAY)
_THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z",
                "threadIdx.x", "threadIdx.y", "threadIdx.z")


class StopTrace(Exception):
    """Raised by a recorder to end the interpretation early (window or event limit)."""


@dataclass(frozen=True)
class Access:
    """One memory instruction of a flat run: ``offset`` and ``mask`` broadcast to (I, T, V)."""

    buffer: E.Var
    write: bool
    offset: object
    mask: object


class Recorder:
    """Receives the accesses; the interpreter sets ``thread_ids``/``block`` and ``step``."""

    def __init__(self):
        self.step = 0
        self.block = 0
        self.thread_ids = np.zeros(1, dtype=np.int64)

    def record(self, accesses: list[Access]) -> None:  # pragma: no cover - interface
        raise NotImplementedError


def _as3(x) -> np.ndarray:
    a = np.asarray(x)
    return a.reshape((1,) * (3 - a.ndim) + a.shape) if a.ndim < 3 else a


# -----------------------------------------------------------------------------------------
# expressions
# -----------------------------------------------------------------------------------------
def _truncdiv(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((np.sign(a) * np.sign(b)) < 0, -q, q) if isinstance(q, np.ndarray) \
        else (-q if (a < 0) != (b < 0) else q)


def _truncmod(a, b):
    return a - _truncdiv(a, b) * b


_ARITH: dict[type, Callable] = {
    E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
    E.Div: _truncdiv, E.Mod: _truncmod,
    E.FloorDiv: lambda a, b: a // b, E.FloorMod: lambda a, b: a % b,
    E.Min: np.minimum, E.Max: np.maximum,
    E.EQ: lambda a, b: a == b, E.NE: lambda a, b: a != b, E.LT: lambda a, b: a < b,
    E.LE: lambda a, b: a <= b, E.GT: lambda a, b: a > b, E.GE: lambda a, b: a >= b,
    E.And: np.logical_and, E.Or: np.logical_or,
}
_INT_CALLS: dict[str, Callable] = {
    "shift_left": lambda a, b: a << b, "shift_right": lambda a, b: a >> b,
    "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b,
}


def _any(mask) -> bool:
    return bool(np.any(mask))


def _known(value, what: str, e) -> object:
    if value is None:
        raise NotImplementedError(f"spacetime: the {what} {e} depends on loaded data; only "
                                  f"programs whose addresses and control flow follow from "
                                  f"the shapes can be traced")
    return value


class Interpreter:
    """Interprets one PrimFunc body; ``env`` maps Vars (shape variables, loop variables,
    ``let`` bindings) to values."""

    def __init__(self, recorder: Recorder, env: dict, num_threads: int):
        self.rec = recorder
        self.env = env
        self.num_threads = max(1, num_threads)
        self.in_parallel = False
        self.launch: dict[str, object] | None = None  # thread tag -> value, inside a kernel
        self.extents: dict[str, int] = {}
        self._flat: dict[int, bool] = {}

    # expressions ---------------------------------------------------------------------------
    def eval(self, e, mask, out: list[Access]):
        """The value of ``e`` (None where it is data), appending the loads it makes."""
        t = type(e)
        if t is E.IntImm:
            return e.value
        if t is E.FloatImm or t is E.StringImm:
            return None
        if t is E.Var or t is E.SizeVar:
            try:
                return self.env[e]
            except KeyError:
                raise TVMError(f"spacetime: no value for {e.name}; pass shapes={{"
                               f"'{e.name}': ...}}") from None
        fn = _ARITH.get(t)
        if fn is not None:
            a, b = self.eval(e.a, mask, out), self.eval(e.b, mask, out)
            return None if a is None or b is None else fn(a, b)
        if t is E.Load:
            self._access(e.buffer_var, e.index, e.predicate, False, mask, out, e)
            return None
        if t is E.Ramp:
            base = _known(self.eval(e.base, mask, out), "vector base", e)
            stride = _known(self.eval(e.stride, mask, out), "vector stride", e)
            return _as3(base) + stride * np.arange(e.lanes).reshape(1, 1, -1)
        if t is E.Broadcast:
            v = self.eval(e.value, mask, out)
            if v is None:
                return None
            v = _as3(v)
            return np.broadcast_to(v, (*v.shape[:2], e.lanes))
        if t is E.Cast:
            v = self.eval(e.value, mask, out)
            return v if dt.is_integer(e.dtype) or dt.is_bool(e.dtype) else None
        if t is E.Not:
            v = self.eval(e.a, mask, out)
            return None if v is None else np.logical_not(v)
        if t is E.Select:
            c = self.eval(e.condition, mask, out)
            a, b = self.eval(e.true_value, mask, out), self.eval(e.false_value, mask, out)
            return None if c is None or a is None or b is None else np.where(c, a, b)
        if t is E.Let:
            return self._with(e.var, self.eval(e.value, mask, out),
                              lambda: self.eval(e.body, mask, out))
        if t is E.Call:
            return self._call(e, mask, out)
        raise NotImplementedError(f"spacetime: cannot interpret {type(e).__name__} ({e}); "
                                  f"trace a lowered function")

    def _call(self, e: E.Call, mask, out: list[Access]):
        if e.op in _OPAQUE_CALLS:
            raise NotImplementedError(f"spacetime: {e.op} reads or writes memory the trace "
                                      f"cannot see")
        if e.op == "likely":
            return self.eval(e.args[0], mask, out)
        if e.op in ("tvm_if_then_else", "if_then_else"):
            c = _known(self.eval(e.args[0], mask, out), "condition", e.args[0])
            a = self.eval(e.args[1], mask & c, out) if _any(mask & c) else None
            b = self.eval(e.args[2], mask & ~np.asarray(c), out) if _any(mask & ~np.asarray(c)) \
                else None
            return None if a is None or b is None else np.where(c, a, b)
        args = [self.eval(a, mask, out) for a in e.args]
        fn = _INT_CALLS.get(e.op)
        if fn is None or any(a is None for a in args):
            return None
        return fn(*args)

    def _access(self, buffer: E.Var, index, predicate, write: bool, mask, out, node) -> None:
        offset = _known(self.eval(index, mask, out), "index", node)
        if predicate is not None:
            mask = mask & _known(self.eval(predicate, mask, out), "predicate", node)
        out.append(Access(buffer, write, offset, mask))

    def _with(self, var: E.Var, value, thunk: Callable):
        old = self.env.get(var, _MISSING)
        self.env[var] = value
        try:
            return thunk()
        finally:
            if old is _MISSING:
                del self.env[var]
            else:
                self.env[var] = old

    # flat statements -------------------------------------------------------------------------
    def is_flat(self, s) -> bool:
        """Whether ``s`` holds no loop and no thread binding (it runs as straight-line code)."""
        key = id(s)
        flat = self._flat.get(key)
        if flat is None:
            flat = self._flat[key] = self._compute_flat(s)
        return flat

    def _compute_flat(self, s) -> bool:
        if isinstance(s, S.For):
            return False
        if isinstance(s, S.AttrStmt) and s.attr_key in ("thread_extent", "virtual_thread"):
            return False
        if isinstance(s, S.SeqStmt):
            return all(self.is_flat(x) for x in s.seq)
        if isinstance(s, S.IfThenElse):
            return self.is_flat(s.then_case) and (s.else_case is None
                                                  or self.is_flat(s.else_case))
        body = getattr(s, "body", None)
        return body is None or self.is_flat(body)

    def exec_flat(self, s, mask, out: list[Access]) -> None:
        if isinstance(s, S.Store):
            self.eval(s.value, mask, out)
            self._access(s.buffer_var, s.index, s.predicate, True, mask, out, s)
        elif isinstance(s, S.SeqStmt):
            for x in s.seq:
                self.exec_flat(x, mask, out)
        elif isinstance(s, S.IfThenElse):
            c = np.asarray(_known(self.eval(s.condition, mask, out), "condition", s.condition))
            if _any(mask & c):
                self.exec_flat(s.then_case, mask & c, out)
            if s.else_case is not None and _any(mask & ~c):
                self.exec_flat(s.else_case, mask & ~c, out)
        elif isinstance(s, S.LetStmt):
            self._with(s.var, self.eval(s.value, mask, out),
                       lambda: self.exec_flat(s.body, mask, out))
        elif isinstance(s, S.Evaluate):
            self.eval(s.value, mask, out)
        elif isinstance(s, S.AssertStmt | S.AttrStmt | S.Allocate):
            self.exec_flat(s.body, mask, out)
        else:
            raise NotImplementedError(f"spacetime: cannot interpret {type(s).__name__}")

    # statements ------------------------------------------------------------------------------
    def run(self, s, mask) -> None:
        """Interpret ``s`` with the lanes of ``mask`` active."""
        if self.is_flat(s):
            out: list[Access] = []
            self.exec_flat(s, mask, out)
            self.rec.record(out)
        elif isinstance(s, S.SeqStmt):
            for x in s.seq:
                self.run(x, mask)
        elif isinstance(s, S.For):
            self._for(s, mask)
        elif isinstance(s, S.IfThenElse):
            c = np.asarray(_known(self.eval(s.condition, mask, []), "condition", s.condition))
            if _any(mask & c):
                self.run(s.then_case, mask & c)
            if s.else_case is not None and _any(mask & ~c):
                self.run(s.else_case, mask & ~c)
        elif isinstance(s, S.LetStmt):
            self._with(s.var, self.eval(s.value, mask, []), lambda: self.run(s.body, mask))
        elif isinstance(s, S.AttrStmt) and s.attr_key == "thread_extent":
            self._thread_extent(s, mask)
        elif isinstance(s, S.AttrStmt) and s.attr_key == "virtual_thread":
            raise NotImplementedError("spacetime: virtual threads are traced after "
                                      "inject_virtual_thread; trace kiln.lower's output")
        else:
            self.run(s.body, mask)

    def _for(self, s: S.For, mask) -> None:
        lo = _known(self.eval(s.min, mask, []), "loop start", s.min)
        extent = _known(self.eval(s.extent, mask, []), "loop extent", s.extent)
        n = int(np.max(extent)) if np.size(extent) else 0
        if n <= 0:
            return
        if s.kind == S.ForKind.PARALLEL and not self.in_parallel and self.launch is None:
            self._parallel(s, lo, n, mask)
        else:
            self.run_range(s, lo, extent, 0, n, mask)

    def run_range(self, s: S.For, lo, extent, begin: int, end: int, mask) -> None:
        """Iterations ``begin .. end-1`` of loop ``s`` (lanes past their own extent off)."""
        varying = np.ndim(extent) > 0
        if self.is_flat(s.body):
            for start in range(begin, end, _CHUNK):
                i = np.arange(start, min(end, start + _CHUNK)).reshape(-1, 1, 1)
                m = mask & (i < extent) if varying else mask
                self._with(s.loop_var, lo + i, lambda m=m: self.run(s.body, m))
            return
        for i in range(begin, end):
            m = mask & (i < extent) if varying else mask
            if varying and not _any(m):
                continue
            self._with(s.loop_var, lo + i, lambda m=m: self.run(s.body, m))

    def _parallel(self, s: S.For, lo, n: int, mask) -> None:
        start, ends, stopped = self.rec.step, [], False
        q, r = divmod(n, self.num_threads)
        self.in_parallel = True
        try:
            for t in range(self.num_threads):
                begin = t * q + min(t, r)
                end = begin + q + (t < r)
                if begin >= end:
                    continue
                self.rec.step = start
                self.rec.thread_ids = np.array([t], dtype=np.int64)
                try:
                    self.run_range(s, lo, n, begin, end, mask)
                except StopTrace:
                    stopped = True
                ends.append(self.rec.step)
        finally:
            self.in_parallel = False
            self.rec.thread_ids = np.zeros(1, dtype=np.int64)
        self.rec.step = max(ends, default=start)
        if stopped:
            raise StopTrace

    # GPU -------------------------------------------------------------------------------------
    def _thread_extent(self, s: S.AttrStmt, mask) -> None:
        tag = s.node.thread_tag or s.node.var.name
        if self.launch is None:
            self._launch_kernel(s, mask)
            return
        value = self.launch[tag]
        extent = int(_known(self.eval(s.value, mask, []), "thread extent", s.value))
        if extent < self.extents[tag]:
            mask = mask & (value < extent)
        self._with(s.node.var, value, lambda: self.run(s.body, mask))

    def _launch_kernel(self, s: S.AttrStmt, mask) -> None:
        self.extents = {tag: 1 for tag in _THREAD_TAGS}
        for tag, ext in thread_extents(s):
            self.extents[tag] = max(self.extents[tag], int(
                _known(self.eval(ext, mask, []), "thread extent", ext)))
        g = [self.extents[f"blockIdx.{a}"] for a in "xyz"]
        d = [self.extents[f"threadIdx.{a}"] for a in "xyz"]
        per_block = d[0] * d[1] * d[2]
        try:
            for b in range(g[0] * g[1] * g[2]):
                for w in range(0, per_block, WARP_SIZE):
                    lanes = np.arange(w, min(per_block, w + WARP_SIZE), dtype=np.int64)
                    self.launch = {
                        "blockIdx.x": b % g[0], "blockIdx.y": (b // g[0]) % g[1],
                        "blockIdx.z": b // (g[0] * g[1]),
                        "threadIdx.x": (lanes % d[0]).reshape(1, -1, 1),
                        "threadIdx.y": ((lanes // d[0]) % d[1]).reshape(1, -1, 1),
                        "threadIdx.z": (lanes // (d[0] * d[1])).reshape(1, -1, 1)}
                    self.rec.block, self.rec.thread_ids = b, lanes
                    self.run(s, np.ones((1, len(lanes), 1), dtype=bool))
        finally:
            self.launch = None
            self.rec.block, self.rec.thread_ids = 0, np.zeros(1, dtype=np.int64)


def thread_extents(s) -> list[tuple[str, E.PrimExpr]]:
    """Every ``thread_extent`` attribute under ``s`` (a kernel's launch dimensions)."""
    found: list[tuple[str, E.PrimExpr]] = []

    def visit(x) -> bool:
        if isinstance(x, S.AttrStmt) and x.attr_key == "thread_extent":
            found.append((x.node.thread_tag or x.node.var.name, x.value))
        return isinstance(x, S.Stmt)

    pre_order_visit(s, visit)
    return found


_MISSING = object()
