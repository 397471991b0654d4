"""The linear canonical form of integer expressions.

An integer expression is read as ``sum(coeff * monomial) + const`` where a monomial is a
product of *atoms* (variables and every sub-expression that is not ``+ - *``: ``floordiv``,
``min``, loads, casts...). Terms are kept in the order they first appear, so rendering a
form back to IR reproduces the reading order of the input::

    (i*4 + j) - i*4        ->  j
    x*2 + x*3              ->  (x*5)
    (n - 1)*m + m - 1      ->  ((n*m) - 1)

Atoms are compared structurally through ``KeyCache`` (variables by identity).
"""

from __future__ import annotations

from collections import Counter

from ..ir import expr as E
from .bound import wrap_int

# Products of sums are expanded only while the result stays this small.
EXPAND_LIMIT = 16


class KeyCache:
    """Hashable structural keys of expressions, memoized by object identity.

    The cache holds a reference to every keyed object, so ids stay valid while cached.
    """

    def __init__(self, limit: int = 200_000):
        self._memo: dict[int, tuple[object, object]] = {}
        self._limit = limit

    def clear(self) -> None:
        self._memo.clear()

    def __call__(self, e) -> object:
        hit = self._memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        if isinstance(e, E.Var):
            k = ("var", id(e))
        elif isinstance(e, E.IntImm):
            k = ("int", e.dtype, e.value)
        elif isinstance(e, E.FloatImm):
            k = ("float", e.dtype, e.value)
        elif isinstance(e, E.PrimExpr):
            k = (type(e).__name__, e.dtype, tuple(self._field(getattr(e, f)) for f in e._fields))
        else:
            k = ("id", id(e))
        if len(self._memo) > self._limit:
            self._memo.clear()
        self._memo[id(e)] = (e, k)
        return k

    def _field(self, v):
        if isinstance(v, E.PrimExpr):
            return self(v)
        if isinstance(v, tuple):
            return tuple(self._field(x) for x in v)
        if v is None or isinstance(v, str | int | float):
            return v
        # IterVars, reducers, producers: by identity (kept alive by the keyed parent).
        return ("id", id(v))


def mono_key(keys) -> frozenset:
    """Order-independent key of a product of atoms (a multiset of atom keys)."""
    return frozenset(Counter(keys).items())


