"""Partition loops at the bounds of the conditions in their body (padding borders).

A padding stage computes ``P[h, w] = if_then_else(h >= 1 && h < 57 && w >= 1 && w < 57,
A[h - 1, w - 1], 0)``: every element pays for the test, and the select keeps the C compiler
from vectorizing the copy. For a loop ``v`` whose body holds conditions (``if_then_else``,
``Select``, ``if``) with conjuncts linear in ``v``, this pass finds the range ``[lo, hi)`` of
``v`` on which all those conjuncts hold, for every value of the loops inside, and emits
three copies of the loop::

    for (h, 0, 58) S
 => for (h, 0, 1) S;  for (h, 1, 56) S;  for (h, 57, 1) S

so that the simplifier, which knows each copy's range, folds the conditions away: the
middle copy (the interior) becomes a plain copy and the borders plain zero fills. Loops
are tried outermost first; each copy is partitioned again for its inner loops.

Guarantee: each copy has the same body and the copies cover the loop's range exactly once,
in order, so the program computes the same values whatever split points are chosen (the
analysis only decides whether splitting pays). Parallel loops are not split (each copy
would fork threads), nor vectorized loops that the vectorizer can still handle; at most
``_MAX_SPLITS`` loops are split per function. Split points must be known up to the loop and
let variables of the function: a point at a symbolic size (``v < n - o*8``) is not used, as
the simplifier can rarely order such points against the loop's bounds, so the copies kept
their conditions and multiplied the code (issue 19); loop_partition has already given such
loops their guard-free full tiles. Run by ``kiln.build`` for the C backend (TVM keeps this
behind its ``partition_const_loop`` option), so ``kiln.lower``'s printout is unchanged.
"""

from __future__ import annotations

from kiln.arith import Analyzer, IntervalSet, simplify_stmt
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import collect_vars, post_order_visit, rebuild, substitute
from kiln.ir.op import emax, emin, floordiv
from kiln.ir.stmt import For, ForKind, IfThenElse, LetStmt, seq

from .loop_partition import _conjuncts, strip_likely

_MAX_SPLITS = 64
_MAX_LANES = 64


def _condition_of(n) -> E.PrimExpr | None:
    if isinstance(n, E.Select):
        return n.condition
    if isinstance(n, E.Call) and n.op in ("tvm_if_then_else", "if_then_else"):
        return n.args[0]
    return None


def _collect(node, inner: dict, out: list) -> None:
    """(conjunct, ranges of the loops around it inside the partitioned loop) for every
    condition under ``node``."""
    if isinstance(node, For):
        inner = dict(inner)
        inner[node.loop_var] = IntervalSet(node.min, node.min + node.extent - 1)
        _collect(node.body, inner, out)
        return
    if isinstance(node, IfThenElse):
        for c in _conjuncts(strip_likely(node.condition)):
            out.append((c, inner))
    for f in getattr(node, "_fields", ()):
        v = getattr(node, f)
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, E.PrimExpr):
                def visit(n, inner=inner):
                    c = _condition_of(n)
                    if c is not None:
                        out.extend((cj, inner) for cj in _conjuncts(strip_likely(c)))
                post_order_visit(x, visit)
            elif isinstance(x, E.Node):
                _collect(x, inner, out)


def _violation(c: E.PrimExpr) -> E.PrimExpr | None:
    """``d`` such that ``c`` holds exactly when ``d <= -1`` (integer comparisons only)."""
    if not isinstance(c, E.LT | E.LE | E.GT | E.GE) or dt.lanes(c.a.dtype) != 1 \
            or not dt.is_integer(c.a.dtype):
        return None
    if isinstance(c, E.LT):
        return c.a - c.b
    if isinstance(c, E.LE):
        return c.a - c.b - 1
    if isinstance(c, E.GT):
        return c.b - c.a
    return c.b - c.a - 1


def _holding_range(c, v: E.Var, inner: dict, local: set, an: Analyzer):
    """``("lt", p)`` when ``c`` holds for all inner values iff ``v < p``, ``("ge", q)`` when
    iff ``v >= q``; None when ``c`` is not linear in ``v`` or depends on local variables."""
    d = _violation(c)
    if d is None or v not in collect_vars(d):
        return None
    hi = an.eval_interval(an.simplify(d), inner).max_value
    if not isinstance(hi, E.PrimExpr) or (collect_vars(hi) & local) - {v}:
        return None
    zero = E.IntImm(v.dtype, 0)
    b = an.simplify(substitute(hi, {v: zero}))
    a = an.simplify(substitute(hi, {v: v + 1}) - hi)
    if not isinstance(a, E.IntImm) or a.value == 0:
        return None
    if not an.can_prove_equal(hi, a * v + b):
        return None
    if a.value > 0:  # a*v + b <= -1  <=>  v < floor((-1 - b) / a) + 1
        return "lt", an.simplify(floordiv(a - 1 - b, a))
    k = -a.value  # -k*v + b <= -1  <=>  v >= ceil((b + 1) / k)
    return "ge", an.simplify(floordiv(b + k, E.IntImm(v.dtype, k)))


