"""Virtual threads are injected into one instruction stream (kiln.tir.inject_virtual_thread).

The GPU side (shared fetches once per block, private accumulators per virtual thread) is
checked on the book's convolution in tests/codegen and tests/book; here the pass runs on CPU
schedules, where TVM accepts ``vthread`` bindings too.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.tir.inject_virtual_thread import inject_virtual_thread


def _matmul(n=16, m=12):
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((m, n), name="B")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _run(s, args, n=16, m=12):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, m)).astype("float32")
    b = rng.standard_normal((m, n)).astype("float32")
    c = kiln.nd.empty((n, n), "float32")
    kiln.build(s, args)(kiln.nd.array(a), kiln.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5, atol=1e-5)


def _vthread_matmul(nv: int, tag: str = "vthread"):
    """C's rows split into ``nv`` virtual threads, a local accumulator under them, and a
    stage T (B doubled) computed under the virtual threads but independent of them."""
    A, B, C = _matmul()
    T = te.compute(B.shape, lambda k, j: B[k, j] * 2.0, name="T")
    k = C.op.reduce_axis[0]
    D = te.compute(C.shape, lambda i, j: te.sum(A[i, k] * T[k, j], axis=k), name="D")
    s = te.create_schedule(D.op)
    DL = s.cache_write(D, "local")
    i, j = s[D].op.axis
    vi, ii = s[D].split(i, nparts=nv)
    s[D].bind(vi, te.thread_axis(tag))
    s[DL].compute_at(s[D], ii)
    s[T].compute_at(s[D], ii)
    return s, [A, B, D]


def test_cpu_vthread_matches_numpy_and_leaves_no_attribute():
    s, args = _vthread_matmul(4)
    text = str(kiln.lower(s, args, simple_mode=True))
    assert "vthread" not in text and "thread_extent" not in text
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 12)).astype("float32")
    b = rng.standard_normal((12, 16)).astype("float32")
    d = kiln.nd.empty((16, 16), "float32")
    kiln.build(s, args)(kiln.nd.array(a), kiln.nd.array(b), d)
    np.testing.assert_allclose(d.numpy(), a @ (2 * b), rtol=1e-5, atol=1e-5)


def test_touched_buffer_is_private_untouched_stage_is_shared():
    """D.local's values differ per virtual thread: 4 copies, accesses offset by 16; T does not
    depend on the virtual thread: one buffer, computed once per iteration."""
    text = str(kiln.lower(*_vthread_matmul(4), simple_mode=True))
    assert "allocate D.local[float32 * 64]" in text
    assert "allocate T[float32 * 192]" in text
    assert text.count("produce T {") == 1
    assert text.count("= (B[") == 1
    for off in (16, 32, 48):  # the four virtual threads' statements side by side
        assert f"D.local[(j + {off})] = 0f" in text


def test_cthread_makes_every_allocation_private():
    text = str(kiln.lower(*_vthread_matmul(4, "cthread"), simple_mode=True))
    assert "allocate D.local[float32 * 64]" in text
    assert "allocate T[float32 * 768]" in text  # cthreads share nothing


def test_many_virtual_threads_become_a_loop():
    s, args = _vthread_matmul(16)
    assert "for (vthread" not in str(kiln.lower(s, args, simple_mode=True))  # 16: interleaved
    A, B, C = _matmul(n=32)
    s = te.create_schedule(C.op)
    vi, _ = s[C].split(C.op.axis[0], nparts=32)
    s[C].bind(vi, te.thread_axis("vthread"))
    text = str(kiln.lower(s, [A, B, C], simple_mode=True))
    assert "for (vthread, 0, 32)" in text
    _run(s, [A, B, C], n=32)


@pytest.mark.parametrize("nv", [1, 2, 3, 4])
def test_nested_virtual_threads_on_two_axes(nv):
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    vi, ii = s[C].split(i, nparts=nv)
    vj, jj = s[C].split(j, nparts=2)
    s[C].reorder(vi, vj, ii, jj)
    s[C].bind(vi, te.thread_axis("vthread", name="vx"))
    s[C].bind(vj, te.thread_axis("vthread", name="vy"))
    s[CL].compute_at(s[C], jj)
    assert "vthread" not in str(kiln.lower(s, [A, B, C], simple_mode=True))
    _run(s, [A, B, C])


def test_allocation_sized_per_virtual_thread_gets_the_loop_around_it():
    """Over symbolic shapes a stage computed under a virtual thread may need a buffer whose
    size depends on the virtual thread: it cannot grow n-fold, so the loop over the virtual
    threads goes around the allocation (as in TVM) instead of leaving ``vthread`` unbound."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    T = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="T")
    C = te.compute((n, m), lambda i, j: T[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    fused = s[C].fuse(*C.op.axis)
    outer, inner = s[C].split(fused, nparts=3)
    vt, _ = s[C].split(inner, factor=8)
    s[C].bind(vt, te.thread_axis("vthread"))
    s[T].compute_at(s[C], vt)
    text = str(kiln.lower(s, [A, C], simple_mode=True))
    assert text.index("for (vthread") < text.index("allocate T")
    mod = kiln.build(s, [A, C])
    for shape in ((1, 1), (5, 7), (13, 13)):
        a = np.random.default_rng(0).standard_normal(shape).astype("float32")
        c = kiln.nd.empty(shape)
        mod(kiln.nd.array(a), c)
        np.testing.assert_allclose(c.numpy(), a * 2 + 1, rtol=1e-6)


def test_injection_golden(golden):
    """Two virtual threads over a hand-built body: the private L doubles and its accesses are
    offset by 4 per thread; the statement that ignores the virtual thread (T = A*2) runs once;
    the others run once per thread, side by side."""
    A, T, B = (tir.decl_buffer(shape, name=n) for n, shape in (("A", (8,)), ("T", (4,)),
                                                                ("B", (8,))))
    L = E.Var("L", "handle")
    vx, k = te.thread_axis("vthread"), E.Var("k")

    def load(data, index):
        return E.Load("float32", data, index)

    def loop(body):
        return S.For(k, 0, 4, S.ForKind.SERIAL, body)

    body = S.seq(
        loop(S.Store(L, load(A.data, vx.var * 4 + k), k)),
        loop(S.Store(T.data, load(A.data, k) * 2.0, k)),
        loop(S.Store(B.data, load(L, k) + load(T.data, k), vx.var * 4 + k)))
    local = S.Allocate(L, "float32", [4], tir.const(True), body, scope="local")
    out = inject_virtual_thread(S.AttrStmt(vx, "thread_extent", 2, local))
    golden("tir/inject_virtual_thread", str(out))
    func = S.PrimFunc([A.data, T.data, B.data], {b.data: b for b in (A, T, B)}, out)
    a = np.random.default_rng(0).standard_normal(8).astype("float32")
    t, b = kiln.nd.empty((4,)), kiln.nd.empty((8,))
    kiln.build(func)(kiln.nd.array(a), t, b)
    np.testing.assert_allclose(b.numpy(), a + np.tile(2 * a[:4], 2))
