"""te.hybrid.script: Python-mode runs, HybridOp lowering and scheduling, errors (numpy is the
reference)."""

import inspect

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.errors import HybridScriptError, ScheduleError
from tests.codegen.cuda_workloads import build_cuda


@te.hybrid.script
def outer_product(a, b):
    c = output_tensor((a.shape[0], b.shape[0]), "float32")  # noqa: F821
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            c[i, j] = a[i] * b[j]
    return c


@te.hybrid.script
def relu_and_row_sum(a):
    """Two outputs, an if/else and a local scalar."""
    b = output_tensor(a.shape, "float32")  # noqa: F821
    c = output_tensor((a.shape[0],), "float32")  # noqa: F821
    for i in range(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):
            if a[i, j] > 0.0:
                b[i, j] = a[i, j]
            else:
                b[i, j] = 0.0
            s += b[i, j]
        c[i] = s
    return b, c


@te.hybrid.script
def prefix_max(a, n):
    """allocate, const_range, a loop from 1, max and a cast."""
    t = allocate((n,), "float32")  # noqa: F821
    out = output_tensor((n,), "float32")  # noqa: F821
    for k in const_range(1):  # noqa: F821
        t[k] = a[k] + float32(k)  # noqa: F821
    for i in range(1, n):
        t[i] = max(t[i - 1], a[i])
    for i in parallel(n):  # noqa: F821
        out[i] = sqrt(t[i] * t[i])  # noqa: F821
    return out


def _run(s, args, inputs, out_shapes):
    f = tvm.build(s, args)
    outs = [tvm.nd.array(np.zeros(shape, "float32")) for shape in out_shapes]
    f(*[tvm.nd.array(x) for x in inputs], *outs)
    return [o.numpy() for o in outs]


def _rand(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype("float32")


def test_python_mode_runs_on_numpy():
    a, b = _rand(5), _rand(7)
    np.testing.assert_allclose(outer_product(a, b), np.outer(a, b), rtol=1e-6)
    x = _rand(4, 6)
    rb, rc = relu_and_row_sum(x)
    np.testing.assert_allclose(rb, np.maximum(x, 0))
    np.testing.assert_allclose(rc, np.maximum(x, 0).sum(axis=1), rtol=1e-5)
    assert "output_tensor" not in globals()  # the language's names are put back


def test_outer_product_lowers_and_matches_numpy():
    A, B = te.placeholder((10,), name="A"), te.placeholder((12,), name="B")
    C = outer_product(A, B)
    assert isinstance(C.op, te.HybridOp) and C.shape[0].value == 10
    assert [iv.var.name for iv in C.op.axis] == ["i", "j"]
    s = te.create_schedule(C.op)
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "produce outer_product" in text and "for (j, 0, 12)" in text
    a, b = _rand(10), _rand(12)
    (c,) = _run(s, [A, B, C], [a, b], [(10, 12)])
    np.testing.assert_allclose(c, np.outer(a, b), rtol=1e-6)
    np.testing.assert_allclose(c, outer_product(a, b), rtol=1e-6)


def test_two_outputs_between_computes():
    """A te.compute feeds the hybrid op, whose second output feeds another te.compute."""
    A = te.placeholder((6, 7), name="A")
    P = te.compute((6, 7), lambda i, j: A[i, j] * 2.0, name="P")
    B, C = relu_and_row_sum(P)
    D = te.compute((6,), lambda i: C[i] + 1.0, name="D")
    s = te.create_schedule(D.op)
    x = _rand(6, 7)
    b, d = _run(s, [A, B, D], [x], [(6, 7), (6,)])
    rb, rc = relu_and_row_sum(2 * x)
    np.testing.assert_allclose(b, rb)
    np.testing.assert_allclose(d, rc + 1, rtol=1e-5)
    np.testing.assert_allclose(d, np.maximum(2 * x, 0).sum(axis=1) + 1, rtol=1e-5)


def test_inlined_producer_is_substituted_into_the_body():
    A, B = te.placeholder((16,), name="A"), te.placeholder((8,), name="B")
    P = te.compute((16,), lambda i: A[i] + 1.0, name="P")
    C = outer_product(P, B)
    s = te.create_schedule(C.op)
    s[P].compute_inline()
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "((A[i] + 1f)*B[j])" in text and "produce P" not in text
    a, b = _rand(16), _rand(8)
    np.testing.assert_allclose(_run(s, [A, B, C], [a, b], [(16, 8)])[0], np.outer(a + 1, b))


def test_scalar_args_buffers_and_symbolic_shape():
    a = _rand(9)
    expected = np.abs(np.maximum.accumulate(a))
    np.testing.assert_allclose(prefix_max(a, 9), expected, rtol=1e-6)
    A = te.placeholder((9,), name="a")
    O = prefix_max(A, 9)
    (o,) = _run(te.create_schedule(O.op), [A, O], [a], [(9,)])
    np.testing.assert_allclose(o, expected, rtol=1e-6)
    n = te.var("n")
    A = te.placeholder((n,), name="a")
    O = prefix_max(A, n)
    s = te.create_schedule(O.op)
    text = str(tvm.lower(s, [A, O], simple_mode=True))
    assert "allocate t[float32 * n]" in text and "for (i, 0, (n - 1))" in text
    (o,) = _run(s, [A, O], [a], [(9,)])
    np.testing.assert_allclose(o, expected, rtol=1e-6)


def test_split_and_parallel_rewrite_the_loops():
    A, B = te.placeholder((10,), name="A"), te.placeholder((12,), name="B")
    C = outer_product(A, B)
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].parallel(io)
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "parallel (i.outer" in text and "for (i.inner, 0, 4)" in text
    a, b = _rand(10), _rand(12)
    (c,) = _run(s, [A, B, C], [a, b], [(10, 12)])
    np.testing.assert_allclose(c, np.outer(a, b), rtol=1e-6)


