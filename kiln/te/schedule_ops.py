"""Schedule → loop IR: one loop nest per stage, placed where the stage is attached.

For every compute stage this builds ``produce <name> { loops { store } }``: one ``For`` per
leaf iteration variable (its kind from parallel / vectorize / unroll annotations, pragmas as
``AttrStmt``), root-axis values recovered from the leaf loops through the split/fuse
relations, a ``likely`` guard wherever a loop may run past the axis it came from, and for
reductions an init nest placed just outside the first reduction loop. Stages attached with
``compute_at`` are built inside their parent's loop, wrapped in ``ProducerRealize``. A
tensorized stage keeps its loops outside the tensorized one, around the statement its
plan (``kiln.te.tensorize``) gives, and the plan's reset in place of the init nest's store.

An operation that lowers itself (``Operation.build_provide``: extern, hybrid, scan, fused
loop) returns its own statement (``make_loop`` builds a leaf's loop for it); the stages
attached at one of its loops are built at the start of that loop's body, and a root stage it
marks with ``AttrStmt(op, "scan_init_scope")`` is built at the mark instead of at the root (a
scan's inits, a fused loop's branches). Last, the tensors an operation aliases to its outputs
(``Operation.output_aliases``: a scan's init, update and state; a fused loop's branches) are
stored and loaded as those outputs, their own realize regions dropped.
"""

from __future__ import annotations

from kiln.arith import Analyzer
from kiln.ir import dtype as dt
from kiln.ir.expr import Call, IntImm, IterVar, PrimExpr, ProducerLoad, Range, Reduce, Var
from kiln.ir.functor import Mutator, substitute
from kiln.ir.op import cast, logical_and
from kiln.ir.stmt import (
    AttrStmt,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    ProducerRealize,
    ProducerStore,
    Stmt,
    seq,
)

from .bound import compute_stages
from .prefetch import prefetch_scopes
from .relations import leaf_values, pass_up, split_factor
from .schedule import Schedule, Split, Stage
from .split_tail import (
    check_pad_allocated,
    guard_group,
    loop_annotations,
    pad_axes,
    pad_value,
    padded_ranges,
    shift_splits,
)
from .tensorize import TensorizedNest

_KIND = {"": ForKind.SERIAL, "parallel": ForKind.PARALLEL, "vectorize": ForKind.VECTORIZED,
         "unroll": ForKind.UNROLLED}

#: marks where an operation that lowers itself computes a producer's root stage (the node)
SCAN_INIT_SCOPE = "scan_init_scope"


