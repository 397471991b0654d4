"""Loop partitioning: split a loop at the point where a ``likely`` guard stops being needed.

A split whose factor does not divide the extent leaves ``if (likely(o*8 + i < 103))`` in the
loop body. For a loop ``o`` this pass finds the largest prefix ``[0, p)`` on which the guard
holds for every value of the loops inside it, and emits two loops: the prefix with the guard
removed (the fast full tiles) and the rest with the guard kept (the tail)::

    for (o, 0, 13) { for (i, 0, 8) { if (likely(o*8 + i < 103)) S } }
 => for (o, 0, 12) { for (i, 0, 8) { S } }
    for (o, 12, 1) { for (i, 0, 8) { if (likely(o*8 + i < 103)) S } }

Loops are tried outermost first, so inner vectorized loops keep their constant extents. The
split point may be symbolic (dynamic shapes, seed 004); it is clamped to the loop's range.
With several guards (a virtual thread or an unrolled stage repeats one per copy), numeric
points are taken one guard at a time (the prefix is split again for the next guard); symbolic
points give one cut, at the smallest of them, below which every guard is dropped: cutting
again per guard wrapped each bound in one more min/max (issue 19: minutes to build).
A parallel loop of symbolic extent is not cut into two parallel loops (each would fork the
threads): its body branches instead, ``parallel (o, 0, floordiv(n + 7, 8)) { if (likely(o <
floordiv(n, 8))) { S without the guard } else { S } }`` (issue 19: one fork per symbolic
product; ``likely`` makes the guard-free body the C compiler's hot path, whose registers
it then favours). A constant extent keeps the two loops.
Past a cut, a guard that holds exactly below it (no loop inside the cut one in its
condition) fails in every iteration: the tail (the other branch of a parallel loop) takes
its else-branch in its place, so no dead copy of the guarded body is left past the cut, and
a second run of the pass over a branched parallel loop finds its branch already decided.
A cut point is computed assuming that the loops between the cut loop and the guard run (the
guard runs only then), and one that still divides by a value that may be 0 is not used: it is
evaluated before those loops, also where they are empty (a division by zero at ``n = 0``).
Guarantee: every iteration runs exactly once and sees the same guard outcome as before.

A split's tail strategy (``kiln.te.split_tail``) marks its loops with the ``For``
annotation ``tail``: a loop marked "guard" is never cut, one marked "partition" is cut even
when its extent is constant, and in a loop marked "remainder" (the inner loop of a
``tail="predicate"`` split) a guard that holds exactly below a point becomes the loop's
bound: ``for (i, 0, 8) { if (likely(o*8 + i < n)) S }`` => ``for (i, 0, n - o*8) S``, a
remainder loop with no test, when nothing outside the guard stores to memory the loop does
not allocate (a vectorized one becomes a serial loop marked with its vector width,
``kiln.tir.vectorize.MASKED_LANES``, which the C backend vectorizes with lane masks).
Unmarked loops are treated as below.

Option ``partition_const_loop`` (TVM's, read from ``PassContext(config={"tir.LoopPartition":
{"partition_const_loop": ...}})``): whether loops of constant extent are split too. TVM's
default is off (a non-dividing constant split keeps one loop and its ``likely`` guard); kiln's
is on, for the guard-free full tiles. Loops of symbolic extent are split either way, as in TVM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from kiln.arith import Analyzer, IntervalSet, eval_interval
from kiln.errors import TVMError
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, collect_vars, post_order_visit, rebuild, substitute
from kiln.ir.op import emax, emin, floordiv
from kiln.ir.stmt import (
    Allocate,
    AttrStmt,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    SeqStmt,
    Stmt,
    Store,
    is_no_op,
    seq,
)
from kiln.ir.structural import structural_equal
from kiln.ir.transform import PassContext
from kiln.tir.vectorize import MASKED_LANES

#: the PassContext config key of this pass's options, as in TVM
CONFIG_KEY = "tir.LoopPartition"
#: the ``For`` annotation a split's tail strategy leaves (``kiln.te.split_tail``)
TAIL_ANNOTATION = "tail"


def _tail_mark(node: For) -> str | None:
    return dict(node.annotations).get(TAIL_ANNOTATION)


def _conjuncts(c: E.PrimExpr) -> list[E.PrimExpr]:
    if isinstance(c, E.And):
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def strip_likely(c: E.PrimExpr) -> E.PrimExpr:
    """``c`` without its ``likely`` hint."""
    if isinstance(c, E.Call) and c.op == "likely":
        return c.args[0]
    return c


def _guards(stmt, inner: dict, out: list) -> None:
    """Collect (IfThenElse, inner-loop ranges) for every likely-guard under ``stmt``."""
    if isinstance(stmt, For):
        inner = dict(inner)
        inner[stmt.loop_var] = IntervalSet(stmt.min, stmt.min + stmt.extent - 1)
        _guards(stmt.body, inner, out)
    elif isinstance(stmt, IfThenElse):
        c = stmt.condition
        if isinstance(c, E.Call) and c.op == "likely":
            out.append((stmt, inner))
        _guards(stmt.then_case, inner, out)
        if stmt.else_case is not None:
            _guards(stmt.else_case, inner, out)
    else:
        for f in getattr(stmt, "_fields", ()):
            v = getattr(stmt, f)
            if isinstance(v, tuple):
                for x in v:
                    if isinstance(x, E.Node) and not isinstance(x, E.PrimExpr):
                        _guards(x, inner, out)
            elif isinstance(v, E.Node) and not isinstance(v, E.PrimExpr):
                _guards(v, inner, out)


def _split_point(cond: E.PrimExpr, v: E.Var, inner: dict, an: Analyzer):
    """The first value of ``v`` from which ``cond`` may fail, or None if not linear in v.

    The guard runs only where each loop of ``inner`` (those between ``v``'s loop and the
    guard) has an iteration, so the point is found assuming that (the outer value of a loop
    fused from extents 5 and ``n``, ``floordiv(5*n - 1, n)`` at most, is then 4). A point
    that still divides by a value that may be 0 is refused: it is evaluated before those
    loops, also where they are empty (division by zero at ``n = 0``)."""
    with an.scope():
        for itv in inner.values():
            an.add_constraint(itv.min_value <= itv.max_value)
        points = _points(cond, v, inner, an)
    if not points:
        return None
    p = _smallest(points)
    return p if _divisors_nonzero(p, an) else None


def _divisors_nonzero(e: E.PrimExpr, an: Analyzer) -> bool:
    """Whether every division in ``e`` is by a value provably not 0."""
    divisors: list[E.PrimExpr] = []

    def visit(n) -> None:
        if isinstance(n, E.FloorDiv | E.FloorMod | E.Div | E.Mod):
            divisors.append(n.b)

    post_order_visit(e, visit)
    for b in divisors:
        lo, hi = an.const_int_bound(b)
        if not ((lo is not None and lo > 0) or (hi is not None and hi < 0)):
            return False
    return True


def _points(cond: E.PrimExpr, v: E.Var, inner: dict, an: Analyzer) -> list[E.PrimExpr] | None:
    """For each conjunct of ``cond`` that may fail, the first value of ``v`` from which it
    does; None if one is not linear in ``v``."""
    points = []
    for c in _conjuncts(cond):
        if isinstance(c, E.LT):
            diff = c.a - c.b  # need diff <= -1
        elif isinstance(c, E.LE):
            diff = c.a - c.b - 1
        elif isinstance(c, E.GT):
            diff = c.b - c.a
        elif isinstance(c, E.GE):
            diff = c.b - c.a - 1
        else:
            return None
        hi = eval_interval(an.simplify(diff), inner).max_value
        if not isinstance(hi, E.PrimExpr) or v not in collect_vars(hi):
            if isinstance(hi, E.PrimExpr) and an.can_prove(hi < 0):
                continue
            return None
        a = an.simplify(substitute(hi, {v: v + 1}) - hi)
        if not (isinstance(a, E.IntImm) and a.value > 0):
            return None
        b = an.simplify(substitute(hi, {v: E.IntImm(v.dtype, 0)}))
        points.append(an.simplify(floordiv(a - 1 - b, a)))
    return points


class _Cut(NamedTuple):
    """A guard of a loop's body that holds for every inner value when the loop variable is
    below ``point`` (``clamped`` to the loop's range); ``exact``: only then (no inner loop
    in its condition), so it fails for every inner value from ``point`` on."""

    guard: IfThenElse
    point: E.PrimExpr
    clamped: E.PrimExpr
    exact: bool


class _DecideGuards(Mutator):
    """The given guard statements replaced by their then-branches (``holds``) or their
    else-branches (a no-op when they have none)."""

    def __init__(self, targets: list[IfThenElse], holds: bool = True):
        super().__init__()
        self.targets = {id(g) for g in targets}  # the caller keeps the guards alive
        self.holds = holds

    def visit_IfThenElse(self, node):
        if id(node) in self.targets:
            branch = node.then_case if self.holds else node.else_case
            return Evaluate(0) if branch is None else self.visit(branch)
        return self.generic_visit(node)

    def visit_SeqStmt(self, node):
        return seq(*(self.visit(s) for s in node.seq))

    def visit_For(self, node):
        body = self.visit(node.body)
        return Evaluate(0) if _does_nothing(body) else rebuild(node, body=body)


class _Partition(Mutator):
    def __init__(self, partition_const_loop: bool):
        super().__init__()
        self.an = Analyzer()
        self.partition_const_loop = partition_const_loop

    def visit_For(self, node: For):
        mark = _tail_mark(node)
        if mark == "guard" or not (isinstance(node.min, E.IntImm) and node.min.value == 0):
            return self.generic_visit(node)
        if isinstance(node.extent, E.IntImm) and not self.partition_const_loop and \
                mark is None:
            return self.generic_visit(node)
        cuts = self._cuts(node)
        if not cuts:
            return self.generic_visit(node)
        if mark == "remainder":
            bounded = self._remainder(node, cuts)
            if bounded is not None:
                return bounded
        if node.kind == ForKind.PARALLEL and not isinstance(node.extent, E.IntImm):
            return self._branch(node, cuts)
        if all(isinstance(c.clamped, E.IntImm) for c in cuts):
            p = cuts[0].clamped  # the fast part is cut again for the next guard
            dropped = [cuts[0].guard]
        else:  # one cut below which every guard holds (module docstring)
            p = self._clamp(_smallest([c.point for c in cuts]), node.extent)
            dropped = [c.guard for c in cuts]
        fast = rebuild(node, extent=p, body=_DecideGuards(dropped).visit(node.body))
        rest = _DecideGuards(_failing_from(cuts, p), holds=False).visit(node.body)
        if _does_nothing(rest):
            return self.visit(fast)
        tail = rebuild(node, min=p, extent=self.an.simplify(node.extent - p), body=rest)
        return seq(self.visit(fast), self.visit(tail))

    def _branch(self, node: For, cuts) -> Stmt:
        """Parallel ``node`` cut inside its body: each iteration below the smallest cut runs
        the body without the guards, the others the body with the guards that fail there
        decided (one parallel loop, one fork of the threads, where two loops would fork
        twice)."""
        p = self.an.simplify(_smallest([c.clamped for c in cuts]))
        fast = _DecideGuards([c.guard for c in cuts]).visit(node.body)
        rest = _DecideGuards(_failing_from(cuts, p), holds=False).visit(node.body)
        fast_first = E.Call("bool", "likely", [node.loop_var < p])  # the C compiler's hot path
        return rebuild(node, body=IfThenElse(fast_first, self.visit(fast),
                                             None if _does_nothing(rest) else self.visit(rest)))

    def _remainder(self, node: For, cuts) -> Stmt | None:
        """``node`` bounded at the cut of its guards, the guards dropped (a vectorized loop
        becomes the scalar remainder loop), when every guard holds exactly below the same
        cut (no loop inside ``node`` in its condition) and nothing but the guarded
        statements writes memory from outside the loop; else None."""
        guards = [c.guard for c in cuts]
        if not all(c.exact for c in cuts) or not _writes_only_inside(node.body, guards):
            return None
        p = cuts[0].point
        if any(not _is_zero(self.an.simplify(c.point - p)) for c in cuts[1:]):
            return None  # statements bounded differently (virtual threads) keep their guards
        body = _DecideGuards(guards).visit(node.body)
        if node.kind != ForKind.VECTORIZED:
            return rebuild(node, extent=self._clamp(p, node.extent), body=self.visit(body))
        # a scalar loop, which the C backend vectorizes with lane masks (its vector width)
        masks = ((MASKED_LANES, node.extent.value),) if isinstance(node.extent, E.IntImm) else ()
        return rebuild(node, extent=self._clamp(p, node.extent), kind=ForKind.SERIAL,
                       annotations=node.annotations + masks, body=self.visit(body))

    def _clamp(self, p: E.PrimExpr, extent: E.PrimExpr) -> E.PrimExpr:
        return self.an.simplify(emax(emin(p, extent), E.IntImm(p.dtype, 0)))

    def _cuts(self, node: For) -> list[_Cut]:
        """The cut of each guard of the body that holds for every inner value exactly when
        ``node.loop_var < p``; guards whose clamped ``p`` is a number outside
        ``(0, extent)`` are left out (nothing to cut)."""
        found: list = []
        _guards(node.body, {}, found)
        cuts = []
        for guard, inner in found:
            if node.loop_var not in collect_vars(guard.condition):
                continue
            p = _split_point(guard.condition.args[0], node.loop_var, inner, self.an)
            if p is None:
                continue
            clamped = self._clamp(p, node.extent)
            if isinstance(clamped, E.IntImm) and (clamped.value == 0 or self.an.can_prove(
                    node.extent <= clamped)):
                continue
            exact = not collect_vars(guard.condition) & set(inner)
            cuts.append(_Cut(guard, p, clamped, exact))
        return cuts


def _smallest(points: list[E.PrimExpr]) -> E.PrimExpr:
    p = points[0]
    for q in points[1:]:
        p = emin(p, q)
    return p


def _failing_from(cuts: list[_Cut], start: E.PrimExpr) -> list[IfThenElse]:
    """The guards of ``cuts`` that fail in every iteration from ``start`` on (a cut point,
    clamped): the exact ones cut there."""
    return [c.guard for c in cuts if c.exact and structural_equal(c.clamped, start)]


def _does_nothing(s: Stmt) -> bool:
    """Whether ``s`` is only loops, allocations, attributes and branches around no-ops (the
    shell of a body whose guarded statements were all decided not to run)."""
    if is_no_op(s):
        return True
    if isinstance(s, SeqStmt):
        return all(_does_nothing(x) for x in s.seq)
    if isinstance(s, IfThenElse):
        return _does_nothing(s.then_case) and (s.else_case is None or
                                               _does_nothing(s.else_case))
    if isinstance(s, (For, Allocate, AttrStmt)):
        return _does_nothing(s.body)
    return False


def _is_zero(e: E.PrimExpr) -> bool:
    return isinstance(e, E.IntImm) and e.value == 0


def _writes_only_inside(body: Stmt, guards: list[IfThenElse]) -> bool:
    """Whether every store in ``body`` outside ``guards`` is to a buffer allocated in
    ``body`` (skipping such iterations loses nothing)."""
    skip = {id(g) for g in guards}
    stored, allocated = set(), set()

    def walk(n) -> None:
        if id(n) in skip or isinstance(n, E.PrimExpr):
            return
        if isinstance(n, Store):
            stored.add(n.buffer_var)
        elif isinstance(n, Allocate):
            allocated.add(n.buffer_var)
        elif not isinstance(n, E.Node):
            return
        for f in getattr(n, "_fields", ()):
            v = getattr(n, f)
            for x in (v if isinstance(v, tuple) else (v,)):
                walk(x)

    walk(body)
    return stored <= allocated


def loop_partition(stmt: Stmt, partition_const_loop: bool = True) -> Stmt:
    """Split guarded loops into a guard-free part and a guarded tail (see module docstring);
    loops of constant extent only with ``partition_const_loop``."""
    return _Partition(partition_const_loop).visit(stmt)


def partition_const_loop_option(ctx: PassContext) -> bool:
    """``partition_const_loop`` of ``ctx.config["tir.LoopPartition"]``; kiln's default is True
    (TVM's is False)."""
    options = ctx.config.get(CONFIG_KEY, {})
    if not isinstance(options, Mapping):
        raise TVMError(f"PassContext config '{CONFIG_KEY}' takes a dict such as "
                       f"{{\"partition_const_loop\": False}}, got {options!r}")
    return bool(options.get("partition_const_loop", True))
