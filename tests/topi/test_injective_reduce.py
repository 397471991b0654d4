"""Elementwise math, broadcasting, reductions and data movement against numpy, with the
default and the x86 schedules."""

import numpy as np
import pytest

from kiln import te, topi

from .common import check, randn, run

special = pytest.importorskip("scipy.special")


def test_unary_math():
    x = randn((3, 5, 19), 1)
    pos = np.abs(x) + 0.1
    xd = x.astype(np.float64)
    cases = [
        (topi.exp, x, np.exp(xd)), (topi.log, pos, np.log(pos)), (topi.sqrt, pos, np.sqrt(pos)),
        (topi.rsqrt, pos, 1 / np.sqrt(pos)), (topi.erf, x, special.erf(xd)),
        (topi.abs, x, np.abs(x)), (topi.negative, x, -x), (topi.floor, x, np.floor(x)),
        (topi.ceil, x, np.ceil(x)), (topi.trunc, x, np.trunc(x)), (topi.sign, x, np.sign(x)),
        (topi.log2, pos, np.log2(pos)), (topi.identity, x, x),
    ]
    # one input per function (some need positive arguments); all built as one module
    ins = [te.placeholder(x.shape, name=f"X{k}") for k in range(len(cases))]
    outs = [fn(inp) for (fn, _, _), inp in zip(cases, ins, strict=True)]
    assert all(o.op.tag == "elemwise" for o in outs)
    check("schedule_injective", outs, ins, [arr for _, arr, _ in cases],
          [e for _, _, e in cases], rtol=1e-5, atol=1e-6)


def test_cast_and_full():
    x = randn((4, 6), 2) * 10
    X = te.placeholder(x.shape, name="X")
    Y = topi.cast(X, "int32")
    assert Y.dtype == "int32"
    check("schedule_injective", Y, [X], [x], x.astype(np.int32))
    check("schedule_injective", topi.full((3, 2), "float32", 2.5), [], [],
          np.full((3, 2), 2.5, "float32"))
    check("schedule_injective", topi.full_like(X, -1.0), [X], [x], np.full_like(x, -1.0))
    check("schedule_injective", topi.elemwise_sum([X, X, X]), [X], [x], 3 * x)


BROADCAST_SHAPES = [((3, 4), (4,)), ((2, 1, 5), (3, 1)), ((1,), (7, 1)), ((6, 33), (6, 33)),
                    ((2, 3, 1, 17), (1, 3, 4, 1))]


@pytest.mark.parametrize("sa, sb", BROADCAST_SHAPES)
def test_broadcast_binary(sa, sb):
    a, b = randn(sa, 3), np.abs(randn(sb, 4)) + 0.5
    A, B = te.placeholder(sa, name="A"), te.placeholder(sb, name="B")
    pairs = [(topi.add, a + b), (topi.subtract, a - b), (topi.multiply, a * b),
             (topi.divide, a / b), (topi.maximum, np.maximum(a, b)),
             (topi.minimum, np.minimum(a, b))]
    outs = [fn(A, B) for fn, _ in pairs] + [topi.power(B, A), topi.greater(A, B)]
    expected = [e for _, e in pairs] + [b.astype(np.float64) ** a, a > b]
    same = tuple(sa) == tuple(sb)
    assert all(o.op.tag == ("elemwise" if same else "broadcast") for o in outs)
    check("schedule_broadcast", outs, [A, B], [a, b], expected, rtol=1e-4)


def test_scalar_operands_and_errors():
    a = randn((5, 3), 5)
    A = te.placeholder(a.shape, name="A")
    check("schedule_injective", [topi.add(A, 2.0), topi.subtract(1.0, A), topi.multiply(A, A)],
          [A], [a], [a + 2, 1 - a, a * a])
    assert topi.add(2, 3) == 5 or int(topi.add(2, 3)) == 5
    with pytest.raises(ValueError, match="broadcast"):
        topi.add(A, te.placeholder((4,), name="B"))
    with pytest.raises(TypeError):
        topi.exp(3.0)