class _Builder:
    def __init__(self, sch: Schedule, bodies: dict, ranges: dict[IterVar, Range],
                 arg_tensors: set, analyzer: Analyzer, tensorized: dict):
        self.sch = sch
        self.bodies = bodies
        self.ranges = ranges
        self.tensorized = tensorized  # Operation -> TensorizedNest (kiln.te.tensorize)
        self.arg_tensors = arg_tensors
        self.analyzer = analyzer
        self.stages = compute_stages(sch)
        self.attached: dict[IterVar, list[Stage]] = {}
        for st in self.stages:
            if st.attach_type == "scope":
                self.attached.setdefault(st.attach_ivar, []).append(st)
        self.placed: set[Stage] = set()  # root stages built at a SCAN_INIT_SCOPE mark

    # ---- the whole program --------------------------------------------------------------
    def build(self) -> Stmt:
        body: Stmt | None = None
        for st in reversed(self.stages):  # consumers first: marks are met before their stage
            if st.attach_type == "root" and st not in self.placed:
                body = self.pipeline(st, body)
        return body if body is not None else seq()

    def pipeline(self, st: Stage, consumer: Stmt | None) -> Stmt:
        """``realize P { produce P { ... }; consumer }`` (no realize for arguments)."""
        produce = AttrStmt(st.op, "produce", 1, self.loop_nest(st))
        body = seq(produce, consumer)
        for t in reversed(st.op.outputs):
            if t in self.arg_tensors:
                continue
            bounds = self._realize_bounds(st, t)
            align = [(d, f, o) for d, (f, o) in sorted(st.storage_align_dims.items())]
            body = ProducerRealize(t, bounds, IntImm("bool", 1), body,
                                   scope=st.scope or "global", align=align)
        return body

    def _realize_bounds(self, st: Stage, t) -> list[Range]:
        """The region of output ``t`` that is stored: what bound inference gave the axes
        of a compute stage; the whole tensor for an operation that lowers itself."""
        if st.op not in self.bodies:
            return [Range.from_min_extent(0, extent) for extent in t.shape]
        if pad_axes(st):
            return padded_ranges(st, self.ranges)
        return [self.ranges[iv] for iv in st.op.axis]

    # ---- one stage ------------------------------------------------------------------------
    def loop_nest(self, st: Stage) -> Stmt:
        """The stage's loops; with ``tail="shift_inwards"`` splits whose extent may be below
        their factor, ``if (f <= n) {shifted nest} else {guarded nest}`` (the guarded nest
        alone when other stages are computed inside the stage's loops: their regions are
        inferred for the unshifted tiles)."""
        if st.op not in self.bodies:  # an operation that lowers itself (hybrid, extern, scan)
            return _PlaceStages(self, st).visit(st.op.build_provide(st, self.ranges))
        check_pad_allocated(st, self.arg_tensors)
        if any(self.attached.get(iv) for iv in st.leaf_iter_vars):
            # stages computed inside are bounded for the unshifted tiles: keep the guards
            return self._loop_nest(st, shift_inwards=False)
        conds = []
        for rel in shift_splits(st):
            extent, f = self.ranges[rel.parent].extent, split_factor(rel, self.ranges)
            if self.analyzer.can_prove(extent < f):
                return self._loop_nest(st, shift_inwards=False)
            if not self.analyzer.can_prove(f <= extent):
                conds.append(f <= extent)
        if not shift_splits(st):
            return self._loop_nest(st, shift_inwards=False)
        if not conds:
            return self._loop_nest(st, shift_inwards=True)
        cond = conds[0]
        for c in conds[1:]:
            cond = logical_and(cond, c)
        return IfThenElse(cond, self._loop_nest(st, shift_inwards=True),
                          self._loop_nest(st, shift_inwards=False))

    def _loop_nest(self, st: Stage, shift_inwards: bool) -> Stmt:
        values = pass_up(st, self.ranges, leaf_values(st, self.ranges), shift_inwards)
        op = st.op
        body_exprs = self.bodies[op]
        root_vmap = {iv.var: values[iv] for iv in list(op.axis) + list(op.reduce_axis)}
        unchecked = set(pad_axes(st))  # axes that a tail strategy keeps in range
        if shift_inwards:
            unchecked.update(rel.parent for rel in shift_splits(st))
        for iv in pad_axes(st):  # the padding computes the last element's value again
            root_vmap[iv.var] = pad_value(values[iv], self.ranges[iv], iv.dom,
                                          self.analyzer.can_prove)
        indices = [values[iv] for iv in op.axis]
        is_reduce = isinstance(body_exprs[0], Reduce)
        leaves = st.leaf_iter_vars
        plan = self.tensorized.get(op)
        if is_reduce:
            main = self._reduce_update(st, body_exprs, indices, root_vmap)
            first = next((k for k, iv in enumerate(leaves) if iv.iter_type == IterVar.CommReduce),
                         len(leaves))
            init = self._reduce_init(st, body_exprs, indices, values, first, plan, root_vmap,
                                     unchecked)
        else:
            stores = [ProducerStore(t, substitute(b, root_vmap), indices)
                      for t, b in zip(op.outputs, body_exprs, strict=True)]
            main = seq(*stores)
            first, init = -1, None
        if plan is not None:  # the loops from the tensorized one inward become the intrinsic
            main = plan.main
        main = self._guard(st, main, values, list(op.axis) + list(op.reduce_axis), leaves,
                           unchecked)
        if plan is not None:
            main = plan.check_guard(main)
            leaves = leaves[:plan.loc]
        body = main
        for k in reversed(range(len(leaves))):
            if is_reduce and first == k + 1:
                body = seq(init, body)
            body = self._with_attached(leaves[k], body)
            body = make_loop(st, leaves[k], self.ranges[leaves[k]].extent, body)
        if is_reduce and first == 0:
            body = seq(init, body)
        return body

    def _with_attached(self, iv: IterVar, body: Stmt) -> Stmt:
        for child in reversed(self.attached.get(iv, [])):
            body = self.pipeline(child, body)
        return body

    # ---- reductions -------------------------------------------------------------------------
    def _reduce_update(self, st: Stage, exprs: list[Reduce], indices, root_vmap) -> Stmt:
        red = exprs[0]
        outs = st.op.outputs
        lhs = [ProducerLoad(t, indices) for t in outs]
        rhs = [substitute(s, root_vmap) for s in red.source]
        combined = red.combiner.combine(lhs, rhs)
        if len(outs) == 1:
            update = ProducerStore(outs[0], combined[0], indices)
        else:
            # every output's new value is computed from the old values before any is stored
            temps = [Var(f"{t.name}.v", t.dtype) for t in outs]
            update = seq(*(ProducerStore(t, v, indices) for t, v in zip(outs, temps,
                                                                         strict=True)))
            for v, value in reversed(list(zip(temps, combined, strict=True))):
                update = LetStmt(v, value, update)
        cond = substitute(red.condition, root_vmap)
        if not (isinstance(cond, IntImm) and cond.value):
            update = IfThenElse(cond, update)
        return update

    def _reduce_init(self, st: Stage, exprs: list[Reduce], indices, values, first: int,
                     plan: TensorizedNest | None, root_vmap: dict,
                     unchecked: set) -> Stmt | None:
        """The init nest; for a tensorized stage, its loops outside the tensorized one
        around the intrinsic's reset (None without one)."""
        red = exprs[0]
        leaves = st.leaf_iter_vars
        end = len(leaves) if plan is None else plan.loc
        inner = [iv for iv in leaves[first:end] if iv.iter_type != IterVar.CommReduce]
        fresh = {iv.var: Var(iv.var.name + ".init", iv.var.dtype) for iv in inner}
        if plan is not None:
            if plan.reset is None:
                return None
            body = plan.check_guard(self._guard(st, plan.reset, values, list(st.op.axis),
                                                leaves, unchecked))
        else:
            init_vals = list(red.init) if red.init else list(red.combiner.identity_element)
            if red.init:
                init_vals = [substitute(v, root_vmap) for v in init_vals]
            stores = [ProducerStore(t, _cast_like(v, t.dtype), indices)
                      for t, v in zip(st.op.outputs, init_vals, strict=True)]
            body = self._guard(st, seq(*stores), values, list(st.op.axis), leaves, unchecked)
        body = substitute(body, fresh)
        for iv in reversed(inner):
            attr = st.iter_var_attrs.get(iv)
            kind = _KIND[attr.kind] if attr and attr.kind in ("vectorize", "unroll") else \
                ForKind.SERIAL
            body = For(fresh[iv.var], 0, self.ranges[iv].extent, kind, body)
        return body

    # ---- guards -----------------------------------------------------------------------------
    def _guard(self, st: Stage, body: Stmt, values, roots: list[IterVar], leaves,
               unchecked: set) -> Stmt:
        """Wrap ``body`` in ``if (likely(v < bound))`` where a root axis may overrun: one
        guard for the default tails, inside it one per explicit tail strategy
        (``kiln.te.split_tail``); axes in ``unchecked`` stay in range by their strategy."""
        groups: dict[str | None, list[PrimExpr]] = {}
        kinds = {iv.iter_type for iv in roots}
        # a split of a split can overrun its parent even when the root stays in range
        roots = roots + [rel.parent for rel in st.relations if isinstance(rel, Split)
                         and rel.parent not in roots and rel.parent.iter_type in kinds]
        an = Analyzer()
        for iv in leaves:
            an.bind(iv.var, Range.from_min_extent(0, self.ranges[iv].extent))
        for iv in roots:
            if iv in unchecked:
                continue
            conds = groups.setdefault(_GUARD_GROUP.get(guard_group(st, iv)), [])
            value = values[iv]
            for lo, hi in _bounds_to_check(iv, self.ranges[iv]):
                if lo is not None and not an.can_prove(value >= lo):
                    conds.append(value >= lo)
                if hi is not None and not an.can_prove(value < hi):
                    conds.append(value < hi)
        for group in reversed(_GUARD_GROUPS):
            conds = groups.get(group)
            if conds:
                cond = conds[0]
                for c in conds[1:]:
                    cond = logical_and(cond, c)
                body = IfThenElse(Call("bool", "likely", [cond]), body)
        return body