class Lin:
    """``sum(coeff * prod(atoms)) + const`` over one integer dtype.

    ``terms`` maps a monomial key to ``(coeff, atoms)``; ``atoms`` is a tuple of
    ``(key, expr)`` pairs in the order the factors were first seen. Treat as immutable.
    """

    __slots__ = ("dtype", "terms", "const")

    def __init__(self, dtype: str, terms: dict | None = None, const: int = 0):
        self.dtype = dtype
        self.terms = terms if terms is not None else {}
        self.const = const

    # ---- construction ------------------------------------------------------------------
    @staticmethod
    def constant(dtype: str, value: int) -> Lin:
        return Lin(dtype, {}, value)

    @staticmethod
    def atom(expr: E.PrimExpr, key) -> Lin:
        atoms = ((key, expr),)
        return Lin(expr.dtype, {mono_key((key,)): (1, atoms)}, 0)

    # ---- queries -----------------------------------------------------------------------
    def is_const(self) -> bool:
        return not self.terms

    def size(self) -> int:
        return len(self.terms) + (1 if self.const else 0)

    def single_term(self):
        """``(coeff, atoms)`` when this is one monomial times a coefficient, else None."""
        if self.const == 0 and len(self.terms) == 1:
            return next(iter(self.terms.values()))
        return None

    def coeffs(self) -> list[int]:
        return [c for c, _ in self.terms.values()]

    # ---- arithmetic --------------------------------------------------------------------
    def add(self, other: Lin, sign: int = 1) -> Lin:
        terms = dict(self.terms)
        for k, (c, atoms) in other.terms.items():
            old = terms.get(k)
            if old is None:
                terms[k] = (sign * c, atoms)
            else:
                nc = old[0] + sign * c
                if nc == 0:
                    del terms[k]
                else:
                    terms[k] = (nc, old[1])
        return Lin(self.dtype, terms, self.const + sign * other.const)

    def sub(self, other: Lin) -> Lin:
        return self.add(other, -1)

    def scale(self, k: int) -> Lin:
        if k == 0:
            return Lin(self.dtype, {}, 0)
        if k == 1:
            return self
        return Lin(self.dtype, {m: (c * k, a) for m, (c, a) in self.terms.items()},
                   self.const * k)

    def add_const(self, k: int) -> Lin:
        return Lin(self.dtype, self.terms, self.const + k) if k else self

    def reduced(self, modulus: int) -> Lin:
        """The same form modulo ``modulus`` (a wrapping dtype's ``2**bits``): coefficients
        in ``[-modulus/2, modulus/2)``, zero terms dropped; a lone constant in the dtype's
        range (``(x + 200) + 100 -> x + 44`` and ``255 + 1 -> 0`` on uint8)."""
        half = modulus // 2

        def rep(v: int) -> int:
            return (v + half) % modulus - half

        terms = {m: (rep(c), a) for m, (c, a) in self.terms.items() if c % modulus}
        if terms:
            return Lin(self.dtype, terms, rep(self.const))
        return Lin(self.dtype, {}, wrap_int(self.const, self.dtype))

    def mul(self, other: Lin) -> Lin | None:
        """The expanded product, or None when it would exceed ``EXPAND_LIMIT`` terms."""
        if other.is_const():
            return self.scale(other.const)
        if self.is_const():
            return other.scale(self.const)
        if self.size() * other.size() > EXPAND_LIMIT:
            return None
        out = Lin(self.dtype, {}, self.const * other.const)
        for c1, a1 in self.terms.values():
            for c2, a2 in other.terms.values():
                atoms = a1 + a2
                out = out.add(Lin(self.dtype, {mono_key(k for k, _ in atoms): (c1 * c2, atoms)}))
            if other.const:
                out = out.add(Lin(self.dtype, {mono_key(k for k, _ in a1): (c1 * other.const,
                                                                            a1)}))
        if self.const:
            out = out.add(other.scale(self.const).add_const(-other.const * self.const))
        return out


# ---- rendering back to IR -----------------------------------------------------------------
def mono_expr(atoms) -> E.PrimExpr:
    """The product of a monomial's atoms, left to right."""
    out = atoms[0][1]
    for _, a in atoms[1:]:
        out = E.Mul(out, a)
    return out


def _scaled(atoms, k: int, dtype: str) -> E.PrimExpr:
    m = mono_expr(atoms)
    return m if k == 1 else E.Mul(m, E.IntImm(dtype, k))


def render(lin: Lin) -> E.PrimExpr:
    """IR for a linear form: terms in order (a positive one first), the constant last."""
    dtype = lin.dtype
    items = list(lin.terms.values())
    if not items:
        return E.IntImm(dtype, lin.const)
    first = next((i for i, (c, _) in enumerate(items) if c > 0), None)
    if first is not None and first > 0:
        items = [items[first]] + items[:first] + items[first + 1:]
    const = lin.const
    c0, a0 = items[0]
    if c0 > 0:
        out = _scaled(a0, c0, dtype)
    elif const > 0:
        out = E.Sub(E.IntImm(dtype, const), _scaled(a0, -c0, dtype))
        const = 0
    elif c0 == -1:
        out = E.Sub(E.IntImm(dtype, 0), mono_expr(a0))
    else:
        out = _scaled(a0, c0, dtype)
    for c, atoms in items[1:]:
        if c > 0:
            out = E.Add(out, _scaled(atoms, c, dtype))
        else:
            out = E.Sub(out, _scaled(atoms, -c, dtype))
    if const > 0:
        out = E.Add(out, E.IntImm(dtype, const))
    elif const < 0:
        out = E.Sub(out, E.IntImm(dtype, -const))
    return out
