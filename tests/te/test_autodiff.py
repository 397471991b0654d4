"""te.gradient: adjoints checked against finite differences (``testing.check_numerical_grads``)
in float64, the Jacobian form (``head=None``), the gather form of affine reads, and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln import te, testing, tir, topi
from kiln.ir.expr import Range
from kiln.te.autodiff.index_solve import solve_indices

F64 = "float64"


def _shape(t: te.Tensor) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape)


def _run(mod, arrays: list[np.ndarray], outputs: list[te.Tensor]) -> list[np.ndarray]:
    outs = [kiln.nd.empty(_shape(t), t.dtype) for t in outputs]
    mod(*[kiln.nd.array(a) for a in arrays], *outs)
    return [o.numpy() for o in outs]


def check_gradient(output: te.Tensor, inputs: list[te.Tensor], low: float = -1.0,
                   high: float = 1.0, seed: int = 0) -> list[np.ndarray]:
    """Build ``output`` with its gradients for a random head (one module computes both);
    compare them with the finite differences of ``sum(output * head)``; return them."""
    rng = np.random.default_rng(seed)
    head = te.placeholder(output.shape, output.dtype, name="head")
    grads = te.gradient(output, inputs, head)
    sched = te.create_schedule([output.op, *[g.op for g in grads]])
    mod = kiln.build(sched, [*inputs, head, output, *grads])
    values = [rng.uniform(low, high, _shape(x)).astype(x.dtype) for x in inputs]
    head_value = rng.uniform(-1.0, 1.0, _shape(output)).astype(output.dtype)

    def function(*arrays):
        out = _run(mod, [*arrays, head_value], [output, *grads])[0]
        return float(np.sum(out * head_value))

    computed = _run(mod, [*values, head_value], [output, *grads])[1:]
    testing.check_numerical_grads(function, values, computed, delta=1e-6, atol=1e-6,
                                  rtol=1e-4)
    return computed


def test_elementwise_chain_of_intrinsics():
    x = te.placeholder((3, 4), F64, name="x")
    y = te.placeholder((3, 4), F64, name="y")

    def f(i, j):
        a, b = x[i, j], y[i, j]
        smooth = te.sigmoid(te.tanh(a) * te.exp(b / 3.0)) + te.sqrt(a * a + 1.0)
        logs = te.log(b * b + 2.0) + te.power(a * a + 1.0, b) - a / (b * b + 1.5)
        gated = tir.Select(a > 0.0, a * b, 0.1 * b) + te.if_then_else(b < 0.2, a, b * b)
        return smooth * logs + gated + tir.max(a, b) - tir.min(a, 0.5 * b)

    z = te.compute((3, 4), f, name="z")
    check_gradient(z, [x, y])


def test_casts_and_integer_parts_are_differentiated():
    x = te.placeholder((5,), "float32", name="x")
    z = te.compute((5,), lambda i: tir.Cast(F64, x[i]) * tir.Cast(F64, i) + te.floor(
        tir.Cast(F64, x[i])), name="z")
    head = te.placeholder((5,), F64, name="head")
    (dx,) = te.gradient(z, [x], head)
    mod = kiln.build(te.create_schedule(dx.op), [head, dx])
    h = np.arange(1, 6, dtype=F64)
    (got,) = _run(mod, [h], [dx])
    np.testing.assert_allclose(got, h * np.arange(5))


def test_broadcast_and_transpose():
    a = te.placeholder((3, 4), F64, name="a")
    b = te.placeholder((4,), F64, name="b")
    c = te.placeholder((3, 1), F64, name="c")
    z = topi.transpose(topi.multiply(topi.add(a, b), c))
    check_gradient(z, [a, b, c])


def test_matmul_gradient_is_a_matmul():
    a = te.placeholder((4, 3), F64, name="a")
    b = te.placeholder((3, 5), F64, name="b")
    k = te.reduce_axis((0, 3), name="k")
    c = te.compute((4, 5), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    head = te.placeholder((4, 5), F64, name="head")
    da, db = te.gradient(c, [a, b], head)
    assert [int(iv.dom.extent) for iv in da.op.reduce_axis] == [5]   # sum over j only
    assert [int(iv.dom.extent) for iv in db.op.reduce_axis] == [4]   # sum over i only
    check_gradient(c, [a, b])


@pytest.mark.parametrize("stride,padding", [
    (2, 1), pytest.param(1, 1, marks=pytest.mark.slow), pytest.param(2, 0, marks=pytest.mark.slow)])
def test_conv2d(stride, padding):
    x = te.placeholder((2, 2, 7, 7), F64, name="x")
    w = te.placeholder((3, 2, 3, 3), F64, name="w")
    y = topi.nn.conv2d(x, w, stride, padding, 1)
    head = te.placeholder(y.shape, F64, name="head")
    dx, _ = te.gradient(y, [x, w], head)
    # the transposed convolution: a sum over at most the 3 filters and the 3x3 kernel taps
    # (with stride 2 and padding 1, the taps of one parity: 2 of the 3 per axis), never the
    # whole image
    extents = [int(iv.dom.extent) for t in _stages(dx) for iv in t.op.reduce_axis]
    assert math.prod(extents) == (3 * 2 * 2 if (stride, padding) == (2, 1) else 3 * 3 * 3)
    check_gradient(y, [x, w])


def _stages(t: te.Tensor) -> list[te.Tensor]:
    """``t`` and the compute tensors it reads, transitively."""
    out, todo = [], [t]
    while todo:
        s = todo.pop()
        if isinstance(s.op, te.ComputeOp) and s not in out:
            out.append(s)
            todo.extend(s.op.input_tensors)
    return out


@pytest.mark.parametrize("index", [
    lambda i, k: i * 2 + k, lambda i, k: i * 2 - k + 2, lambda i, k: 8 - i * 2 + k,
    lambda i, k: 11 - i * 3 - k])
def test_strided_windows_of_every_sign(index):
    x = te.placeholder((12,), F64, name="x")
    k = te.reduce_axis((0, 3), name="k")
    y = te.compute((4,), lambda i: te.sum(x[index(i, k)] * (k + 1.0), axis=k), name="y")
    check_gradient(y, [x])


@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("padding", [0, 1])
def test_pooling(pool_type, padding):
    x = te.placeholder((1, 2, 6, 6), F64, name="x")
    y = topi.nn.pool2d(x, (3, 3), (2, 2), (1, 1), (padding,) * 4, pool_type)
    check_gradient(y, [x])


def test_max_pool_gives_the_adjoint_to_the_first_maximum():
    x = te.placeholder((1, 1, 2, 4), F64, name="x")
    y = topi.nn.pool2d(x, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "max")
    (dx,) = te.gradient(y, [x], topi.full_like(y, 1.0))
    mod = kiln.build(te.create_schedule(dx.op), [x, dx])
    values = np.array([[[[1, 3, 2, 2], [3, 0, 2, 1]]]], F64)
    (got,) = _run(mod, [values], [dx])
    np.testing.assert_array_equal(got, [[[[0, 1, 1, 0], [0, 0, 0, 0]]]])


def test_sum_and_max_reductions_with_a_condition():
    x = te.placeholder((4, 6), F64, name="x")
    k = te.reduce_axis((0, 6), name="k")
    s = te.compute((4,), lambda i: te.sum(x[i, k] * x[i, k], axis=k, where=k < 4), name="s")
    m = te.reduce_axis((0, 4), name="m")
    z = te.compute((6,), lambda j: te.max(x[m, j] * 2.0, axis=m), name="z")
    r = te.compute((6,), lambda j: z[j] * s[j % 4], name="r")
    check_gradient(r, [x])


def test_topi_reductions():
    x = te.placeholder((3, 4, 5), F64, name="x")
    y = topi.add(topi.sum(x, axis=(0, 2)), topi.max(x, axis=(0, 2)))
    check_gradient(y, [x])


def test_softmax():
    x = te.placeholder((3, 5), F64, name="x")
    check_gradient(topi.nn.softmax(x), [x])


def test_reshape_and_flatten_gradients_are_copies():
    x = te.placeholder((2, 3, 2, 2), F64, name="x")
    y = topi.reshape(topi.nn.flatten(topi.exp(x)), (4, 6))
    (dx,) = te.gradient(y, [x], te.placeholder(y.shape, F64, name="head"))
    assert not [iv for t in _stages(dx) for iv in t.op.reduce_axis]
    check_gradient(y, [x])


def test_non_affine_index_uses_the_jacobian_form():
    x = te.placeholder((3, 4), F64, name="x")
    y = te.compute((6, 4), lambda i, j: x[i // 2, j] * x[i // 2, (j + 1) % 4], name="y")
    check_gradient(y, [x])


def test_jacobian_when_head_is_none():
    a = te.placeholder((2, 3), F64, name="a")
    b = te.placeholder((3,), F64, name="b")
    k = te.reduce_axis((0, 3), name="k")
    c = te.compute((2,), lambda i: te.sum(a[i, k] * b[k], axis=k), name="c")
    ja, jb = te.gradient(c, [a, b])
    assert _shape(ja) == (2, 2, 3) and _shape(jb) == (2, 3)
    mod = kiln.build(te.create_schedule([ja.op, jb.op]), [a, b, ja, jb])
    av, bv = np.arange(6, dtype=F64).reshape(2, 3), np.array([1.0, -2.0, 3.0])
    got_a, got_b = _run(mod, [av, bv], [ja, jb])
    expect_a = np.zeros((2, 2, 3))
    expect_a[0, 0], expect_a[1, 1] = bv, bv
    np.testing.assert_allclose(got_a, expect_a)
    np.testing.assert_allclose(got_b, av)


def test_head_with_a_prefix_and_gradient_of_an_intermediate():
    x = te.placeholder((3,), F64, name="x")
    h = te.compute((3,), lambda i: x[i] * x[i], name="h")
    y = te.compute((3,), lambda i: h[i] * 3.0 + x[i], name="y")
    head = te.placeholder((2, 3), F64, name="head")
    dx, dh = te.gradient(y, [x, h], head)
    assert _shape(dx) == (2, 3) and _shape(dh) == (2, 3)
    mod = kiln.build(te.create_schedule([dx.op, dh.op]), [x, head, dx, dh])
    xv, hv = np.array([1.0, 2.0, -1.0]), np.arange(6, dtype=F64).reshape(2, 3)
    got_x, got_h = _run(mod, [xv, hv], [dx, dh])
    np.testing.assert_allclose(got_x, hv * (6 * xv + 1))
    np.testing.assert_allclose(got_h, hv * 3)


def test_unused_input_gets_zeros():
    x = te.placeholder((3,), F64, name="x")
    unused = te.placeholder((2, 2), F64, name="unused")
    y = te.compute((3,), lambda i: x[i] * 2.0, name="y")
    dx, du = te.gradient(y, [x, unused], topi.full_like(y, 1.0))
    assert _shape(du) == (2, 2)
    mod = kiln.build(te.create_schedule([dx.op, du.op]), [dx, du])
    got_x, got_u = _run(mod, [], [dx, du])
    np.testing.assert_allclose(got_x, [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(got_u, np.zeros((2, 2)))


def test_argument_errors():
    x = te.placeholder((3,), F64, name="x")
    y = te.compute((3,), lambda i: x[i] * 2.0, name="y")
    with pytest.raises(TypeError, match=r"inputs\[1\] is a Var, not a te.Tensor"):
        te.gradient(y, [x, te.var("n")])
    with pytest.raises(TypeError, match="output must be a te.Tensor"):
        te.gradient(x[0], [x])
    with pytest.raises(ValueError, match="must end with the output's shape"):
        te.gradient(y, [x], te.placeholder((4,), F64, name="head"))


def test_product_and_tuple_reducers_use_the_jacobian():
    x = te.placeholder((3, 4), F64, name="x")
    product = te.comm_reducer(lambda a, b: a * b, lambda t: tir.const(1, t), name="prod")
    k = te.reduce_axis((0, 4), name="k")
    p = te.compute((3,), lambda i: product(x[i, k] + 2.0, axis=k), name="p")
    check_gradient(p, [x], seed=2)

    def take_max(a, b):  # (value, weight): the weight of the larger value
        return tir.Select(a[0] >= b[0], a[0], b[0]), tir.Select(a[0] >= b[0], a[1], b[1])

    arg = te.comm_reducer(take_max, lambda t0, t1: (tir.min_value(t0), tir.const(0, t1)))
    m = te.reduce_axis((0, 4), name="m")
    _, weight = te.compute((3,), lambda i: arg((x[i, m], x[i, m] * x[i, m]), axis=m),
                           name="w")
    check_gradient(weight, [x], seed=3)


def test_reduction_with_init_is_not_differentiated():
    x = te.placeholder((3, 4), F64, name="x")
    k = te.reduce_axis((0, 4), name="k")
    y = te.compute((3,), lambda i: te.sum(x[i, k], axis=k, init=1.0), name="y")
    with pytest.raises(NotImplementedError, match="reduction of 'y' has an init"):
        te.gradient(y, [x])


def test_intrinsic_without_a_derivative_rule_is_named():
    x = te.placeholder((3,), F64, name="x")
    y = te.compute((3,), lambda i: tir.fmod(x[i], 2.0), name="y")
    with pytest.raises(NotImplementedError, match="no derivative rule for the intrinsic 'fmod'"):
        te.gradient(y, [x])


def test_index_solve_strided_window():
    """conv2d's read ``X[n, h*2 + kh]``: h is solved (the larger loop) and kh runs over the
    taps of x's parity only, two steps of 2 (a new loop ``kh_step``)."""
    n, h, kh = te.var("n"), te.var("h"), te.var("kh")
    x0, x1 = te.var("x0"), te.var("x1")
    domain = {n: Range(0, 2), h: Range(0, 5), kh: Range(0, 3)}
    sol = solve_indices([n, h * 2 + kh], [x0, x1], domain, [2, 11])
    (step, dom), = sol.free.items()
    assert step.name == "kh_step" and int(dom.extent) == 2
    assert sol.values[n] is x0
    assert str(sol.values[kh]) == "(floormod(x1, 2) + (kh_step*2))"
    assert str(sol.values[h]) == "(floordiv(x1, 2) - kh_step)"
    assert [str(c) for c in sol.conditions] == [
        "((floormod(x1, 2) + (kh_step*2)) < 3)", "(0 <= (floordiv(x1, 2) - kh_step))",
        "(floordiv(x1, 2) < (kh_step + 5))"]