def test_integer_division_and_mod():
    a = np.array([[7, -7, 9], [-9, 5, -5]], dtype="int32")
    b = np.array([2, 3, -4], dtype="int32")
    A, B = te.placeholder(a.shape, "int32", "A"), te.placeholder(b.shape, "int32", "B")
    outs = [topi.floor_divide(A, B), topi.floor_mod(A, B), topi.divide(A, B), topi.mod(A, B)]
    check("schedule_broadcast", outs, [A, B], [a, b],
          [a // b, a % b, np.trunc(a / b).astype("int32"), np.fmod(a, b)])


REDUCE_CASES = [((4, 5, 6), 1, False), ((4, 5, 6), (0, 2), True), ((3, 40), -1, False),
                ((7, 64), None, False), ((2, 3, 33), 2, True), ((33, 5), 0, False),
                ((128,), 0, True)]


@pytest.mark.parametrize("shape, axis, keepdims", REDUCE_CASES)
def test_reductions(shape, axis, keepdims):
    x = randn(shape, 6)
    X = te.placeholder(shape, name="X")
    np_axis = tuple(axis) if isinstance(axis, tuple) else axis
    fns = [(topi.sum, np.sum), (topi.max, np.max), (topi.min, np.min), (topi.mean, np.mean)]
    outs = [fn(X, axis, keepdims) for fn, _ in fns]
    assert outs[0].op.tag == "comm_reduce"
    expected = [np.asarray(npfn(x.astype(np.float64), axis=np_axis, keepdims=keepdims))
                for _, npfn in fns]
    check("schedule_reduce", outs, [X], [x], expected, rtol=1e-4, atol=1e-4)


def test_prod_all_any():
    x = (randn((3, 4), 7) * 0.5 + 1).astype("float32")
    X = te.placeholder(x.shape, name="X")
    check("schedule_reduce", topi.prod(X, 1), [X], [x], x.prod(1), rtol=1e-5)
    b = x > 1.0
    B = te.placeholder(b.shape, "bool", "B")
    check("schedule_reduce", topi.all(B, 0), [B], [b], b.all(0))
    check("schedule_reduce", topi.any(B, 1, keepdims=True), [B], [b], b.any(1, keepdims=True))


@pytest.mark.parametrize("shape, axis", [((4, 9), 1), ((5, 3, 2), 0), ((6,), None)])
def test_argmax_argmin(shape, axis):
    x = np.round(randn(shape, 8) * 2)  # ties: the first index wins, as in numpy
    X = te.placeholder(shape, name="X")
    check("schedule_reduce", [topi.argmax(X, axis), topi.argmin(X, axis)], [X], [x],
          [np.argmax(x, axis=axis), np.argmin(x, axis=axis)])


def test_reshape_transpose_squeeze_expand():
    x = randn((2, 3, 1, 4), 9)
    X = te.placeholder(x.shape, name="X")
    outs = [topi.reshape(X, (6, 4)), topi.reshape(X, (4, -1)), topi.transpose(X, (3, 0, 2, 1)),
            topi.transpose(X), topi.squeeze(X), topi.squeeze(X, 2), topi.expand_dims(X, 1, 2),
            topi.expand_dims(X, -1)]
    expected = [x.reshape(6, 4), x.reshape(4, -1), x.transpose(3, 0, 2, 1), x.T, x.squeeze(),
                x.squeeze(2), x[:, None, None], x[..., None]]
    check("schedule_injective", outs, [X], [x], expected)
    with pytest.raises(ValueError):
        topi.reshape(X, (5, 5))
    with pytest.raises(ValueError):
        topi.squeeze(X, 0)


def test_concatenate_stack_split():
    a, b, c = randn((2, 3, 4), 10), randn((2, 5, 4), 11), randn((2, 1, 4), 12)
    A, B, C = (te.placeholder(v.shape, name=n) for v, n in ((a, "A"), (b, "B"), (c, "C")))
    out = topi.concatenate([A, B, C], axis=1)
    check("schedule_injective", out, [A, B, C], [a, b, c], np.concatenate([a, b, c], 1))
    check("schedule_injective", topi.stack([A, A], axis=2), [A], [a], np.stack([a, a], 2))
    check("schedule_injective", topi.split(B, [1, 3], axis=1), [B], [b],
          np.split(b, [1, 3], axis=1))


def test_slice_take_flip_tile_repeat_where():
    x = randn((5, 6), 13)
    X = te.placeholder(x.shape, name="X")
    idx = np.array([[0, 4], [2, -1]], dtype="int32")
    Ind = te.placeholder(idx.shape, "int32", "I")
    outs = [topi.strided_slice(X, [1, 5], [4, 0], [1, -2]),
            topi.take(X, Ind, axis=1, mode="wrap"), topi.take(X, Ind, axis=0, mode="clip"),
            topi.flip(X, 1), topi.tile(X, (2, 1)), topi.repeat(X, 3, 0)]
    expected = [x[1:4, 5:0:-2], np.take(x, idx, axis=1, mode="wrap"),
                np.take(x, idx, axis=0, mode="clip"), x[:, ::-1], np.tile(x, (2, 1)),
                np.repeat(x, 3, 0)]
    check("schedule_injective", outs, [X, Ind], [x, idx], expected)
    cond = x > 0
    Cn = te.placeholder(cond.shape, "bool", "Cn")
    Y = te.placeholder((6,), name="Y")
    y = randn((6,), 14)
    check("schedule_injective", topi.where(Cn, X, Y), [Cn, X, Y], [cond, x, y],
          np.where(cond, x, y))


def test_layout_transform():
    x = randn((1, 32, 5, 3), 15)
    X = te.placeholder(x.shape, name="X")
    packed = x.reshape(1, 2, 16, 5, 3).transpose(0, 1, 3, 4, 2)
    check("schedule_injective", topi.layout_transform(X, "NCHW", "NCHW16c"), [X], [x], packed)
    P = te.placeholder(packed.shape, name="P")
    check("schedule_injective", [topi.layout_transform(P, "NCHW16c", "NCHW"),
                                 topi.layout_transform(P, "NCHW16c", "NCHW8c")], [P], [packed],
          [x, x.reshape(1, 4, 8, 5, 3).transpose(0, 1, 3, 4, 2)])
    w = randn((32, 16, 3, 3), 16)
    W = te.placeholder(w.shape, name="W")
    wp = w.reshape(4, 8, 2, 8, 3, 3).transpose(0, 2, 4, 5, 3, 1)
    check("schedule_injective", topi.layout_transform(W, "OIHW", "OIHW8i8o"), [W], [w], wp)
    with pytest.raises(ValueError):
        topi.layout_transform(X, "NCHW", "NCHW5c")


def test_schedule_injective_fuses_and_vectorizes():
    """The x86 injective schedule parallelizes outer loops and vectorizes the inner one."""
    import kiln

    A = te.placeholder((64, 256), name="A")
    B = te.placeholder((256,), name="B")
    C = topi.nn.relu(topi.add(A, B))
    s = topi.x86.schedule_injective([C])
    text = str(kiln.lower(s, [A, B, C], simple_mode=True))
    assert "parallel" in text and "ramp(" in text
    assert "T_add" not in text  # inlined into the relu
    a, b = randn((64, 256), 17), randn((256,), 18)
    (got,) = run(topi.x86.schedule_injective, C, [A, B], [a, b])
    np.testing.assert_allclose(got, np.maximum(a + b, 0))


def test_symbolic_batch_dimension():
    """Shapes with a symbolic dimension schedule and run (one build serves every size)."""
    n = te.var("n")
    A = te.placeholder((n, 37), name="A")
    B = te.placeholder((37,), name="B")
    C = topi.nn.relu(A + B)  # Tensor arithmetic goes through topi.add
    S = topi.sum(A, 1)
    a, b = randn((5, 37), 19), randn((37,), 20)
    check("schedule_injective", C, [A, B], [a, b], np.maximum(a + b, 0))
    check("schedule_reduce", S, [A], [a], a.sum(1), rtol=1e-5, atol=1e-5)


def test_schedule_auto_dispatch():
    x = randn((1, 4, 10, 10), 21)
    X = te.placeholder(x.shape, name="X")
    outs = {
        "pool": (topi.nn.pool2d(X, 2, 2, 1, 0, "max"),
                 x.reshape(1, 4, 5, 2, 5, 2).max(axis=(3, 5))),
        "reduce": (topi.mean(X, (2, 3)), x.mean(axis=(2, 3))),
        "softmax": (topi.nn.softmax(X, 1), special.softmax(x, axis=1)),
        "injective": (topi.exp(topi.transpose(X)), np.exp(x.T)),
    }
    for out, expected in outs.values():
        for sched in (topi.x86.schedule_auto, topi.generic.schedule_auto):
            (got,) = run(sched, out, [X], [x])
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_layout_transform_into_three_channel_blocks_is_unrolled_not_gathered():
    """NCHW -> NCHW3c: the short block axis is unrolled (a vector across it would divide
    every lane by 3); a bias broadcast over a 7x7 plane still fuses and vectorizes."""
    import kiln

    x = randn((1, 3, 10, 13), 2)
    a = te.placeholder(x.shape, name="A")
    b = topi.layout_transform(a, "NCHW", "NCHW3c")
    s = topi.x86.schedule_injective([b])
    text = str(kiln.lower(s, [a, b], simple_mode=True))
    assert "unrolled" in text and "floordiv" not in text and "vectorized" not in text
    check("schedule_injective", [b], [a], [x], [x.transpose(0, 2, 3, 1)[:, None]])
    p = te.placeholder((1, 4, 7, 7), name="P")
    bias = te.placeholder((4, 1, 1), name="bias")
    s2 = topi.x86.schedule_injective([topi.add(p, bias)])
    assert "vectorized" in str(kiln.lower(s2, [p, bias], simple_mode=True))
