"""kiln.contrib.spacetime.trace: the accesses of small schedules against hand-derived
sequences (issue 20, acceptance 1)."""

from __future__ import annotations

import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import spacetime


def _events(tr):
    return [(e.step, e.thread, e.buffer, e.offset, "w" if e.write else "r") for e in tr]


def _matmul(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_row_major_matmul():
    A, B, C = _matmul(2)
    s = te.create_schedule(C.op)
    expected = []
    for i in range(2):
        for j in range(2):
            expected.append(("C", i * 2 + j, "w"))  # C[i, j] = 0
            for k in range(2):  # C[i, j] = C[i, j] + A[i, k] * B[k, j]
                expected += [("C", i * 2 + j, "r"), ("A", i * 2 + k, "r"),
                             ("B", k * 2 + j, "r"), ("C", i * 2 + j, "w")]
    expected = [(step, 0, *e) for step, e in enumerate(expected)]
    tr = spacetime.trace(s, [A, B, C])
    assert _events(tr) == expected
    assert not tr.gpu and not tr.truncated


def test_split_and_reorder():
    A = te.placeholder((2, 4), name="A")
    B = te.compute((2, 4), lambda i, j: A[i, j], name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    jo, ji = s[B].split(j, factor=2)
    s[B].reorder(jo, i, ji)
    expected = []
    for jo_ in range(2):
        for i_ in range(2):
            for ji_ in range(2):
                x = i_ * 4 + jo_ * 2 + ji_
                expected += [("A", x, "r"), ("B", x, "w")]
    tr = spacetime.trace(s, [A, B])
    assert _events(tr) == [(n, 0, *e) for n, e in enumerate(expected)]


def test_vector_lanes_share_a_step():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].vectorize(xi)
    assert "ramp(" in str(tvm.lower(s, [A, B], simple_mode=True))
    expected = [(step, 0, buf, base + lane, rw)
                for step, (buf, base, rw) in enumerate([("A", 0, "r"), ("B", 0, "w"),
                                                       ("A", 4, "r"), ("B", 4, "w")])
                for lane in range(4)]
    assert _events(spacetime.trace(s, [A, B])) == expected


def test_parallel_loop_threads_side_by_side():
    """OpenMP's static schedule of 6 iterations on 4 threads: 2, 2, 1, 1."""
    A = te.placeholder((6,), name="A")
    B = te.compute((6,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    streams = {0: [0, 1], 1: [2, 3], 2: [4], 3: [5]}
    expected = sorted(((2 * n + (rw == "w"), t, buf, i, rw)
                       for t, its in streams.items() for n, i in enumerate(its)
                       for buf, rw in (("A", "r"), ("B", "w"))), key=lambda e: (e[0], e[1]))
    tr = spacetime.trace(s, [A, B], num_threads=4)
    assert _events(tr) == expected


def _shared_copy(n=64, block=32):
    """B = A + 1 through shared memory: each block stages its tile of A in A.shared."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    bx, tx = s[B].split(B.op.axis[0], factor=block)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], bx)
    s[AA].bind(s[AA].op.axis[0], te.thread_axis("threadIdx.x"))
    return s, [A, B]


def test_gpu_shared_memory_tiling():
    s, args = _shared_copy()
    tr = spacetime.trace(s, args)
    assert tr.gpu
    expected = []
    for b in range(2):  # blocks in order; one warp of 32 threads each
        for k, (buf, rw, base) in enumerate([("A", "r", 32 * b), ("A.shared", "w", 0),
                                             ("A.shared", "r", 0), ("B", "w", 32 * b)]):
            expected += [(4 * b + k, (b, t), buf, base + t, rw) for t in range(32)]
    assert _events(tr) == expected


def test_window_and_sample():
    A, B, C = _matmul(4)
    s = te.create_schedule(C.op)
    full = _events(spacetime.trace(s, [A, B, C]))
    assert _events(spacetime.trace(s, [A, B, C], window=(10, 20))) == \
        [e for e in full if 10 <= e[0] < 20]
    assert _events(spacetime.trace(s, [A, B, C], sample=7)) == \
        [e for e in full if e[0] % 7 == 0]
    cut = spacetime.trace(s, [A, B, C], max_events=5)
    assert cut.truncated and _events(cut) == full[:5]


def test_symbolic_shapes_are_bound():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    tr = spacetime.trace(s, [A, B], shapes={"n": 3})
    assert [(e.buffer, e.offset) for e in tr] == [("A", 0), ("B", 0), ("A", 1), ("B", 1),
                                                  ("A", 2), ("B", 2)]
    with pytest.raises(tvm.TVMError, match="shapes="):
        spacetime.trace(s, [A, B])


def test_data_dependent_index_is_refused():
    A = te.placeholder((4,), name="A")
    Idx = te.placeholder((4,), name="Idx", dtype="int32")
    B = te.compute((4,), lambda i: A[Idx[i]], name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(NotImplementedError, match="depends on loaded data"):
        spacetime.trace(s, [A, Idx, B])


def test_extern_calls_are_refused():
    from kiln.contrib import cblas

    A = te.placeholder((4, 4), name="A")
    B = te.placeholder((4, 4), name="B")
    C = cblas.matmul(A, B)
    with pytest.raises(NotImplementedError, match="tvm_call_packed"):
        spacetime.trace(te.create_schedule(C.op), [A, B, C])
