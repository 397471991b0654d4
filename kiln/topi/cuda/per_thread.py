"""The CUDA schedule of every topi operator: one GPU thread per output element.

Injective intermediate stages (padding, casts, broadcasts, an ``exp`` before a sum) are
inlined into their consumers. Every remaining stage gets the loops of
:func:`~kiln.topi.cuda.injective.bind_flat`: its data axes fused and bound to
``blockIdx.x``/``threadIdx.x``, its reduction (the window of a convolution or pooling, the
``k`` of a matrix product, the axis of a softmax) a serial loop in each thread. An operator
followed by an elementwise epilogue of its shape (``relu(conv + bias)``) is one kernel: the
anchor is computed in registers (``local``) at the thread of the output element::

    for (n, c, y, x)                          // blockIdx.x * threadIdx.x over n*c*y*x
      conv.local = 0
      for (rc, ry, rx) conv.local += pad(x)[...] * w[...]
      out[n, c, y, x] = max(conv.local + b[c], 0)

Other stages (softmax's maximum and sum, a reduction feeding a reshape) are kernels of their
own, writing device temporaries. Correct for every operator; not tuned: there is no shared
memory tiling and no cross-thread reduction yet, so a reduction to a scalar raises
``NotImplementedError`` (reduce with ``keepdims=True``).
"""

from __future__ import annotations

from kiln import te
from kiln.te.tensor import ComputeOp, Operation

from ..utils import all_ops, as_list, traverse_inline
from .injective import bind_flat


def _stage_inputs(s, op: Operation) -> list[Operation]:
    """The compute stages ``op`` reads once its inlined producers are substituted."""
    out: list[Operation] = []
    for t in op.input_tensors:
        if not isinstance(t.op, ComputeOp):
            continue
        if s[t.op].attach_type == "inline":
            out.extend(_stage_inputs(s, t.op))
        else:
            out.append(t.op)
    return out


def _epilogue_anchor(s, out: Operation) -> Operation | None:
    """The one root, non-output, single-output compute stage that ``out`` reads (through
    inlined stages) when both have the same shape (the anchor of an elementwise epilogue),
    or None."""
    inputs = {id(op): op for op in _stage_inputs(s, out)}
    if len(inputs) != 1:
        return None
    anchor = next(iter(inputs.values()))
    if (s[anchor].is_output or s[anchor].attach_type != "root" or anchor.num_outputs != 1
            or [str(d) for d in anchor.output(0).shape] != [str(d) for d in out.output(0).shape]):
        return None
    return anchor


def schedule_per_thread(outs):
    """``outs`` (a tensor or a list) scheduled one thread per output element."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    for t in outs:
        traverse_inline(s, t.op, lambda op: None)
    readers: dict[int, int] = {}  # stage -> how many stages read it (inlined ones see through)
    for op in all_ops(outs):
        if isinstance(op, ComputeOp) and s[op].attach_type != "inline":
            for producer in {id(p) for p in _stage_inputs(s, op)}:
                readers[producer] = readers.get(producer, 0) + 1
    fused_into: set[int] = set()
    for t in outs:
        _, tx = bind_flat(s[t.op])
        anchor = _epilogue_anchor(s, t.op)
        if anchor is not None and readers[id(anchor)] == 1:
            s[anchor].set_scope("local")
            s[anchor].compute_at(s[t.op], tx)
            fused_into.add(id(anchor))
    output_ids = {id(t.op) for t in outs}
    for op in all_ops(outs):
        if (isinstance(op, ComputeOp) and id(op) not in output_ids | fused_into
                and s[op].attach_type == "root"):
            bind_flat(s[op])
    return s
