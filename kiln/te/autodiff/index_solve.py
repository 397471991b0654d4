"""Which points of a loop nest read a given tensor element: solving ``f(v) == x`` for ``v``.

``te.gradient`` turns the scatter "every point ``v`` of a stage's iteration domain reads
``X[f(v)]``" into the gather "element ``x`` of X's adjoint sums over the points with
``f(v) == x``". Where an index component is affine in the loop variables (integer
coefficients), its equation is solved for one of them; the variables left over stay *free*
(the adjoint sums over them), and the solution holds under *conditions*: the solved
variables' ranges, divisibility where a coefficient is not ±1, and the equations it could not
solve (non-affine indices such as ``i // 2``) as equalities. With no equation solved this is
the dense Jacobian form - correct for every index, but it sums over the whole domain.

Each equation eliminates the variable with the largest extent it may (one with coefficient
±1, or one no other equation uses), so the sum left runs over the small loops (the kernel
window, not the image). A conv2d with stride 2 reads ``X[n, c, h*2 + kh, w*2 + kw]``; for
``x = (x0, x1, x2, x3)``::

    n = x0, c = x1, kh = x2 % 2 + 2*kh_step, h = x2 // 2 - kh_step, kw = ..., w = ...
    free: f, kh_step, kw_step          conditions: kh < 3, 0 <= h < H, kw < 3, 0 <= w < W

(``kh`` runs over the taps of x2's parity only, so no divisibility test remains). Two shapes
of index are solved whole, leaving nothing to sum:

* a mixed radix, ``i*6 + j`` with ``0 <= j < 6`` (``h*2 + kh`` of a 2x2 pooling window with
  stride 2): ``i = t // 6, j = t % 6``;
* the digits of one flat index, as a reshape unravels it: ``X[(f // 6) % 4, f % 6]`` with
  ``0 <= f < 24`` is the single equation ``f == x0*6 + x1``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.arith import Analyzer
from kiln.ir import expr as E
from kiln.ir.functor import collect_vars, substitute
from kiln.ir.op import compare, floordiv, floormod, make_const
from kiln.ir.structural import structural_equal

__all__ = ["IndexSolution", "solve_indices"]

#: the extent a symbolic loop counts as when choosing which variable to eliminate
_SYMBOLIC_EXTENT = 1 << 62


@dataclass(frozen=True, eq=False)
class _Affine:
    """``sum(coeffs[v] * v) + rest``, where ``rest`` uses no loop variable."""

    coeffs: dict[E.Var, int]
    rest: E.PrimExpr

    def plus(self, other: _Affine, sign: int = 1) -> _Affine:
        coeffs = dict(self.coeffs)
        for v, c in other.coeffs.items():
            coeffs[v] = coeffs.get(v, 0) + sign * c
        rest = self.rest + other.rest if sign > 0 else self.rest - other.rest
        return _Affine({v: c for v, c in coeffs.items() if c != 0}, rest)

    def scaled(self, k: int) -> _Affine:
        return _Affine({v: c * k for v, c in self.coeffs.items()}, self.rest * k)

    def without(self, v: E.Var) -> _Affine:
        return _Affine({u: c for u, c in self.coeffs.items() if u is not v}, self.rest)

    def to_expr(self) -> E.PrimExpr:
        out = self.rest
        for v, c in self.coeffs.items():
            out = out + v * c
        return out


def _affine(e: E.PrimExpr, loop_vars: set[E.Var]) -> _Affine | None:
    """``e`` as an affine form of ``loop_vars``; None when it is not one."""
    if not collect_vars(e) & loop_vars:
        return _Affine({}, e)
    if isinstance(e, E.Var):
        return _Affine({e: 1}, make_const(0, e.dtype))
    if isinstance(e, E.Add | E.Sub):
        a, b = _affine(e.a, loop_vars), _affine(e.b, loop_vars)
        if a is None or b is None:
            return None
        return a.plus(b, 1 if isinstance(e, E.Add) else -1)
    if isinstance(e, E.Mul):
        for form, factor in ((e.a, e.b), (e.b, e.a)):
            if isinstance(factor, E.IntImm):
                inner = _affine(form, loop_vars)
                return None if inner is None else inner.scaled(factor.value)
    return None


@dataclass
class IndexSolution:
    """The points ``v`` with ``f(v) == x``: ``values`` gives the solved loop variables as
    expressions of ``x`` and of the ``free`` loop variables left to sum over (with their
    ranges, in the domain's order; a new ``<u>_step`` variable in the place of ``u``); the
    point belongs to the domain and solves the equations exactly when every ``condition``
    holds."""

    values: dict[E.Var, E.PrimExpr]
    free: dict[E.Var, E.Range]
    conditions: list[E.PrimExpr]


def solve_indices(indices: list[E.PrimExpr], targets: list[E.PrimExpr],
                  domain: dict[E.Var, E.Range],
                  target_extents: list[E.PrimExpr]) -> IndexSolution:
    """Solve ``indices[d](v) == targets[d]`` for the loop variables ``v`` of ``domain``,
    where ``targets[d]`` ranges over ``[0, target_extents[d])``."""
    loop_vars = set(domain)
    domain = dict(domain)  # the elimination may add loop variables
    pending: list[tuple[_Affine, E.PrimExpr]] = []
    equations, conditions = _equations(indices, targets, domain)
    for index, target in equations:
        form = _affine(index, loop_vars)
        if form is None:
            conditions.append(compare(E.EQ, target, index))
        else:
            pending.append((form, target))
    order = _eliminate(pending, domain, conditions)
    for form, target in pending:
        conditions.append(compare(E.EQ, target, form.to_expr()))
    values = _back_substitute(order)
    for v, value in values.items():
        dom = domain[v]
        conditions.append(compare(E.LE, dom.min, value))
        conditions.append(compare(E.LT, value, dom.min + dom.extent))
    free = {v: dom for v, dom in domain.items() if v not in values}
    conditions = [substitute(c, values) for c in conditions]
    return _simplified(IndexSolution(values, free, conditions), targets, target_extents)


@dataclass(frozen=True, eq=False)
class _Digit:
    """An index ``floormod(floordiv(base, stride), radix)``; ``radix`` None: no floormod."""

    base: E.PrimExpr
    stride: int
    radix: int | None


def _digit(e: E.PrimExpr) -> _Digit:
    radix = None
    if isinstance(e, E.FloorMod) and isinstance(e.b, E.IntImm):
        radix, e = e.b.value, e.a
    stride = 1
    while isinstance(e, E.FloorDiv) and isinstance(e.b, E.IntImm):
        stride, e = stride * e.b.value, e.a
    return _Digit(e, stride, radix)


_Equation = tuple[E.PrimExpr, E.PrimExpr]  # (index, target)


def _equations(indices: list[E.PrimExpr], targets: list[E.PrimExpr],
               domain: dict[E.Var, E.Range]) -> tuple[list[_Equation], list[E.PrimExpr]]:
    """The equations ``(index, target)`` to solve and the conditions they need: as given,
    except that all the digits of one flat index (a reshape's unravelling ``floordiv``/
    ``floormod``) become one equation ``flat == sum(target_k * stride_k)``."""
    digits = [_digit(i) for i in indices]
    groups: list[list[int]] = []  # positions of the digits of one base
    for d, digit in enumerate(digits):
        if digit.stride == 1 and digit.radix is None:
            continue
        group = next((g for g in groups if structural_equal(digits[g[0]].base, digit.base)),
                     None)
        if group is None:
            groups.append([d])
        else:
            group.append(d)
    equations: list[_Equation] = []
    conditions: list[E.PrimExpr] = []
    recombined: set[int] = set()
    for group in groups:
        found = _recombined([digits[d] for d in group], [targets[d] for d in group], domain)
        if found is not None:
            equations.append(found[0])
            conditions.extend(found[1])
            recombined.update(group)
    equations += [(indices[d], targets[d]) for d in range(len(indices)) if d not in recombined]
    return equations, conditions


def _recombined(digits: list[_Digit], targets: list[E.PrimExpr],
                domain: dict[E.Var, E.Range]) -> tuple[_Equation, list[E.PrimExpr]] | None:
    """``(base, sum(target_k * stride_k))`` and the targets' digit ranges, when ``digits``
    are all the digits of their base in a mixed radix (strides ``1, r_n, r_n * r_(n-1)``...)
    and hold its whole value; None otherwise."""
    ranked = sorted(zip(digits, targets, strict=True), key=lambda dt_: -dt_[0].stride)
    if ranked[-1][0].stride != 1:
        return None
    for (upper, _), (lower, _) in zip(ranked, ranked[1:], strict=False):
        if lower.radix is None or upper.stride != lower.stride * lower.radix:
            return None
    top = ranked[0][0]
    if top.radix is not None and not _within(top.base, top.stride * top.radix, domain):
        return None
    flat = make_const(0, top.base.dtype)
    conditions = []
    for digit, target in ranked:
        flat = flat + target * digit.stride
        if digit.radix is not None:
            conditions.append(compare(E.LT, target, make_const(digit.radix, target.dtype)))
    return (top.base, flat), conditions


def _within(e: E.PrimExpr, size: int, domain: dict[E.Var, E.Range]) -> bool:
    """Whether ``0 <= e < size`` holds over ``domain``."""
    analyzer = Analyzer()
    for v, dom in domain.items():
        analyzer.bind(v, dom)
    return analyzer.can_prove(compare(E.LE, make_const(0, e.dtype), e)) and \
        analyzer.can_prove(compare(E.LT, e, make_const(size, e.dtype)))


def _eliminate(pending: list[tuple[_Affine, E.PrimExpr]], domain: dict[E.Var, E.Range],
               conditions: list[E.PrimExpr]) -> list[tuple[E.Var, E.PrimExpr]]:
    """Solve equations of ``pending`` one variable at a time, removing them from the list;
    returns the solved variables in order, each value in terms of the variables solved
    after it. Divisibility conditions are appended to ``conditions``, new loop variables to
    ``domain``."""
    order: list[tuple[E.Var, E.PrimExpr]] = []
    order += _eliminate_mixed_radix(pending, domain)
    while (pivot := _best_pivot(pending, domain)) is not None:
        k, v = pivot
        form, target = pending.pop(k)
        a = form.coeffs[v]
        numerator = _Affine({}, target).plus(form.without(v), -1)  # a * v == numerator
        if abs(a) == 1:
            solved = numerator.scaled(a)
            order.append((v, solved.to_expr()))
            pending[:] = [(_replace(f, v, solved), t) for f, t in pending]
        elif (strided := _solve_strided(form, target, v, pending, domain)) is not None:
            order += strided
        else:
            num = numerator.to_expr()
            conditions.append(compare(E.EQ, floormod(num, a), make_const(0, num.dtype)))
            order.append((v, floordiv(num, a)))
    return order


def _solve_strided(form: _Affine, target: E.PrimExpr, v: E.Var,
                   pending: list[tuple[_Affine, E.PrimExpr]],
                   domain: dict[E.Var, E.Range]) -> list[tuple[E.Var, E.PrimExpr]] | None:
    """Solve ``a*v + c*u == m`` (``m`` the rest of the equation moved to the right; ``|a| >
    1``, ``|c| == 1``, ``u`` zero-based with a constant extent ``E`` and in no other
    equation) without a divisibility test: ``u`` runs over its residue class only. With
    ``n = c*m``, ``u = n % |a| + |a|*s`` and ``v = c*sign(a)*(n // |a| - s)``, where the new
    loop variable ``s`` (``<u>_step``, over ``[0, ceil(E / |a|))``) is added to ``domain``
    after ``u``. For a conv2d with stride 2 this visits the kernel taps of one parity only,
    instead of testing all of them."""
    a = form.coeffs[v]
    for u, c in form.coeffs.items():
        dom = domain[u]
        if u is v or abs(c) != 1 or _shared(u, pending) or not _zero_based_const(dom):
            continue
        n = _Affine({}, target).plus(form.without(v).without(u), -1).scaled(c).to_expr()
        step = E.Var(f"{u.name}_step", u.dtype)
        _insert_after(domain, u, step, E.Range(0, -(-dom.extent.value // abs(a))))
        u_value = floormod(n, abs(a)) + step * abs(a)
        v_value = (floordiv(n, abs(a)) - step) * (c if a > 0 else -c)
        return [(u, u_value), (v, v_value)]
    return None


def _shared(v: E.Var, equations: list[tuple[_Affine, E.PrimExpr]]) -> bool:
    """Whether one of ``equations`` uses ``v``."""
    return any(v in f.coeffs for f, _ in equations)


def _zero_based_const(dom: E.Range) -> bool:
    return isinstance(dom.min, E.IntImm) and dom.min.value == 0 and \
        isinstance(dom.extent, E.IntImm)


def _insert_after(domain: dict[E.Var, E.Range], anchor: E.Var, v: E.Var,
                  dom: E.Range) -> None:
    items = list(domain.items())
    k = next(j for j, (u, _) in enumerate(items) if u is anchor)
    domain.clear()
    domain.update(items[:k + 1] + [(v, dom)] + items[k + 1:])


def _eliminate_mixed_radix(pending: list[tuple[_Affine, E.PrimExpr]],
                           domain: dict[E.Var, E.Range]) -> list[tuple[E.Var, E.PrimExpr]]:
    """Solve, and remove from ``pending``, each equation ``sum(c_k * v_k) + rest == t``
    whose variables no other equation uses and whose coefficients are the strides of their
    extents (``i*6 + j`` with ``j < 6``, a reshape's flat index; ``h*2 + kh`` with
    ``kh < 2``): every variable is a digit of ``t - rest``, and nothing is left to sum."""
    order: list[tuple[E.Var, E.PrimExpr]] = []
    k = 0
    while k < len(pending):
        form, target = pending[k]
        digits = _radix_digits(form, domain)
        others = pending[:k] + pending[k + 1:]
        if digits is None or any(_shared(v, others) for v, _ in digits):
            k += 1
            continue
        del pending[k]
        number = target - form.rest
        (top, top_stride), lower = digits[-1], digits[:-1]
        order.append((top, floordiv(number, top_stride)))
        order += [(v, floormod(floordiv(number, stride), domain[v].extent))
                  for v, stride in lower]
    return order


def _radix_digits(form: _Affine, domain: dict[E.Var, E.Range]) -> list[tuple[E.Var, int]] | None:
    """``form``'s variables with their coefficients, lowest first, when those are the
    strides of a mixed radix (1, extent_0, extent_0 * extent_1, ...) of at least two digits
    over zero-based constant extents (the top one may be symbolic); None otherwise."""
    ranked = sorted(form.coeffs.items(), key=lambda vc: vc[1])
    if len(ranked) < 2:
        return None
    stride = 1
    for k, (v, c) in enumerate(ranked):
        dom = domain[v]
        if c != stride or not (isinstance(dom.min, E.IntImm) and dom.min.value == 0):
            return None
        if k < len(ranked) - 1:
            if not isinstance(dom.extent, E.IntImm):
                return None
            stride *= dom.extent.value
    return ranked


def _best_pivot(pending: list[tuple[_Affine, E.PrimExpr]],
                domain: dict[E.Var, E.Range]) -> tuple[int, E.Var] | None:
    """The (equation, variable) to eliminate next: the largest loop that can be solved for
    while the other equations stay affine; unit coefficients first among equals."""
    best, best_key = None, None
    for k, (form, _) in enumerate(pending):
        others = pending[:k] + pending[k + 1:]
        for v, c in form.coeffs.items():
            if abs(c) != 1 and _shared(v, others):
                continue
            extent = domain[v].extent
            size = extent.value if isinstance(extent, E.IntImm) else _SYMBOLIC_EXTENT
            key = (size, abs(c) == 1)
            if best_key is None or key > best_key:
                best, best_key = (k, v), key
    return best


def _replace(form: _Affine, v: E.Var, value: _Affine) -> _Affine:
    c = form.coeffs.get(v, 0)
    return form if c == 0 else form.without(v).plus(value.scaled(c))


def _back_substitute(order: list[tuple[E.Var, E.PrimExpr]]) -> dict[E.Var, E.PrimExpr]:
    """Each solved variable in terms of the free ones and the targets only."""
    values: dict[E.Var, E.PrimExpr] = {}
    for v, value in reversed(order):
        values[v] = substitute(value, values)
    return {v: values[v] for v, _ in order}


def _simplified(sol: IndexSolution, targets: list[E.PrimExpr],
                target_extents: list[E.PrimExpr]) -> IndexSolution:
    """``sol`` simplified under the ranges of the free variables and the targets, without
    the conditions those ranges already prove."""
    analyzer = Analyzer()
    for t, extent in zip(targets, target_extents, strict=True):
        if isinstance(t, E.Var):
            analyzer.bind(t, E.Range(0, extent))
    for v, dom in sol.free.items():
        analyzer.bind(v, dom)
    values = {v: analyzer.simplify(e) for v, e in sol.values.items()}
    conditions = []
    for c in sol.conditions:
        c = analyzer.simplify(c)
        if not (isinstance(c, E.IntImm) and c.value):
            conditions.append(c)
    return IndexSolution(values, sol.free, conditions)
