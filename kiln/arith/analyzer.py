"""``Analyzer``: the facts known about variables, and the queries that use them.

An Analyzer holds, for integer variables, a constant bound ``(lo, hi)`` and possibly a
symbolic interval (``j in [0, m - 1]``), plus conditions known to hold. ``bind`` and
``constraint`` add facts; ``scope()`` undoes everything added inside it. All queries
(``simplify``, ``can_prove``, ``const_int_bound``, ``eval_interval``, ``modular_set``) are
memoized until the facts change.

Sign assumption: with ``nonneg_free_vars=True`` (the default) an integer variable that
is not bound is taken to be >= 0, as shape and size variables are in a tensor program;
``SizeVar`` and unsigned variables are always >= 0. Binding ``v`` to ``Range(min, ext)``
also records ``ext >= 1``: the range is not empty since ``v`` lies in it.
"""

from __future__ import annotations

from contextlib import contextmanager

from ..ir import expr as E
from ..ir.functor import collect_vars
from ..ir.op import add, convert, make_const, match_types, sub
from . import bound as B
from .bound import ConstIntBound, is_int_scalar
from .const_bound import ConstBoundWalker
from .interval import IntervalSet, _Infinity, neg_inf, pos_inf, simplify_set
from .interval_eval import IntervalEvaluator
from .linear import KeyCache, Lin, render
from .modular import ModularSet, ModularWalker
from .rewrite import Rewriter

#: the structural keys of expressions, shared by every Analyzer: a key depends on the
#: expression alone, so the passes of a pipeline, each with its own Analyzer, key a shared
#: index expression once (ResNet-18's build keys 15,000; the cap bounds what stays alive)
STRUCTURAL_KEYS = KeyCache(limit=50_000)


