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

``interleave=k`` (constant extents) visits blocks of ``k`` rows of each branch round-robin,
while a branch still has rows, so that each thread's chunk of a ``parallel`` loop holds rows
of every branch; with extents ``[2, 4]`` and ``k = 1`` (X0 Y0 X1 Y1 Y2 Y3)::

  ``X2, Y2 = s.create_fused_loop([[X], [Y]], [X, Y], [2, 4], interleave=1)``

    parallel (fused, 0, 6) {
      if (fused < 4) {
        fused.round = floordiv(fused, 2)
        fused.pos = floormod(fused, 2)
        if (fused.pos < 1) {
          // attr [fused] fused_branch_scope = 0
          produce X { ... row fused.round ... }
        } else {
          // attr [fused] fused_branch_scope = 1
          produce Y { ... row fused.round ... }
        }
      } else {
        // attr [fused] fused_branch_scope = 1
        Y.row = fused - 2
        produce Y { ... row Y.row ... }
      }
    }

Guarantees:

* Branch ``i`` runs where ``loop_axis`` lies in ``[offset_i, offset_i + extents[i])`` (the
  prefix sums of ``extents``), under an ``AttrStmt(op, "fused_branch_scope", i)``, computing
  row ``loop_axis - offset_i`` of its stage: one row per iteration, no loop left over the rows.
* With ``interleave=k``, round ``t`` of the loop computes rows ``[t*k, min((t+1)*k,
  extents[i]))`` of each branch ``i`` that still has rows, in branch order: every row of
  every branch exactly once, ``sum(extents)`` iterations, none out of range. The row map is
  a chain of *pieces* (runs of rounds in which every branch takes as many rows; a piece of
  several rounds binds ``<name>.round`` and ``<name>.pos``), each a chain of blocks; a branch
  met in several blocks reads its row from ``<branch>.row``, bound in each (and substituted
  by ``Simplify`` where it is a variable). A block size of at least every extent but the
  last gives the end-to-end order.
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
from dataclasses import dataclass
from itertools import pairwise

from kiln.arith import Analyzer, IntervalSet
from kiln.errors import ScheduleError
from kiln.ir.expr import Call, IntImm, IterVar, PrimExpr, Range, Var
from kiln.ir.op import convert, floordiv, floormod
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


@dataclass(frozen=True)
class RowBlock:
    """Rows of branch ``branch`` in each round of a :class:`RowPiece`: positions
    ``[start, start + width)`` of the round compute its rows ``first_row + round*width``
    onwards."""

    branch: int
    start: PrimExpr
    width: PrimExpr
    first_row: PrimExpr


@dataclass(frozen=True)
class RowPiece:
    """Rows ``[start, start + rounds*period)`` of ``loop_axis``: ``rounds`` rounds of
    ``period`` rows, each round the ``blocks`` one after the other."""

    start: PrimExpr
    rounds: int
    period: PrimExpr
    blocks: tuple[RowBlock, ...]


def end_to_end(extents: list[PrimExpr]) -> list[RowPiece]:
    """The classic row map: one round, branch ``i`` on rows ``[offset_i, offset_i + extent_i)``
    (the prefix sums)."""
    offsets = _prefix_sums(extents)
    blocks = tuple(RowBlock(i, offsets[i], extent, convert(0))
                   for i, extent in enumerate(extents))
    return [RowPiece(convert(0), 1, offsets[-1], blocks)]


