"""External tensor functions: ``te.extern`` and its operation, ``ExternOp``.

An extern operation computes its outputs with a statement the user writes over *buffers*
(usually one ``tvm.tir.call_packed`` of a function registered in Python, or a
``tvm.tir.call_extern`` of a C function, or an ``ir_builder`` program). Guarantees, as in
classic TVM:

* it is a stage of ``te.create_schedule`` whose consumers can be scheduled freely; the stage
  itself has no loops: every schedule primitive but ``compute_root`` raises ScheduleError;
* it reads each input whole and its outputs are realized whole (bound inference gives
  operations that lower themselves whole regions);
* lowering emits ``produce <name> { body }`` with each placeholder buffer bound to its
  tensor's storage (a ``buffer_bind_scope`` attribute, resolved by storage flattening).

    produce C {
      tvm_call_packed("tvm.contrib.my_tvm_addone", tvm_stack_make_array(A, ...), ...)
    }
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln.errors import ScheduleError
from kiln.ir import dtype as dt
from kiln.ir.expr import Call, PrimExpr
from kiln.ir.op import const
from kiln.ir.stmt import AttrStmt, Buffer, Evaluate, Stmt, decl_buffer
from kiln.tir.storage_flatten import BUFFER_BIND_SCOPE

from .operation import _shape_tuple
from .tag import scoped_tag
from .tensor import Operation, Tensor


class ExternOp(Operation):
    """An operation computed by an opaque statement over buffers (``te.extern``)."""

    def __init__(self, name: str, tag: str, attrs: dict | None, inputs: Sequence[Tensor],
                 input_placeholders: Sequence[Buffer], output_placeholders: Sequence[Buffer],
                 body: Stmt):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.inputs = list(inputs)
        self.input_placeholders = list(input_placeholders)
        self.output_placeholders = list(output_placeholders)
        self.body = body
        self.outputs = [Tensor(buf.shape, buf.dtype, self, i)
                        for i, buf in enumerate(self.output_placeholders)]

    @property
    def input_tensors(self) -> list[Tensor]:
        """The tensors this operation reads (a property, as in TVM)."""
        return list(self.inputs)

    def replace_inputs(self, vmap: dict[Tensor, Tensor]) -> ExternOp:
        """This operation reading through ``vmap`` (after ``cache_read`` of an input), with
        the same buffers and body; itself when it reads none of the replaced tensors."""
        if not any(t in vmap for t in self.inputs):
            return self
        return ExternOp(self.name, self.tag, self.attrs, [vmap.get(t, t) for t in self.inputs],
                        self.input_placeholders, self.output_placeholders, self.body)

    def check_primitive(self, primitive: str) -> None:
        """Only ``compute_root`` applies: the body is opaque and runs once over whole
        tensors."""
        if primitive != "compute_root":
            raise ScheduleError(
                f"{primitive}: stage '{self.name}' is a te.extern operation; its body is "
                f"opaque, so it has no loops to transform and is computed once at the root "
                f"over whole tensors. Schedule the stages that consume it instead")

    def build_provide(self, stage, ranges: dict) -> Stmt:
        """The body with every placeholder buffer bound to its tensor's whole storage.

        ``attr [A, A] buffer_bind_scope = tvm_tuple(0, n)`` around ``body``: storage
        flattening replaces the buffer's data pointer by the tensor's."""
        body = self.body
        binds = list(zip(self.output_placeholders, self.outputs, strict=True))
        binds += list(zip(self.input_placeholders, self.inputs, strict=True))
        for buf, tensor in reversed(binds):
            region = [x for extent in tensor.shape for x in (const(0), extent)]
            body = AttrStmt((buf, tensor), BUFFER_BIND_SCOPE, Call("handle", "tvm_tuple", region),
                            body)
        return body


def extern(shape, inputs: Sequence[Tensor], fcompute: Callable, name: str = "extern",
           dtype=None, in_buffers=None, out_buffers=None, tag: str = "",
           attrs: dict | None = None):
    """Tensors computed by an external function (``te.extern``).

    ``shape`` is one output's shape or a list of shapes; ``fcompute(ins, outs)`` gets one
    Buffer per input and per output and returns a Stmt, or a PrimExpr such as
    ``tvm.tir.call_packed("name", ins[0], outs[0])`` (evaluated for its effect). ``dtype``
    defaults to the inputs' common dtype. Returns a Tensor, or a list for several outputs.
    """
    shapes = _shapes(shape)
    tag = scoped_tag(tag, "te.extern")
    inputs = _check_inputs(inputs, name)
    dtypes = _dtypes(dtype, inputs, len(shapes), name)
    in_bufs = _buffers(in_buffers, [(t.shape, t.dtype, t.op.name) for t in inputs],
                       "in_buffers", name)
    out_bufs = _buffers(out_buffers, [(s, d, name) for s, d in zip(shapes, dtypes, strict=True)],
                        "out_buffers", name)
    body = fcompute(list(in_bufs), list(out_bufs))
    if isinstance(body, PrimExpr):
        body = Evaluate(body)
    if not isinstance(body, Stmt):
        raise TypeError(
            f"te.extern '{name}': fcompute must return a Stmt or a PrimExpr (e.g. "
            f"tvm.tir.call_packed(...)), got {type(body).__name__}")
    op = ExternOp(name, tag, attrs, inputs, in_bufs, out_bufs, body)
    return op.outputs[0] if len(op.outputs) == 1 else op.outputs


def _shapes(shape) -> list[tuple[PrimExpr, ...]]:
    """One shape or a list of shapes (the first element itself a sequence)."""
    several = isinstance(shape, list | tuple) and len(shape) > 0 and \
        isinstance(shape[0], list | tuple)
    return [_shape_tuple(s, "te.extern") for s in (shape if several else [shape])]


def _check_inputs(inputs, name: str) -> list[Tensor]:
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for t in inputs:
        if not isinstance(t, Tensor):
            raise TypeError(f"te.extern '{name}': inputs must be tensors, got "
                            f"{type(t).__name__}")
    return inputs


def _dtypes(dtype, inputs: list[Tensor], n: int, name: str) -> list[str]:
    if dtype is None:
        found = {t.dtype for t in inputs}
        if len(found) != 1:
            raise ValueError(f"te.extern '{name}': cannot infer the output dtype from inputs "
                             f"of dtypes {sorted(found)}; pass dtype=")
        dtype = found.pop()
    dtypes = [dtype] * n if isinstance(dtype, str) else list(dtype)
    if len(dtypes) != n:
        raise ValueError(f"te.extern '{name}': {len(dtypes)} dtypes for {n} outputs")
    return [dt.normalize(d) for d in dtypes]


def _buffers(given, specs: list[tuple], what: str, name: str) -> list[Buffer]:
    """The user's buffers (checked against ``specs``: shape, dtype, name), or new ones."""
    if given is None:
        return [decl_buffer(shape, dtype, name=buf_name) for shape, dtype, buf_name in specs]
    given = [given] if isinstance(given, Buffer) else list(given)
    if len(given) != len(specs):
        raise ValueError(f"te.extern '{name}': {len(given)} {what} for {len(specs)} tensors")
    for buf, (shape, dtype, _) in zip(given, specs, strict=True):
        if not isinstance(buf, Buffer) or len(buf.shape) != len(shape) or buf.dtype != dtype:
            raise ValueError(f"te.extern '{name}': {what} must be Buffers of the tensors' "
                             f"ndim and dtype ({len(shape)}-d {dtype}), got {buf!r}")
    return given


__all__ = ["ExternOp", "extern"]
