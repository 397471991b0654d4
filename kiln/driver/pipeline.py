"""The whole compiler pipeline in one table: schedule → loop IR → target code.

``kiln.lower`` runs ``LOWER_PHASES`` on a schedule; ``kiln.build`` then runs the target's
phases from ``TARGET_PHASES`` on each lowered function and hands the result to the target's
backend (``kiln.codegen.backend``). Every entry is a named pass with one module of its own;
``run_phases`` runs them in order and, under ``KILN_DEBUG=1`` (or ``debug=True``), prints the
IR after each one. docs/lowering.md is generated from this table (``render_markdown``; a test
compares them).

User passes join at TVM's four lowering phases: ``PassContext(config={"tir.add_lower_pass":
[(phase, pass), ...]})`` runs ``pass`` after the built-in passes of ``phase`` (0–3). A pass is
a ``kiln.ir.transform.Pass`` (e.g. from ``tvm.tir.transform.prim_func_pass``), a function
``f(func, mod, ctx) -> func``, ``f(func: PrimFunc) -> PrimFunc`` (annotated), or, as in
classic TVM, ``f(stmt) -> stmt``.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kiln.arith import Analyzer, simplify_stmt
from kiln.cost.tail_choice import choose_tails, has_choices
from kiln.errors import TVMError
from kiln.ir.printer import to_text
from kiln.ir.stmt import IRModule, PrimFunc, Stmt
from kiln.ir.transform import Pass as ModulePassBase
from kiln.ir.transform import PassContext
from kiln.te.bound import infer_bound
from kiln.te.inline import effective_bodies
from kiln.te.schedule import Schedule
from kiln.te.schedule_ops import schedule_to_stmt
from kiln.te.tensorize import tensorize_stages
from kiln.tir.dispatch_remainder import dispatch_remainder
from kiln.tir.inject_prefetch import inject_prefetch
from kiln.tir.inject_virtual_thread import inject_virtual_thread
from kiln.tir.instrument_bound_checkers import instrument_bound_checkers
from kiln.tir.loop_partition import loop_partition, partition_const_loop_option
from kiln.tir.lower_divmod import lower_divmod
from kiln.tir.partition_conditions import partition_conditions
from kiln.tir.remove_no_op import remove_no_op
from kiln.tir.scalarize_vector_stores import scalarize_vector_stores
from kiln.tir.specialize_remainder import specialize_remainder
from kiln.tir.split_host_device import SplitFunc, split_host_device
from kiln.tir.storage_flatten import storage_flatten
from kiln.tir.storage_sync import insert_storage_sync
from kiln.tir.thread_binding import unify_thread_extents
from kiln.tir.unroll import auto_unroll
from kiln.tir.vectorize import vectorize, vectorize_lane_masks

#: the PassContext config key of user lowering passes, as in TVM
ADD_LOWER_PASS = "tir.add_lower_pass"


# ---------------------------------------------------------------------------------------
# what flows through the schedule phase
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScheduleLowering:
    """A function being lowered from a schedule: its signature, and what the schedule phase
    has computed so far (inlined bodies, loop ranges, then the loop program ``body``)."""

    schedule: Schedule
    name: str
    params: tuple
    buffer_map: dict
    tensor_buffers: dict  # argument tensor -> its Buffer
    analyzer: Analyzer
    bodies: dict | None = None
    ranges: dict | None = None
    tensorized: dict | None = None  # Operation -> kiln.te.tensorize.TensorizedNest
    body: Stmt | None = None

    def with_body(self, body: Stmt) -> ScheduleLowering:
        return replace(self, body=body)

    def primfunc(self) -> PrimFunc:
        if self.body is None:
            raise TVMError(f"{self.name}: no loop program yet (before schedule_ops)")
        return PrimFunc(self.params, self.buffer_map, self.body, self.name)


def _inline(st: ScheduleLowering) -> ScheduleLowering:
    """Stages marked ``compute_inline`` substituted into their consumers."""
    return replace(st, bodies=effective_bodies(st.schedule))


def _infer_bound(st: ScheduleLowering) -> ScheduleLowering:
    """The range of every loop of every stage (bound inference)."""
    return replace(st, ranges=infer_bound(st.schedule, st.bodies, st.analyzer))


def _tensorize(st: ScheduleLowering) -> ScheduleLowering:
    """Each tensorized stage's body matched against its tensor intrinsic (a TVMError names
    the first difference), and the intrinsic's statements planned with their buffers bound
    to the regions they cover."""
    return replace(st, tensorized=tensorize_stages(st.schedule, st.bodies, st.ranges))


def _choose_tails(st: ScheduleLowering) -> ScheduleLowering:
    """Each ``split(..., tail="auto")`` given the tail strategy that the cost model predicts
    fastest, and each ``tail="dispatch"`` the widths of its remainder's paths, the function
    lowered once per candidate."""
    if has_choices(st.schedule):
        def lower_with() -> Stmt:
            return run_phases(LOWER_PHASES[1:], _schedule_ops(st)).body

        choose_tails(st.schedule, lower_with, {t.op for t in st.tensor_buffers})
    return st


def _schedule_ops(st: ScheduleLowering) -> ScheduleLowering:
    """One loop nest per stage, placed at its attachment point: ``produce X { ... }``,
    realize regions, boundary guards."""
    body = schedule_to_stmt(st.schedule, st.bodies, st.ranges, set(st.tensor_buffers),
                            st.analyzer, st.tensorized)
    return replace(st, body=body)


def _storage_flatten(st: ScheduleLowering) -> ScheduleLowering:
    """Tensors become flat buffers; temporaries get an ``allocate`` with a constant upper
    bound on their size."""
    return replace(st, body=storage_flatten(st.body, st.tensor_buffers))


def _loop_partition(stmt: Stmt) -> Stmt:
    """Split guarded loops into a guard-free part and a guarded tail (see module docstring);
    loops of constant extent too unless ``PassContext(config={"tir.LoopPartition":
    {"partition_const_loop": False}})`` (TVM's default) keeps their ``likely`` guard."""
    return loop_partition(stmt, partition_const_loop_option(PassContext.current()))


def simplify(stmt: Stmt) -> Stmt:
    """Every expression simplified, knowing each loop variable's range."""
    return simplify_stmt(stmt)


# ---------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pass:
    """One step of the pipeline: ``fn`` maps the phase's IR to new IR. ``on_body`` passes
    rewrite a statement and are applied to the function's body."""

    name: str
    fn: Callable[[Any], Any]
    on_body: bool = False
    module: str = ""  # where the pass is implemented, if not ``fn``'s own module

    @property
    def home(self) -> str:
        return self.module or self.fn.__module__

    @property
    def doc(self) -> str:
        """The first paragraph of the pass function's docstring."""
        return _first_paragraph(self.fn)

    def __call__(self, ir):
        if self.on_body:
            return ir.with_body(self.fn(ir.body))
        return self.fn(ir)


@dataclass(frozen=True)
class Phase:
    """An ordered list of passes. Lowering phases have TVM's numbers (user passes join them);
    ``ir`` says what the phase transforms."""

    name: str
    ir: str
    passes: tuple[Pass, ...]
    number: int | None = None


def _body(name: str, fn: Callable[[Stmt], Stmt]) -> Pass:
    home = "kiln.arith.stmt_simplify" if fn is simplify else ""
    return Pass(name, fn, on_body=True, module=home)


LOWER_PHASES: tuple[Phase, ...] = (
    Phase("schedule", "te.Schedule → loop nest over tensors", (
        Pass("inline", _inline, module="kiln.te.inline"),
        Pass("infer_bound", _infer_bound, module="kiln.te.bound"),
        Pass("tensorize", _tensorize, module="kiln.te.tensorize"),
        Pass("choose_tails", _choose_tails, module="kiln.cost.tail_choice"),
        Pass("schedule_ops", _schedule_ops, module="kiln.te.schedule_ops"),
        _body("unify_thread_extents", unify_thread_extents),
    ), number=0),
    Phase("flatten", "tensors → flat buffers", (
        _body("inject_prefetch", inject_prefetch),
        Pass("storage_flatten", _storage_flatten, module="kiln.tir.storage_flatten"),
        _body("simplify", simplify),
    ), number=1),
    Phase("loops", "loop transformations", (
        _body("inject_virtual_thread", inject_virtual_thread),
        Pass("loop_partition", _loop_partition, on_body=True, module="kiln.tir.loop_partition"),
        _body("dispatch_remainder", dispatch_remainder),
        _body("specialize_remainder", specialize_remainder),
        _body("simplify", simplify),
        _body("vectorize", vectorize),
        _body("auto_unroll", auto_unroll),
    ), number=2),
    Phase("cleanup", "the printed loop program", (
        _body("simplify", simplify),
        _body("remove_no_op", remove_no_op),
    ), number=3),
)


def _each_kernel(fn: Callable[[Stmt], Stmt]) -> Callable[[SplitFunc], SplitFunc]:
    def run(sp: SplitFunc) -> SplitFunc:
        kernels = [replace(k, body=fn(k.body)) for k in sp.kernels]
        return replace(sp, kernels=kernels)

    run.__doc__ = fn.__doc__
    return run


#: the phases ``kiln.build`` runs per target kind, after lowering, on each PrimFunc; the
#: result goes to that kind's backend (``kiln.codegen.backend.backend_for``)
TARGET_PHASES: dict[str, tuple[Phase, ...]] = {
    "c": (
        Phase("c", "PrimFunc → PrimFunc for C code generation", (
            Pass("instrument_bound_checkers", instrument_bound_checkers),
            _body("partition_conditions", partition_conditions),
            _body("vectorize_lane_masks", vectorize_lane_masks),
            _body("simplify", simplify),
            _body("lower_divmod", lower_divmod),
        )),
    ),
    "cuda": (
        Phase("cuda_host", "PrimFunc → host program + kernels", (
            Pass("split_host_device", split_host_device),
        )),
        Phase("cuda_device", "each kernel body, for CUDA C", (
            Pass("scalarize_vector_stores", _each_kernel(scalarize_vector_stores),
                 module="kiln.tir.scalarize_vector_stores"),
            Pass("insert_storage_sync", _each_kernel(insert_storage_sync),
                 module="kiln.tir.storage_sync"),
        )),
    ),
}


# ---------------------------------------------------------------------------------------
# running it
# ---------------------------------------------------------------------------------------
def debug_enabled(debug: bool | None) -> bool:
    """``debug`` if given, else whether ``KILN_DEBUG`` is set (to anything but 0/empty)."""
    if debug is not None:
        return bool(debug)
    return os.environ.get("KILN_DEBUG", "") not in ("", "0")


def ir_text(ir) -> str:
    """The text ``KILN_DEBUG`` prints for any IR the pipeline carries."""
    if isinstance(ir, ScheduleLowering):
        if ir.body is not None:
            return to_text(ir.body)
        if ir.ranges is not None:
            return "\n".join(f"// {iv.var.name}: [{to_text(r.min)}, +{to_text(r.extent)})"
                             for iv, r in ir.ranges.items())
        return f"// {len(ir.bodies or {})} stage bodies after inlining"
    if isinstance(ir, SplitFunc):
        from kiln.codegen.cuda_host import host_source

        kernels = [f"// kernel {k.name}\n{to_text(k.body)}" for k in ir.kernels]
        return "\n".join([host_source(ir), *kernels])
    return to_text(ir)


def run_phases(phases: Sequence[Phase], ir, *, debug: bool = False,
               user_passes: Sequence[tuple[int, Any]] = ()):
    """Run every pass of ``phases`` on ``ir`` in order, then the user passes of each numbered
    phase; with ``debug`` print the IR after each pass."""
    extra = _user_passes(user_passes)
    for phase in phases:
        steps = list(phase.passes)
        if phase.number is not None:
            steps += extra.get(phase.number, [])
        for p in steps:
            ir = p(ir)
            if debug:
                print(f"// ---- after {p.name} ----")
                print(ir_text(ir))
    return ir


def lower_passes_from_context() -> list[tuple[int, Any]]:
    """The ``(phase, pass)`` pairs of ``tir.add_lower_pass`` in the current PassContext."""
    return list(PassContext.current().config.get(ADD_LOWER_PASS, ()))


def _user_passes(pairs: Sequence[tuple[int, Any]]) -> dict[int, list[Pass]]:
    out: dict[int, list[Pass]] = {}
    for pair in pairs:
        try:
            phase, user = pair
        except (TypeError, ValueError):
            raise TVMError(f"{ADD_LOWER_PASS} takes (phase, pass) pairs, got {pair!r}") from None
        if phase not in (0, 1, 2, 3):
            raise TVMError(f"{ADD_LOWER_PASS}: phase must be 0, 1, 2 or 3, got {phase!r}")
        out.setdefault(phase, []).append(user_pass(user))
    return out


def user_pass(user) -> Pass:
    """A pipeline step from a user's pass object or function (module docstring)."""
    name = getattr(getattr(user, "info", None), "name", None) or getattr(
        user, "__name__", type(user).__name__)
    if isinstance(user, ModulePassBase):
        def run(ir):
            func = ir.primfunc()
            out = user(IRModule({func.name: func}))
            return ir.with_body(_only_function(out, name).body)
    elif callable(user):
        kind = _user_function_kind(user)

        def run(ir):
            func = ir.primfunc()
            if kind == "stmt":
                out = user(func.body)
                if not isinstance(out, Stmt):
                    raise TVMError(f"lowering pass {name} returned {type(out).__name__}, "
                                   f"not a Stmt")
                return ir.with_body(out)
            out = user(func, IRModule({func.name: func}), PassContext.current()) \
                if kind == "prim_func3" else user(func)
            if not isinstance(out, PrimFunc):
                raise TVMError(f"lowering pass {name} returned {type(out).__name__}, "
                               f"not a PrimFunc")
            return ir.with_body(out.body)
    else:
        raise TVMError(f"{ADD_LOWER_PASS}: {user!r} is neither a pass nor a function")
    return Pass(name, run)


def _user_function_kind(fn) -> str:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return "stmt"
    if len(params) >= 3:
        return "prim_func3"
    ann = params[0].annotation if params else inspect.Parameter.empty
    if ann is PrimFunc or ann == "PrimFunc":
        return "prim_func1"
    return "stmt"


def _only_function(mod: IRModule, name: str) -> PrimFunc:
    if not isinstance(mod, IRModule) or len(mod.functions) != 1:
        raise TVMError(f"lowering pass {name} must return an IRModule with one PrimFunc")
    return next(iter(mod.functions.values()))


# ---------------------------------------------------------------------------------------
# the table as documentation
# ---------------------------------------------------------------------------------------
DOC_BEGIN = "<!-- BEGIN pipeline table (generated by kiln.driver.pipeline; do not edit) -->"
DOC_END = "<!-- END pipeline table -->"


def _first_paragraph(fn) -> str:
    doc = inspect.getdoc(fn) or ""
    return " ".join(doc.split("\n\n")[0].split())


def render_markdown() -> str:
    """The pipeline table as the markdown of docs/lowering.md's generated section."""
    lines = ["| phase | # | pass | module | what it guarantees |", "|---|---|---|---|---|"]
    groups = [("kiln.lower", LOWER_PHASES)]
    groups += [(f"kiln.build, target {kind}", phases) for kind, phases in TARGET_PHASES.items()]
    for where, phases in groups:
        for phase in phases:
            num = "" if phase.number is None else str(phase.number)
            for k, p in enumerate(phase.passes):
                head = f"{phase.name} ({where}): {phase.ir}" if k == 0 else ""
                lines.append(f"| {head} | {num if k == 0 else ''} | `{p.name}` | `{p.home}` | "
                             f"{p.doc} |")
    return "\n".join(lines) + "\n"


def with_table(doc: str) -> str:
    """``doc`` (docs/lowering.md's text) with its generated section replaced by the table."""
    begin, end = doc.index(DOC_BEGIN) + len(DOC_BEGIN), doc.index(DOC_END)
    return doc[:begin] + "\n" + render_markdown() + doc[end:]


__all__ = ["LOWER_PHASES", "TARGET_PHASES", "ADD_LOWER_PASS", "Pass", "Phase",
           "ScheduleLowering", "run_phases", "debug_enabled", "ir_text", "user_pass",
           "lower_passes_from_context", "render_markdown", "with_table", "simplify"]
