"""Bound inference: the range of every iteration variable of every stage.

Stages are visited consumers first. An output's axes cover its whole shape. Any other stage
must produce exactly the region its consumers read: for each consumer, the indices of its reads
are evaluated as intervals, where the consumer's loops that lie *inside* the producer's
attachment point are relaxed over their whole range and those outside it (the loops the
producer is computed within) stay symbolic. Ranges of split and fused loops then follow from
the root ranges (``pass_down``).
"""

from __future__ import annotations

from kiln.arith import Analyzer, IntervalSet, eval_interval
from kiln.errors import ScheduleError
from kiln.ir.expr import IterVar, PrimExpr, ProducerLoad, Range, Var
from kiln.ir.functor import collect_vars, post_order_visit
from kiln.ir.structural import structural_equal, structural_hash

from .relations import leaf_values, pass_down, pass_up
from .schedule import Schedule, Stage
from .split_tail import pad_axes, pad_value
from .tensor import PlaceholderOp


def compute_stages(sch: Schedule) -> list[Stage]:
    """Stages that get loops: every operation but inputs and inlined stages, producers
    first."""
    return [st for st in sch.stages
            if not isinstance(st.op, PlaceholderOp) and st.attach_type != "inline"]


def attach_path_vars(stage: Stage) -> set[Var]:
    """Loop variables of the loops enclosing the point where ``stage`` is computed."""
    out: set[Var] = set()
    st = stage
    while st.attach_type == "scope":
        parent = st.attach_stage
        pos = parent.leaf_iter_vars.index(st.attach_ivar)
        out.update(iv.var for iv in parent.leaf_iter_vars[: pos + 1])
        st = parent
    return out


# GPU memory scopes and the thread axes whose loops they are shared across: a shared-memory
# buffer is one per block, so it must hold what every thread (and virtual thread) of the block
# reads; a local buffer is per thread. Only used where loops are bound to GPU threads.
_SHARED_ACROSS = {"shared": ("threadIdx.", "vthread", "cthread"),
                  "global": ("blockIdx.", "threadIdx.", "vthread", "cthread")}


def thread_relaxed_vars(stage: Stage) -> set[Var]:
    """Loop variables on ``stage``'s attach path that are bound to GPU threads sharing the
    stage's storage (threadIdx/vthread for ``shared`` scope): bound inference relaxes them."""
    prefixes = _SHARED_ACROSS.get(stage.scope)
    out: set[Var] = set()
    if not prefixes:
        return out
    st = stage
    while st.attach_type == "scope":
        parent = st.attach_stage
        pos = parent.leaf_iter_vars.index(st.attach_ivar)
        for iv in parent.leaf_iter_vars[: pos + 1]:
            attr = parent.iter_var_attrs.get(iv)
            thread = attr.bind_thread if attr is not None else None
            if thread is not None and thread.thread_tag.startswith(prefixes):
                out.add(iv.var)
        st = parent
    return out


def _read_ops(consumer: Stage, bodies: dict) -> set:
    """The operations ``consumer`` reads (an operation that lowers itself reads its
    inputs), found in one walk of its body."""
    if consumer.op not in bodies:
        return {t.op for t in consumer.op.input_tensors}
    found: set = set()

    def visit(n):
        if isinstance(n, ProducerLoad):
            found.add(n.producer.op)

    for b in bodies[consumer.op]:
        post_order_visit(b, visit)
    return found


def _reads_of(body: list[PrimExpr], op) -> list[tuple[PrimExpr, ...]]:
    """The distinct index tuples at which ``body`` reads ``op`` (structurally equal ones
    once: a Winograd transform reads each of its 36 tile elements in up to 36 sums)."""
    found: dict[int, list[tuple[PrimExpr, ...]]] = {}

    def visit(n):
        if isinstance(n, ProducerLoad) and n.producer.op is op:
            same = found.setdefault(structural_hash(n.indices), [])
            if not any(structural_equal(n.indices, f) for f in same):
                same.append(n.indices)

    for b in body:
        post_order_visit(b, visit)
    return [idx for group in found.values() for idx in group]


def infer_bound(sch: Schedule, bodies: dict, analyzer: Analyzer) -> dict[IterVar, Range]:
    """Ranges of all iteration variables (root, split/fused, leaf) of the compute stages.

    An operation that lowers itself (not in ``bodies``: ``Operation.build_provide``) keeps
    the domains of its loops, and reads of its inputs what its ``read_region`` says (by
    default the whole input; a scan reads its update one step at a time)."""
    ranges: dict[IterVar, Range] = {}
    relax: dict[Var, IntervalSet] = {}  # every loop var seen so far, over its whole range
    stages = compute_stages(sch)
    reads = {c: _read_ops(c, bodies) for c in stages}
    for st in reversed(stages):
        op = st.op
        consumers = [c for c in stages if c is not st and op in reads[c]]
        _check_attachment(st, consumers)
        for iv in op.root_iter_vars() + st.env_thread_axes:
            ranges[iv] = iv.dom
        if op in bodies and not _whole_region_needed(st, consumers):
            region = _needed_region(st, consumers, bodies, ranges, relax, analyzer)
            for iv, r in zip(op.axis, region, strict=True):
                ranges[iv] = r
        pass_down(st, ranges, analyzer.simplify)
        for iv in st.leaf_iter_vars:
            ext = ranges[iv].extent
            relax[iv.var] = IntervalSet(_zero(), analyzer.simplify(ext - 1))
    return ranges


