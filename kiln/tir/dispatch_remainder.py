"""Dispatch remainder: the remainder loop of a ``tail="dispatch"`` split, cut into paths of
descending vector widths that dispatch on its run-time extent.

``loop_partition`` leaves, for a split with ``tail="dispatch"`` (``kiln.te.split_tail``),
the full tiles and a remainder loop ``for (i, 0, r)`` whose extent ``r`` is below the factor
``f``. Its ``For`` annotation ``dispatch`` holds ``(f, w_1, ..., w_m)``: ``f``, then the
widths of the paths, widest first, each dividing the one before, the last 1. Path ``k``
runs the iterations ``[floordiv(r, w_{k-1})*w_{k-1}, floordiv(r, w_k)*w_k)`` (from 0 for
the first), ``w_k`` at a time in a vectorized loop; the scalar path is the loop itself over
what is left. A path that provably runs at most once is an ``if``. For ``f = 16`` and the
widths ``(8, 1)``::

    for (i, 0, r) { S(i) }
 => if (8 <= r) { vectorized (i.l8, 0, 8) { S(i.l8) } }
    for (i, floordiv(r, 8)*8, r - floordiv(r, 8)*8) { S(i) }

A loop of extent ``f`` (a full tile, or a tail whose guard ``loop_partition`` kept) is left
as it is. Guarantee: every iteration of the loop runs exactly once, in increasing order.
"""

from __future__ import annotations

from kiln.arith import Analyzer
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, Visitor, rebuild, substitute
from kiln.ir.op import emax, floordiv
from kiln.ir.stmt import For, ForKind, IfThenElse, Stmt, seq

#: the ``For`` annotation that lists a remainder loop's paths (``kiln.te.split_tail``)
DISPATCH_ANNOTATION = "dispatch"


def dispatch_remainder(stmt: Stmt) -> Stmt:
    """Cut the remainder loop of each ``tail="dispatch"`` split into vector paths of
    descending widths that test its extent at run time, and a scalar loop (module
    docstring)."""
    return _Dispatch().visit(stmt) if _has_dispatch(stmt) else stmt


def _has_dispatch(stmt: Stmt) -> bool:
    """Whether a loop of ``stmt`` is annotated ``dispatch`` (most programs have none)."""
    finder = _FindDispatch()
    finder.visit(stmt)
    return finder.found


class _FindDispatch(Visitor):
    def __init__(self):
        super().__init__()
        self.found = False

    def visit_For(self, node: For) -> None:
        if any(key == DISPATCH_ANNOTATION for key, _ in node.annotations):
            self.found = True
        elif not self.found:
            self.generic_visit(node)


class _Dispatch(Mutator):
    def __init__(self):
        super().__init__()
        self.an = Analyzer()

    def visit_For(self, node: For) -> Stmt:
        paths = dict(node.annotations).get(DISPATCH_ANNOTATION)
        with self.an.scope():
            # what the enclosing loops say about the extent (once: at most one widest vector)
            extent = self.an.simplify(node.extent) if paths else node.extent
            if paths and not self.an.can_prove(extent >= 0):  # a loop of r <= 0 runs nothing
                extent = emax(extent, E.IntImm(extent.dtype, 0))
            once = bool(paths) and self.an.can_prove(extent < 2 * paths[1])
            self.an.bind(node.loop_var, E.Range.from_min_extent(node.min, node.extent))
            node = self.generic_visit(node)
        if not paths or not _is_zero(node.min) or _is_const(extent, paths[0]):
            return node
        return seq(*_paths(rebuild(node, extent=extent), paths[1:], once))


def _paths(node: For, widths: tuple[int, ...], first_once: bool) -> list[Stmt]:
    """The paths of remainder loop ``node`` (module docstring); ``first_once``: whether
    its extent is provably below twice the first width."""
    r = node.extent
    out: list[Stmt] = []
    start: E.PrimExpr = E.IntImm(r.dtype, 0)
    once = first_once
    for k, w in enumerate(widths[:-1]):
        out.append(_vector_path(node, start, w, once))
        start = floordiv(r, w) * w
        once = 2 * widths[k + 1] >= w  # what is left is below w: one narrower vector at most
    scalar = tuple(a for a in node.annotations if a[0] != DISPATCH_ANNOTATION)
    out.append(rebuild(node, min=start, extent=r - start, kind=_scalar_kind(node.kind),
                       annotations=scalar))
    return out


def _vector_path(node: For, start: E.PrimExpr, w: int, once: bool) -> Stmt:
    """The iterations of ``node`` from ``start`` (a multiple of ``w``) to
    ``floordiv(r, w)*w``, ``w`` at a time: an ``if`` when they are at most ``w`` (``once``)."""
    r, v = node.extent, node.loop_var
    lane = E.Var(f"{v.name}.l{w}", v.dtype)
    if once:
        body = substitute(node.body, {v: start + lane})
        return IfThenElse(E.LE(start + w, r), For(lane, 0, w, ForKind.VECTORIZED, body))
    block = E.Var(f"{v.name}.v{w}", v.dtype)
    body = substitute(node.body, {v: start + block * w + lane})
    return For(block, 0, floordiv(r, w) - floordiv(start, w), ForKind.SERIAL,
               For(lane, 0, w, ForKind.VECTORIZED, body))


def _scalar_kind(kind: ForKind) -> ForKind:
    return ForKind.SERIAL if kind == ForKind.VECTORIZED else kind


def _is_zero(e: E.PrimExpr) -> bool:
    return isinstance(e, E.IntImm) and e.value == 0


def _is_const(e: E.PrimExpr, value: int) -> bool:
    return isinstance(e, E.IntImm) and e.value == value


__all__ = ["DISPATCH_ANNOTATION", "dispatch_remainder"]
