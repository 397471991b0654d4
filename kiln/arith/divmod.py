"""Rules for integer ``floordiv``/``floormod`` (and truncating ``Div``/``Mod``).

With floor semantics, splitting off multiples of the divisor is exact for *any* values::

    floordiv(q*c + r, c) == q + floordiv(r, c)        floormod(q*c + r, c) == floormod(r, c)

so the numerator's linear form is split into a divisible part and a remainder ``r``; the
remainder's bounds then often fix the quotient (``floordiv(j, 8) -> 0`` for ``j in [0, 7]``;
``floordiv(5*n - 1, n) -> 4`` for ``n >= 1``: a remainder in ``[-b, 0)`` takes one off).
A factor ``g`` of the divisor is taken out of the terms it divides when the others lie in
one block of ``g`` (``floordiv(jo*16 + ji, 64) -> floordiv(jo, 4)`` for ``ji in [0, 15]``;
a common factor of all terms is the case where the others are a constant). Further rules:
nested divisions merge (``floordiv(floordiv(x, a), b) -> floordiv(x, a*b)``), and in sums
``floordiv(x, c)*c + floormod(x, c) -> x`` and ``x - floordiv(x, c)*c -> floormod(x, c)``.
Truncating division gets the same rules when its numerator is provably non-negative.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from math import gcd
from typing import TYPE_CHECKING

from ..ir import expr as E
from ..ir.op import make_const
from .linear import Lin, mono_key, render

if TYPE_CHECKING:
    from .rewrite import Rewriter


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def simplify_division(rw: Rewriter, e):
    """Simplify an integer FloorDiv/FloorMod/Div/Mod whose children are simplified."""
    a, b = e.a, e.b
    t = type(e)
    if isinstance(a, E.IntImm) and a.value == 0:
        return a  # 0 / b == 0 % b == 0 (b != 0 for the program to be defined)
    if isinstance(b, E.IntImm):
        c = b.value
        if c == 1:
            return a if t in (E.FloorDiv, E.Div) else make_const(0, e.dtype)
        if c == -1 and t in (E.FloorDiv, E.Div):
            return rw(E.Sub(make_const(0, e.dtype), a))
        if c == -1:
            return make_const(0, e.dtype)
    if t in (E.Div, E.Mod):
        return _trunc(rw, e)
    lb = rw.an.to_lin(b)
    if isinstance(b, E.IntImm) and b.value > 0:
        fn = floordiv_lin if t is E.FloorDiv else floormod_lin
        return rw.emit(fn(rw, rw.an.to_lin(a), b.value), e)
    return _symbolic(rw, e, lb)


# ---- constant divisor ------------------------------------------------------------------
def _atom(rw: Rewriter, node) -> Lin:
    return Lin.atom(node, rw.an.keys(node))


def _const(dtype: str, v: int) -> E.IntImm:
    return E.IntImm(dtype, v)


def _subset_gcds(c: int, coeffs: Iterable[int]) -> set[int]:
    """``gcd(c, *S)`` for every non-empty subset ``S`` of ``coeffs``."""
    out: set[int] = set()
    for co in coeffs:
        g = gcd(c, co)
        out |= {gcd(g, h) for h in out} | {g}
    return out


def _split_coarse(rw: Rewriter, r: Lin, c: int) -> tuple[int, Lin] | None:
    """``(g, y + k)`` with ``r == g*y + s``, ``g > 1`` a divisor of ``c`` and every value of
    ``s`` in one block ``[k*g, k*g + g - 1]``; None when no such ``g`` is found.

    ``y`` takes the terms whose coefficient ``g`` divides, ``s`` the others and the
    constant; the candidates for ``g`` are the gcds of ``c`` and the coefficients of each
    subset of the terms, largest first. Then ``floordiv(r, c) == floordiv(y + k, c/g)``:
    ``floordiv(jo*16 + ji, 64) -> floordiv(jo, 4)`` for ``ji in [0, 15]``. A common factor of
    all terms is the case of an ``s`` that is a constant (``floordiv(x*4 + 5, 8) ->
    floordiv(x + 1, 2)``)."""
    for g in sorted(_subset_gcds(c, r.coeffs()) - {1}, reverse=True):
        y_terms = {m: (co // g, a) for m, (co, a) in r.terms.items() if co % g == 0}
        s = Lin(r.dtype, {m: v for m, v in r.terms.items() if m not in y_terms}, r.const)
        k = s.const // g if s.is_const() else _same_block(rw, s, g)
        if k is not None:
            return g, Lin(r.dtype, y_terms, k)
    return None


def _same_block(rw: Rewriter, r: Lin, c: int):
    """``k`` when every value of ``r`` lies in ``[k*c, k*c + c - 1]``, else None."""
    lo, hi = rw.an.lin_bound(r)
    if lo is not None and hi is not None and lo // c == hi // c:
        return lo // c
    return None


def floordiv_lin(rw: Rewriter, lin: Lin, c: int) -> Lin:
    """The linear form of ``floordiv(lin, c)`` for a constant ``c > 0``."""
    dtype = lin.dtype
    q_terms, r_terms = {}, {}
    for k, (coef, atoms) in lin.terms.items():
        if coef % c == 0:
            q_terms[k] = (coef // c, atoms)
        else:
            r_terms[k] = (coef, atoms)
    if not r_terms:
        return Lin(dtype, q_terms, lin.const // c)
    q0 = _tdiv(lin.const, c)
    q = Lin(dtype, q_terms, q0)
    r = Lin(dtype, r_terms, lin.const - q0 * c)
    return q.add(_floordiv_rest(rw, r, c))


def _floordiv_rest(rw: Rewriter, r: Lin, c: int) -> Lin:
    dtype = r.dtype
    k = _same_block(rw, r, c)
    if k is not None:
        return Lin.constant(dtype, k)
    split = _split_coarse(rw, r, c)
    if split is not None:  # floordiv(g*y + s, g*c') == floordiv(y + k, c')
        g, y = split
        return floordiv_lin(rw, y, c // g)
    single = _single_atom(r)
    if single is not None and type(single) is E.FloorDiv:
        inner = single.b
        if isinstance(inner, E.IntImm) and inner.value > 0:
            # floordiv(floordiv(x, c1) + k, c) == floordiv(x + k*c1, c1*c)
            x = rw.an.to_lin(single.a).add_const(r.const * inner.value)
            return floordiv_lin(rw, x, inner.value * c)
        if r.const == 0 and _positive(rw, inner):
            return rw.an.to_lin(rw(E.FloorDiv(single.a, rw(E.Mul(inner, _const(dtype, c))))))
    return _atom(rw, E.FloorDiv(render(r), _const(dtype, c)))


def floormod_lin(rw: Rewriter, lin: Lin, c: int) -> Lin:
    """The linear form of ``floormod(lin, c)`` for a constant ``c > 0``."""
    dtype = lin.dtype
    terms = {}
    for k, (coef, atoms) in lin.terms.items():
        m = coef - c * _tdiv(coef, c)
        if m:
            terms[k] = (m, atoms)
    r0 = lin.const - c * _tdiv(lin.const, c)
    if not terms:
        return Lin.constant(dtype, r0 % c)
    r = Lin(dtype, terms, r0)
    k = _same_block(rw, r, c)
    if k is not None:
        return r.add_const(-k * c)
    split = _split_coarse(rw, r, c)
    if split is not None:  # floormod(g*y + s, g*c') == g*floormod(y + k, c') + s - k*g
        g, y = split
        return floormod_lin(rw, y, c // g).scale(g).add(r.sub(y.scale(g)))
    single = _single_atom(r)
    if single is not None and type(single) is E.FloorMod and isinstance(single.b, E.IntImm) \
            and single.b.value % c == 0:
        # floormod(floormod(x, k*c) + r0, c) == floormod(x + r0, c)
        return floormod_lin(rw, rw.an.to_lin(single.a).add_const(r.const), c)
    return _atom(rw, E.FloorMod(render(r), _const(dtype, c)))


def _single_atom(r: Lin):
    """The atom ``x`` when ``r`` is ``x + const``, else None."""
    if len(r.terms) != 1:
        return None
    coef, atoms = next(iter(r.terms.values()))
    return atoms[0][1] if coef == 1 and len(atoms) == 1 else None


# ---- symbolic divisor --------------------------------------------------------------------
def _positive(rw: Rewriter, x) -> bool:
    lo = rw.an.const_int_bound(x)[0]
    return lo is not None and lo >= 1


def _in_range(rw: Rewriter, r: Lin, b) -> bool:
    """``0 <= r < b`` provable."""
    an = rw.an
    lo = an.diff_bound(r, lambda bd: bd[0] is not None and bd[0] >= 0)[0]
    if lo is None or lo < 0:
        return False
    hi = an.diff_bound(r.sub(an.to_lin(b)), lambda bd: bd[1] is not None and bd[1] < 0)[1]
    return hi is not None and hi < 0


def _split_by_monomial(rw: Rewriter, lin: Lin, lb: Lin):
    """``(q, r)`` with ``lin == q*b + r`` where ``b = lb`` is one monomial, or None."""
    st = lb.single_term()
    if st is None:
        return None
    cb, batoms = st
    need = Counter(k for k, _ in batoms)
    q, r = Lin(lin.dtype), Lin(lin.dtype, {}, lin.const)
    for key, (coef, atoms) in lin.terms.items():
        have = Counter(k for k, _ in atoms)
        if coef % cb or any(have[k] < n for k, n in need.items()):
            r = r.add(Lin(lin.dtype, {key: (coef, atoms)}))
            continue
        left, drop = [], Counter(need)
        for k, a in atoms:
            if drop[k]:
                drop[k] -= 1
            else:
                left.append((k, a))
        if left:
            q = q.add(Lin(lin.dtype, {mono_key(k for k, _ in left): (coef // cb, tuple(left))}))
        else:
            q = q.add_const(coef // cb)
    return q, r


def _symbolic(rw: Rewriter, e, lb: Lin):
    """FloorDiv/FloorMod by a non-constant divisor."""
    a, b = e.a, e.b
    is_div = type(e) is E.FloorDiv
    la = rw.an.to_lin(a)
    split = _split_by_monomial(rw, la, lb)
    if split is not None and split[0].size():
        q, r = split
        if r.size() == 0:
            return rw.emit(q, e) if is_div else make_const(0, e.dtype)
        if _in_range(rw, r, b):
            return rw.emit(q if is_div else r, e)
        if _in_range(rw, r.add(lb), b):  # -b <= r < 0: floordiv(q*b - 1, b) == q - 1
            return rw.emit(q.add_const(-1) if is_div else r.add(lb), e)
        node = (E.FloorDiv if is_div else E.FloorMod)(render(r), b)
        return rw.emit(q.add(_atom(rw, node)) if is_div else _atom(rw, node), e)
    if _in_range(rw, la, b):
        return make_const(0, e.dtype) if is_div else a
    if _in_range(rw, la.add(lb), b):  # -b <= a < 0
        return make_const(-1, e.dtype) if is_div else rw.emit(la.add(lb), e)
    if is_div and type(a) is E.FloorDiv and _positive(rw, a.b) and _positive(rw, b):
        return rw(E.FloorDiv(a.a, rw(E.Mul(a.b, b))))
    return e


# ---- truncating division -------------------------------------------------------------------
def _trunc(rw: Rewriter, e):
    """Div/Mod: the floor rules apply when the numerator is >= 0 and the divisor > 0."""
    a, b = e.a, e.b
    if not (isinstance(b, E.IntImm) and b.value > 0):
        return e
    lo = rw.an.const_int_bound(a)[0]
    if lo is None or lo < 0:
        return e
    la = rw.an.to_lin(a)
    fn = floordiv_lin if type(e) is E.Div else floormod_lin
    out = fn(rw, la, b.value)
    return rw.emit(_back_to_trunc(rw, out, la), e)


def _back_to_trunc(rw: Rewriter, lin: Lin, source: Lin) -> Lin:
    """Turn the new floor atoms of ``lin`` with non-negative numerators into Div/Mod."""
    seen = {k for _, atoms in source.terms.values() for k, _ in atoms}
    out = Lin(lin.dtype, {}, lin.const)
    for coef, atoms in lin.terms.values():
        new_atoms = []
        for k, x in atoms:
            if k not in seen and type(x) in (E.FloorDiv, E.FloorMod) and \
                    isinstance(x.b, E.IntImm) and x.b.value > 0:
                lo = rw.an.const_int_bound(x.a)[0]
                if lo is not None and lo >= 0:
                    x = (E.Div if type(x) is E.FloorDiv else E.Mod)(x.a, x.b)
                    k = rw.an.keys(x)
            new_atoms.append((k, x))
        out = out.add(Lin(lin.dtype, {mono_key(k for k, _ in new_atoms): (coef,
                                                                        tuple(new_atoms))}))
    return out


# ---- sums: floordiv(x, c)*c + floormod(x, c) -> x ---------------------------------------------
def _divisor_monomial(rw: Rewriter, d):
    """``(coeff, atom keys)`` of a divisor that is one monomial, or None."""
    if isinstance(d, E.IntImm):
        return (d.value, ()) if d.value > 0 else None
    st = rw.an.to_lin(d).single_term()
    if st is None:
        return None
    return st[0], tuple(k for k, _ in st[1])


def _has_divmod(lin: Lin) -> bool:
    return any(type(a) in (E.FloorDiv, E.FloorMod) for _, atoms in lin.terms.values()
               for _, a in atoms)


def merge_divmod(rw: Rewriter, lin: Lin) -> Lin:
    """Recombine ``floordiv``/``floormod`` pairs of the same operands inside a sum."""
    if not _has_divmod(lin):
        return lin
    for _ in range(8):  # each step removes a division atom; a few suffice
        step = _merge_once(rw, lin)
        if step is None:
            return lin
        lin = step
    return lin


def _mod_partners(rw: Rewriter, node) -> list:
    """Keys of the ``floormod`` atoms that complete ``floordiv(x, d)*d`` to ``x``:
    ``floormod(x, d)``, and ``floormod(y, d)`` when ``x`` is ``floormod(y, k*d)``."""
    keys = rw.an.keys
    out = [("FloorMod",) + keys(node)[1:]]
    x, d = node.a, node.b
    if type(x) is E.FloorMod and isinstance(d, E.IntImm) and isinstance(x.b, E.IntImm) and \
            d.value > 0 and x.b.value % d.value == 0:
        out.append(keys(E.FloorMod(x.a, d)))
    return out


def _merge_once(rw: Rewriter, lin: Lin) -> Lin | None:
    an = rw.an
    for key, (coef, atoms) in lin.terms.items():
        divs = [a for _, a in atoms if type(a) is E.FloorDiv]
        if len(divs) != 1:
            continue
        node = divs[0]
        dm = _divisor_monomial(rw, node.b)
        if dm is None:
            continue
        cd, dkeys = dm
        if key != mono_key((an.keys(node),) + dkeys) or coef % cd:
            continue
        k = coef // cd
        # k*d*floordiv(x, d) + k*floormod(x, d)  ->  k*x
        for pkey in _mod_partners(rw, node):
            target = mono_key((pkey,))
            other = lin.terms.get(target)
            if other is not None and other[0] == k:
                rest = Lin(lin.dtype, {m: v for m, v in lin.terms.items()
                                       if m != key and m != target}, lin.const)
                return rest.add(an.to_lin(node.a).scale(k))
        # k*x - k*d*floordiv(x, d)  ->  k*floormod(x, d)
        lx = an.to_lin(node.a)
        if lx.terms and all(lin.terms.get(m, (0,))[0] == -k * c
                            for m, (c, _) in lx.terms.items()):
            rest = Lin(lin.dtype, {m: v for m, v in lin.terms.items() if m != key}, lin.const)
            mod = an.to_lin(rw(E.FloorMod(node.a, node.b)))
            return rest.add(lx.scale(k)).sub(mod.scale(k))
    return None
