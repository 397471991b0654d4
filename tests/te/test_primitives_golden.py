"""Each schedule primitive's effect, pinned as the lowered loop program before and after it.

A case builds a tiny computation and its schedule up to the primitive, then (for "after")
applies the primitive. Both ``kiln.lower(..., simple_mode=True)`` texts are compared with
``tests/golden/primitives/<case>.txt``; for CPU schedules both built functions must compute the
same result, and it must match numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import kiln
from kiln import te


@dataclass(frozen=True)
class Workload:
    """A computation: its tensors by name, the argument list, and a numpy reference."""

    tensors: dict[str, te.Tensor]
    args: list[te.Tensor]
    reference: Callable[..., np.ndarray]


def elementwise() -> Workload:
    """B = A*2 + 1 over (4, 8)."""
    A = te.placeholder((4, 8), name="A")
    B = te.compute((4, 8), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return Workload({"A": A, "B": B}, [A, B], lambda a: a * 2 + 1)


def two_stages() -> Workload:
    """T = A*2, then B = T + 1 over (4, 8)."""
    A = te.placeholder((4, 8), name="A")
    T = te.compute((4, 8), lambda i, j: A[i, j] * 2.0, name="T")
    B = te.compute((4, 8), lambda i, j: T[i, j] + 1.0, name="B")
    return Workload({"A": A, "T": T, "B": B}, [A, B], lambda a: a * 2 + 1)


def matmul() -> Workload:
    """C = A @ B with A (4, 6) and B (6, 8)."""
    A = te.placeholder((4, 6), name="A")
    B = te.placeholder((6, 8), name="B")
    k = te.reduce_axis((0, 6), name="k")
    C = te.compute((4, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return Workload({"A": A, "B": B, "C": C}, [A, B, C], lambda a, b: a @ b)


def row_sum() -> Workload:
    """B[i] = sum of row i of A (4, 16)."""
    A = te.placeholder((4, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    return Workload({"A": A, "B": B}, [A, B], lambda a: a.sum(axis=1))


# A case: ``steps(s, tensors, after)`` sets up the schedule before the primitive and applies
# the primitive when ``after`` is true.
Steps = Callable[[te.Schedule, dict[str, te.Tensor], bool], None]


def split_factor(s, t, after):
    if after:
        s[t["B"]].split(t["B"].op.axis[1], factor=4)


def split_nparts(s, t, after):
    if after:
        s[t["B"]].split(t["B"].op.axis[0], nparts=2)


def fuse(s, t, after):
    if after:
        s[t["B"]].fuse(*t["B"].op.axis)


def reorder(s, t, after):
    C = t["C"]
    if after:
        s[C].reorder(C.op.axis[0], C.op.reduce_axis[0], C.op.axis[1])


def tile(s, t, after):
    if after:
        s[t["B"]].tile(*t["B"].op.axis, 2, 4)


def compute_at(s, t, after):
    if after:
        s[t["T"]].compute_at(s[t["B"]], t["B"].op.axis[0])


def compute_inline(s, t, after):
    if after:
        s[t["T"]].compute_inline()


def compute_root(s, t, after):
    s[t["T"]].compute_at(s[t["B"]], t["B"].op.axis[0])
    if after:
        s[t["T"]].compute_root()


def cache_read(s, t, after):
    if after:
        s.cache_read(t["A"], "local", [t["B"]])


def cache_write(s, t, after):
    if after:
        s.cache_write(t["C"], "local")


def rfactor(s, t, after):
    B = t["B"]
    _, ki = s[B].split(B.op.reduce_axis[0], factor=4)
    if after:
        s.rfactor(B, ki)


def parallel(s, t, after):
    if after:
        s[t["B"]].parallel(t["B"].op.axis[0])


def vectorize(s, t, after):
    if after:
        s[t["B"]].vectorize(t["B"].op.axis[1])


def unroll(s, t, after):
    if after:
        s[t["B"]].unroll(t["B"].op.axis[1])


def bind(s, t, after):
    B = t["B"]
    if after:
        s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
        s[B].bind(B.op.axis[1], te.thread_axis("threadIdx.x"))


def vthread(s, t, after):
    B = t["B"]
    vo, _ = s[B].split(B.op.axis[0], nparts=2)
    if after:
        s[B].bind(vo, te.thread_axis("vthread"))


def pragma(s, t, after):
    if after:
        s[t["B"]].pragma(t["B"].op.axis[0], "auto_unroll_max_step", 8)


def storage_align(s, t, after):
    AA = s.cache_read(t["A"], "local", [t["B"]])
    if after:
        s[AA].storage_align(AA.op.axis[0], 16, 3)


def set_scope(s, t, after):
    if after:
        s[t["T"]].set_scope("local")


CASES: list[tuple[Steps, Callable[[], Workload], bool]] = [
    (split_factor, elementwise, True),
    (split_nparts, elementwise, True),
    (fuse, elementwise, True),
    (reorder, matmul, True),
    (tile, elementwise, True),
    (compute_at, two_stages, True),
    (compute_inline, two_stages, True),
    (compute_root, two_stages, True),
    (cache_read, elementwise, True),
    (cache_write, matmul, True),
    (rfactor, row_sum, True),
    (parallel, elementwise, True),
    (vectorize, elementwise, True),
    (unroll, elementwise, True),
    (bind, elementwise, False),  # a GPU schedule: lowered only
    (vthread, elementwise, True),
    (pragma, elementwise, True),
    (storage_align, elementwise, True),
    (set_scope, two_stages, True),
]


def _lowered(steps: Steps, workload: Callable[[], Workload], after: bool):
    w = workload()
    s = te.create_schedule(w.args[-1].op)
    steps(s, w.tensors, after)
    return s, w, str(kiln.lower(s, w.args, simple_mode=True))


def _run(s: te.Schedule, w: Workload, inputs: list[np.ndarray]) -> np.ndarray:
    out = kiln.nd.empty([int(d) for d in w.args[-1].shape])
    kiln.build(s, w.args)(*[kiln.nd.array(x) for x in inputs], out)
    return out.numpy()


@pytest.mark.parametrize(("steps", "workload", "cpu"), CASES,
                         ids=[c[0].__name__ for c in CASES])
def test_primitive(steps, workload, cpu, golden):
    s0, w0, before = _lowered(steps, workload, after=False)
    s1, w1, after = _lowered(steps, workload, after=True)
    assert before != after
    golden(f"primitives/{steps.__name__}", f"before:\n{before}\nafter:\n{after}")
    if not cpu:
        return
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal([int(d) for d in a.shape]).astype("float32")
              for a in w0.args[:-1]]
    expected = _run(s0, w0, inputs)
    np.testing.assert_allclose(expected, w0.reference(*inputs), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_run(s1, w1, inputs), expected, rtol=1e-5, atol=1e-5)