class Analyzer:
    """Integer analysis and simplification under bound variables and constraints."""

    def __init__(self, nonneg_free_vars: bool = True):
        self.nonneg_free_vars = nonneg_free_vars
        self._bounds: dict[E.Var, ConstIntBound] = {}
        self._sym: dict[E.Var, IntervalSet] = {}
        self._facts: dict[object, bool] = {}
        self._stack: list[tuple] = []
        self._symbolic_depth = 0
        self.keys = STRUCTURAL_KEYS
        self._lin_cache: dict[int, tuple[E.PrimExpr, Lin]] = {}
        self._cb = ConstBoundWalker(self)
        self._mod = ModularWalker(self)
        self._rw = Rewriter(self)

    # ==== facts ============================================================================
    def _changed(self) -> None:
        self._cb.clear()
        self._mod.clear()
        self._rw.cache.clear()

    def bind(self, var: E.Var, value, allow_override: bool = True) -> None:
        """Record that ``var`` ranges over ``value``: a Range, an IntervalSet, or an
        expression it equals. Binding again replaces the earlier binding."""
        if isinstance(var, E.IterVar):
            var = var.var
        if isinstance(value, E.Range):
            lo = self.simplify(value.min)
            hi = self.simplify(sub(add(value.min, value.extent), 1))
            self._set_interval(var, IntervalSet(lo, hi))
            ext = self.simplify(value.extent)
            if not isinstance(ext, E.IntImm):
                self.add_constraint(E.GE(ext, make_const(1, ext.dtype)))
        elif isinstance(value, IntervalSet):
            self._set_interval(var, value)
        else:
            e = self.simplify(convert(value))
            self._set_interval(var, IntervalSet(e, e))

    def update(self, var: E.Var, bound, override: bool = True) -> None:
        """Set (or with ``override=False`` tighten) the constant bound of ``var``."""
        b = ConstIntBound(*bound)
        if not override and var in self._bounds:
            b = B.intersect(self._bounds[var], b)
        self._bounds[var] = b
        self._changed()

    def _set_interval(self, var: E.Var, iv: IntervalSet) -> None:
        lo = None if isinstance(iv.min_value, _Infinity) else self.const_int_bound(iv.min_value)[0]
        hi = None if isinstance(iv.max_value, _Infinity) else self.const_int_bound(iv.max_value)[1]
        self._bounds[var] = ConstIntBound(lo, hi)
        symbolic = any(not isinstance(x, E.IntImm | _Infinity)
                       for x in (iv.min_value, iv.max_value))
        if symbolic:
            self._sym[var] = iv
        else:
            self._sym.pop(var, None)
        self._changed()

    def enter_scope(self) -> None:
        self._stack.append((dict(self._bounds), dict(self._sym), dict(self._facts)))

    def exit_scope(self) -> None:
        self._bounds, self._sym, self._facts = self._stack.pop()
        self._changed()

    @contextmanager
    def scope(self):
        """Undo every bind/constraint made inside the ``with`` block."""
        self.enter_scope()
        try:
            yield self
        finally:
            self.exit_scope()

    @contextmanager
    def constraint(self, cond):
        """``with analyzer.constraint(i < n): ...`` - assume ``cond`` inside the block."""
        self.enter_scope()
        try:
            self.add_constraint(cond)
            yield self
        finally:
            self.exit_scope()

    def add_constraint(self, cond) -> None:
        """Assume ``cond`` from now on (until the enclosing scope ends)."""
        cond = self.simplify(convert(cond))
        for c in _conjuncts(cond):
            if isinstance(c, E.IntImm):
                continue
            if isinstance(c, E.Not):
                self._facts[self.keys(c.a)] = False
            self._facts[self.keys(c)] = True
            if isinstance(c, E.CmpOp) and not isinstance(c, E.And | E.Or | E.NE) and \
                    is_int_scalar(c.a.dtype):
                self._tighten(c)
        self._changed()

    def _tighten(self, c: E.CmpOp) -> None:
        """Narrow variable bounds from a comparison ``a OP b`` assumed true (not where a
        side can wrap: ``a + b < 10`` on uint8 bounds neither ``a`` nor ``b``)."""
        if B.wrap_modulus(c.a.dtype) is not None and (self.may_wrap(c.a) or
                                                      self.may_wrap(c.b)):
            return
        d = self.to_lin(c.a).sub(self.to_lin(c.b))
        t = type(c)
        if t in (E.LT, E.LE, E.EQ):  # d <= k
            self._tighten_le(d, -1 if t is E.LT else 0)
        if t in (E.GT, E.GE, E.EQ):  # d >= k  <=>  -d <= -k
            self._tighten_le(d.scale(-1), -1 if t is E.GT else 0)

    def _tighten_le(self, d: Lin, k: int) -> None:
        """Use ``d <= k`` to bound each variable appearing alone in a term of ``d``.

        Every such variable gets a tighter constant bound; one of them (a bound loop
        variable if there is one) also gets a symbolic end, e.g. ``i < n`` gives
        ``i <= n - 1``. Only one, so that the symbolic ends never refer to each other.
        """
        symbolic_done = self._symbolic_depth > 0
        order = sorted(d.terms.items(), key=lambda kv: kv[1][1][0][1] not in self._bounds)
        for mk, (coef, atoms) in order:
            if len(atoms) != 1 or not isinstance(atoms[0][1], E.Var):
                continue
            v = atoms[0][1]
            rest = Lin(d.dtype, {m: t for m, t in d.terms.items() if m != mk}, d.const)
            # coef * v <= k - rest
            rlo = self.lin_bound(rest)[0]
            old = self._cb.var_bound(v)
            if coef > 0:  # v <= floor((k - rest) / coef)
                hi = None if rlo is None else (k - rlo) // coef
                new = B.intersect(old, (None, hi))
            else:  # v >= ceil((rest - k) / -coef)
                lo = None if rlo is None else -((k - rlo) // -coef)
                new = B.intersect(old, (lo, None))
            self._bounds[v] = new
            if symbolic_done or abs(coef) != 1 or not rest.terms:
                continue
            limit = render(Lin.constant(d.dtype, k).sub(rest).scale(coef))
            cur = self._sym.get(v) or IntervalSet(
                neg_inf_or(new[0], d.dtype), pos_inf_or(new[1], d.dtype))
            if coef > 0 and not _symbolic(cur.max_value):
                self._sym[v] = IntervalSet(cur.min_value, limit)
                symbolic_done = True
            elif coef < 0 and not _symbolic(cur.min_value):
                self._sym[v] = IntervalSet(limit, cur.max_value)
                symbolic_done = True

    # ==== queries ==========================================================================
    def const_int_bound(self, e) -> ConstIntBound:
        """``(lo, hi)`` with every value of ``e`` inside; ``None`` for an infinite end."""
        return self._cb(convert(e))

    def may_wrap(self, e: E.PrimExpr) -> bool:
        """Whether some sub-expression of ``e`` of an unsigned or narrow signed dtype can
        wrap around (leave its dtype's range)."""
        return self._cb.may_wrap(e)

    def modular_set(self, e) -> ModularSet:
        """``(coeff, base)``: every value of ``e`` is ``coeff*k + base``."""
        return self._mod(convert(e))

    def simplify(self, e):
        """Simplify an expression (or a statement / PrimFunc, see ``simplify_stmt``)."""
        if isinstance(e, E.PrimExpr):
            return self._rw(e)
        if isinstance(e, int | float | bool | E.IterVar):
            return self._rw(convert(e))
        from .stmt_simplify import simplify_stmt

        return simplify_stmt(e, self)

    rewrite_simplify = simplify
    canonical_simplify = simplify

    def can_prove(self, cond) -> bool:
        """True only when ``cond`` holds for every value the facts allow."""
        c = self.simplify(convert(cond))
        return isinstance(c, E.IntImm) and c.value != 0

    def can_prove_equal(self, a, b) -> bool:
        a, b = convert(a), convert(b)
        if is_int_scalar(a.dtype) and is_int_scalar(b.dtype):
            d = self.to_lin(self.simplify(a)).sub(self.to_lin(self.simplify(b)))
            return d.is_const() and d.const == 0
        return self.keys(self.simplify(a)) == self.keys(self.simplify(b))

    def can_prove_less(self, a, b) -> bool:
        return self.can_prove(E.LT(*match_types(a, b)))

    def can_prove_greater_equal(self, a, b) -> bool:
        return self.can_prove(E.GE(*match_types(a, b)))

    def eval_interval(self, e, dom_map=None) -> IntervalSet:
        """The interval of ``e`` when each variable of ``dom_map`` (to a Range, an
        IntervalSet or an expression) ranges over its set; other variables stay symbolic."""
        e = convert(e)
        dom: dict[E.Var, IntervalSet] = {}
        with self.scope():
            items = _relevant_domain(e, [(v.var if isinstance(v, E.IterVar) else v, s)
                                         for v, s in (dom_map or {}).items()])
            for v, s in items:
                if isinstance(s, E.Range):
                    s = IntervalSet(s.min, sub(add(s.min, s.extent), 1))
                elif not isinstance(s, IntervalSet):
                    s = IntervalSet.single_point(s)
                dom[v] = simplify_set(s, self)
            # The expression is only looked at inside the domain: bind its variables (this
            # also records non-empty extents) before simplifying it.
            for v, s in items:
                self.bind(v, s)
            iv = IntervalEvaluator(self, dom)(self.simplify(e))
            return simplify_set(iv, self)

    int_set = eval_interval

    # ==== helpers for the rewriter ===========================================================
    def to_lin(self, e: E.PrimExpr) -> Lin:
        """The linear form of an integer expression (memoized)."""
        hit = self._lin_cache.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        t = type(e)
        if t is E.IntImm:
            r = Lin.constant(e.dtype, e.value)
        elif t is E.Add:
            r = self.to_lin(e.a).add(self.to_lin(e.b))
        elif t is E.Sub:
            r = self.to_lin(e.a).sub(self.to_lin(e.b))
        elif t is E.Mul:
            r = self.to_lin(e.a).mul(self.to_lin(e.b)) or Lin.atom(e, self.keys(e))
        else:
            r = Lin.atom(e, self.keys(e))
        self.remember_lin(e, r)
        return r

    def remember_lin(self, e: E.PrimExpr, lin: Lin) -> None:
        if len(self._lin_cache) > 200_000:
            self._lin_cache.clear()
        self._lin_cache[id(e)] = (e, lin)

    def lin_bound(self, lin: Lin) -> ConstIntBound:
        """Constant bound of a linear form, from the bounds of its atoms."""
        acc = ConstIntBound(lin.const, lin.const)
        for coef, atoms in lin.terms.values():
            b = self._cb(atoms[0][1])
            for _, a in atoms[1:]:
                b = B.mul(b, self._cb(a))
            acc = B.add(acc, B.scale(b, coef))
        return acc

    def diff_bound(self, lin: Lin, decided) -> ConstIntBound:
        """Bound of ``lin``; when ``decided(bound)`` is false and some variables have
        symbolic ranges, retry by substituting those ranges (one level deep)."""
        b = self.lin_bound(lin)
        if decided(b) or not self._sym or self._symbolic_depth:
            return b
        self._symbolic_depth += 1
        saved = self._rw.cache
        self._rw.cache = {}
        try:
            iv = IntervalEvaluator(self, self._sym)(render(lin))
            lo = hi = None
            if not isinstance(iv.min_value, _Infinity):
                lo = self._cb(self._rw(iv.min_value))[0]
            if not isinstance(iv.max_value, _Infinity):
                hi = self._cb(self._rw(iv.max_value))[1]
            return B.intersect(b, (lo, hi))
        finally:
            self._rw.cache = saved
            self._symbolic_depth -= 1

    def fact(self, cond: E.PrimExpr) -> bool | None:
        """True/False when ``cond`` (structurally) was assumed true/false."""
        if not self._facts:
            return None
        return self._facts.get(self.keys(cond))


def _relevant_domain(e: E.PrimExpr, items: list[tuple[E.Var, object]]
                     ) -> list[tuple[E.Var, object]]:
    """The ``(var, set)`` items of a domain that can matter to the interval of ``e``, in
    their order: those connected to the variables of ``e`` through the variables the sets
    mention (a set mentions ``n``; a Range of extent ``n - 3`` also tells ``n >= 4``).
    Binding the others only tells facts about variables that ``e`` cannot reach, so they
    are skipped, and with them a simplification and a cache flush each (bound inference
    evaluates every index over the ranges of all the loops seen so far)."""
    if len(items) < 2:
        return items
    mentions = [_set_vars(s) for _, s in items]
    needed = collect_vars(e)
    keep = [False] * len(items)
    grown = True
    while grown:
        grown = False
        for k, (v, _) in enumerate(items):
            if not keep[k] and (v in needed or not mentions[k].isdisjoint(needed)):
                keep[k] = grown = True
                needed |= mentions[k] | {v}
    return [item for item, kept in zip(items, keep, strict=True) if kept]


def _set_vars(s) -> set[E.Var]:
    """The variables a domain value (a Range, an IntervalSet or an expression) mentions."""
    if isinstance(s, E.Range):
        ends = (s.min, s.extent)
    elif isinstance(s, IntervalSet):
        ends = (s.min_value, s.max_value)
    else:
        ends = (s,)
    out: set[E.Var] = set()
    for x in ends:
        if isinstance(x, E.Var):
            out.add(x)
        elif isinstance(x, E.PrimExpr) and not isinstance(x, E.IntImm):
            out |= collect_vars(x)
    return out


def _conjuncts(c):
    if isinstance(c, E.And):
        yield from _conjuncts(c.a)
        yield from _conjuncts(c.b)
    elif isinstance(c, E.Call) and c.op == "likely" and len(c.args) == 1:
        yield from _conjuncts(c.args[0])
    else:
        yield c


def _symbolic(x) -> bool:
    return not isinstance(x, E.IntImm | _Infinity)


def neg_inf_or(v, dtype):
    return neg_inf if v is None else E.IntImm(dtype, v)


def pos_inf_or(v, dtype):
    return pos_inf if v is None else E.IntImm(dtype, v)