#: the guard each split's tail strategy puts its checks in (outermost first); None: the
#: default guard, which is outermost, so that a stage without tail strategies is unchanged
#: (a shift_inwards split's fallback nest, for an extent below its factor, uses it too)
_GUARD_GROUP = {None: None, "guard": "guard", "shift_inwards": None,
                "partition": "partition", "predicate": "predicate", "dispatch": "dispatch"}
_GUARD_GROUPS = (None, "guard", "partition", "predicate", "dispatch")


def make_loop(st: Stage, iv: IterVar, extent: PrimExpr, body: Stmt) -> Stmt:
    """The loop of leaf ``iv`` of stage ``st`` around ``body``: a ``For`` of the kind its
    annotation says, under its pragmas, its body under its ``prefetch_scope`` attributes
    (``Stage.prefetch``), or the thread extent of the GPU thread it is bound to (``iv``
    replaced by the thread index in ``body``)."""
    attr = st.iter_var_attrs.get(iv)
    kind = _KIND[attr.kind] if attr else ForKind.SERIAL
    if attr is not None and attr.bind_thread is not None:
        thread = attr.bind_thread
        body = substitute(body, {iv.var: cast(thread.var, iv.var.dtype)})
        return AttrStmt(thread, "thread_extent", extent, body)
    body = prefetch_scopes(st, iv, body)
    loop: Stmt = For(iv.var, 0, extent, kind, body,
                     annotations=loop_annotations(st).get(iv, ()))
    if attr is not None:
        for key, value in reversed(attr.pragmas):
            loop = AttrStmt(iv, "pragma_" + key, value, loop)
    return loop