def _local_vars(body) -> set:
    out: set = set()

    def visit(n):
        if isinstance(n, For):
            out.add(n.loop_var)
        elif isinstance(n, LetStmt | E.Let):
            out.add(n.var)

    post_order_visit(body, visit)
    return out


def _vectorizable(node: For) -> bool:
    ext = node.extent
    return (node.kind == ForKind.VECTORIZED and isinstance(ext, E.IntImm)
            and 1 < ext.value <= _MAX_LANES and ext.value & (ext.value - 1) == 0)


class _Partitioner:
    def __init__(self, defined: set):
        self.an = Analyzer()
        self.splits = 0
        self.defined = defined  # the loop and let variables of the whole statement

    def visit(self, node):
        if isinstance(node, For):
            return self.visit_For(node)
        changes = {}
        for f in getattr(node, "_fields", ()):
            v = getattr(node, f)
            if isinstance(v, tuple):
                nv = tuple(self.visit(x) if _is_stmt(x) else x for x in v)
                if any(a is not b for a, b in zip(nv, v, strict=True)):
                    changes[f] = nv
            elif _is_stmt(v):
                nv = self.visit(v)
                if nv is not v:
                    changes[f] = nv
        return rebuild(node, **changes) if changes else node

    def _split_points(self, node: For):
        v = node.loop_var
        found: list = []
        _collect(node.body, {}, found)
        lo, hi = [], []
        if not found:
            return lo, hi
        local = _local_vars(node.body)
        for c, inner in found:
            r = _holding_range(c, v, inner, local, self.an)
            if r is None or not collect_vars(r[1]) <= self.defined:
                continue  # not linear, or at a symbolic size (see the module docstring)
            (hi if r[0] == "lt" else lo).append(r[1])
        return lo, hi

    def visit_For(self, node: For):
        if node.kind == ForKind.PARALLEL or _vectorizable(node) or self.splits >= _MAX_SPLITS:
            return self._inner(node)
        lows, highs = self._split_points(node)
        if not lows and not highs:
            return self._inner(node)
        an = self.an
        start, end = node.min, an.simplify(node.min + node.extent)
        lo = start
        for q in lows:
            lo = emax(lo, q)
        lo = an.simplify(emin(lo, end))
        hi = end
        for p in highs:
            hi = emin(hi, p)
        hi = an.simplify(emax(hi, lo))
        cut_lo = not an.can_prove(lo <= start)
        cut_hi = not an.can_prove(hi >= end)
        if not (cut_lo or cut_hi):
            return self._inner(node)
        self.splits += 1
        pieces = []
        bounds = [start] + ([lo] if cut_lo else []) + ([hi] if cut_hi else []) + [end]
        for a, b in zip(bounds, bounds[1:], strict=False):
            ext = an.simplify(b - a)
            if isinstance(ext, E.IntImm) and ext.value <= 0:
                continue
            # simplify each copy first, so that its inner loops see the folded conditions;
            # the copy's own loop is not split again (a bound the analyzer cannot fold would
            # be split again and again, each copy nesting one more min/max around it)
            piece = simplify_stmt(rebuild(node, min=a, extent=ext), self.an)
            pieces.append(self._inner(piece) if isinstance(piece, For) else self.visit(piece))
        return seq(*pieces)

    def _inner(self, node: For):
        with self.an.scope():
            self.an.bind(node.loop_var, E.Range.from_min_extent(node.min, node.extent))
            body = self.visit(node.body)
        return node if body is node.body else rebuild(node, body=body)


def _is_stmt(x) -> bool:
    return isinstance(x, E.Node) and not isinstance(x, E.PrimExpr)


def partition_conditions(stmt):
    """Split loops at the bounds of the conditions they hold (see module docstring); run
    ``simplify`` afterwards to fold the conditions in each copy."""
    return _Partitioner(_local_vars(stmt)).visit(stmt)
