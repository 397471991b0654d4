"""Interval evaluation: the set of values an expression takes over variable intervals.

``IntervalEvaluator`` maps an expression and intervals for some of its variables to an
interval containing every value the expression can take. Variables outside the map stay
symbolic (single points), so ends are expressions such as ``(n*m) - 1``. Ends are built
with the IR's folding helpers and left unsimplified; ``Analyzer.eval_interval`` simplifies
them once at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import rebuild
from ..ir.op import add, cast, div, floordiv, make_const, mul, sub
from . import bound as B
from .interval import (
    End,
    IntervalSet,
    _Infinity,
    add_end,
    max_end,
    min_end,
    neg_end,
    neg_inf,
    pos_inf,
    raw_union,
)

if TYPE_CHECKING:
    from .analyzer import Analyzer


def _truncdiv(a, b):
    return div(a, b)


def _div_end(x: End, y: E.PrimExpr, fn) -> End:
    if isinstance(x, _Infinity):
        return x
    return fn(x, y)


def _mul_end(x: End, y: End, sx: int, sy: int) -> End:
    """``x * y`` where ``sx``/``sy`` are the known signs of the finite ends."""
    if isinstance(x, _Infinity) or isinstance(y, _Infinity):
        s = (x.sign if isinstance(x, _Infinity) else sx) * \
            (y.sign if isinstance(y, _Infinity) else sy)
        return pos_inf if s > 0 else neg_inf
    if isinstance(x, E.IntImm) and isinstance(y, E.IntImm):  # an exact end, not wrapped
        return E.IntImm(x.dtype, x.value * y.value)
    return mul(x, y)


_BOOL_RANGE = (E.IntImm("bool", 0), E.IntImm("bool", 1))


class IntervalEvaluator:
    """Evaluates the interval of expressions given intervals for some variables.

    Signs of symbolic factors and divisors are decided with the analyzer's constant
    bounds (so free integer variables count as non-negative when the analyzer assumes so).
    In dtypes that wrap around (``bound.wrap_modulus``) an interval whose ends are not
    constants inside the dtype's range widens to the whole range.
    """

    def __init__(self, analyzer: Analyzer, dom: dict[E.Var, IntervalSet]):
        self.an = analyzer
        self.dom = dom
        self.memo: dict[int, tuple[E.PrimExpr, IntervalSet]] = {}

    def __call__(self, e: E.PrimExpr) -> IntervalSet:
        hit = self.memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        r = self._eval(e)
        if not r.is_single_point() and dt.is_integer(e.dtype) and \
                B.wrap_modulus(e.dtype) is not None:
            r = _within_dtype(r, e.dtype)
        self.memo[id(e)] = (e, r)
        return r

    # ---- helpers ------------------------------------------------------------------------
    def _sign(self, e: End) -> int:
        """+1 when ``e >= 0`` is known, -1 when ``e <= 0`` is, else 0."""
        if isinstance(e, _Infinity):
            return e.sign
        if not dt.is_integer(e.dtype):
            if isinstance(e, E.FloatImm):
                return 1 if e.value >= 0 else -1
            return 0
        lo, hi = self.an.const_int_bound(e)
        if lo is not None and lo >= 0:
            return 1
        if hi is not None and hi <= 0:
            return -1
        return 0

    def _iv_sign(self, s: IntervalSet) -> int:
        if self._sign(s.min_value) > 0:
            return 1
        if self._sign(s.max_value) < 0:
            return -1
        return 0

    @staticmethod
    def _point(e: E.PrimExpr) -> IntervalSet:
        return IntervalSet(e, e)

    def _rebuilt_point(self, e, **fields) -> IntervalSet:
        if all(getattr(e, k) is v for k, v in fields.items()):
            return self._point(e)
        return self._point(rebuild(e, **fields))

    def _everything(self, e) -> IntervalSet:
        if dt.is_bool(e.dtype):
            return IntervalSet(*_BOOL_RANGE)
        return IntervalSet.everything()

    # ---- dispatch -------------------------------------------------------------------------
    def _eval(self, e) -> IntervalSet:  # noqa: C901 - flat type switch
        if isinstance(e, E.Var):
            s = self.dom.get(e)
            return s if s is not None else self._point(e)
        if isinstance(e, E.IntImm | E.FloatImm | E.StringImm):
            return self._point(e)
        t = type(e)
        handler = _BINARY.get(t)
        if handler is not None:
            a, b = self(e.a), self(e.b)
            if a.is_single_point() and b.is_single_point():
                return self._rebuilt_point(e, a=a.min_value, b=b.min_value)
            return handler(self, e, a, b)
        if isinstance(e, E.CmpOp):
            a, b = self(e.a), self(e.b)
            if a.is_single_point() and b.is_single_point():
                return self._rebuilt_point(e, a=a.min_value, b=b.min_value)
            return self._compare(e, a, b)
        if t is E.Not:
            a = self(e.a)
            if a.is_single_point():
                return self._rebuilt_point(e, a=a.min_value)
            return IntervalSet(*_BOOL_RANGE)
        if t is E.Select:
            return self._select(e, e.condition, e.true_value, e.false_value)
        if t is E.Cast:
            return self._cast(e)
        if t is E.Let:
            v = self(e.value)
            inner = IntervalEvaluator(self.an, {**self.dom, e.var: v})
            body = inner(e.body)
            if v.is_single_point() and body.is_single_point():
                return self._rebuilt_point(e, value=v.min_value, body=body.min_value)
            return body
        if t is E.Call:
            if e.op == "likely" and len(e.args) == 1:
                return self(e.args[0])
            if e.op in ("if_then_else", "tvm_if_then_else") and len(e.args) == 3:
                return self._select(e, *e.args)
        if t is E.Broadcast:
            v = self(e.value)
            return v if not v.is_single_point() else self._rebuilt_point(e, value=v.min_value)
        if t is E.Ramp:
            return self._ramp(e)
        return self._generic(e)

    def _generic(self, e) -> IntervalSet:
        """Opaque nodes: a point when every sub-expression is, else everything."""
        changes = {}
        for f in e._fields:
            v = getattr(e, f)
            if isinstance(v, E.PrimExpr):
                s = self(v)
                if not s.is_single_point():
                    return self._everything(e)
                changes[f] = s.min_value
            elif isinstance(v, tuple) and v and all(isinstance(x, E.PrimExpr) for x in v):
                pts = []
                for x in v:
                    s = self(x)
                    if not s.is_single_point():
                        return self._everything(e)
                    pts.append(s.min_value)
                same = all(p is x for p, x in zip(pts, v, strict=True))
                changes[f] = v if same else tuple(pts)
        return self._rebuilt_point(e, **changes)

    # ---- arithmetic -----------------------------------------------------------------------
    def _add(self, e, a, b):
        return IntervalSet(add_end(a.min_value, b.min_value), add_end(a.max_value, b.max_value))

    def _sub(self, e, a, b):
        return IntervalSet(add_end(a.min_value, neg_end(b.max_value)),
                           add_end(a.max_value, neg_end(b.min_value)))

    def _mul(self, e, a, b):
        if b.is_single_point():
            return self._scale(a, b.min_value, e)
        if a.is_single_point():
            return self._scale(b, a.min_value, e)
        ends = (a.min_value, a.max_value, b.min_value, b.max_value)
        if all(isinstance(x, E.IntImm) for x in ends):
            c = [x.value * y.value for x in ends[:2] for y in ends[2:]]
            return IntervalSet(E.IntImm(e.dtype, min(c)), E.IntImm(e.dtype, max(c)))
        sa, sb = self._iv_sign(a), self._iv_sign(b)
        if sa == 0 or sb == 0:
            return self._everything(e)
        if sa > 0 and sb > 0:
            lo, hi = (a.min_value, b.min_value), (a.max_value, b.max_value)
        elif sa > 0:
            lo, hi = (a.max_value, b.min_value), (a.min_value, b.max_value)
        elif sb > 0:
            lo, hi = (a.min_value, b.max_value), (a.max_value, b.min_value)
        else:
            lo, hi = (a.max_value, b.max_value), (a.min_value, b.min_value)
        return IntervalSet(_mul_end(*lo, sa, sb), _mul_end(*hi, sa, sb))

    def _scale(self, a: IntervalSet, k: E.PrimExpr, e) -> IntervalSet:
        if isinstance(k, E.IntImm) and k.value == 0:
            return self._point(make_const(0, e.dtype))
        s = self._sign(k)
        if s == 0:
            return self._everything(e)
        lo, hi = (a.min_value, a.max_value) if s > 0 else (a.max_value, a.min_value)
        return IntervalSet(_mul_end(lo, k, 1, s), _mul_end(hi, k, 1, s))

    def _divide(self, e, a, b, fn, trunc: bool):
        if b.is_single_point():
            k = b.min_value
            if isinstance(k, E.IntImm) and k.value == 0:
                return self._everything(e)
            s = self._sign(k)
            if s == 0:
                return self._everything(e)
            lo, hi = (a.min_value, a.max_value) if s > 0 else (a.max_value, a.min_value)
            return IntervalSet(_div_end(lo, k, fn), _div_end(hi, k, fn))
        if self._positive(b.min_value):
            return self._divide_by_positive(e, a, b, fn, trunc)
        return self._everything(e)

    def _divide_by_positive(self, e, a, b, fn, trunc: bool) -> IntervalSet:
        """``a / b`` for an interval ``b`` of positive values: for a fixed numerator the
        quotient is monotone in the divisor, so the extremes sit at the divisor's ends."""
        zero, minus_one = make_const(0, e.dtype), make_const(-1, e.dtype)
        sa = self._iv_sign(a)
        if trunc and sa <= 0:
            return self._everything(e)

        def q(x, y, big):  # x / y, with ``big`` standing for x / +inf
            return big if y is pos_inf else _div_end(x, y, fn)

        bmin, bmax = b.min_value, b.max_value
        if sa > 0:
            return IntervalSet(q(a.min_value, bmax, zero), q(a.max_value, bmin, zero))
        if sa < 0:
            return IntervalSet(q(a.min_value, bmin, minus_one), q(a.max_value, bmax, zero))
        lo = min_end(q(a.min_value, bmin, minus_one), q(a.min_value, bmax, minus_one))
        hi = max_end(q(a.max_value, bmin, zero), q(a.max_value, bmax, zero))
        return IntervalSet(lo, hi)

    def _positive(self, x: End) -> bool:
        if isinstance(x, _Infinity):
            return x.sign > 0
        lo = self.an.const_int_bound(x)[0] if dt.is_integer(x.dtype) else None
        return lo is not None and lo >= 1

    def _floordiv(self, e, a, b):
        return self._divide(e, a, b, floordiv, False)

    def _truncdiv(self, e, a, b):
        return self._divide(e, a, b, _truncdiv, True)

    def _floormod(self, e, a, b):
        return self._modulo(e, a, b, trunc=False)

    def _truncmod(self, e, a, b):
        return self._modulo(e, a, b, trunc=True)

    def _modulo(self, e, a, b, trunc: bool):
        zero = make_const(0, e.dtype)
        one = make_const(1, e.dtype)
        sa = self._iv_sign(a)
        if b.is_single_point():
            k = b.min_value
            if isinstance(k, E.IntImm) and k.value > 0 and all(
                    isinstance(x, E.IntImm) for x in (a.min_value, a.max_value)):
                lo, hi, c = a.min_value.value, a.max_value.value, k.value
                if not trunc and lo // c == hi // c:
                    return IntervalSet(E.IntImm(e.dtype, lo % c), E.IntImm(e.dtype, hi % c))
            s = self._sign(k)
            if s == 0:
                return self._everything(e)
            top = sub(k, one) if s > 0 else sub(sub(zero, k), one)
        elif self._positive(b.min_value):
            if b.max_value is pos_inf:
                return IntervalSet(zero, pos_inf) if sa > 0 or not trunc else \
                    self._everything(e)
            top = sub(b.max_value, one)
        else:
            return self._everything(e)
        if trunc:
            if sa > 0:
                return IntervalSet(zero, min_end(a.max_value, top))
            if sa < 0:
                return IntervalSet(max_end(a.min_value, neg_end(top)), zero)
            return IntervalSet(neg_end(top), top)
        if b.is_single_point() and self._sign(b.min_value) < 0:
            return IntervalSet(add(b.min_value, one), zero)
        if sa > 0:
            return IntervalSet(zero, min_end(a.max_value, top))
        return IntervalSet(zero, top)

    def _min(self, e, a, b):
        return IntervalSet(min_end(a.min_value, b.min_value), min_end(a.max_value, b.max_value))

    def _max(self, e, a, b):
        return IntervalSet(max_end(a.min_value, b.min_value), max_end(a.max_value, b.max_value))

    # ---- the rest ---------------------------------------------------------------------------
    def _compare(self, e, a, b) -> IntervalSet:
        ends = (a.min_value, a.max_value, b.min_value, b.max_value)
        if all(isinstance(x, E.IntImm) for x in ends):
            a0, a1, b0, b1 = (x.value for x in ends)
            verdict = {E.LT: (a1 < b0, a0 >= b1), E.LE: (a1 <= b0, a0 > b1),
                       E.GT: (a0 > b1, a1 <= b0), E.GE: (a0 >= b1, a1 < b0)}.get(type(e))
            if verdict is not None and (verdict[0] or verdict[1]):
                return self._point(E.IntImm(e.dtype, 1 if verdict[0] else 0))
        return IntervalSet(*_BOOL_RANGE) if e.dtype == "bool" else self._everything(e)

    def _select(self, e, cond, tv, fv) -> IntervalSet:
        c = self(cond)
        t, f = self(tv), self(fv)
        if c.is_single_point() and isinstance(c.min_value, E.IntImm):
            return t if c.min_value.value else f
        if c.is_single_point() and t.is_single_point() and f.is_single_point():
            if isinstance(e, E.Select):
                return self._rebuilt_point(e, condition=c.min_value, true_value=t.min_value,
                                           false_value=f.min_value)
            return self._rebuilt_point(e, args=(c.min_value, t.min_value, f.min_value))
        return raw_union(t, f)

    def _cast(self, e: E.Cast) -> IntervalSet:
        v = self(e.value)
        if v.is_single_point():
            return self._rebuilt_point(e, value=v.min_value)
        if not (dt.is_integer(e.dtype) and dt.is_integer(e.value.dtype)):
            return self._everything(e)
        target, src = B.dtype_bound(e.dtype), B.dtype_bound(e.value.dtype)
        widening = B.contains(target, src[0]) and B.contains(target, src[1])

        def conv(x):
            if isinstance(x, _Infinity):
                return x
            if widening or (isinstance(x, E.IntImm) and B.contains(target, x.value)):
                return cast(x, e.dtype)
            return None

        lo, hi = conv(v.min_value), conv(v.max_value)
        if lo is None or hi is None:
            return IntervalSet(E.IntImm(e.dtype, target[0]), E.IntImm(e.dtype, target[1]))
        return IntervalSet(lo, hi)

    def _ramp(self, e: E.Ramp) -> IntervalSet:
        base, stride = self(e.base), self(e.stride)
        if base.is_single_point() and stride.is_single_point():
            return self._rebuilt_point(e, base=base.min_value, stride=stride.min_value)
        last = self._add(e, base, self._scale(stride, make_const(e.lanes - 1,
                                                                    e.base.dtype), e.base))
        return raw_union(base, last)


_BINARY = {
    E.Add: IntervalEvaluator._add, E.Sub: IntervalEvaluator._sub,
    E.Mul: IntervalEvaluator._mul, E.FloorDiv: IntervalEvaluator._floordiv,
    E.Div: IntervalEvaluator._truncdiv, E.FloorMod: IntervalEvaluator._floormod,
    E.Mod: IntervalEvaluator._truncmod, E.Min: IntervalEvaluator._min,
    E.Max: IntervalEvaluator._max,
}


def _within_dtype(s: IntervalSet, dtype: str) -> IntervalSet:
    """``s`` where its ends are constants inside ``dtype``'s range, else that whole range
    (the values wrap around)."""
    full = B.dtype_bound(dtype)
    ends = (s.min_value, s.max_value)
    if all(isinstance(x, E.IntImm) and B.contains(full, x.value) for x in ends):
        return s
    return IntervalSet(E.IntImm(dtype, full[0]), E.IntImm(dtype, full[1]))
