"""split_host_device: each outermost thread binding becomes a kernel; the host launches them.

Only IR is checked here (no GPU, no NVRTC); the CUDA backend's device passes that run on the
kernels afterwards have their own tests.
"""

from __future__ import annotations

import pytest

import kiln
from kiln import ScheduleError, te
from kiln.ir.printer import expr_text, to_text
from kiln.tir.split_host_device import SplitFunc, split_host_device


def _two_kernels():
    """B = A*2 in global memory (a host workspace), then C = B + 1 with vector stores."""
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    bo, bi = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bo, te.thread_axis("blockIdx.x"))
    s[B].bind(bi, te.thread_axis("threadIdx.x"))
    co, ci = s[C].split(C.op.axis[0], factor=256)
    tx, vec = s[C].split(ci, factor=4)
    s[C].bind(co, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].vectorize(vec)
    return kiln.lower(s, [A, C])["main"]


def _text(sp: SplitFunc) -> str:
    parts = ["host:", to_text(sp.host_body)]
    for k in sp.kernels:
        params = ", ".join(f"{p.var.name}: {p.kind} {p.dtype}" + (" const" if p.read_only
                                                                     else "")
                           for p in k.params)
        grid = ", ".join(expr_text(g) for g in k.grid)
        block = ", ".join(expr_text(b) for b in k.block)
        parts += [f"kernel {k.name}({params}) grid ({grid}) block ({block}):", to_text(k.body)]
    return "\n".join(parts)


def test_split(golden):
    func = _two_kernels()
    sp = split_host_device(func)
    golden("tir/split_host_device", _text(sp))
    assert [k.name for k in sp.kernels] == ["main_kernel0", "main_kernel1"]
    assert [v.name for v in sp.workspaces] == ["B"]
    assert "thread_extent" not in to_text(sp.host_body)


def test_unbound_function_is_rejected():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    func = kiln.lower(te.create_schedule(B.op), [A, B])["main"]
    with pytest.raises(ScheduleError, match="Did you forget to bind"):
        split_host_device(func)
