"""Recurrences: ``te.scan`` and its operation, ``ScanOp``.

``te.scan(init, update, state_placeholder)`` makes tensors shaped like the state placeholders
whose first rows (``init.shape[0]`` of them) are ``init`` and whose row ``t`` after that is
``update[t]``, where ``update`` reads rows of earlier steps through the state placeholder
(``s_state[t - 1, i]``). Several states scan together (lists of the same length). Guarantees,
as in classic TVM:

* Schedule: the stages on a path from the states (and ``inputs``) to the updates, TVM's scan
  group, are computed inside the scan loop ``scan_axis``, as if by
  ``s[s_update].compute_at(s[s_scan], s_scan.op.scan_axis)`` (which may also be written);
  ``compute_root`` returns such a stage there. Their axes can be split, bound to threads,
  parallelized and vectorized, and one may be computed at another's loop. The init stages
  are computed once, before the loop. The scan stage itself takes no loop primitive;
  ``env_threads`` runs it whole inside GPU thread axes (one persistent kernel, a barrier
  after the init and after each step).
* Bound inference: per step, an update stage computes the one row ``t`` (its other axes
  whole), a stage of the group what the update reads of it at ``t``; an init stage computes
  rows ``[0, init.shape[0])``.
* Lowering: the init, the update and the state placeholder of a state all stand for the
  scan's output storage (``output_aliases``), so an update reads the rows written at earlier
  steps::

    produce scan {
      produce s_init { for (i, 0, n) { scan[i] = X[i] } }
      for (scan.idx, 0, (m - 1)) {
        produce s_update {
          for (i, 0, n) { scan[(((scan.idx + 1)*n) + i)] = (scan[((scan.idx*n) + i)] + X[...]) }
        }
      }
    }

``te.scan`` checks that states, inits and updates agree in number, dtype and shape and that
every update reads some state placeholder.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.arith import Analyzer, IntervalSet
from kiln.errors import ScheduleError
from kiln.ir.expr import IterVar, PrimExpr, Range, Var
from kiln.ir.printer import expr_text
from kiln.ir.stmt import AttrStmt, Evaluate, For, ForKind, Stmt, seq
from kiln.tir.storage_sync import sync_stmt

from .schedule import Schedule, Stage
from .schedule_ops import SCAN_INIT_SCOPE
from .tensor import Operation, Tensor

#: schedule primitives a scan stage takes (its one loop is the recurrence itself)
_SCAN_PRIMITIVES = ("compute_root", "compute_at", "env_threads")


class ScanOp(Operation):
    """The operation of ``te.scan``: outputs shaped like ``state_placeholder``, rows
    ``[0, init.shape[0])`` from ``init``, the rest from ``update`` along ``scan_axis``."""

    composite = True

    def __init__(self, name: str, tag: str, attrs: dict | None, scan_axis: IterVar,
                 init: Sequence[Tensor], update: Sequence[Tensor],
                 state_placeholder: Sequence[Tensor], inputs: Sequence[Tensor]):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.scan_axis = scan_axis
        self.init = list(init)
        self.update = list(update)
        self.state_placeholder = list(state_placeholder)
        self.inputs = list(inputs)
        self.outputs = [Tensor(state.shape, upd.dtype, self, i)
                        for i, (state, upd) in enumerate(zip(state_placeholder, update,
                                                             strict=True))]

    @property
    def input_tensors(self) -> list[Tensor]:
        """The tensors this operation reads (TVM's order: the inits, then the updates)."""
        return self.init + self.update

    def root_iter_vars(self) -> list[IterVar]:
        return [self.scan_axis]

    def check_primitive(self, primitive: str) -> None:
        """A scan stage only moves (``compute_at``/``compute_root``) and runs inside thread
        axes (``env_threads``): its loop is the recurrence, whose steps depend on each
        other."""
        if primitive not in _SCAN_PRIMITIVES:
            raise ScheduleError(
                f"{primitive}: stage '{self.name}' is a te.scan; its loop '"
                f"{self.scan_axis.var.name}' runs the steps of the recurrence in order and "
                f"cannot be transformed. Schedule the update and init stages instead "
                f"(s[s_update].split(s_update.op.axis[1], ...))")

    def attach_group(self, sch: Schedule) -> None:
        """Put the stages of the scan group (every stage on a path from the states or
        ``inputs`` to an update) inside the scan loop, where ``compute_root`` also returns
        them (TVM's scan group)."""
        home = (sch.stage_map[self], self.scan_axis)
        boundary = {t.op for t in self.state_placeholder + self.inputs}
        for op in _ops_between([t.op for t in self.update], boundary):
            stage = sch.stage_map[op]
            stage.group_attach = home
            stage.compute_root()

    def read_region(self, tensor: Tensor, dom_map: dict[Var, IntervalSet]) -> list[IntervalSet]:
        """An update is read at the step(s) ``scan_axis`` takes in ``dom_map``, an init over
        its rows; both over their whole other axes."""
        first = IntervalSet(0, tensor.shape[0] - 1)
        if tensor in self.update:
            first = dom_map[self.scan_axis.var]
        return [first] + [IntervalSet(0, extent - 1) for extent in tensor.shape[1:]]

    def replace_inputs(self, vmap: dict[Tensor, Tensor]) -> ScanOp:
        """This scan with its inits and updates read through ``vmap`` (after ``cache_write``
        or ``rfactor`` of an update); itself when none is replaced."""
        init = [vmap.get(t, t) for t in self.init]
        update = [vmap.get(t, t) for t in self.update]
        if init == self.init and update == self.update:
            return self
        return ScanOp(self.name, self.tag, self.attrs, self.scan_axis, init, update,
                      self.state_placeholder, self.inputs)

    def output_aliases(self) -> dict[Tensor, Tensor]:
        """Each state's init, update and placeholder are stored as the scan's output."""
        aliases: dict[Tensor, Tensor] = {}
        for out, init, upd, state in zip(self.outputs, self.init, self.update,
                                         self.state_placeholder, strict=True):
            aliases.update({init: out, upd: out, state: out})
        return aliases

    def build_provide(self, stage: Stage, ranges: dict[IterVar, Range]) -> Stmt:
        """The init stages (``scan_init_scope``), then the loop over the steps, where the
        schedule puts the update group::

            // attr [s_init] scan_init_scope = 0
            for (scan.idx, 0, (m - 1)) { }

        With ``env_threads``, all of it runs inside those thread axes (one persistent
        kernel), and a barrier ends the init and each step (TVM's ``ScanOp::BuildProvide``
        places the init inside the env threads too)::

            // attr [threadIdx.x] thread_extent = 8
            { // attr [s_init] scan_init_scope = 0
              tvm_storage_sync("shared")
              for (scan.idx, 0, (m - 1)) { tvm_storage_sync("shared") } }
        """
        _check_updates_stored(self, stage.schedule)
        _check_states_read_inside(self, stage)
        env_threads = stage.env_thread_axes
        inits = [AttrStmt(t.op, SCAN_INIT_SCOPE, 0, Evaluate(0)) for t in self.init]
        barrier = sync_stmt() if env_threads else None
        steps = For(self.scan_axis.var, 0, ranges[self.scan_axis].extent, ForKind.SERIAL,
                    barrier or Evaluate(0))
        body = seq(*inits, barrier, steps)
        for iv in reversed(env_threads):
            body = AttrStmt(iv, "thread_extent", ranges[iv].extent, body)
        return body


def _ops_between(outputs: list[Operation], boundary: set[Operation]) -> list[Operation]:
    """The operations on a path from ``boundary`` to ``outputs`` (``boundary`` excluded),
    producers first (TVM's ``GetSubGraph``)."""
    reaches: dict[Operation, bool] = {}
    order: list[Operation] = []

    def visit(op: Operation) -> bool:
        if op in boundary:
            return True
        if op not in reaches:
            reaches[op] = False
            found = [visit(t.op) for t in op.input_tensors]
            reaches[op] = any(found)
            if reaches[op]:
                order.append(op)
        return reaches[op]

    for op in outputs:
        visit(op)
    return order


def _check_updates_stored(op: ScanOp, sch: Schedule) -> None:
    for t in op.update:
        if sch[t].attach_type == "inline":
            raise ScheduleError(
                f"compute_inline: stage '{t.op.name}' is an update of scan '{op.name}'; it "
                f"writes the scan's rows and cannot be inlined")


def _check_states_read_inside(op: ScanOp, scan_stage: Stage) -> None:
    """A stage that reads a state must run inside the scan loop, where its rows exist."""
    states = {t.op for t in op.state_placeholder}
    for st in scan_stage.schedule.stages:
        if st.attach_type == "inline" or not any(t.op in states for t in st.op.input_tensors):
            continue
        if not _inside(st, scan_stage):
            raise ScheduleError(
                f"stage '{st.name}' reads a state of scan '{op.name}' but is computed outside "
                f"its loop '{op.scan_axis.var.name}'; compute it inside: "
                f"s[{st.name}].compute_at(s[{op.name}], {op.name}.op.scan_axis), or at a loop "
                f"of a stage computed there")


def _inside(stage: Stage, ancestor: Stage) -> bool:
    """Is ``stage`` computed within ``ancestor``'s loops (through compute_at)?"""
    while stage.attach_type == "scope":
        stage = stage.attach_stage
        if stage is ancestor:
            return True
    return False


def scan(init, update, state_placeholder, inputs=None, name: str = "scan", tag: str = "",
         attrs: dict | None = None):
    """A recurrence along the first axis of the states (``te.scan``).

    ``init``, ``update`` and ``state_placeholder`` are tensors or equally long lists of them,
    one per state: ``state_placeholder`` a placeholder standing for the result inside the
    update; ``init`` the first rows (shape ``(k, ...)``); ``update`` every row (shape of the
    state) computed from earlier rows of the states. ``inputs`` (optional) lists the other
    tensors the update reads per step, which bounds the scan group. Returns a Tensor, or a
    list of them for several states.
    """
    init, update, states = (_as_list(x) for x in (init, update, state_placeholder))
    inputs = _as_list(inputs) if inputs is not None else []
    _check_counts(init, update, states, name)
    analyzer = Analyzer()
    for k, (i, u, s) in enumerate(zip(init, update, states, strict=True)):
        _check_state(k, i, u, s, name, analyzer)
    _check_init_rows(init, name, analyzer)
    _check_reads_states(update, states, name)
    begin, end = init[0].shape[0], update[0].shape[0]
    axis = IterVar(Range(begin, end), Var(f"{name}.idx", begin.dtype), IterVar.Ordered)
    op = ScanOp(name, tag, attrs, axis, init, update, states, inputs)
    return op.outputs[0] if len(op.outputs) == 1 else op.outputs


def _as_list(x) -> list[Tensor]:
    return list(x) if isinstance(x, list | tuple) else [x]


def _check_counts(init: list, update: list, states: list, name: str) -> None:
    for what, ts in (("init", init), ("update", update), ("state_placeholder", states)):
        for t in ts:
            if not isinstance(t, Tensor):
                raise TypeError(f"te.scan '{name}': {what} must be tensors, got "
                                f"{type(t).__name__}")
    if not len(init) == len(update) == len(states) > 0:
        raise ValueError(
            f"te.scan '{name}': got {len(init)} init, {len(update)} update and {len(states)} "
            f"state_placeholder tensors; give one of each per state")


def _shape_text(t: Tensor) -> str:
    return "(" + ", ".join(expr_text(e) for e in t.shape) + ")"


def _check_state(k: int, init: Tensor, upd: Tensor, state: Tensor, name: str,
                 analyzer: Analyzer) -> None:
    where = f"te.scan '{name}', state {k}"
    if not init.dtype == upd.dtype == state.dtype:
        raise TypeError(
            f"{where}: dtypes differ: init '{init.name}' is {init.dtype}, update "
            f"'{upd.name}' is {upd.dtype}, state_placeholder '{state.name}' is {state.dtype}")
    if not init.ndim == upd.ndim == state.ndim >= 1:
        raise ValueError(
            f"{where}: init '{init.name}' {_shape_text(init)}, update '{upd.name}' "
            f"{_shape_text(upd)} and state_placeholder '{state.name}' {_shape_text(state)} "
            f"must have the same number (>= 1) of dimensions; the first is time")
    for d in range(state.ndim):
        if not analyzer.can_prove_equal(upd.shape[d], state.shape[d]):
            raise ValueError(
                f"{where}: update '{upd.name}' has shape {_shape_text(upd)} but "
                f"state_placeholder '{state.name}' has {_shape_text(state)}; they must be "
                f"equal (dimension {d} differs)")
        if d > 0 and not analyzer.can_prove_equal(init.shape[d], state.shape[d]):
            raise ValueError(
                f"{where}: init '{init.name}' has shape {_shape_text(init)} but the state is "
                f"{_shape_text(state)}; they must agree in every dimension but the first "
                f"(dimension {d} differs)")
    if analyzer.can_prove(init.shape[0] >= state.shape[0]):
        raise ValueError(
            f"{where}: init '{init.name}' has {expr_text(init.shape[0])} rows but the state "
            f"has {expr_text(state.shape[0])}; init must have fewer rows than the state "
            f"(usually 1: te.compute((1, n), ...))")


def _check_init_rows(init: list[Tensor], name: str, analyzer: Analyzer) -> None:
    rows: PrimExpr = init[0].shape[0]
    for t in init[1:]:
        if not analyzer.can_prove_equal(t.shape[0], rows):
            raise ValueError(
                f"te.scan '{name}': init '{t.name}' has {expr_text(t.shape[0])} rows but "
                f"'{init[0].name}' has {expr_text(rows)}; every state starts with the same "
                f"number of init rows")


def _check_reads_states(update: list[Tensor], states: list[Tensor], name: str) -> None:
    boundary = {t.op for t in states}
    for upd in update:
        if upd.op in boundary:
            raise ValueError(f"te.scan '{name}': the update '{upd.name}' is a state "
                             f"placeholder; give the tensor computed from it")
        if upd.op not in _ops_between([upd.op], boundary):
            names = ", ".join(f"'{s.name}'" for s in states)
            raise ValueError(
                f"te.scan '{name}': update '{upd.name}' does not read the state placeholder "
                f"({names}), directly or through other stages; an update computes step t "
                f"from earlier steps, e.g. te.compute((m, n), lambda t, i: "
                f"s_state[t - 1, i] + X[t, i])")