def test_fuse_vectorize_reorder():
    A, B = te.placeholder((16,), name="A"), te.placeholder((8,), name="B")
    C = outer_product(A, B)
    s = te.create_schedule(C.op)
    fused = s[C].fuse(*C.op.axis)
    outer, inner = s[C].split(fused, factor=8)
    s[C].vectorize(inner)
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "ramp(" in text
    a, b = _rand(16), _rand(8)
    np.testing.assert_allclose(_run(s, [A, B, C], [a, b], [(16, 8)])[0], np.outer(a, b))
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    s[C].reorder(io, j, ii)
    s[C].unroll(ii)
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert text.index("for (j, 0, 8)") < text.index("(i.inner, 0, 4)")
    np.testing.assert_allclose(_run(s, [A, B, C], [a, b], [(16, 8)])[0], np.outer(a, b))


def test_bind_builds_a_cuda_kernel():
    A, B = te.placeholder((16,), name="A"), te.placeholder((8,), name="B")
    C = outer_product(A, B)
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], te.thread_axis("threadIdx.x"))
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "thread_extent = 16" in text and "thread_extent = 8" in text
    src = build_cuda(s, [A, B, C]).imported_modules[0].get_source()
    assert ("outer_product[((((int)blockIdx.x) * 8) + ((int)threadIdx.x))] = "
            "(A[((int)blockIdx.x)] * B[((int)threadIdx.x)])") in src


def test_cache_read_of_an_input():
    A, B = te.placeholder((16,), name="A"), te.placeholder((8,), name="B")
    C = outer_product(A, B)
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=4)  # the stage's loops survive the rewrite of its op
    s.cache_read(A, "local", [C])
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "A.local[((i.outer*4) + i.inner)]" in text
    a, b = _rand(16), _rand(8)
    np.testing.assert_allclose(_run(s, [A, B, C], [a, b], [(16, 8)])[0], np.outer(a, b))


def test_schedule_errors():
    A, B = te.placeholder((10,), name="A"), te.placeholder((12,), name="B")
    C = outer_product(A, B)
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="hybrid operation"):
        s[C].compute_inline()
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=3)  # does not divide 10: a guard between the loops
    s[C].reorder(j, ii)
    with pytest.raises(ScheduleError, match="perfectly nested"):
        tvm.lower(s, [A, B, C])


def _line_of(func, text: str) -> int:
    lines, first = inspect.getsourcelines(func.__wrapped__)
    return first + next(k for k, line in enumerate(lines) if text in line)


@te.hybrid.script
def _writes_input(a):
    b = output_tensor(a.shape, "float32")  # noqa: F821
    for i in range(a.shape[0]):
        a[i] = 1.0
        b[i] = a[i]
    return b


@te.hybrid.script
def _uses_undefined(a):
    b = output_tensor(a.shape, "float32")  # noqa: F821
    for i in range(a.shape[0]):
        b[i] = a[i] * undefined_scale  # noqa: F821
    return b


@te.hybrid.script
def _unsupported_statement(a):
    b = output_tensor(a.shape, "float32")  # noqa: F821
    while True:
        b[0] = a[0]
    return b


@te.hybrid.script
def _returns_one_of_two(a):
    b = output_tensor(a.shape, "float32")  # noqa: F821
    c = output_tensor(a.shape, "float32")  # noqa: F821
    for i in range(a.shape[0]):
        b[i] = a[i]
        c[i] = a[i]
    return b


@pytest.mark.parametrize("func, line_text, message", [
    (_writes_input, "a[i] = 1.0", "writing to input tensor 'a'"),
    (_uses_undefined, "undefined_scale", "undefined variable 'undefined_scale'"),
    (_unsupported_statement, "while True", "unsupported statement 'While'"),
    (_returns_one_of_two, "return b", "wrong number of return values"),
])
def test_errors_name_the_line(func, line_text, message):
    A = te.placeholder((4,), name="A")
    with pytest.raises(HybridScriptError) as info:
        func(A)
    text = str(info.value)
    assert message in text
    assert f"hybrid function '{func.__name__}', line {_line_of(func, line_text)}:" in text


def test_tvm_names():
    assert te.hybrid.script is tvm.te.hybrid.script
    assert te.HybridOp is te.hybrid.HybridOp