def _whole_region_needed(st: Stage, consumers: list[Stage]) -> bool:
    """An output or a stage nobody reads is computed over its whole domain."""
    return st.is_output or not consumers


def _check_attachment(st: Stage, consumers: list[Stage]) -> None:
    """A stage computed inside another stage's loop is invisible outside that loop."""
    if st.attach_type != "scope":
        return
    home = st.attach_stage
    for c in consumers:
        chain, cur = [], c
        while cur is not None:
            chain.append(cur)
            cur = cur.attach_stage if cur.attach_type == "scope" else None
        if home not in chain:
            raise ScheduleError(
                f"compute_at: stage '{st.name}' is computed inside stage '{home.name}' "
                f"(loop '{st.attach_ivar.var.name}'), but stage '{c.name}' also reads it "
                f"outside that loop; compute it at root, or at a loop that encloses every "
                f"consumer")


def _zero() -> PrimExpr:
    from kiln.ir.expr import IntImm

    return IntImm("int32", 0)


def _relax(itv: IntervalSet, relax_map: dict[Var, IntervalSet]) -> IntervalSet:
    """Widen an interval until no relaxed variable remains in its bounds."""
    for _ in range(8):
        if not itv.is_finite():
            return itv
        vars_in = collect_vars(itv.min_value) | collect_vars(itv.max_value)
        if not any(v in relax_map for v in vars_in):
            return itv
        lo = eval_interval(itv.min_value, relax_map).min_value
        hi = eval_interval(itv.max_value, relax_map).max_value
        itv = IntervalSet(lo, hi)
    return itv


def _needed_region(st: Stage, consumers: list[Stage], bodies: dict,
                   ranges: dict[IterVar, Range], relax: dict[Var, IntervalSet],
                   analyzer: Analyzer) -> list[Range]:
    op = st.op
    fixed = attach_path_vars(st) - thread_relaxed_vars(st)
    relax_map = {v: itv for v, itv in relax.items() if v not in fixed}
    per_dim: list[IntervalSet | None] = [None] * len(op.axis)
    for c in consumers:
        dom_map = _consumer_root_intervals(c, ranges, relax_map, analyzer)
        for read in _read_intervals(c, op, bodies, dom_map, relax_map):
            for d, itv in enumerate(read):
                per_dim[d] = itv if per_dim[d] is None else per_dim[d].union(itv)
    region = []
    for d, iv in enumerate(op.axis):
        itv = per_dim[d]
        if itv is None or not itv.is_finite():
            region.append(iv.dom)
            continue
        lo = analyzer.simplify(itv.min_value)
        ext = analyzer.simplify(itv.max_value - itv.min_value + 1)
        region.append(Range.from_min_extent(lo, ext))
    return region


def _read_intervals(c: Stage, op, bodies: dict, dom_map: dict[Var, IntervalSet],
                    relax_map: dict[Var, IntervalSet]) -> list[list[IntervalSet]]:
    """For each read of ``op`` by consumer ``c``, the interval of each index: from the
    indices in its body, or from the region an operation that lowers itself reads."""
    if c.op in bodies:
        return [[_relax(eval_interval(idx, dom_map), relax_map) for idx in indices]
                for indices in _reads_of(bodies[c.op], op)]
    return [c.op.read_region(t, dom_map) for t in op.outputs if t in c.op.input_tensors]


def _consumer_root_intervals(c: Stage, ranges: dict[IterVar, Range],
                             relax_map: dict[Var, IntervalSet],
                             analyzer: Analyzer) -> dict[Var, IntervalSet]:
    """Interval of each root axis of consumer ``c`` seen from the producer's attach point."""
    values = pass_up(c, ranges, leaf_values(c, ranges))
    for iv in pad_axes(c):  # the padding reads at a clamped value (kiln.te.split_tail)
        values[iv] = pad_value(values[iv], ranges[iv], iv.dom, analyzer.can_prove)
    out: dict[Var, IntervalSet] = {}
    for iv in c.op.root_iter_vars():
        value = values[iv]
        r = ranges[iv]
        used = collect_vars(value)
        leaf_vars = {lv.var for lv in c.leaf_iter_vars}
        if used & leaf_vars and all(v in relax_map for v in used & leaf_vars):
            itv = IntervalSet(r.min, analyzer.simplify(r.min + r.extent - 1))
        else:
            itv = eval_interval(value, relax_map)
        out[iv.var] = _relax(itv, relax_map)
    # A root axis that is also a leaf loop shares its Var with the loop counter: inside the
    # body the Var means the axis value, so the root interval wins over the loop's range.
    return {**relax_map, **out}
