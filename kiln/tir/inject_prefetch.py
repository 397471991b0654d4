"""Inject prefetch: ``prefetch_scope`` attributes become ``prefetch`` calls (TVM's
``InjectPrefetch``, with the cache-line loop of its ``StorageFlatten``).

``s[B].prefetch(W, k, offset)`` puts ``// attr [W] prefetch_scope = offset`` at the top of the
body of loop ``k``. This pass replaces each such attribute by a loop nest that prefetches the
region of ``W`` the body reads in iteration ``k + offset`` (loops inside the body relaxed to
their whole range, loops outside it fixed), one call per cache line of the region's innermost
contiguous extent::

    for (k.outer, 0, 7) {
      // attr [A] prefetch_scope = 1
      for (k.inner, 0, 16) { C[i] = (C[i] + A[i, ((k.outer*16) + k.inner)]) } }

becomes (after flattening; 16 float32 are one 64-byte line)::

    for (k.outer, 0, 7) {
      if ((k.outer < 6)) {
        prefetch(tvm_address_of(A[(((i*112) + (k.outer*16)) + 16)]), 0, 3, 1)
      }
      for (k.inner, 0, 16) { ... } }

A region longer than a line gets a loop ``for (prefetch.A.1, 0, lines)`` stepping one line
per call, and loops over its outer dimensions. The call's arguments are TVM's: the address,
0 (a read), 3 (keep in every cache level), 1 (data); the C backend emits
``__builtin_prefetch(addr, 0, 3)``, the CUDA backend nothing.

Guarantees: only ``prefetch`` calls are added, so results never change; they run only where
iteration ``k + offset`` exists (``if ((k + 1) < 8)`` where the loop range does not prove it),
and every prefetched address lies inside the tensor (a region the loop ranges do not keep
inside its shape, as the tail of a guarded split, is clamped to it). A region that cannot be
bounded (an index depending on a value computed in the body) is not prefetched.
"""

from __future__ import annotations

from kiln.arith import Analyzer, eval_interval
from kiln.arith.interval import IntervalSet
from kiln.ir import dtype as dt
from kiln.ir.expr import Call, IntImm, PrimExpr, ProducerLoad, Range, Var
from kiln.ir.functor import Mutator, collect_vars, defined_vars, post_order_visit, substitute
from kiln.ir.op import convert, emax, emin, floordiv, logical_and
from kiln.ir.stmt import AttrStmt, Evaluate, For, ForKind, IfThenElse, Stmt, seq

#: the attribute ``Stage.prefetch`` puts at the top of its loop's body (TVM's name)
PREFETCH_SCOPE = "prefetch_scope"
#: the bytes one prefetch brings in (TVM's ``cache_line_size``)
CACHE_LINE_BYTES = 64


def inject_prefetch(stmt: Stmt) -> Stmt:
    """Replace every ``prefetch_scope`` attribute by the prefetch calls of the region its
    tensor is read in iteration ``loop + offset`` (see module docstring)."""
    return _PrefetchInjector().visit(stmt)


class _PrefetchInjector(Mutator):
    def __init__(self):
        super().__init__()
        self.loops: list[For] = []  # the enclosing loops, outermost first

    def visit_For(self, node: For):
        self.loops.append(node)
        try:
            return super().generic_visit(node)
        finally:
            self.loops.pop()

    def visit_AttrStmt(self, node: AttrStmt):
        node = super().generic_visit(node)
        if node.attr_key != PREFETCH_SCOPE:
            return node
        if not self.loops:
            return node.body
        loop = self.loops[-1]
        analyzer = Analyzer()
        for outer in self.loops:
            analyzer.bind(outer.loop_var, Range.from_min_extent(outer.min, outer.extent))
        # the iteration prefetched for, ``loop + offset``, while it is one of the loop's
        ahead = Var(loop.loop_var.name + ".ahead", loop.loop_var.dtype)
        analyzer.bind(ahead, Range.from_min_extent(loop.min, loop.extent))
        region = _region_read(node.node, node.body, loop.loop_var, ahead)
        if region is None:
            return node.body
        region = [_clamp(lo, hi, extent, analyzer)
                  for (lo, hi), extent in zip(region, node.node.shape, strict=True)]
        lines = substitute(_prefetch_lines(node.node, region),
                           {ahead: loop.loop_var + node.value})
        cond = _in_loop(loop.loop_var + node.value, loop, analyzer)
        return seq(lines if cond is None else IfThenElse(cond, lines), node.body)