def interleaved(extents: list[int], k: int) -> list[RowPiece]:
    """The row map that visits blocks of ``k`` rows of each branch round-robin, while a
    branch still has rows: round ``t`` gives branch ``i`` its rows ``[t*k, min((t+1)*k,
    extent_i))``. Consecutive rounds where every branch takes as many rows are one piece;
    the rounds where one branch is left are one round of all its remaining rows."""
    rounds = max(-(-e // k) for e in extents)
    # the widths change where a branch runs out of full blocks, and where it runs out of rows
    breaks = sorted({0, rounds} | {e // k for e in extents} | {-(-e // k) for e in extents})
    pieces: list[RowPiece] = []
    start = 0
    for t0, t1 in pairwise(breaks):
        widths = [(i, min(k, e - t0 * k)) for i, e in enumerate(extents) if e > t0 * k]
        if len(widths) == 1:  # one branch left: its rows in order, one round
            (i, _), = widths
            rows = extents[i] - t0 * k
            pieces.append(RowPiece(convert(start), 1, convert(rows),
                                   (RowBlock(i, convert(0), convert(rows), convert(t0 * k)),)))
            start += rows
            break
        blocks, position = [], 0
        for i, width in widths:
            blocks.append(RowBlock(i, convert(position), convert(width), convert(t0 * k)))
            position += width
        pieces.append(RowPiece(convert(start), t1 - t0, convert(position), tuple(blocks)))
        start += (t1 - t0) * position
    return pieces


@dataclass(frozen=True)
class RowVars:
    """The variables a fused loop's rows are written with: its row, and, in a piece of
    several rounds, the round and the position in it (bound where the piece starts)."""

    row: Var
    round: Var
    position: Var

    def of(self, piece: RowPiece) -> tuple[PrimExpr, PrimExpr]:
        """The round and the position of ``row`` in ``piece``, as read in its blocks."""
        if piece.rounds == 1:
            return convert(0), Analyzer().simplify(self.row - piece.start)
        return self.round, self.position

    def bind(self, piece: RowPiece, body: Stmt) -> Stmt:
        """``body`` with the round and the position of a piece of several rounds bound."""
        if piece.rounds == 1:
            return body
        local = Analyzer().simplify(self.row - piece.start)
        return LetStmt(self.round, floordiv(local, piece.period),
                       LetStmt(self.position, floormod(local, piece.period), body))


def block_row(piece: RowPiece, block: RowBlock, rows: RowVars) -> PrimExpr:
    """The branch row that the fused row (inside ``block`` of ``piece``) computes."""
    round_, position = rows.of(piece)
    in_block = 0 if _is_one(block.width) else position - block.start
    return Analyzer().simplify(block.first_row + round_ * block.width + in_block)


def _is_one(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1


class FusedLoopOp(Operation):
    """Independent stages (``branches``) computed in one loop, ``loop_axis``, whose rows are
    mapped to the branches' rows by ``pieces``: end to end (``interleave`` None: rows
    ``[offsets[i], offsets[i + 1])`` compute branch ``i``), or blocks of ``interleave`` rows
    of each branch round-robin."""

    def __init__(self, name: str, tag: str, attrs: dict | None, loop_axis: IterVar,
                 branches: Sequence[Tensor], extents: Sequence[PrimExpr],
                 interleave: int | None = None):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.loop_axis = loop_axis
        self.branches = list(branches)
        self.extents = [convert(e) for e in extents]
        self.interleave = interleave
        #: the prefix sums of the extents (``offsets[-1]``: the extent of ``loop_axis``)
        self.offsets = _prefix_sums(self.extents)
        #: the row map: which rows of ``loop_axis`` compute which rows of which branch
        self.pieces = end_to_end(self.extents) if interleave is None else \
            interleaved([int(e) for e in self.extents], interleave)
        #: the value of ``loop_axis`` inside the loop nest (bound once the leaves are known)
        self.row = Var(loop_axis.var.name, loop_axis.var.dtype)
        self.row_vars = RowVars(self.row, Var(f"{name}.round", self.row.dtype),
                                Var(f"{name}.pos", self.row.dtype))
        #: the row variable of each branch met in several blocks (bound in each of them)
        self.branch_rows = {i: Var(f"{t.op.name}.row", loop_axis.var.dtype)
                            for i, t in enumerate(self.branches) if len(self._blocks(i)) > 1}
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
        """Each iteration computes one row of one branch (its row expression, or its row
        variable where the branch is met in several blocks), all of its other dimensions."""
        row = self._row_of(self.branches.index(tensor))
        return [IntervalSet(row, row)] + [IntervalSet(0, extent - 1)
                                          for extent in tensor.shape[1:]]

    def replace_inputs(self, vmap: dict[Tensor, Tensor]) -> FusedLoopOp:
        """This fused loop over the branches of ``vmap`` (a ``cache_write`` of a branch);
        itself when none is replaced."""
        branches = [vmap.get(t, t) for t in self.branches]
        if branches == self.branches:
            return self
        return FusedLoopOp(self.name, self.tag, self.attrs, self.loop_axis, branches,
                           self.extents, self.interleave)

    def output_aliases(self) -> dict[Tensor, Tensor]:
        """Each branch stores straight into its fused output."""
        return dict(zip(self.branches, self.outputs, strict=True))

    def build_provide(self, stage: Stage, ranges: dict[IterVar, Range]) -> Stmt:
        """The leaves of ``loop_axis``, the row they reach, and one branch per block of rows,
        where the branch's stage is built (``scan_init_scope`` marks it)::

            for (fused, 0, 4) {
              if (fused < 2) { // attr [fused] fused_branch_scope = 0  <X> }
              else           { // attr [fused] fused_branch_scope = 1  <Y> }
            }
        """
        _check_branches_in_place(self, stage.schedule)
        row = pass_up(stage, ranges, leaf_values(stage, ranges))[self.loop_axis]
        chain = self._piece_chain(_overruns(stage, ranges, row, self.offsets[-1]))
        body: Stmt = LetStmt(self.row, row, chain)
        for iv in reversed(stage.leaf_iter_vars):
            body = make_loop(stage, iv, ranges[iv].extent, body)
        return body

    def _blocks(self, i: int) -> list[tuple[RowPiece, RowBlock]]:
        return [(p, b) for p in self.pieces for b in p.blocks if b.branch == i]

    def _row_of(self, i: int) -> PrimExpr:
        """Branch ``i``'s row as read by its stage: its row variable, or the expression of
        its one block."""
        if i in self.branch_rows:
            return self.branch_rows[i]
        (piece, block), = self._blocks(i)
        return block_row(piece, block, self.row_vars)

    def _piece_chain(self, guard_last: bool) -> Stmt:
        """``if (row < start_1) {piece 0} else if ... else {last piece}``, each piece a
        :meth:`_block_chain`; where the loop may run past the rows, the last piece guarded
        by ``likely(row < total)`` (its last block, in a piece of one round)."""
        last = len(self.pieces) - 1
        guard = Call("bool", "likely", [self.row < self.offsets[-1]]) if guard_last else None
        chain = self._block_chain(self.pieces[last], guard)
        for p in reversed(range(last)):
            chain = IfThenElse(self.row < self.pieces[p + 1].start,
                               self._block_chain(self.pieces[p], None), chain)
        return chain

    def _block_chain(self, piece: RowPiece, guard: PrimExpr | None) -> Stmt:
        """``if (position < end of block 0) {its branch} else if ... else {last block}``,
        the round and the position bound first in a piece of several rounds; ``guard``
        around the last block (one round: the rows only grow) or the whole piece."""
        _, position = self.row_vars.of(piece)
        chain = self._branch(piece, piece.blocks[-1])
        if guard is not None and piece.rounds == 1:
            chain = IfThenElse(guard, chain)
        for block in reversed(piece.blocks[:-1]):
            end = Analyzer().simplify(block.start + block.width)
            chain = IfThenElse(position < end, self._branch(piece, block), chain)
        chain = self.row_vars.bind(piece, chain)
        if guard is not None and piece.rounds > 1:
            chain = IfThenElse(guard, chain)
        return chain

    def _branch(self, piece: RowPiece, block: RowBlock) -> Stmt:
        """The branch's stage (built at the mark), its row variable bound where it has one."""
        i = block.branch
        body: Stmt = AttrStmt(self.branches[i].op, SCAN_INIT_SCOPE, 0, Evaluate(0))
        if i in self.branch_rows:
            body = LetStmt(self.branch_rows[i], block_row(piece, block, self.row_vars), body)
        return AttrStmt(self, FUSED_BRANCH_SCOPE, i, body)


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
def create_fused_loop(sch: Schedule, inputs, fuse_outputs, extents, name: str = "fused",
                      interleave: int | None = None) -> list[Tensor]:
    """Fuse the outer loops of the independent stages ``fuse_outputs`` into one loop.

    ``inputs[i]`` lists the stages of branch ``i``: its own (``fuse_outputs[i]``) and
    producers of it to compute once per row of it (``compute_at`` its row axis), e.g.
    ``[X]`` or ``[P, X]``. ``extents[i]`` is the extent of its outer loop (its first
    dimension). ``interleave=k`` (constant extents only) visits blocks of ``k`` rows of each
    branch round-robin instead of placing the branches end to end. Returns the new outputs
    (``<name>.v0``, ...), read by every former reader of the branches; ``new[0].op.loop_axis``
    is the fused loop. See the module docstring for the loop nest before and after.
    """
    tensors, extents = _check_arguments(sch, inputs, fuse_outputs, extents)
    analyzer = Analyzer()
    for k, (t, extent) in enumerate(zip(tensors, extents, strict=True)):
        _check_branch(sch, k, t, extent, analyzer)
    _check_independent(tensors)
    _check_interleave(interleave, extents)
    producers = [_branch_producers(sch, k, group, t)
                 for k, (group, t) in enumerate(zip(inputs, tensors, strict=True))]
    total = _prefix_sums(extents)[-1]
    loop_axis = IterVar(Range(0, total), Var(name, total.dtype), IterVar.DataPar)
    op = FusedLoopOp(name, "", None, loop_axis, tensors, extents, interleave)
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


def _check_interleave(interleave, extents: list[PrimExpr]) -> None:
    """``interleave`` is None or a positive int, and then the extents are constants (the
    round-robin row map is laid out when the loop is created)."""
    if interleave is None:
        return
    if isinstance(interleave, bool) or not isinstance(interleave, int) or interleave < 1:
        raise ScheduleError(f"create_fused_loop: interleave={interleave!r}; give the rows "
                            f"per block as a positive int, or None to place the branches end "
                            f"to end")
    symbolic = [expr_text(e) for e in extents if not isinstance(e, IntImm)]
    if symbolic:
        raise ScheduleError(f"create_fused_loop: interleave={interleave} needs constant "
                            f"extents, got {', '.join(symbolic)}; place branches of symbolic "
                            f"extent end to end (interleave=None)")


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