def _bounds_to_check(iv: IterVar, r: Range):
    """(low, high) pairs a root axis value must respect: its inferred range and its domain."""
    out = [(None, r.min + r.extent)]
    if iv.dom is not None:
        out.append((iv.dom.min, iv.dom.min + iv.dom.extent))
    return out


def _cast_like(v: PrimExpr, dtype: str) -> PrimExpr:
    return v if v.dtype == dtype else cast(v, dt.normalize(dtype))


class _PlaceStages(Mutator):
    """Builds, into the statement of an operation that lowers itself, the stages attached at
    its loops and the root stages it marks with ``SCAN_INIT_SCOPE``."""

    def __init__(self, builder: _Builder, stage: Stage):
        super().__init__()
        self.builder = builder
        self.loops = {iv.var: iv for iv in stage.leaf_iter_vars}

    def visit_For(self, node: For) -> Stmt:
        node = self.generic_visit(node)
        iv = self.loops.get(node.loop_var)
        if iv is None:
            return node
        return For(node.loop_var, node.min, node.extent, node.kind,
                   self.builder._with_attached(iv, node.body), node.thread_tag,
                   node.annotations)

    def visit_AttrStmt(self, node: AttrStmt) -> Stmt:
        if node.attr_key != SCAN_INIT_SCOPE:
            return self.generic_visit(node)
        stage = self.builder.sch.stage_map[node.node]
        if stage.attach_type != "root":  # the user computes it elsewhere
            return node.body
        self.builder.placed.add(stage)
        return self.builder.pipeline(stage, None)


class _ReplaceAliases(Mutator):
    """Stores and loads of aliased tensors go to the tensors they alias; their realize
    regions are dropped (the aliased tensor's own realize holds them)."""

    def __init__(self, aliases: dict):
        super().__init__()
        self.aliases = aliases

    def visit_ProducerRealize(self, node: ProducerRealize) -> Stmt:
        if node.producer in self.aliases:
            return self.visit(node.body)
        return self.generic_visit(node)

    def visit_ProducerStore(self, node: ProducerStore) -> Stmt:
        node = self.generic_visit(node)
        target = self.aliases.get(node.producer)
        return node if target is None else ProducerStore(target, node.value, node.indices)

    def visit_ProducerLoad(self, node: ProducerLoad) -> PrimExpr:
        node = self.generic_visit(node)
        target = self.aliases.get(node.producer)
        return node if target is None else ProducerLoad(target, node.indices)


def output_aliases(sch: Schedule) -> dict:
    """Every tensor that an operation of ``sch`` stores as one of its outputs, to that
    output (``Operation.output_aliases``)."""
    aliases: dict = {}
    for st in sch.stages:
        aliases.update(st.op.output_aliases())
    return aliases


def schedule_to_stmt(sch: Schedule, bodies: dict, ranges: dict[IterVar, Range], arg_tensors: set,
                     analyzer: Analyzer, tensorized: dict | None = None) -> Stmt:
    """The loop program of a schedule (before storage flattening); ``tensorized`` holds the
    plan of each tensorized stage (``kiln.te.tensorize.tensorize_stages``)."""
    body = _Builder(sch, bodies, ranges, arg_tensors, analyzer, tensorized or {}).build()
    aliases = output_aliases(sch)
    return _ReplaceAliases(aliases).visit(body) if aliases else body
