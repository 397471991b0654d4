"""``kiln.lower``: a schedule becomes a loop program, phase after phase.

The phases and their passes are the table ``kiln.driver.pipeline.LOWER_PHASES`` (docs/
lowering.md lists them): schedule (inline, bound inference, schedule → loop nests), flatten
(tensors → buffers), loops (virtual threads, loop partition, vectorize, unroll), cleanup.
User passes from ``PassContext(config={"tir.add_lower_pass": [...]})`` join their phase.

Set ``KILN_DEBUG=1`` (or pass ``debug=True``) to print the IR after every pass.
"""

from __future__ import annotations

from kiln.arith import Analyzer
from kiln.errors import TVMError
from kiln.ir.expr import Var
from kiln.ir.functor import collect_vars, defined_vars
from kiln.ir.stmt import Buffer, IRModule, PrimFunc
from kiln.te.schedule import Schedule
from kiln.te.schedule_ops import output_aliases
from kiln.te.tensor import PlaceholderOp, Tensor

from . import pipeline


def _arg_buffers(args, binds: dict | None) -> tuple[list[Var], dict[Var, Buffer], dict]:
    params: list[Var] = []
    buffer_map: dict[Var, Buffer] = {}
    tensor_buffers: dict = {}
    for a in args:
        if isinstance(a, Tensor):
            buf = (binds or {}).get(a)
            if buf is None:
                buf = Buffer(Var(a.name, "handle"), a.dtype, a.shape, a.name)
            params.append(buf.data)
            buffer_map[buf.data] = buf
            tensor_buffers[a] = buf
        elif isinstance(a, Buffer):
            params.append(a.data)
            buffer_map[a.data] = a
        elif isinstance(a, Var):
            params.append(a)
        else:
            raise TypeError(
                f"lower/build arguments must be tensors or te.var scalars, got {a!r} "
                f"({type(a).__name__})")
    return params, buffer_map, tensor_buffers


def schedule_to_primfunc(sch: Schedule, args, name: str = "main", binds=None,
                         debug: bool | None = None,
                         phases: tuple[pipeline.Phase, ...] = pipeline.LOWER_PHASES) -> PrimFunc:
    """Run the lowering ``phases`` (all of them by default) on one schedule and return the
    lowered PrimFunc."""
    args = [_current_tensor(sch, a) for a in args]
    params, buffer_map, tensor_buffers = _arg_buffers(args, binds)
    _check_inputs_are_args(sch, tensor_buffers)
    start = pipeline.ScheduleLowering(sch, name, tuple(params), buffer_map, tensor_buffers,
                                      Analyzer())
    done = pipeline.run_phases(phases, start,
                               debug=pipeline.debug_enabled(debug),
                               user_passes=pipeline.lower_passes_from_context())
    func = done.primfunc()
    _check_free_vars(func)
    return func


def _current_tensor(sch: Schedule, arg):
    """The tensor that stands for ``arg`` now (cache_write and friends replace operations)."""
    if isinstance(arg, Tensor) and not isinstance(arg.op, PlaceholderOp):
        st = sch.stage_map.get(arg.op)
        if st is not None and st.op is not arg.op:
            return st.op.output(arg.value_index)
    return arg


def _check_inputs_are_args(sch: Schedule, tensor_buffers: dict) -> None:
    # An output missing from the arguments is legal (the book lowers with [A, B] to look at
    # the loops): it is then allocated inside the function like any temporary. A scan's
    # state placeholder is no input: it stands for the scan's output (output_aliases).
    aliases = output_aliases(sch)
    for st in sch.stages:
        if isinstance(st.op, PlaceholderOp):
            t = st.op.output(0)
            if t not in tensor_buffers and t not in aliases:
                raise TVMError(
                    f"input tensor '{t.name}' is read by the schedule but is not in the "
                    f"argument list of lower/build")


def _check_free_vars(func: PrimFunc) -> None:
    defined: set[Var] = set(func.params)
    for buf in func.buffer_map.values():
        defined |= set(buf.symbolic_vars())
    bound = defined_vars(func.body)
    for v in collect_vars(func.body):
        if v not in defined and v not in bound and v.dtype != "handle":
            raise TVMError(
                f"variable '{v.name}' is used by the computation but is neither a dimension of "
                f"an argument tensor nor a scalar argument; add it to the argument list")


def lower(sch, args=None, name: str = "main", binds=None, simple_mode: bool = False,
          debug: bool | None = None) -> IRModule:
    """Lower a schedule to an IRModule holding one PrimFunc named ``name``.

    ``print(kiln.lower(s, [A, B, C], simple_mode=True))`` shows the loop program in the book's
    pseudo-code.
    """
    if isinstance(sch, PrimFunc):
        return IRModule({sch.name: sch})
    if isinstance(sch, IRModule):
        return sch
    if not isinstance(sch, Schedule):
        raise TypeError(f"lower expects a te.Schedule, got {type(sch).__name__}")
    if args is None:
        raise TypeError("lower needs the argument list: lower(s, [A, B, C])")
    func = schedule_to_primfunc(sch, list(args), name, binds, debug)
    return IRModule({name: func})
