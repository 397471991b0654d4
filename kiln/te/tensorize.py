"""Tensorization: the loops of a stage from one axis inward replaced by a tensor intrinsic.

``s[C].tensorize(axis, intrin)`` marks the leaf loop ``axis``; the pipeline's ``tensorize``
pass (after bound inference) plans every marked stage, and ``schedule_ops`` builds the
stage's loops outside ``axis`` around the plan's statement (TVM's ``MakeTensorize``).
Guarantees, as in classic TVM:

* **matching**: the region that the loops from ``axis`` inward cover is computed for each
  root axis (the outer loops fixed) and for each input tensor; the stage's body, with its
  trailing axes renamed to the intrinsic's axes (``i -> i' + min``), its leading axes of
  extent 1 fixed, and every input read made relative to its region, equals the intrinsic's
  computation after simplification. Otherwise a ``TVMError`` names the intrinsic, the stage,
  the axis and the first sub-expression that differs on each side;
* **replacement**: the intrinsic's statement, with every buffer bound to the tensor region it
  stands for (``attr [buffer, tensor] buffer_bind_scope = tvm_tuple(min, extent, ...)``,
  resolved by storage flattening, which binds the buffer's data, ``elem_offset``, strides
  and shape);
* **reductions**: when every reduction loop lies inside the tensorized region, ``body``
  computes the result; when some lie outside, ``reduce_reset`` runs where the reduction's
  init nest runs and ``reduce_update`` inside the outer reduction loops (without a reset,
  ``body`` runs on the first outer reduction iteration and ``reduce_update`` on the others);
* loops inside the tensorized region may not be bound to threads or hold other stages; a
  boundary guard that depends on them is refused unless it provably always holds (the
  intrinsic would run on a partial region).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.arith import Analyzer, union
from kiln.errors import ScheduleError, TVMError
from kiln.ir.expr import And, Call, IterVar, PrimExpr, ProducerLoad, Range, Reduce, Var
from kiln.ir.functor import Mutator, collect_vars, post_order_visit, rebuild, substitute
from kiln.ir.op import logical_and, logical_or
from kiln.ir.printer import expr_text
from kiln.ir.stmt import AttrStmt, IfThenElse, Stmt
from kiln.ir.structural import structural_equal
from kiln.tir.storage_flatten import BUFFER_BIND_SCOPE

from .bound import compute_stages
from .relations import leaf_values, pass_up
from .schedule import Schedule, Stage
from .tensor import Operation, Tensor
from .tensor_intrin import TensorIntrin


@dataclass(frozen=True)
class TensorizedNest:
    """How ``schedule_ops`` ends a tensorized stage's loop nest: the first ``loc`` leaf
    loops are kept; ``main`` replaces what the loops from leaf ``loc`` inward computed and
    ``reset`` (a split reduction's reset, or None) the init nest's store, both written in the
    stage's leaf variables. ``loops`` knows the range of every loop of the schedule."""

    loc: int
    main: Stmt
    reset: Stmt | None
    inner_vars: frozenset[Var]
    where: str
    loops: Analyzer

    def check_guard(self, stmt: Stmt) -> Stmt:
        """``stmt`` (the plan's statement under the stage's boundary guards) without the
        guard conditions that hold in every iteration of the loops around it (a stage
        computed inside another one guards against its axis' domain without knowing the
        outer loops); refused when a remaining condition depends on a loop inside the
        tensorized region (the intrinsic would run on a partial region)."""
        if stmt is self.main or stmt is self.reset or not isinstance(stmt, IfThenElse) \
                or stmt.else_case is not None:
            return stmt
        cond = stmt.condition
        hinted = isinstance(cond, Call) and cond.op == "likely"
        keep = [c for c in _conjuncts(cond.args[0] if hinted else cond)
                if not self.loops.can_prove(c)]
        for c in keep:
            if collect_vars(c) & self.inner_vars:
                raise TVMError(
                    f"{self.where}: the loop nest needs the boundary guard {expr_text(c)}, "
                    f"which depends on loops inside the tensorized region; choose split "
                    f"factors that divide the extents")
        body = self.check_guard(stmt.then_case)
        if not keep:
            return body
        cond = keep[0]
        for c in keep[1:]:
            cond = logical_and(cond, c)
        return IfThenElse(Call("bool", "likely", [cond]) if hinted else cond, body)


def _conjuncts(cond: PrimExpr) -> list[PrimExpr]:
    if isinstance(cond, And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def tensorized_leaf(stage: Stage) -> int | None:
    """The position of the leaf loop ``stage`` tensorizes, or None."""
    for k, iv in enumerate(stage.leaf_iter_vars):
        attr = stage.iter_var_attrs.get(iv)
        if attr is not None and attr.tensor_intrin is not None:
            return k
    return None


def tensorize_stages(sch: Schedule, bodies: dict,
                     ranges: dict[IterVar, Range]) -> dict[Operation, TensorizedNest]:
    """The plan of every tensorized stage of ``sch`` (module docstring)."""
    plans = {}
    for st in compute_stages(sch):
        loc = tensorized_leaf(st)
        if loc is not None:
            plans[st.op] = _plan(sch, st, loc, bodies[st.op], ranges)
    return plans


def _plan(sch: Schedule, st: Stage, loc: int, body: list[PrimExpr],
          ranges: dict[IterVar, Range]) -> TensorizedNest:
    leaves = st.leaf_iter_vars
    intrin: TensorIntrin = st.iter_var_attrs[leaves[loc]].tensor_intrin
    where = f"tensorize '{intrin.name}' on stage '{st.name}' at axis '{leaves[loc].var.name}'"
    _check_inner_loops(sch, st, loc, where)
    analyzer = _all_loops(sch, ranges)
    values = pass_up(st, ranges, leaf_values(st, ranges))
    inner = {iv.var: Range.from_min_extent(0, ranges[iv].extent) for iv in leaves[loc:]}
    out_dom = {iv: _cover([values[iv]], inner, analyzer) for iv in st.op.root_iter_vars()}
    inputs = _read_tensors(body)
    in_region = {t: _read_region(body, t, out_dom, analyzer) for t in inputs}
    _verify_body(st, intrin, body, inputs, out_dom, in_region, analyzer, where)
    sizes = _intrin_sizes(st, intrin, out_dom, analyzer, where)
    out_binds = [(buf, st.op.output(k), [out_dom[iv] for iv in st.op.axis])
                 for k, buf in enumerate(intrin.output_buffers)]
    in_binds = [(buf, t, in_region[t]) for buf, t in zip(intrin.input_buffers, inputs,
                                                         strict=True)]
    main, reset = _statements(st, loc, intrin, where)
    main = _bind(_bind(substitute(main, sizes), out_binds), in_binds)
    reset = None if reset is None else _bind(substitute(reset, sizes), out_binds)
    return TensorizedNest(loc, main, reset, frozenset(inner), where, analyzer)


def _all_loops(sch: Schedule, ranges: dict[IterVar, Range]) -> Analyzer:
    """An analyzer knowing that every leaf loop variable of ``sch`` lies in its loop."""
    analyzer = Analyzer()
    for st in sch.stages:
        for iv in st.leaf_iter_vars:
            if iv in ranges:
                analyzer.bind(iv.var, Range.from_min_extent(0, ranges[iv].extent))
    return analyzer


def _check_inner_loops(sch: Schedule, st: Stage, loc: int, where: str) -> None:
    inner = st.leaf_iter_vars[loc:]
    for iv in inner:
        attr = st.iter_var_attrs.get(iv)
        if attr is not None and attr.bind_thread is not None:
            raise ScheduleError(f"{where}: loop '{iv.var.name}' inside the tensorized region "
                                f"is bound to a thread; bind only loops outside it")
    for other in sch.stages:
        if other.attach_type == "scope" and other.attach_ivar in inner:
            raise ScheduleError(
                f"{where}: stage '{other.name}' is computed at loop "
                f"'{other.attach_ivar.var.name}' inside the tensorized region; compute it at "
                f"a loop outside it")


def _cover(exprs: list[PrimExpr], dom: dict[Var, Range], analyzer: Analyzer) -> Range:
    """The smallest range holding every value of ``exprs`` over ``dom``."""
    sets = [analyzer.eval_interval(e, dom) for e in exprs]
    s = sets[0]
    for other in sets[1:]:
        s = union(s, other)
    lo = analyzer.simplify(s.min_value)
    return Range.from_min_extent(lo, analyzer.simplify(s.max_value - lo + 1))


def _read_tensors(body: list[PrimExpr]) -> list[Tensor]:
    """The tensors ``body`` reads, in the order of ``ComputeOp.input_tensors``."""
    found: list[Tensor] = []

    def visit(n) -> None:
        if isinstance(n, ProducerLoad) and n.producer not in found:
            found.append(n.producer)

    for b in body:
        post_order_visit(b, visit)
    return found


def _read_region(body: list[PrimExpr], t: Tensor, out_dom: dict[IterVar, Range],
                 analyzer: Analyzer) -> list[Range]:
    """The region of ``t`` that ``body`` reads while its root axes range over ``out_dom``."""
    reads: list[tuple[PrimExpr, ...]] = []

    def visit(n) -> None:
        if isinstance(n, ProducerLoad) and n.producer == t:
            reads.append(n.indices)

    for b in body:
        post_order_visit(b, visit)
    dom = {iv.var: r for iv, r in out_dom.items()}
    return [_cover([r[d] for r in reads], dom, analyzer) for d in range(t.ndim)]


# ---------------------------------------------------------------------------------------
# matching the body against the intrinsic's computation
# ---------------------------------------------------------------------------------------
class _IntrinMatcher(Mutator):
    """The stage's body in the intrinsic's terms: root axes renamed to the intrinsic's
    (leading ones of extent 1 fixed at their value), input reads relative to their region."""

    def __init__(self, vmap: dict[Var, PrimExpr], axis_map: dict[IterVar, IterVar],
                 loads: dict[Tensor, tuple[Tensor, list[Range]]]):
        super().__init__()
        self.vmap = vmap
        self.axis_map = axis_map
        self.loads = loads

    def visit_Var(self, v: Var) -> PrimExpr:
        return self.vmap.get(v, v)

    visit_SizeVar = visit_Var

    def visit_ProducerLoad(self, node: ProducerLoad) -> PrimExpr:
        indices = [self.visit(i) for i in node.indices]
        if node.producer not in self.loads:
            return ProducerLoad(node.producer, indices)
        target, region = self.loads[node.producer]
        start = len(region) - target.ndim
        return ProducerLoad(target, [i - r.min for i, r in zip(indices[start:], region[start:],
                                                                strict=True)])

    def visit_Reduce(self, node: Reduce) -> PrimExpr:
        node = self.generic_visit(node)
        return rebuild(node, axis=tuple(self.axis_map[iv] for iv in node.axis
                                        if iv in self.axis_map))


def _axis_remap(kind: str, ours: list[IterVar], theirs: list[IterVar],
                out_dom: dict[IterVar, Range], analyzer: Analyzer, where: str,
                vmap: dict[Var, PrimExpr], axis_map: dict[IterVar, IterVar]) -> None:
    """Rename the trailing ``ours`` to the intrinsic's ``theirs`` (``i -> i' + min``); the
    leading ones must cover one point (``i -> min``)."""
    lead = len(ours) - len(theirs)
    if lead < 0:
        raise TVMError(f"{where}: the intrinsic has {len(theirs)} {kind} axes, the stage "
                       f"only {len(ours)}")
    for iv in ours[:lead]:
        r = out_dom[iv]
        if not analyzer.can_prove(r.extent == 1):
            raise TVMError(
                f"{where}: the intrinsic has {len(theirs)} {kind} axes, so the stage's "
                f"leading {kind} axis '{iv.var.name}' must have extent 1 inside the "
                f"tensorized region, but it has {expr_text(r.extent)}")
        vmap[iv.var] = r.min
    for iv, target in zip(ours[lead:], theirs, strict=True):
        vmap[iv.var] = target.var + out_dom[iv].min
        axis_map[iv] = target


def _verify_body(st: Stage, intrin: TensorIntrin, body: list[PrimExpr], inputs: list[Tensor],
                 out_dom: dict[IterVar, Range], in_region: dict[Tensor, list[Range]],
                 analyzer: Analyzer, where: str) -> None:
    iop = intrin.op
    if len(inputs) != len(intrin.inputs):
        raise TVMError(f"{where}: the stage reads {len(inputs)} tensors "
                       f"({', '.join(t.name for t in inputs)}), the intrinsic "
                       f"{len(intrin.inputs)} ({', '.join(t.name for t in intrin.inputs)})")
    if len(body) != len(iop.body):
        raise TVMError(f"{where}: the stage has {len(body)} outputs, the intrinsic "
                       f"{len(iop.body)}")
    loads = {}
    for t, target in zip(inputs, intrin.inputs, strict=True):
        region = in_region[t]
        if len(region) < target.ndim or not all(
                analyzer.can_prove(r.extent == 1) for r in region[:len(region) - target.ndim]):
            raise TVMError(f"{where}: the region of '{t.name}' read inside the tensorized "
                           f"loops, [{_region_text(region)}], does not fit the intrinsic's "
                           f"input '{target.name}' of shape [{_region_text(target.shape)}]")
        loads[t] = (target, region)
    vmap: dict[Var, PrimExpr] = {}
    axis_map: dict[IterVar, IterVar] = {}
    _axis_remap("data-parallel", st.op.axis, iop.axis, out_dom, analyzer, where, vmap,
                axis_map)
    _axis_remap("reduction", st.op.reduce_axis, iop.reduce_axis, out_dom, analyzer, where,
                vmap, axis_map)
    matcher = _IntrinMatcher(vmap, axis_map, loads)
    with analyzer.scope():
        for iv in (*iop.axis, *iop.reduce_axis):
            analyzer.bind(iv.var, iv.dom)
        for ours, theirs in zip(body, iop.body, strict=True):
            lhs = analyzer.simplify(matcher.visit(ours))
            rhs = analyzer.simplify(theirs)
            _check_equal(lhs, rhs, where)


def _check_equal(lhs: PrimExpr, rhs: PrimExpr, where: str) -> None:
    if lhs.dtype != rhs.dtype:
        raise TVMError(f"{where}: the stage computes {lhs.dtype}, the intrinsic {rhs.dtype}")
    if isinstance(lhs, Reduce) and isinstance(rhs, Reduce) and \
            structural_equal(lhs.combiner, rhs.combiner, map_free_vars=True):
        lhs = rebuild(lhs, combiner=rhs.combiner)  # the same reducer, declared twice
    if structural_equal(lhs, rhs):
        return
    ours, theirs = first_difference(lhs, rhs)
    raise TVMError(
        f"{where}: the loop body does not match the intrinsic's computation; they first "
        f"differ at\n  stage:     {expr_text(ours)}\n  intrinsic: {expr_text(theirs)}\n"
        f"(stage body in the intrinsic's axes: {expr_text(lhs)}\n"
        f" intrinsic body:                     {expr_text(rhs)})")


def first_difference(a, b) -> tuple | None:
    """The first pair of sub-trees, in pre-order, at which ``a`` and ``b`` differ (the
    nodes themselves when their kinds, dtypes or non-IR fields differ); None when equal."""
    if structural_equal(a, b):
        return None
    if type(a) is not type(b) or getattr(a, "dtype", None) != getattr(b, "dtype", None) \
            or not hasattr(a, "_fields") or isinstance(a, Var):
        return a, b
    for f in a._fields:
        x, y = getattr(a, f), getattr(b, f)
        xs, ys = (x, y) if isinstance(x, tuple) and isinstance(y, tuple) else ((x,), (y,))
        if len(xs) != len(ys):
            return a, b
        for xi, yi in zip(xs, ys, strict=True):
            if hasattr(xi, "_fields") or hasattr(yi, "_fields"):
                found = first_difference(xi, yi)
                if found is not None:
                    return found
            elif xi != yi:
                return a, b
    return a, b


def _region_text(items) -> str:
    return ", ".join(f"{expr_text(r.min)}:+{expr_text(r.extent)}" if isinstance(r, Range)
                     else expr_text(r) for r in items)


# ---------------------------------------------------------------------------------------
# the replacement
# ---------------------------------------------------------------------------------------
def _intrin_sizes(st: Stage, intrin: TensorIntrin, out_dom: dict[IterVar, Range],
                  analyzer: Analyzer, where: str) -> dict[Var, PrimExpr]:
    """The intrinsic's symbolic axis extents bound to the region's; constant ones checked."""
    sizes: dict[Var, PrimExpr] = {}
    iop = intrin.op
    pairs = list(zip(reversed(st.op.axis), reversed(iop.axis), strict=False))
    pairs += list(zip(reversed(st.op.reduce_axis), reversed(iop.reduce_axis), strict=False))
    for ours, theirs in pairs:
        have, want = out_dom[ours].extent, theirs.dom.extent
        if isinstance(want, Var):
            sizes[want] = have
        elif not analyzer.can_prove(have == want):
            raise TVMError(
                f"{where}: axis '{ours.var.name}' covers {expr_text(have)} elements inside "
                f"the tensorized loops, but the intrinsic's axis '{theirs.var.name}' has "
                f"extent {expr_text(want)}")
    return sizes


def _statements(st: Stage, loc: int, intrin: TensorIntrin,
                where: str) -> tuple[Stmt, Stmt | None]:
    """(main, reset) of the plan, before buffer binding."""
    leaves = st.leaf_iter_vars
    outer_reduce = [iv for iv in leaves[:loc] if iv.iter_type == IterVar.CommReduce]
    if not outer_reduce:
        if intrin.body is None:
            raise TVMError(f"{where}: the intrinsic has no body (its intrin_func returned "
                           f"None for it), which a region holding the whole reduction needs")
        return intrin.body, None
    if intrin.reduce_update is None:
        raise TVMError(
            f"{where}: reduction loop(s) {', '.join(iv.var.name for iv in outer_reduce)} lie "
            f"outside the tensorized region, so the intrinsic must return (body, "
            f"reduce_reset, reduce_update) with a reduce_update")
    if intrin.reduce_init is not None:
        return intrin.reduce_update, intrin.reduce_init
    if intrin.body is None:
        raise TVMError(f"{where}: without reduce_reset the intrinsic's body starts the "
                       f"reduction, but it has none")
    later = outer_reduce[0].var > 0
    for iv in outer_reduce[1:]:
        later = logical_or(later, iv.var > 0)
    return IfThenElse(Call("bool", "likely", [later]), intrin.reduce_update, intrin.body), None


def _bind(stmt: Stmt, binds: list) -> Stmt:
    """``stmt`` with each (buffer, tensor, region) bound by ``buffer_bind_scope``."""
    for buf, tensor, region in reversed(binds):
        spec = Call("handle", "tvm_tuple", [x for r in region for x in (r.min, r.extent)])
        stmt = AttrStmt((buf, tensor), BUFFER_BIND_SCOPE, spec, stmt)
    return stmt


__all__ = ["TensorizedNest", "tensorize_stages", "tensorized_leaf", "first_difference"]
