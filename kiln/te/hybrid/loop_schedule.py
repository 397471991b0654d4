"""A stage's schedule applied to a hybrid operation's own loop nest.

A hybrid function's loops are written out in its body, so ``split``, ``fuse``, ``reorder``
and the loop annotations of its stage rewrite that body directly, as TVM's
``ApplyLoopShapes``, ``ApplyLoopOrder`` and ``ApplyLoopAnnotations`` do:

- split:  ``for (i, 0, 10) B`` → ``for (i.outer, 0, 3) for (i.inner, 0, 4)
  if (likely(i.outer*4 + i.inner < 10)) B[i := i.outer*4 + i.inner]`` (no guard where the
  factor divides the extent); a ``parallel`` loop stays parallel outside, a ``vectorize`` /
  ``unroll`` loop stays so inside;
- fuse:   ``for (i, 0, 4) for (j, 0, 8) B`` → ``for (i.j.fused, 0, 32) B[i := f // 8,
  j := f % 8]`` (the two loops must be perfectly nested);
- reorder: loop headers are permuted in place, which needs the reordered loops perfectly
  nested (a split's guard between them breaks that: split by a dividing factor);
- parallel / vectorize / unroll set the loop's kind, ``bind`` makes it a ``thread_extent``
  attribute, pragmas wrap the loop in ``pragma_<key>`` attributes, ``prefetch`` puts its
  ``prefetch_scope`` attributes at the top of the loop's body (kiln/te/prefetch.py).
"""

from __future__ import annotations

from kiln.arith import Analyzer
from kiln.errors import ScheduleError
from kiln.ir.expr import IterVar, PrimExpr, Range, Var
from kiln.ir.functor import Mutator, Visitor, rebuild, substitute
from kiln.ir.op import cast, floordiv, floormod
from kiln.ir.stmt import AttrStmt, For, ForKind, IfThenElse, Stmt
from kiln.tir.op import likely

from ..prefetch import prefetch_scopes
from ..relations import split_factor
from ..schedule import Fuse, Split, Stage

_KIND = {"": ForKind.SERIAL, "parallel": ForKind.PARALLEL, "vectorize": ForKind.VECTORIZED,
         "unroll": ForKind.UNROLLED}


def apply_loop_schedule(stage: Stage, ranges: dict[IterVar, Range], body: Stmt) -> Stmt:
    """``body`` (the operation's loop nest) with ``stage``'s splits, fuses, loop order and
    annotations applied."""
    body = apply_loop_shapes(stage, ranges, body)
    body = apply_loop_order(stage, ranges, body)
    return apply_loop_annotations(stage, ranges, body)


def loops_in_order(body: Stmt) -> list[For]:
    """The ``For`` loops of ``body``, outer before inner, in program order."""
    found: list[For] = []

    class _Loops(Visitor):
        def visit_For(self, node: For) -> None:
            found.append(node)
            self.generic_visit(node)

    _Loops().visit(body)
    return found


# ---------------------------------------------------------------------------------------
# split / fuse
# ---------------------------------------------------------------------------------------
def apply_loop_shapes(stage: Stage, ranges: dict[IterVar, Range], body: Stmt) -> Stmt:
    """Every split and fuse of ``stage``, in the order they were made."""
    for rel in stage.relations:
        if isinstance(rel, Split):
            rewriter: _LoopRewriter = _LoopSplitter(rel, ranges)
            what, var = "split", rel.parent.var
        elif isinstance(rel, Fuse):
            rewriter = _LoopFuser(rel, ranges)
            what, var = "fuse", rel.outer.var
        else:
            continue
        body = rewriter.visit(body)
        if not rewriter.done:
            raise ScheduleError(
                f"{what} on hybrid stage '{stage.name}': loop '{var.name}' is not a loop of "
                f"the hybrid function")
    return body


class _LoopRewriter(Mutator):
    """Rewrites the one loop over ``var``; ``done`` tells whether it was found."""

    def __init__(self, var: Var):
        super().__init__()
        self.var = var
        self.done = False

    def visit_For(self, node: For):
        if node.loop_var is not self.var:
            return self.generic_visit(node)
        self.done = True
        return self.rewrite(node)

    def rewrite(self, node: For) -> Stmt:
        raise NotImplementedError


class _LoopSplitter(_LoopRewriter):
    def __init__(self, rel: Split, ranges: dict[IterVar, Range]):
        super().__init__(rel.parent.var)
        self.rel = rel
        self.ranges = ranges

    def rewrite(self, node: For) -> Stmt:
        rel, ranges = self.rel, self.ranges
        outer_extent = ranges[rel.outer].extent
        factor = split_factor(rel, ranges)
        value = rel.outer.var * factor + rel.inner.var
        body = substitute(node.body, {node.loop_var: value + node.min})
        analyzer = Analyzer()
        analyzer.bind(rel.outer.var, Range.from_min_extent(0, outer_extent))
        analyzer.bind(rel.inner.var, Range.from_min_extent(0, factor))
        if not analyzer.can_prove(value < node.extent):
            body = IfThenElse(likely(value < node.extent), body)
        outer_kind = node.kind if node.kind == ForKind.PARALLEL else ForKind.SERIAL
        inner_kind = node.kind if node.kind != ForKind.PARALLEL else ForKind.SERIAL
        inner = For(rel.inner.var, 0, factor, inner_kind, body)
        return For(rel.outer.var, 0, outer_extent, outer_kind, inner)