def _in_loop(value: PrimExpr, loop: For, analyzer: Analyzer) -> PrimExpr | None:
    """The condition that ``value`` is an iteration of ``loop`` (None where provable)."""
    conds = [c for c in (value >= loop.min, value < loop.min + loop.extent)
             if not analyzer.can_prove(c)]
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else logical_and(*conds)


def _region_read(tensor, body: Stmt, loop_var: Var,
                 value: PrimExpr) -> list[tuple[PrimExpr, PrimExpr]] | None:
    """``(low, high)`` of each index of ``tensor`` read in ``body`` with ``loop_var`` at
    ``value`` and every loop of ``body`` over its range; None if unbounded."""
    dom_map: dict[Var, IntervalSet] = {loop_var: IntervalSet.single_point(value)}
    reads: list[tuple[PrimExpr, ...]] = []

    def visit(n) -> None:
        if isinstance(n, For):
            dom_map[n.loop_var] = IntervalSet(n.min, n.min + n.extent - 1)
        elif isinstance(n, ProducerLoad) and n.producer == tensor:
            reads.append(n.indices)

    post_order_visit(body, visit)
    if not reads:
        return None
    inner = defined_vars(body)  # loops and lets of the body: no index of the region
    per_dim: list[IntervalSet | None] = [None] * len(tensor.shape)
    for indices in reads:
        for d, index in enumerate(indices):
            itv = eval_interval(index, dom_map)
            per_dim[d] = itv if per_dim[d] is None else per_dim[d].union(itv)
    region = []
    for itv in per_dim:
        if not itv.is_finite() or \
                (collect_vars(itv.min_value) | collect_vars(itv.max_value)) & inner:
            return None
        region.append((itv.min_value, itv.max_value))
    return region


def _clamp(lo: PrimExpr, hi: PrimExpr, extent: PrimExpr,
           analyzer: Analyzer) -> Range:
    """The range ``[lo, hi]`` of one dimension kept inside ``[0, extent)`` where the loop
    ranges do not prove it is."""
    if not analyzer.can_prove(lo >= 0):
        lo = emax(lo, 0)
    if not analyzer.can_prove(lo < extent):
        lo = emin(lo, extent - 1)
    if not analyzer.can_prove(hi < extent):
        hi = emin(hi, extent - 1)
    return Range.from_min_extent(analyzer.simplify(lo), analyzer.simplify(hi - lo + 1))


def _prefetch_lines(tensor, region: list[Range]) -> Stmt:
    """The loops of ``prefetch`` calls covering ``region`` of ``tensor``: trailing dimensions
    that fit in one cache line together are prefetched from their first element; along the
    next one, one call per cache line; the dimensions outside it are looped over."""
    per_line = max(1, CACHE_LINE_BYTES // max(1, dt.bits(tensor.dtype) // 8))
    starts, block = len(region) - 1, 1
    while starts > 0:
        extent = tensor.shape[starts]
        if not isinstance(extent, IntImm) or block * extent.value > per_line:
            break
        block *= extent.value
        starts -= 1
    stride = max(1, per_line // block)
    loop_vars = [Var(f"prefetch.{tensor.name}.{d}", "int32") for d in range(starts + 1)]
    indices = [r.min for r in region]
    indices[starts] = region[starts].min + loop_vars[starts] * stride
    for d in range(starts):
        indices[d] = region[d].min + loop_vars[d]
    address = Call("handle", "tvm_address_of", [ProducerLoad(tensor, indices)])
    body: Stmt = Evaluate(Call(tensor.dtype, "prefetch",
                               [address, convert(0), convert(3), convert(1)]))
    lines = _ceil_div(region[starts].extent, stride)
    body = For(loop_vars[starts], 0, lines, ForKind.SERIAL, body)
    for d in reversed(range(starts)):
        body = For(loop_vars[d], 0, region[d].extent, ForKind.SERIAL, body)
    return body


def _ceil_div(extent: PrimExpr, stride: int) -> PrimExpr:
    """``ceil(extent / stride)`` for a positive ``extent``."""
    if stride == 1:
        return extent
    return floordiv(extent + (stride - 1), stride)
