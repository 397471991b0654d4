"""The expression simplifier: bottom-up rewriting with an Analyzer's facts.

Integer ``+ - *`` go through the linear canonical form (``linear.py``); division and
modulo rules live in ``divmod.py``; everything else is a small set of local rules:
constant folding, provable ``min``/``max``/comparisons, logic with constants, ``select``
with constant conditions, cast folding. Floating point is only folded where the result is
exactly what IEEE arithmetic would give (``x*1.0 -> x`` but not ``x*0.0 -> 0``).
"""

from __future__ import annotations

import math
from math import gcd
from typing import TYPE_CHECKING

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import collect_vars, rebuild, substitute
from ..ir.op import make_const
from . import divmod as DM
from .bound import dtype_bound, is_int_scalar, wrap_modulus
from .fold import CMP_FOLD, fold_binary, fold_cast
from .linear import Lin, render

if TYPE_CHECKING:
    from .analyzer import Analyzer

_FLIP = {E.LT: E.GT, E.LE: E.GE, E.GT: E.LT, E.GE: E.LE}
_NEGATE = {E.LT: E.GE, E.LE: E.GT, E.GT: E.LE, E.GE: E.LT, E.EQ: E.NE, E.NE: E.EQ}
_IMM = (E.IntImm, E.FloatImm)
#: how many levels of min/max/floordiv parts a comparison opens (Rewriter._le_parts)
_PARTS_DEPTH = 3


def _true(dtype: str = "bool") -> E.IntImm:
    return E.IntImm(dtype, 1)


def _false(dtype: str = "bool") -> E.IntImm:
    return E.IntImm(dtype, 0)


