"""Schedule primitives that change the dataflow: cache_read, cache_write, rfactor.

Each adds a new operation to the DAG and rewrites the readers of a tensor to read the new one.
Rewritten operations keep their IterVars, so every split or reorder already recorded on their
stages stays valid; ``s[T]`` keeps working with the tensors the user holds.
"""

from __future__ import annotations

from kiln.errors import ScheduleError
from kiln.ir.expr import IterVar, ProducerLoad, Var
from kiln.ir.functor import Mutator, substitute

from .schedule import Schedule, Stage
from .tensor import ComputeOp, Tensor


class _ReplaceTensors(Mutator):
    def __init__(self, vmap: dict[Tensor, Tensor]):
        super().__init__()
        self.vmap = vmap

    def visit_ProducerLoad(self, node: ProducerLoad):
        indices = tuple(self.visit(i) for i in node.indices)
        t = self.vmap.get(node.producer, node.producer)
        if t is node.producer and all(a is b for a, b in zip(indices, node.indices, strict=True)):
            return node
        return ProducerLoad(t, indices)


def _with_body(op: ComputeOp, body) -> ComputeOp:
    return ComputeOp(op.name, op.tag, op.attrs, op.axis, body)


def _with_inputs(op, vmap: dict[Tensor, Tensor]):
    """``op`` reading through ``vmap``; ``op`` itself when it reads none of its tensors."""
    if not isinstance(op, ComputeOp):
        return op.replace_inputs(vmap)
    mut = _ReplaceTensors(vmap)
    body = [mut.visit(b) for b in op.body]
    if all(a is b for a, b in zip(body, op.body, strict=True)):
        return op
    return _with_body(op, body)


def _replace_dataflow(sch: Schedule, vmap: dict[Tensor, Tensor], only: set | None = None):
    """Rewrite every stage (or only the stages in ``only``) to read through ``vmap``."""
    for st in sch.stages:
        if only is not None and st not in only:
            continue
        new_op = _with_inputs(st.op, vmap)
        if new_op is st.op:
            continue
        for old_t, new_t in zip(st.op.outputs, new_op.outputs, strict=True):
            vmap[old_t] = new_t
        _rebind(sch, st, new_op)


def _rebind(sch: Schedule, st: Stage, new_op) -> None:
    st.op = new_op
    sch.stage_map[new_op] = st


def _current(sch: Schedule, tensor: Tensor) -> Tensor:
    """The tensor that currently stands for ``tensor`` (after earlier rewrites)."""
    st = sch[tensor]
    return st.op.output(tensor.value_index)


def cache_read(sch: Schedule, tensor: Tensor, scope: str, readers) -> Tensor:
    """Add a stage that copies ``tensor`` into ``scope``; ``readers`` read the copy.

    Before:: produce C { for (i) C[i] = A[i] }
    ``AA = s.cache_read(A, "local", [C])``
    After::  produce A.local { for (ax0) A.local[ax0] = A[ax0] }  produce C { ... A.local[i] }
    """
    if not isinstance(tensor, Tensor):
        raise ScheduleError(f"cache_read: expected a tensor, got {type(tensor).__name__}")
    readers = [readers] if not isinstance(readers, list | tuple) else list(readers)
    reader_stages = []
    for r in readers:
        st = sch[r]
        if not any(t.op is sch[tensor].op for t in st.op.input_tensors):
            raise ScheduleError(
                f"cache_read: stage '{st.name}' does not read tensor '{tensor.name}'")
        reader_stages.append(st)
    src = _current(sch, tensor)
    from .operation import compute

    cache = compute(src.shape, lambda *i: src[i], name=f"{src.name}.{scope}")
    vmap = {src: cache}
    _replace_dataflow(sch, vmap, only=set(reader_stages))
    # the readers are new operations now: their own consumers (e.g. the stage that copies a
    # cache_write result back) must read the new ones
    del vmap[src]
    if vmap:
        _replace_dataflow(sch, vmap)
    _insert_stage(sch, cache.op, after=sch[tensor], scope=scope)
    return cache


def _insert_stage(sch: Schedule, op, after: Stage | None, scope: str, before=None) -> Stage:
    """A stage for ``op`` next to ``after`` or ``before``; as in TVM, it joins that stage's
    group (a scan's update group: computed in the scan loop)."""
    st = Stage(op, sch)
    st.scope = scope
    neighbour = before if before is not None else after
    if neighbour is not None and neighbour.group_attach is not None:
        st.group_attach = neighbour.group_attach
        st.compute_root()
    if before is not None:
        pos = sch.stages.index(before)
    else:
        pos = sch.stages.index(after) + 1 if after is not None else 0
    sch.stages.insert(pos, st)
    sch.stage_map[op] = st
    return st


def cache_write(sch: Schedule, tensor, scope: str):
    """Compute ``tensor`` into a ``scope`` cache first, then copy the cache to ``tensor``.

    Before:: produce C { for (i) { C[i] = 0; for (k) C[i] = C[i] + ... } }
    ``CC = s.cache_write(C, "local")``
    After::  produce C.local { ... C.local[i] = C.local[i] + ... }
             produce C { for (i) C[i] = C.local[i] }
    """
    tensors = list(tensor) if isinstance(tensor, list | tuple) else [tensor]
    st = sch[tensors[0]]
    op = st.op
    if not isinstance(op, ComputeOp):
        raise ScheduleError(f"cache_write: stage '{st.name}' is not a compute stage")
    if st.relations or not st.at_group_root or st.iter_var_attrs:
        raise ScheduleError(
            f"cache_write on stage '{st.name}': call cache_write before scheduling the stage "
            f"(it already has splits, annotations or an attachment)")
    new_axis = [IterVar(iv.dom, Var(iv.var.name, iv.var.dtype), iv.iter_type)
                for iv in op.axis]
    vmap = {iv.var: niv.var for iv, niv in zip(op.axis, new_axis, strict=True)}
    body = [substitute(b, vmap) for b in op.body]
    cache_op = ComputeOp(f"{op.name}.{scope}", op.tag, op.attrs, new_axis, body)
    copy_body = [ProducerLoad(t, [iv.var for iv in op.axis]) for t in cache_op.outputs]
    new_op = ComputeOp(op.name, op.tag, op.attrs, op.axis, copy_body)
    old_outputs = list(op.outputs)
    _rebind(sch, st, new_op)
    st._set_op(new_op)
    _insert_stage(sch, cache_op, after=None, scope=scope, before=st)
    _replace_dataflow(sch, dict(zip(old_outputs, new_op.outputs, strict=True)))
    outs = cache_op.outputs
    return outs if len(outs) > 1 else outs[0]


