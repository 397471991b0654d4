"""kiln's bound checks (``tir.instrument_bound_checkers``, issue 25): a kernel that strays
out of a buffer raises an error naming the buffer, the index and the extent instead of
corrupting memory, and a correct kernel runs as before (no false reports where a condition
skips an access, in vector, gather, parallel and temporary-buffer accesses)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, rebuild
from kiln.ir.transform import PassContext
from kiln.tir.instrument_bound_checkers import CONFIG_KEY

CHECKED = {CONFIG_KEY: True}


def _build(s, args, config=CHECKED):
    with PassContext(config=config):
        return kiln.build(s, args)


def _shifted_read(shift: int):
    """B[i] = A[i + shift] over n elements: out of bounds for shift > 0."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i + shift] * 2.0, name="B")
    return te.create_schedule(B.op), A, B


def _call(f, n: int = 16):
    a = kiln.nd.array(np.arange(n, dtype="float32"))
    b = kiln.nd.empty((n,))
    f(a, b)
    return a.numpy(), b.numpy()


def test_the_config_key_is_tvms():
    assert CONFIG_KEY == "tir.instrument_bound_checkers"


def test_scalar_read_out_of_bounds_raises():
    s, A, B = _shifted_read(1)
    f = _build(s, [A, B])
    with pytest.raises(kiln.TVMError, match=r"^Out of bounds: kernel default_function "
                       r"accessed buffer A at index 16, outside its 16 elements \[0, 16\)$"):
        _call(f)


def test_vector_read_reports_the_lanes():
    s, A, B = _shifted_read(1)
    _, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(xi)
    f = _build(s, [A, B])
    with pytest.raises(kiln.TVMError, match=r"buffer A at indices 9 to 16, outside its 16 "):
        _call(f)


def test_parallel_loop_reports_from_its_threads():
    s, A, B = _shifted_read(3)
    xo, _ = s[B].split(B.op.axis[0], factor=2)
    s[B].parallel(xo)
    f = _build(s, [A, B])
    with pytest.raises(kiln.TVMError, match=r"buffer A at index 1[6-8], outside its 16 "):
        _call(f)


class _ShiftStores(Mutator):
    """A broken lowering pass: every store goes one element further."""

    def visit_Store(self, node):
        return rebuild(node, index=node.index + 1)


def test_store_out_of_bounds_raises_and_writes_nothing_outside():
    s, A, B = _shifted_read(0)
    config = {**CHECKED, "tir.add_lower_pass": [(3, lambda stmt: _ShiftStores().visit(stmt))]}
    f = _build(s, [A, B], config)
    with pytest.raises(kiln.TVMError, match="buffer B at index 16, outside its 16 elements"):
        _call(f)


def test_checks_are_off_by_default_and_when_the_key_is_false():
    s, A, B = _shifted_read(0)
    assert "kiln_check_index" not in kiln.build(s, [A, B]).get_source()
    assert "kiln_check_index" not in _build(s, [A, B], {CONFIG_KEY: False}).get_source()
    assert "kiln_check_index" in _build(s, [A, B]).get_source()


def test_padding_guard_tail_and_temporaries_report_nothing():
    """A padded stencil (reads skipped by its condition), a split with a guarded tail,
    vectorized, and a temporary computed at a loop: checked and correct."""
    n = 13
    A = te.placeholder((n,), name="A")
    P = te.compute((n + 2,), lambda i: te.if_then_else(
        te.any(i < 1, i >= n + 1), 0.0, A[i - 1]), name="P")
    C = te.compute((n,), lambda i: P[i] + P[i + 1] + P[i + 2], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[P].compute_at(s[C], xo)
    s[C].vectorize(xi)
    f = _build(s, [A, C])
    assert "kiln_check_index" in f.get_source()
    a = np.arange(1, n + 1, dtype="float32")
    c = kiln.nd.empty((n,))
    f(kiln.nd.array(a), c)
    p = np.pad(a, 1)
    np.testing.assert_allclose(c.numpy(), p[:-2] + p[1:-1] + p[2:])


def _strided(n_a: int):
    """B[i] = A[2*i] over 8 elements, vectorized: a stride-2 ramp over A (n_a elements)."""
    A = te.placeholder((n_a,), name="A")
    B = te.compute((8,), lambda i: A[2 * i], name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    return s, A, B


def test_strided_vector_read_checks_its_last_lane():
    s, A, B = _strided(15)
    a = np.arange(15, dtype="float32")
    b = kiln.nd.empty((8,))
    _build(s, [A, B])(kiln.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a[::2])
    s, A, B = _strided(14)
    with pytest.raises(kiln.TVMError, match=r"buffer A at indices 0 to 14, outside its 14 "):
        _build(s, [A, B])(kiln.nd.array(np.zeros(14, "float32")), b)


class _Gather(Mutator):
    """Turn vector loads into gathers: an index that is not a ramp."""

    def visit_Load(self, node):
        if isinstance(node.index, E.Ramp):
            return rebuild(node, index=node.index + E.Broadcast(E.IntImm("int32", 0),
                                                                 node.index.lanes))
        return node


@pytest.mark.parametrize("n_a", [15, 14])
def test_gather_is_checked_lane_by_lane(n_a):
    s, A, B = _strided(n_a)
    config = {**CHECKED, "tir.add_lower_pass": [(3, lambda stmt: _Gather().visit(stmt))]}
    f = _build(s, [A, B], config)
    a = np.arange(n_a, dtype="float32")
    b = kiln.nd.empty((8,))
    if n_a == 14:
        with pytest.raises(kiln.TVMError, match=r"buffer A at index 14, outside its 14 "):
            f(kiln.nd.array(a), b)
        return
    f(kiln.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a[::2])


def test_symbolic_shapes_check_against_the_call_shapes():
    s, A, B = _shifted_read(0)
    f = _build(s, [A, B])
    a, b = _call(f, 5)
    np.testing.assert_array_equal(b, a * 2)


def test_strided_buffer_extent_spans_its_strides():
    """A buffer bound with strides (``tir.decl_buffer``) spans ``1 + sum((n-1)*stride)``
    elements, not ``prod(shape)``: a column block of a wider array is in bounds."""
    n, m, s0 = te.var("n"), te.var("m"), te.var("s0")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    binds = {A: kiln.tir.decl_buffer((n, m), name="A", strides=[s0, 1])}
    with PassContext(config=CHECKED):
        f = kiln.build(te.create_schedule(B.op), [A, B], binds=binds)
    base = np.arange(12 * 32, dtype="float32").reshape(12, 32)
    b = kiln.nd.empty((12, 4))
    f(kiln.nd.from_dlpack(base[:, 5:9]), b)
    np.testing.assert_array_equal(b.numpy(), 2 * base[:, 5:9])