class Rewriter:
    """Simplifies expressions bottom-up; ``cache`` memoizes results per Analyzer state."""

    _TABLE = {
        E.Var: "_var", E.IntImm: "_leaf", E.FloatImm: "_leaf", E.StringImm: "_leaf",
        E.Add: "_arith", E.Sub: "_arith", E.Mul: "_arith", E.Div: "_division",
        E.Mod: "_division", E.FloorDiv: "_division", E.FloorMod: "_division",
        E.Min: "_minmax", E.Max: "_minmax", E.EQ: "_cmp", E.NE: "_cmp", E.LT: "_cmp",
        E.LE: "_cmp", E.GT: "_cmp", E.GE: "_cmp", E.And: "_logic", E.Or: "_logic",
        E.Not: "_not", E.Select: "_select", E.Cast: "_cast", E.Let: "_let", E.Call: "_call",
        E.Reduce: "_reduce", E.Broadcast: "_generic", E.Ramp: "_generic",
    }
    _DISPATCH: dict[type, object] = {}  # node type -> unbound handler, shared by all

    def __init__(self, analyzer: Analyzer):
        self.an = analyzer
        self.cache: dict[int, tuple[E.PrimExpr, E.PrimExpr]] = {}

    def __call__(self, e: E.PrimExpr) -> E.PrimExpr:
        hit = self.cache.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        fn = self._DISPATCH.get(type(e))
        if fn is None:
            name = next((self._TABLE[c] for c in type(e).__mro__ if c in self._TABLE),
                        "_generic")
            fn = self._DISPATCH[type(e)] = getattr(Rewriter, name)
        r = fn(self, e)
        if len(self.cache) > 100_000:
            self.cache.clear()
        self.cache[id(e)] = (e, r)
        return r

    # ---- helpers -----------------------------------------------------------------------------
    @staticmethod
    def rebuilt(e, **fields):
        """``e`` itself when no field changed, else a copy with the new fields."""
        if all(getattr(e, k) is v for k, v in fields.items()):
            return e
        return rebuild(e, **fields)

    def emit(self, lin: Lin, base: E.PrimExpr) -> E.PrimExpr:
        """Render ``lin``; return ``base`` instead when it is the same expression."""
        out = render(lin)
        if _same_tree(out, base):
            out = base
            if type(base) in (E.Add, E.Sub, E.Mul):
                _remember_canonical(base)
        self.an.remember_lin(out, lin)
        return out

    def same(self, a, b) -> bool:
        return a is b or self.an.keys(a) == self.an.keys(b)

    def may_wrap(self, *es: E.PrimExpr) -> bool:
        """Whether one of ``es`` can wrap around, so that rules reading them as unbounded
        integers (their linear forms, bounds of differences) do not apply: ``max(a + b, b)``
        on uint8 is not ``a + b``. Always False for int32/int64 (overflow is undefined)."""
        return any(wrap_modulus(x.dtype) is not None and self.an.may_wrap(x) for x in es)

    # ---- leaves ------------------------------------------------------------------------------
    def _leaf(self, e):
        return e

    def _var(self, e):
        if is_int_scalar(e.dtype):
            lo, hi = self.an.const_int_bound(e)
            if lo is not None and lo == hi:
                return E.IntImm(e.dtype, lo)
        return e

    def _generic(self, e):
        changes = {}
        for f in e._fields:
            v = getattr(e, f)
            if isinstance(v, E.PrimExpr):
                changes[f] = self(v)
            elif isinstance(v, tuple) and v and all(isinstance(x, E.PrimExpr) for x in v):
                nv = tuple(self(x) for x in v)
                changes[f] = v if all(x is y for x, y in zip(nv, v, strict=True)) else nv
        out = self.rebuilt(e, **changes)
        if isinstance(out, E.Broadcast | E.Ramp):
            return self._vector_leaf(out)
        return out

    # ---- + - * ------------------------------------------------------------------------------
    def _arith(self, e):
        a, b = self(e.a), self(e.b)
        if a is e.a and b is e.b and _CANONICAL.get(id(e)) is e:
            return e
        folded = fold_binary(e, a, b)
        if folded is not None:
            return folded
        base = self.rebuilt(e, a=a, b=b)
        if is_int_scalar(e.dtype):
            la, lb = self.an.to_lin(a), self.an.to_lin(b)
            t = type(e)
            if t is E.Add:
                lin = la.add(lb)
            elif t is E.Sub:
                lin = la.sub(lb)
            else:
                lin = la.mul(lb)
                if lin is None:
                    return base
            if t is not E.Mul:
                lin = DM.merge_divmod(self, lin)
            modulus = wrap_modulus(e.dtype)
            if modulus is not None:
                lin = lin.reduced(modulus)  # a ring modulo 2**bits: x + y - y -> x holds
            return self.emit(lin, base)
        if dt.is_float(e.dtype) and dt.lanes(e.dtype) == 1:
            return self._float_identity(base, a, b)
        if dt.lanes(e.dtype) > 1:
            return self._vector_arith(base, a, b)
        return base

    def _float_identity(self, e, a, b):
        t = type(e)
        one_b = isinstance(b, E.FloatImm) and b.value == 1.0
        if t is E.Mul and one_b:
            return a
        if t is E.Mul and isinstance(a, E.FloatImm) and a.value == 1.0:
            return b
        if t is E.Div and one_b:
            return a
        if t is E.Sub and isinstance(b, E.FloatImm) and b.value == 0.0 and \
                math.copysign(1.0, b.value) > 0:
            return a
        return e

    def _vector_arith(self, e, a, b):
        """Broadcast/Ramp algebra: ``x4(a) + x4(b) -> x4(a + b)``, ``ramp + x4(c)``..."""
        t = type(e)
        if isinstance(a, E.Broadcast) and isinstance(b, E.Broadcast):
            return E.Broadcast(self(t(a.value, b.value)), a.lanes)
        if t in (E.Add, E.Sub):
            if isinstance(a, E.Ramp) and isinstance(b, E.Broadcast):
                return E.Ramp(self(t(a.base, b.value)), a.stride, a.lanes)
            if isinstance(a, E.Broadcast) and isinstance(b, E.Ramp):
                stride = b.stride if t is E.Add else self(E.Sub(_zero(b.stride), b.stride))
                return E.Ramp(self(t(a.value, b.base)), stride, b.lanes)
            if isinstance(a, E.Ramp) and isinstance(b, E.Ramp) and a.lanes == b.lanes:
                return E.Ramp(self(t(a.base, b.base)), self(t(a.stride, b.stride)), a.lanes)
        if t is E.Mul:
            if isinstance(a, E.Broadcast) and isinstance(b, E.Ramp):
                a, b = b, a
            if isinstance(a, E.Ramp) and isinstance(b, E.Broadcast):
                return E.Ramp(self(E.Mul(a.base, b.value)), self(E.Mul(a.stride, b.value)),
                              a.lanes)
        return e

    def _vector_leaf(self, e):
        if isinstance(e, E.Ramp) and isinstance(e.stride, E.IntImm) and e.stride.value == 0:
            return E.Broadcast(e.base, e.lanes)
        return e

    # ---- division ----------------------------------------------------------------------------
    def _division(self, e):
        a, b = self(e.a), self(e.b)
        folded = fold_binary(e, a, b)
        if folded is not None:
            return folded
        base = self.rebuilt(e, a=a, b=b)
        if is_int_scalar(e.dtype) and not self.may_wrap(a, b):
            out = DM.simplify_division(self, base)
            # read as unbounded integers, the rewrite is exact only if it wraps nothing either
            return base if self.may_wrap(out) else out
        if dt.is_float(e.dtype) and type(e) is E.Div:
            return self._float_identity(base, a, b)
        if dt.lanes(e.dtype) > 1 and isinstance(a, E.Broadcast) and \
                isinstance(b, E.Broadcast):
            return E.Broadcast(self(type(e)(a.value, b.value)), a.lanes)
        return base

    # ---- min / max ---------------------------------------------------------------------------
    def _minmax(self, e):
        a, b = self(e.a), self(e.b)
        folded = fold_binary(e, a, b)
        if folded is not None:
            return folded
        if self.same(a, b):
            return a
        is_min = type(e) is E.Min
        base = self.rebuilt(e, a=a, b=b)
        other = E.Max if is_min else E.Min
        # min(x, max(x, y)) -> x, max(x, min(x, y)) -> x
        for x, y in ((a, b), (b, a)):
            if type(y) is other and (self.same(y.a, x) or self.same(y.b, x)):
                return x
        if not is_int_scalar(e.dtype):
            return base
        picked = self._pick(type(e), a, b)
        if picked is not None:
            return picked
        # min(min(x, c1), c2) -> min(x, min(c1, c2))
        if type(a) is type(e) and isinstance(a.b, E.IntImm) and isinstance(b, E.IntImm):
            c = min(a.b.value, b.value) if is_min else max(a.b.value, b.value)
            return self(type(e)(a.a, E.IntImm(e.dtype, c)))
        merged = self._merge_chain(base)
        return base if merged is None else merged

    def _pick(self, op, a, b, symbolic: bool = True):
        """``a`` or ``b``, whichever ``op`` (Min or Max) provably selects; None if unknown."""
        order = self._order(a, b, symbolic)
        if order is None:
            return None
        return a if (order < 0) == (op is E.Min) else b

    def _order(self, a, b, symbolic: bool = True) -> int | None:
        """-1 when ``a <= b`` is provable, 1 when ``a >= b`` is, else None; the bound of
        ``a - b`` substitutes symbolic variable ranges only with ``symbolic``."""
        if self.may_wrap(a, b):
            return None
        d = self.an.to_lin(a).sub(self.an.to_lin(b))
        if symbolic:
            lo, hi = self.an.diff_bound(d, lambda bd: (bd[1] is not None and bd[1] <= 0) or (
                bd[0] is not None and bd[0] >= 0))
        else:
            lo, hi = self.an.lin_bound(d)
        if (hi is not None and hi <= 0) or self._le_parts(a, b, 0):
            return -1
        if (lo is not None and lo >= 0) or self._le_parts(b, a, 0):
            return 1
        return None

    def _le(self, a, b, k: int, depth: int) -> bool:
        """Provably ``a - b <= k``: from the constant bound of the difference, else
        ``_le_parts``."""
        hi = self.an.lin_bound(self.an.to_lin(a).sub(self.an.to_lin(b)))[1]
        return (hi is not None and hi <= k) or self._le_parts(a, b, k, depth)

    def _le_parts(self, a, b, k: int, depth: int = _PARTS_DEPTH) -> bool:
        """Provably ``a - b <= k`` from the parts of a min/max side, as TVM rewrites such
        comparisons: ``max(x, y) - z <= k`` iff both ``x - z`` and ``y - z`` are, ``min(x, y)
        - z <= k`` if either is (and the mirror rules for ``z``); and ``floordiv(x, c) -
        floordiv(y, c) <= k`` if ``x - y <= k*c`` (floordiv by ``c > 0`` is monotone). At
        most ``depth`` levels of parts are opened."""
        if depth == 0:
            return False
        depth -= 1
        ta, tb = type(a), type(b)
        if ta is E.Max:
            return self._le(a.a, b, k, depth) and self._le(a.b, b, k, depth)
        if ta is E.Min:
            return self._le(a.a, b, k, depth) or self._le(a.b, b, k, depth)
        if tb is E.Min:
            return self._le(a, b.a, k, depth) and self._le(a, b.b, k, depth)
        if tb is E.Max:
            return self._le(a, b.a, k, depth) or self._le(a, b.b, k, depth)
        if ta is E.FloorDiv and tb is E.FloorDiv and isinstance(a.b, E.IntImm) and \
                a.b.value > 0 and self.same(a.b, b.b):
            return self._le(a.a, b.a, k * a.b.value, depth)
        return False

    def _merge_chain(self, e):
        """A chain ``min(min(x, y), z)`` without the operands another one provably
        dominates, wherever they sit in the chain: ``min(min(x, y // 7), (y + 6) // 7)
        -> min(x, y // 7)``. None when no operand goes (the chain is kept as it is)."""
        op = type(e)
        kept = _flatten(e.a, op)
        pending = _flatten(e.b, op)
        if len(kept) + len(pending) < 3:
            return None  # a pair: _minmax has compared it already
        dropped = False
        while pending:
            z = pending.pop(0)
            for k, x in enumerate(kept):
                picked = self._pick(op, x, z, symbolic=False)
                if picked is not None:
                    kept[k] = picked
                    dropped = True
                    break
            else:
                kept.append(z)
        if not dropped:
            return None
        out = kept[0]
        for x in kept[1:]:
            out = op(out, x)
        return out

    # ---- comparisons -------------------------------------------------------------------------
    def _cmp(self, e):
        a, b = self(e.a), self(e.b)
        t = type(e)
        if isinstance(a, _IMM) and isinstance(b, _IMM):
            return E.IntImm(e.dtype, int(CMP_FOLD[t](a.value, b.value)))
        base = self.rebuilt(e, a=a, b=b)
        if not is_int_scalar(a.dtype) or wrap_modulus(a.dtype) is not None:
            return base  # wrapping arithmetic: u * 2 > k is not u > k / 2 on uint32
        known = self.an.fact(base)
        if known is not None:
            return E.IntImm(e.dtype, int(known))
        la, lb = self.an.to_lin(a), self.an.to_lin(b)
        d = la.sub(lb)
        verdict = self._decide(t, d)
        if verdict is None:
            verdict = self._decide_parts(t, a, b)
        if verdict is not None:
            return E.IntImm(e.dtype, int(verdict))
        g = 0
        for c in d.coeffs():
            g = gcd(g, c)
        cancelled = len(d.terms) < len(la.terms) + len(lb.terms)
        both_const = (la.const != 0 or la.is_const()) and (lb.const != 0 or lb.is_const())
        negative_left = lb.is_const() and any(c < 0 for c in la.coeffs())  # x - y < 0
        if not (cancelled or both_const or negative_left or g > 1):
            return base
        out = self._normal_cmp(t, d, g, e.dtype)
        if isinstance(out, E.IntImm):
            return out
        known = self.an.fact(out)
        if known is not None:
            return E.IntImm(e.dtype, int(known))
        return out if not self.same(out, base) else base

    def _decide(self, t, d: Lin) -> bool | None:
        """Truth of ``d OP 0`` when the bounds of ``d`` decide it."""
        if d.is_const():
            return CMP_FOLD[t](d.const, 0)
        if t in (E.EQ, E.NE):
            g = 0
            for c in d.coeffs():
                g = gcd(g, c)
            if d.const % g:  # g*Y + const never hits zero
                return t is E.NE

        def decided(bd):
            return self._verdict(t, bd) is not None

        return self._verdict(t, self.an.diff_bound(d, decided))

    def _decide_parts(self, t, a, b) -> bool | None:
        """Truth of ``a OP b`` (``< <= > >=``) from the parts of its sides (``_le_parts``)."""
        if t in (E.GT, E.GE):
            a, b, t = b, a, _FLIP[t]
        if t is E.LT:
            holds, fails = (a, b, -1), (b, a, 0)
        elif t is E.LE:
            holds, fails = (a, b, 0), (b, a, -1)
        else:
            return None
        if self._le_parts(*holds):
            return True
        if self._le_parts(*fails):
            return False
        return None

    @staticmethod
    def _verdict(t, bd) -> bool | None:
        lo, hi = bd
        le = (lambda k: hi is not None and hi <= k)
        ge = (lambda k: lo is not None and lo >= k)
        if t is E.LT:
            return True if le(-1) else False if ge(0) else None
        if t is E.LE:
            return True if le(0) else False if ge(1) else None
        if t is E.GT:
            return True if ge(1) else False if le(0) else None
        if t is E.GE:
            return True if ge(0) else False if le(-1) else None
        if lo is not None and lo == hi == 0:
            return t is E.EQ
        if ge(1) or le(-1):
            return t is E.NE
        return None

    def _normal_cmp(self, t, d: Lin, g: int, dtype: str):
        """``T OP k`` with the terms ``T`` of ``d`` (divided by their gcd) and a constant."""
        k = -d.const  # d OP 0  <=>  T OP k
        terms = d.terms
        if g > 1:
            if t in (E.EQ, E.NE):
                if k % g:
                    return E.IntImm(dtype, int(t is E.NE))
                k //= g
            elif t is E.LT:
                k = (k - 1) // g + 1
            elif t is E.LE:
                k = k // g
            elif t is E.GT:
                k = -((-(k + 1)) // g) - 1
            else:  # GE
                k = -((-k) // g)
            terms = {m: (c // g, a) for m, (c, a) in terms.items()}
        if not any(c > 0 for c, _ in terms.values()):
            terms = {m: (-c, a) for m, (c, a) in terms.items()}
            k = -k
            t = _FLIP.get(t, t)
        pos = Lin(d.dtype, {m: v for m, v in terms.items() if v[0] > 0})
        neg = Lin(d.dtype, {m: (-v[0], v[1]) for m, v in terms.items() if v[0] < 0}, k)
        left, right = render(pos), render(neg)
        self.an.remember_lin(left, pos)
        self.an.remember_lin(right, neg)
        return t(left, right)

    # ---- logic -------------------------------------------------------------------------------
    def _logic(self, e):
        a, b = self(e.a), self(e.b)
        is_and = type(e) is E.And
        for x, y in ((a, b), (b, a)):
            if isinstance(x, E.IntImm):
                return y if bool(x.value) == is_and else x
        op = type(e)
        if any(self.same(p, b) for p in _flatten(a, op)):
            return a  # (p && q) && q -> p && q
        if any(self.same(p, a) for p in _flatten(b, op)):
            return b
        if self._negations(a, b):
            return _false(e.dtype) if is_and else _true(e.dtype)
        base = self.rebuilt(e, a=a, b=b)
        known = self.an.fact(base)
        if known is not None:
            return E.IntImm(e.dtype, int(known))
        return base

    def _negations(self, a, b) -> bool:
        """``b`` is ``!a`` (or ``a``'s integer comparison flipped, as ``_not`` writes it)."""
        for x, y in ((a, b), (b, a)):
            if isinstance(y, E.Not) and self.same(y.a, x):
                return True
        neg = _NEGATE.get(type(a))
        return neg is not None and type(b) is neg and dt.is_integer(a.a.dtype) and \
            self.same(a.a, b.a) and self.same(a.b, b.b)

    def _not(self, e):
        a = self(e.a)
        if isinstance(a, E.IntImm):
            return E.IntImm(e.dtype, int(not a.value))
        if isinstance(a, E.Not):
            return a.a
        neg = _NEGATE.get(type(a))
        if neg is not None and (type(a) in (E.EQ, E.NE) or dt.is_integer(a.a.dtype)):
            return self(neg(a.a, a.b))
        return self.rebuilt(e, a=a)

    # ---- select / cast / let / call ----------------------------------------------------------
    def _select(self, e):
        c = self(e.condition)
        if isinstance(c, E.IntImm):
            return self(e.true_value if c.value else e.false_value)
        tv, fv = self(e.true_value), self(e.false_value)
        if self.same(tv, fv):
            return tv
        return self.rebuilt(e, condition=c, true_value=tv, false_value=fv)

    def _cast(self, e):
        v = self(e.value)
        if v.dtype == e.dtype:
            return v
        if isinstance(v, _IMM) and dt.lanes(e.dtype) == 1:
            out = fold_cast(v, e.dtype)
            if out is not None:
                return out
        if isinstance(v, E.Cast) and dt.is_integer(e.dtype) and v.value.dtype == e.dtype and \
                dt.is_integer(v.dtype) and not dt.is_bool(e.dtype) and \
                not dt.is_bool(v.dtype) and dt.bits(v.dtype) >= dt.bits(e.dtype):
            return v.value  # int32(int64(x)) -> x
        if self._round_trip_fits(e.dtype, v):
            return v.value  # int32(uint8(x)) -> x where x is in [0, 255]
        if isinstance(v, E.Broadcast):
            return E.Broadcast(self(E.Cast(dt.element_of(e.dtype), v.value)), v.lanes)
        return self.rebuilt(e, value=v)

    def _round_trip_fits(self, dtype: str, v: E.PrimExpr) -> bool:
        """Whether ``dtype(v)``, ``v = narrow(x)`` with ``x`` of ``dtype``, is ``x``: both
        integer types and every value ``x`` may take (its const-int bound) one the narrow
        type holds, so the narrowing wraps nothing."""
        if not (isinstance(v, E.Cast) and v.value.dtype == dtype and is_int_scalar(dtype)
                and is_int_scalar(v.dtype)):
            return False
        lo, hi = self.an.const_int_bound(v.value)
        narrow = dtype_bound(v.dtype)
        return lo is not None and hi is not None and narrow.min_value <= lo \
            and hi <= narrow.max_value

    def _let(self, e):
        value = self(e.value)
        if isinstance(value, E.IntImm | E.FloatImm | E.Var):
            return self(substitute(e.body, {e.var: value}))
        with self.an.scope():
            self.an.bind(e.var, value)
            body = self(e.body)
        if e.var not in collect_vars(body):
            return body
        return self.rebuilt(e, value=value, body=body)

    def _call(self, e):
        if e.op == "likely" and len(e.args) == 1:
            c = self(e.args[0])
            if isinstance(c, E.IntImm):
                return c  # likely() of a known condition is that condition
            return e if c is e.args[0] else self.rebuilt(e, args=(c,))
        if e.op in ("if_then_else", "tvm_if_then_else") and len(e.args) == 3:
            c = self(e.args[0])
            if isinstance(c, E.IntImm):
                return self(e.args[1] if c.value else e.args[2])
        return self._generic(e)

    def _reduce(self, e):
        with self.an.scope():
            for iv in e.axis:
                if isinstance(iv, E.IterVar) and iv.dom is not None:
                    self.an.bind(iv.var, iv.dom)
            return self._generic(e)


def _flatten(e, op) -> list:
    """The operands of a chain of ``op`` (And, Or, Min or Max)."""
    if type(e) is not op:
        return [e]
    return _flatten(e.a, op) + _flatten(e.b, op)


# Integer sums/products known to be their own canonical form given their (unchanged)
# children. That property does not depend on any Analyzer's facts, so it is shared: index
# expressions simplified by one pass are not re-rendered by the next.
_CANONICAL: dict[int, E.PrimExpr] = {}


def _remember_canonical(e: E.PrimExpr) -> None:
    if len(_CANONICAL) > 200_000:
        _CANONICAL.clear()
    _CANONICAL[id(e)] = e


def _same_tree(a, b) -> bool:
    """Structural equality with early exit (variables by identity)."""
    if a is b:
        return True
    t = type(a)
    if t is not type(b) or a.dtype != b.dtype:
        return False
    if t is E.IntImm or t is E.FloatImm:
        return a.value == b.value
    if isinstance(a, E.Var):
        return False
    if isinstance(a, E.BinaryOp):
        return _same_tree(a.a, b.a) and _same_tree(a.b, b.b)
    return _structural_equal(a, b)


def _structural_equal(a, b) -> bool:
    from ..ir.structural import structural_equal

    return structural_equal(a, b)


def _zero(like: E.PrimExpr) -> E.PrimExpr:
    return make_const(0, like.dtype)