def rfactor(sch: Schedule, tensor: Tensor, axis: IterVar, factor_axis: int = 0):
    """Factor a reduction: partial results over ``axis`` become a new stage (``tensor.rf``),
    which the original stage then reduces. Lets a reduction be parallelized or vectorized.

    Before:: B[i] = sum(A[i, k], k)   with k split into k.outer, k.inner
    ``BF = s.rfactor(B, ki)``
    After::  B.rf[k.inner, i] = sum(A[i, k.outer*f + k.inner], k.outer)
             B[i] = sum(B.rf[k.inner.v, i], k.inner.v)

    Where ``f`` may not divide the extent, ``B.rf`` reduces under the condition
    ``likely(k.outer*f + k.inner < extent)`` (TVM's predicate), which ``loop_partition``
    cuts into guard-free whole slices and a tail.
    """
    from kiln.arith import Analyzer
    from kiln.ir.expr import Call, Range, Reduce
    from kiln.ir.op import logical_and

    from .relations import pass_down, pass_up

    st = sch[tensor]
    op = st.op
    if not isinstance(op, ComputeOp) or not op.reduce_axis:
        raise ScheduleError(f"rfactor: stage '{st.name}' is not a reduction")
    if len(op.body) != 1:
        raise NotImplementedError("rfactor of a multi-output reduction is not implemented")
    if axis not in st.leaf_iter_vars or axis.iter_type != IterVar.CommReduce:
        raise ScheduleError(
            f"rfactor on stage '{st.name}': '{getattr(axis, 'var', axis)}' must be one of the "
            f"stage's current reduction loops")
    if not 0 <= factor_axis <= len(op.axis):
        raise ScheduleError(f"rfactor: factor_axis must be in [0, {len(op.axis)}]")
    analyzer = Analyzer()
    ranges = {iv: iv.dom for iv in list(op.axis) + list(op.reduce_axis)}
    pass_down(st, ranges, analyzer.simplify)
    red: Reduce = op.body[0]
    # the rfactor stage: data axes = copies of op.axis with the factored axis inserted
    rf_axis = IterVar(Range.from_min_extent(0, ranges[axis].extent),
                      Var(axis.var.name, axis.var.dtype), IterVar.DataPar)
    data_axes = [IterVar(iv.dom, Var(iv.var.name, iv.var.dtype), IterVar.DataPar)
                 for iv in op.axis]
    rest = [iv for iv in st.leaf_iter_vars
            if iv.iter_type == IterVar.CommReduce and iv is not axis]
    new_reduce = [IterVar(Range.from_min_extent(0, ranges[iv].extent),
                          Var(iv.var.name, iv.var.dtype), IterVar.CommReduce) for iv in rest]
    leaf_vals = {axis: rf_axis.var}
    leaf_vals.update({iv: niv.var for iv, niv in zip(rest, new_reduce, strict=True)})
    leaf_vals.update({iv: iv.var for iv in st.leaf_iter_vars if iv not in leaf_vals})
    values = pass_up(st, ranges, leaf_vals)
    vmap = {iv.var: values[iv] for iv in op.reduce_axis}
    vmap.update({iv.var: niv.var for iv, niv in zip(op.axis, data_axes, strict=True)})
    cond = substitute(red.condition, vmap)
    for iv in op.reduce_axis:
        bound = values[iv] < iv.dom.min + iv.dom.extent
        if not analyzer.can_prove(bound):
            cond = logical_and(cond, Call("bool", "likely", [bound]))
    source = [substitute(x, vmap) for x in red.source]
    rf_axes = data_axes[:factor_axis] + [rf_axis] + data_axes[factor_axis:]
    rf_body = Reduce(red.combiner, source, new_reduce, cond, 0)
    rf_op = ComputeOp(f"{op.name}.rf", op.tag, op.attrs, rf_axes, [rf_body])
    rf_tensor = rf_op.output(0)
    # the original stage now reduces the partial results over the factored axis
    k_final = IterVar(Range.from_min_extent(0, ranges[axis].extent),
                      Var(axis.var.name + ".v", axis.var.dtype), IterVar.CommReduce)
    idx = [iv.var for iv in op.axis]
    idx = idx[:factor_axis] + [k_final.var] + idx[factor_axis:]
    from kiln.ir.expr import IntImm

    final = Reduce(red.combiner, [ProducerLoad(rf_tensor, idx)], [k_final],
                   IntImm("bool", 1), 0)
    new_op = ComputeOp(op.name, op.tag, op.attrs, op.axis, [final])
    old_outputs = list(op.outputs)
    st.relations = []
    st.iter_var_attrs = {}
    _rebind(sch, st, new_op)
    st._set_op(new_op)
    _insert_stage(sch, rf_op, after=None, scope="", before=st)
    _replace_dataflow(sch, dict(zip(old_outputs, new_op.outputs, strict=True)))
    return rf_tensor
