"""``bind`` on an axis that also has a loop kind: as in TVM, the thread binding wins and the
``parallel`` / ``vectorize`` / ``unroll`` annotation is dropped, in either order. Lowered on
the CPU; the CUDA build compiles through NVRTC where it is installed (no GPU needed)."""

from __future__ import annotations

import pytest

import kiln
from kiln import te
from tests.codegen.cuda_workloads import build_cuda


def _vector_add(n: int = 1024):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=64)
    return s, A, B, xo, xi


@pytest.mark.parametrize("annotate", ["parallel", "vectorize", "unroll"])
def test_bind_after_annotation_drops_the_annotation(annotate):
    s, A, B, xo, xi = _vector_add()
    getattr(s[B], annotate)(xo)
    getattr(s[B], annotate)(xi)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    text = str(kiln.lower(s, [A, B], simple_mode=True))
    assert "thread_extent = 16" in text and "thread_extent = 64" in text
    assert "for (" not in text and annotate not in text and "ramp" not in text


def test_annotation_after_bind_is_dropped():
    s, A, B, xo, xi = _vector_add()
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    s[B].parallel(xo)
    s[B].vectorize(xi)
    text = str(kiln.lower(s, [A, B], simple_mode=True))
    assert "for (" not in text and "parallel" not in text and "ramp" not in text


def test_bind_over_parallel_builds_for_cuda():
    s, A, B, xo, xi = _vector_add()
    s[B].parallel(xo)
    s[B].vectorize(xi)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    src = build_cuda(s, [A, B]).imported_modules[0].get_source()
    assert "B[((((int)blockIdx.x) * 64) + ((int)threadIdx.x))] = " in src
