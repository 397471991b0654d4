"""Horizontal fusion of independent stages: ``Schedule.create_fused_loop`` and ``FusedLoopOp``.

``s.create_fused_loop(inputs, fuse_outputs, extents)`` puts the outer loops of independent
stages (the *branches*) end to end in one loop, ``loop_axis``, of extent ``sum(extents)``, so
that one ``parallel`` (or one ``blockIdx.x`` binding: one CUDA kernel) runs the branches side
by side instead of one after the other (seed 002; HFuse-style horizontal kernel fusion)::

    for (x, 0, 2) { for (y, 0, n) { X[x, y] = A[x, y] + 1 } }
    for (x, 0, 2) { for (y, 0, n) { Y[x, y] = B[x, y] + 3 } }
    for (x, 0, 2) { for (y, 0, n) { Z[x, y] = X[x, y]*Y[x, y] } }

  ``X2, Y2 = s.create_fused_loop([[X], [Y]], [X, Y], [2, 2])``
  ``s[X2].parallel(X2.op.loop_axis)``

    produce fused {
      parallel (fused, 0, 4) {
        if (fused < 2) {
          // attr [fused] fused_branch_scope = 0
          produce X { for (y, 0, n) { fused.v0[fused, y] = A[fused, y] + 1 } }
        } else {
          // attr [fused] fused_branch_scope = 1
          produce Y { for (y, 0, n) { fused.v1[fused - 2, y] = B[fused - 2, y] + 3 } }
        }
      }
    }
    for (x, 0, 2) { for (y, 0, n) { Z[x, y] = fused.v0[x, y]*fused.v1[x, y] } }

Guarantees:

* Branch ``i`` runs where ``loop_axis`` lies in ``[offset_i, offset_i + extents[i])`` (the
  prefix sums of ``extents``), under an ``AttrStmt(op, "fused_branch_scope", i)``, computing
  row ``loop_axis - offset_i`` of its stage: one row per iteration, no loop left over the rows.
* The fused outputs are ``<name>.v0``, ``<name>.v1``, ... (``new_outputs``); every stage that
  read a branch reads them instead. A branch stage stores straight into its fused output.
* ``loop_axis`` takes ``split``, ``fuse`` (of its pieces), ``reorder``, ``parallel``,
  ``unroll``, ``bind`` and pragmas; a split that does not divide the extent guards the
  branches with ``likely(fused < sum(extents))``. Each branch keeps its stage (``s[X]``), whose
  inner loops take every primitive (``split``, ``vectorize``, ``unroll``, ``reorder``, ``bind``
  to threads, ...); reductions are branches like any other.
* ``inputs[i]`` lists the stages of branch ``i``: its own and producers of it, which are
  computed once per row of the branch (``compute_at`` its row axis).
* Branches must be independent (none reads another, directly or through other stages),
  distinct, computed at root, not outputs of the schedule, one-output compute stages whose
  first dimension is their extent: otherwise ``ScheduleError`` at the call, naming the
  branch. When lowering, a branch must still be at root and the compute stages it reads
  inlined or computed inside it (``ScheduleError`` naming the stage otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.arith import Analyzer, IntervalSet
from kiln.errors import ScheduleError
from kiln.ir.expr import Call, IterVar, PrimExpr, Range, Var
from kiln.ir.op import convert
from kiln.ir.printer import expr_text
from kiln.ir.stmt import AttrStmt, Evaluate, IfThenElse, LetStmt, Stmt

from .relations import leaf_values, pass_up
from .schedule import Schedule, Stage
from .schedule_dataflow import _replace_dataflow
from .schedule_ops import SCAN_INIT_SCOPE, make_loop
from .tensor import ComputeOp, Operation, Tensor

#: the attribute that tags each branch of a fused loop (its value: the branch number)
FUSED_BRANCH_SCOPE = "fused_branch_scope"

#: schedule primitives the fused stage takes (all act on ``loop_axis`` and its pieces)
_FUSED_PRIMITIVES = ("split", "fuse", "reorder", "parallel", "unroll", "bind", "compute_root")


class FusedLoopOp(Operation):
    """Independent stages (``branches``) computed in one loop, ``loop_axis``: rows
    ``[offsets[i], offsets[i + 1])`` of it compute the rows of branch ``i``."""

    def __init__(self, name: str, tag: str, attrs: dict | None, loop_axis: IterVar,
                 branches: Sequence[Tensor], extents: Sequence[PrimExpr]):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.loop_axis = loop_axis
        self.branches = list(branches)
        self.extents = [convert(e) for e in extents]
        #: the prefix sums of the extents: branch ``i`` spans ``[offsets[i], offsets[i+1])``
        self.offsets = _prefix_sums(self.extents)
        #: the value of ``loop_axis`` inside the loop nest (bound once the leaves are known)
        self.row = Var(loop_axis.var.name, loop_axis.var.dtype)
        self.outputs = [Tensor(t.shape, t.dtype, self, i) for i, t in enumerate(self.branches)]

    @property
    def input_tensors(self) -> list[Tensor]:
        """The tensors this operation computes in its loop (the branches)."""
        return list(self.branches)

    def root_iter_vars(self) -> list[IterVar]:
        return [self.loop_axis]

    def check_primitive(self, primitive: str) -> None:
        """The fused stage has one loop, ``loop_axis``, that runs the branches' rows; it is
        split, parallelized or bound, never vectorized or moved."""
        if primitive not in _FUSED_PRIMITIVES:
            names = ", ".join(t.op.name for t in self.branches)
            raise ScheduleError(
                f"{primitive}: stage '{self.name}' is a fused loop over stages {names}; its "
                f"loop '{self.loop_axis.var.name}' takes only "
                f"{', '.join(_FUSED_PRIMITIVES)}. Schedule the branches' inner loops on "
                f"their own stages (s[{self.branches[0].op.name}])")

    def read_region(self, tensor: Tensor, dom_map: dict[Var, IntervalSet]) -> list[IntervalSet]:
        """Each iteration computes one row of one branch: row ``loop_axis - offset`` of it,
        all of its other dimensions."""
        i = self.branches.index(tensor)
        row = Analyzer().simplify(self.row - self.offsets[i])
        return [IntervalSet(row, row)] + [IntervalSet(0, extent - 1)
                                          for extent in tensor.shape[1:]]

    def replace_inputs(self, vmap: dict[Tensor, Tensor]) -> FusedLoopOp:
        """This fused loop over the branches of ``vmap`` (a ``cache_write`` of a branch);
        itself when none is replaced."""
        branches = [vmap.get(t, t) for t in self.branches]
        if branches == self.branches:
            return self
        return FusedLoopOp(self.name, self.tag, self.attrs, self.loop_axis, branches,
                           self.extents)

    def output_aliases(self) -> dict[Tensor, Tensor]:
        """Each branch stores straight into its fused output."""
        return dict(zip(self.branches, self.outputs, strict=True))

    def build_provide(self, stage: Stage, ranges: dict[IterVar, Range]) -> Stmt:
        """The leaves of ``loop_axis``, the row they reach, and one branch per range of
        rows, where the branch's stage is built (``scan_init_scope`` marks it)::

            for (fused, 0, 4) {
              if (fused < 2) { // attr [fused] fused_branch_scope = 0  <X> }
              else           { // attr [fused] fused_branch_scope = 1  <Y> }
            }
        """
        _check_branches_in_place(self, stage.schedule)
        row = pass_up(stage, ranges, leaf_values(stage, ranges))[self.loop_axis]
        chain = self._branch_chain(_overruns(stage, ranges, row, self.offsets[-1]))
        body: Stmt = LetStmt(self.row, row, chain)
        for iv in reversed(stage.leaf_iter_vars):
            body = make_loop(stage, iv, ranges[iv].extent, body)
        return body

    def _branch_chain(self, guard_last: bool) -> Stmt:
        """``if (row < offsets[1]) {branch 0} else if ... else {branch n-1}``, the last one
        guarded by ``likely(row < total)`` where the loop may run past the rows."""
        offsets = self.offsets
        n = len(self.branches)
        chain = self._branch(n - 1)
        if guard_last:
            chain = IfThenElse(Call("bool", "likely", [self.row < offsets[n]]), chain)
        for i in reversed(range(n - 1)):
            chain = IfThenElse(self.row < offsets[i + 1], self._branch(i), chain)
        return chain

    def _branch(self, i: int) -> Stmt:
        mark = AttrStmt(self.branches[i].op, SCAN_INIT_SCOPE, 0, Evaluate(0))
        return AttrStmt(self, FUSED_BRANCH_SCOPE, i, mark)


def _prefix_sums(extents: list[PrimExpr]) -> list[PrimExpr]:
    analyzer = Analyzer()
    out = [convert(0)]
    for extent in extents:
        out.append(analyzer.simplify(out[-1] + extent))
    return out


def _overruns(stage: Stage, ranges: dict[IterVar, Range], row: PrimExpr,
              total: PrimExpr) -> bool:
    """May the leaves of ``loop_axis`` reach a row past ``total`` (a split that does not
    divide it)?"""
    analyzer = Analyzer()
    for iv in stage.leaf_iter_vars:
        analyzer.bind(iv.var, Range.from_min_extent(0, ranges[iv].extent))
    return not analyzer.can_prove(row < total)


def _check_branches_in_place(op: FusedLoopOp, sch: Schedule) -> None:
    """Each branch stage is built in its branch: it must stay at root (neither inlined nor
    computed at another stage's loop), and so must the compute stages it reads be computed
    inside it (or inlined): an iteration computes one row of the branch."""
    for t in op.branches:
        st = sch[t]
        if st.attach_type != "root":
            how = "inlined" if st.attach_type == "inline" else \
                f"computed at stage '{st.attach_stage.name}'"
            raise ScheduleError(
                f"create_fused_loop: stage '{st.name}' is a branch of fused loop '{op.name}' "
                f"but is {how}; a branch is computed in the fused loop (s[{st.name}]."
                f"compute_root() puts it back)")
        outside = _producer_outside(st, sch)
        if outside is not None:
            raise ScheduleError(
                f"create_fused_loop: stage '{outside.name}' feeds branch '{st.name}' of fused "
                f"loop '{op.name}' but is computed outside it; each iteration of the fused "
                f"loop computes one row of '{st.name}', so compute its producers inside it "
                f"(s[{outside.name}].compute_at(s[{st.name}], {st.name}.op.axis[-1])) or "
                f"inline them (s[{outside.name}].compute_inline())")


def _producer_outside(branch: Stage, sch: Schedule) -> Stage | None:
    """A compute stage that ``branch`` reads (directly or through inlined stages) which is
    computed outside the branch's loops; None when there is none."""
    todo = list(branch.op.input_tensors)
    seen: set[Stage] = set()
    while todo:
        st = sch[todo.pop()]
        if st in seen or not isinstance(st.op, ComputeOp):
            continue  # inputs, and operations that lower themselves (read whole)
        seen.add(st)
        if st.attach_type == "root" or (st.attach_type == "scope"
                                        and not _computed_inside(st, branch)):
            return st
        todo.extend(st.op.input_tensors)
    return None


def _computed_inside(stage: Stage, ancestor: Stage) -> bool:
    """Is ``stage`` computed within ``ancestor``'s loops (through compute_at)?"""
    while stage.attach_type == "scope":
        stage = stage.attach_stage
        if stage is ancestor:
            return True
    return False


# ---------------------------------------------------------------------------------------
# the primitive
# ---------------------------------------------------------------------------------------
def create_fused_loop(sch: Schedule, inputs, fuse_outputs, extents,
                      name: str = "fused") -> list[Tensor]:
    """Fuse the outer loops of the independent stages ``fuse_outputs`` into one loop.

    ``inputs[i]`` lists the stages of branch ``i``: its own (``fuse_outputs[i]``) and
    producers of it to compute once per row of it (``compute_at`` its row axis), e.g.
    ``[X]`` or ``[P, X]``. ``extents[i]`` is the extent of its outer loop (its first
    dimension). Returns the new outputs
    (``<name>.v0``, ...), read by every former reader of the branches; ``new[0].op.loop_axis``
    is the fused loop. See the module docstring for the loop nest before and after.
    """
    tensors, extents = _check_arguments(sch, inputs, fuse_outputs, extents)
    analyzer = Analyzer()
    for k, (t, extent) in enumerate(zip(tensors, extents, strict=True)):
        _check_branch(sch, k, t, extent, analyzer)
    _check_independent(tensors)
    producers = [_branch_producers(sch, k, group, t)
                 for k, (group, t) in enumerate(zip(inputs, tensors, strict=True))]
    total = _prefix_sums(extents)[-1]
    loop_axis = IterVar(Range(0, total), Var(name, total.dtype), IterVar.DataPar)
    op = FusedLoopOp(name, "", None, loop_axis, tensors, extents)
    _replace_dataflow(sch, dict(zip(tensors, op.outputs, strict=True)))
    stage = Stage(op, sch)
    sch.stages.append(stage)
    sch.stage_map[op] = stage
    sch.stages[:] = _producers_first(sch)
    for t, stages in zip(tensors, producers, strict=True):
        for st in stages:  # computed once per row of the branch
            st.compute_at(sch[t], t.op.axis[0])
    return list(op.outputs)


def _branch_producers(sch: Schedule, k: int, group, branch: Tensor) -> list[Stage]:
    """The stages ``group`` lists for branch ``k`` besides the branch's own: compute stages
    the branch reads."""
    group = list(group) if isinstance(group, list | tuple) else [group]
    stages = [sch[t] for t in group if sch[t].op is not branch.op]
    for st in stages:
        if not isinstance(st.op, ComputeOp) or _dependence(branch.op, st.op) is None:
            raise ScheduleError(
                f"create_fused_loop: inputs[{k}] lists '{st.name}', which is not a compute "
                f"stage that branch '{branch.op.name}' reads; inputs[{k}] lists the branch's "
                f"stage and the producers to compute in each of its rows")
    return stages


def _check_arguments(sch: Schedule, inputs, fuse_outputs,
                     extents) -> tuple[list[Tensor], list[PrimExpr]]:
    """The branches' current tensors and their extents, after checking the three lists."""
    outs = list(fuse_outputs) if isinstance(fuse_outputs, list | tuple) else [fuse_outputs]
    groups = list(inputs) if isinstance(inputs, list | tuple) else []
    exts = list(extents) if isinstance(extents, list | tuple) else []
    if len(outs) < 2 or not len(outs) == len(groups) == len(exts):
        raise ScheduleError(
            f"create_fused_loop: give one list of inputs, one output and one extent per "
            f"branch, at least two branches (got {len(groups)} input lists, {len(outs)} "
            f"outputs, {len(exts)} extents), e.g. s.create_fused_loop([[X], [Y]], [X, Y], "
            f"[M, M])")
    for k, (group, out) in enumerate(zip(groups, outs, strict=True)):
        group = list(group) if isinstance(group, list | tuple) else [group]
        if not all(isinstance(t, Tensor) for t in [out, *group]):
            raise ScheduleError(f"create_fused_loop: branch {k}: inputs and outputs must be "
                                f"tensors")
        if not any(t.op is out.op for t in group):
            raise ScheduleError(
                f"create_fused_loop: inputs[{k}] ({', '.join(t.name for t in group)}) must "
                f"list the branch's own stage '{out.name}' (inputs[{k}] = [{out.name}, ...])")
    current = [sch[t].op.output(t.value_index) for t in outs]
    for k, t in enumerate(current):
        if any(t.op is other.op for other in current[:k]):
            raise ScheduleError(f"create_fused_loop: stage '{t.op.name}' is given twice; "
                                f"each branch is a different stage")
    return current, [convert(e) for e in exts]


def _check_branch(sch: Schedule, k: int, t: Tensor, extent: PrimExpr,
                  analyzer: Analyzer) -> None:
    st = sch[t]
    where = f"create_fused_loop: branch {k}, stage '{st.name}'"
    if not isinstance(st.op, ComputeOp) or len(st.op.outputs) != 1:
        raise ScheduleError(f"{where} is a {type(st.op).__name__} with "
                            f"{len(st.op.outputs)} outputs; a branch is a one-output "
                            f"te.compute stage")
    if st.is_output:
        raise ScheduleError(f"{where} is an output of the schedule; fuse stages that a later "
                            f"stage reads (the fused outputs replace them)")
    if st.attach_type != "root" or st.relations or st.iter_var_attrs:
        raise ScheduleError(f"{where}: call create_fused_loop before scheduling the branch "
                            f"(it is inlined, attached or already has loop primitives)")
    if not analyzer.can_prove_equal(extent, t.shape[0]):
        raise ScheduleError(
            f"{where}: extent {expr_text(extent)} differs from the stage's first dimension "
            f"{expr_text(t.shape[0])}; a branch fuses its whole outer loop")


def _check_independent(tensors: list[Tensor]) -> None:
    """No branch reads another, directly or through other stages."""
    for consumer in tensors:
        for producer in tensors:
            path = _dependence(consumer.op, producer.op) if consumer is not producer else None
            if path is not None:
                via = " through " + ", ".join(f"'{op.name}'" for op in path) if path else ""
                raise ScheduleError(
                    f"create_fused_loop: stage '{consumer.op.name}' reads stage "
                    f"'{producer.op.name}'{via}; fused branches run side by side and must be "
                    f"independent. Fuse independent stages only (here, not both "
                    f"'{producer.op.name}' and '{consumer.op.name}')")


def _dependence(consumer: Operation, producer: Operation) -> list[Operation] | None:
    """The operations between ``producer`` and ``consumer`` on a path of reads (empty for a
    direct read); None when ``consumer`` does not depend on ``producer``."""
    seen: set[Operation] = set()

    def path_from(op: Operation) -> list[Operation] | None:
        for t in op.input_tensors:
            if t.op is producer:
                return []
            if t.op in seen:
                continue
            seen.add(t.op)
            rest = path_from(t.op)
            if rest is not None:
                return [t.op, *rest]
        return None

    found = path_from(consumer)
    return list(reversed(found)) if found is not None else None


def _producers_first(sch: Schedule) -> list[Stage]:
    """The stages in their current order, except that a stage moves after the stages it
    reads (the fused stage after its branches, the readers of the branches after it)."""
    pending = list(sch.stages)
    order: list[Stage] = []
    placed: set[Stage] = set()
    while pending:
        ready = next(st for st in pending
                     if all(sch[t] in placed for t in st.op.input_tensors))
        pending.remove(ready)
        order.append(ready)
        placed.add(ready)
    return order