class _LoopFuser(_LoopRewriter):
    def __init__(self, rel: Fuse, ranges: dict[IterVar, Range]):
        super().__init__(rel.outer.var)
        self.rel = rel
        self.ranges = ranges

    def rewrite(self, node: For) -> Stmt:
        rel = self.rel
        inner = node.body
        if not (isinstance(inner, For) and inner.loop_var is rel.inner.var):
            raise ScheduleError(
                f"fuse: loop '{rel.inner.var.name}' must be the only statement in the body "
                f"of loop '{rel.outer.var.name}' to fuse them")
        fused = rel.fused.var
        inner_extent = _as_dtype(inner.extent, fused.dtype)
        vmap = {node.loop_var: _as_dtype(floordiv(fused, inner_extent), node.loop_var.dtype),
                inner.loop_var: _as_dtype(floormod(fused, inner_extent), inner.loop_var.dtype)}
        return For(fused, 0, self.ranges[rel.fused].extent, ForKind.SERIAL,
                   substitute(inner.body, vmap))


def _as_dtype(e: PrimExpr, dtype: str) -> PrimExpr:
    return e if e.dtype == dtype else cast(e, dtype)


# ---------------------------------------------------------------------------------------
# reorder
# ---------------------------------------------------------------------------------------
def apply_loop_order(stage: Stage, ranges: dict[IterVar, Range], body: Stmt) -> Stmt:
    """Permute loop headers so the loops run in ``stage.leaf_iter_vars`` order."""
    leaves = {iv.var: iv for iv in stage.leaf_iter_vars}
    current = [loop for loop in loops_in_order(body) if loop.loop_var in leaves]
    required = stage.leaf_iter_vars
    moved = {loop.loop_var: want for loop, want in zip(current, required, strict=True)
             if loop.loop_var is not want.var}
    if not moved:
        return body
    _check_perfect_nest(stage, current, moved)
    kinds = {loop.loop_var: loop.kind for loop in current}
    return _LoopReorder(moved, kinds, ranges).visit(body)


def _check_perfect_nest(stage: Stage, current: list[For], moved: dict) -> None:
    outermost = next(loop for loop in current if loop.loop_var in moved)
    nest, loop = set(), outermost
    while isinstance(loop, For):
        nest.add(loop.loop_var)
        loop = loop.body
    if not set(moved) <= nest:
        names = ", ".join(v.name for v in moved)
        raise ScheduleError(
            f"reorder on hybrid stage '{stage.name}': the loops ({names}) must be perfectly "
            f"nested (each the only statement of the one outside it); a split whose factor "
            f"does not divide the extent adds a guard between its loops")


class _LoopReorder(Mutator):
    def __init__(self, moved: dict[Var, IterVar], kinds: dict[Var, ForKind],
                 ranges: dict[IterVar, Range]):
        super().__init__()
        self.moved = moved
        self.kinds = kinds
        self.ranges = ranges

    def visit_For(self, node: For):
        body = self.visit(node.body)
        target = self.moved.get(node.loop_var)
        if target is None:
            return node if body is node.body else rebuild(node, body=body)
        return For(target.var, 0, self.ranges[target].extent, self.kinds[target.var], body)


# ---------------------------------------------------------------------------------------
# parallel / vectorize / unroll / bind / pragma
# ---------------------------------------------------------------------------------------
def apply_loop_annotations(stage: Stage, ranges: dict[IterVar, Range], body: Stmt) -> Stmt:
    """Loop kinds, thread bindings and pragmas of ``stage`` on their loops."""
    attrs = {iv.var: (iv, attr) for iv, attr in stage.iter_var_attrs.items()}
    if not attrs:
        return body
    return _Annotator(stage, attrs).visit(body)


class _Annotator(Mutator):
    def __init__(self, stage: Stage, attrs: dict):
        super().__init__()
        self.stage = stage
        self.attrs = attrs

    def visit_For(self, node: For):
        node = self.generic_visit(node)
        entry = self.attrs.get(node.loop_var)
        if entry is None:
            return node
        iv, attr = entry
        if attr.bind_thread is not None:
            thread = attr.bind_thread
            body = substitute(node.body, {node.loop_var: _as_dtype(thread.var,
                                                                   node.loop_var.dtype)})
            return AttrStmt(thread, "thread_extent", node.extent, body)
        body = prefetch_scopes(self.stage, iv, node.body)
        kind = _KIND[attr.kind] if attr.kind else node.kind
        loop: Stmt = node if body is node.body and kind == node.kind else \
            rebuild(node, kind=kind, body=body)
        for key, value in reversed(attr.pragmas):
            loop = AttrStmt(iv, "pragma_" + key, value, loop)
        return loop