def test_index_solve_keeps_what_it_cannot_invert_as_conditions():
    i, j = te.var("i"), te.var("j")
    x0, x1 = te.var("x0"), te.var("x1")
    domain = {i: Range(0, 4), j: Range(0, 5)}
    sol = solve_indices([i // 2, j], [x0, x1], domain, [2, 5])
    assert list(sol.free) == [i] and sol.values[j] is x1
    assert [str(c) for c in sol.conditions] == ["(x0 == floordiv(i, 2))"]
    # a variable shared by two indices: solved in one, substituted in the other
    sol = solve_indices([i + j, i], [x0, x1], domain, [8, 4])
    assert not sol.free and sol.values[i] is x1
    assert str(sol.values[j]) == "(x0 - x1)"


def test_index_solve_recombines_the_digits_of_a_flat_index():
    """A reshape (4, 6) -> (24,) reads ``X[(i // 6) % 4, i % 6]``: one equation for ``i``."""
    i, x0, x1 = te.var("i"), te.var("x0"), te.var("x1")
    sol = solve_indices([tir.floormod(tir.floordiv(i, 6), 4), tir.floormod(i, 6)], [x0, x1],
                        {i: Range(0, 24)}, [4, 6])
    assert not sol.free and str(sol.values[i]) == "((x0*6) + x1)" and not sol.conditions
    # i + 1 may reach 24, so (i + 1) // 6 % 4 is not the top digit: no recombination
    sol = solve_indices([tir.floormod(tir.floordiv(i + 1, 6), 4), tir.floormod(i + 1, 6)],
                        [x0, x1], {i: Range(0, 24)}, [4, 6])
    assert list(sol.free) == [i]


def test_index_solve_mixed_radix_leaves_nothing_to_sum():
    """A 2x2 window with stride 2 reads ``X[h*2 + kh]``: each x has exactly one (h, kh)."""
    h, kh, x0 = te.var("h"), te.var("kh"), te.var("x0")
    sol = solve_indices([h * 2 + kh], [x0], {h: Range(0, 3), kh: Range(0, 2)}, [6])
    assert not sol.free and not sol.conditions
    assert str(sol.values[h]) == "floordiv(x0, 2)" and str(sol.values[kh]) == "floormod(x0, 2)"


def test_check_numerical_grads_rejects_a_wrong_gradient():
    def function(a, b):
        return float(np.sum(a * a) + np.sum(np.sin(b)))

    a, b = np.array([1.0, -2.0]), np.array([[0.5, 1.5]])
    testing.check_numerical_grads(function, {"a": a, "b": b}, {"a": 2 * a, "b": np.cos(b)})
    with pytest.raises(AssertionError, match="wrt '1' differ"):
        testing.check_numerical_grads(function, [a, b], [2 * a, np.sin(b)])
    with pytest.raises(AssertionError, match="has shape"):
        testing.check_numerical_grads(function, [a, b], [a[:1], b])
