"""``s[T].tensorize``: matching a stage's inner loops against a tensor intrinsic, replacing
them (buffers bound to regions, reductions split into reset and update), and the errors
when they do not match. The intrinsics here are written in kiln's IR (``vload``/``vstore``
loops), so every program runs and is compared with numpy; the C micro-kernel versions are
in tests/book/test_tensorize_tutorial.py and tests/te/test_tensorize_gemm.py."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.errors import ScheduleError, TVMError


def intrin_vadd(n, dtype="float32", op=lambda a, b: a + b):
    """``z[i] = op(x[i], y[i])`` for ``n`` elements as one vector load, op and store."""
    x = te.placeholder((n,), dtype, name="x")
    y = te.placeholder((n,), dtype, name="y")
    z = te.compute((n,), lambda i: op(x[i], y[i]), name="z")
    vec = f"{dtype}x{n}"

    def intrin_func(ins, outs):
        return outs[0].vstore([0], op(ins[0].vload([0], vec), ins[1].vload([0], vec)))

    return te.decl_tensor_intrin(z.op, intrin_func, name="vadd",
                                 default_buffer_params={"offset_factor": 1})


def intrin_vadd_loop():
    """``z[i] = x[i] + y[i]`` over a symbolic ``n`` (bound where it is used), as a loop."""
    n = te.var("n")
    x = te.placeholder((n,), name="x")
    y = te.placeholder((n,), name="y")
    z = te.compute((n,), lambda i: x[i] + y[i], name="z")

    def intrin_func(ins, outs):
        ib = tvm.tir.ir_builder.create()
        with ib.for_range(0, n, name="e") as e:
            ib.emit(outs[0].vstore([e], ins[0].vload([e]) + ins[1].vload([e])))
        return ib.get()

    return te.decl_tensor_intrin(z.op, intrin_func, name="vadd_loop",
                                 default_buffer_params={"offset_factor": 1})


def intrin_matmul(mi, nj, kc, parts=("body", "reset", "update")):
    """``c[i, j] = sum_k a[i, k] * b[k, j]`` on an ``mi x nj x kc`` block, every buffer
    strided; ``parts`` says which of (body, reset, update) the intrinsic provides."""
    a = te.placeholder((mi, kc), name="a")
    b = te.placeholder((kc, nj), name="b")
    k = te.reduce_axis((0, kc), name="k")
    c = te.compute((mi, nj), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    binds = {t: tvm.tir.decl_buffer(t.shape, t.dtype, t.op.name, offset_factor=1,
                                    strides=[te.var(f"{t.op.name}_s"), 1]) for t in (a, b, c)}

    def intrin_func(ins, outs):
        aa, bb = ins
        cc = outs[0]

        def nest(reset: bool, update: bool):
            ib = tvm.tir.ir_builder.create()
            with ib.for_range(0, mi, name="x") as x, ib.for_range(0, nj, name="y") as y:
                if reset:
                    ib.emit(cc.vstore([x, y], tvm.tir.const(0.0)))
                if update:
                    with ib.for_range(0, kc, name="z") as z:
                        ib.emit(cc.vstore([x, y], cc.vload([x, y])
                                          + aa.vload([x, z]) * bb.vload([z, y])))
            return ib.get()

        made = {"body": nest(True, True), "reset": nest(True, False),
                "update": nest(False, True)}
        return tuple(made[p] if p in parts else None for p in ("body", "reset", "update"))

    return te.decl_tensor_intrin(c.op, intrin_func, name="matmul", binds=binds)


def _elementwise(n=8, m=32, dtype="float32", op=lambda a, b: a + b):
    A = te.placeholder((n, m), dtype, name="A")
    B = te.placeholder((n, m), dtype, name="B")
    C = te.compute((n, m), lambda i, j: op(A[i, j], B[i, j]), name="C")
    return A, B, C


def _run_elementwise(s, A, B, C, op=np.add):
    f = tvm.build(s, [A, B, C])
    shape = tuple(int(x) for x in C.shape)
    a = np.random.uniform(size=shape).astype(A.dtype)
    b = np.random.uniform(size=shape).astype(B.dtype)
    c = tvm.nd.array(np.zeros(shape, C.dtype))
    f(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), op(a, b), rtol=1e-6)


def _matmul(M=16, N=16, K=16):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _run_matmul(s, A, B, C):
    f = tvm.build(s, [A, B, C])
    a = np.random.uniform(size=[int(x) for x in A.shape]).astype("float32")
    b = np.random.uniform(size=[int(x) for x in B.shape]).astype("float32")
    c = tvm.nd.array(np.full([int(x) for x in C.shape], np.nan, "float32"))
    f(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5)


# ---- replacement -----------------------------------------------------------------------
def test_vector_intrinsic_replaces_the_inner_loop():
    A, B, C = _elementwise()
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].tensorize(ji, intrin_vadd(8))
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "C[ramp(((i*32) + (j.outer*8)), 1, 8)] = (A[ramp(((i*32) + (j.outer*8)), 1, 8)]" \
        in text
    assert "j.inner" not in text
    _run_elementwise(s, A, B, C)


def test_leading_axes_of_extent_one_match_a_smaller_intrinsic():
    """TVM's fuzzy matching: a [1, 32] region matches a 1-d intrinsic of 32."""
    A, B, C = _elementwise()
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=1)
    s[C].tensorize(ii, intrin_vadd(32))
    _run_elementwise(s, A, B, C)


def test_symbolic_intrinsic_extent_is_bound_at_the_call_site():
    A, B, C = _elementwise()
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].tensorize(ji, intrin_vadd_loop())
    assert "for (e, 0, 4)" in str(tvm.lower(s, [A, B, C], simple_mode=True))
    _run_elementwise(s, A, B, C)


def test_reduction_inside_the_region_uses_the_body():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].reorder(io, jo, ii, ji, C.op.reduce_axis[0])
    s[C].tensorize(ii, intrin_matmul(4, 8, 16, parts=("body",)))
    assert ".init" not in str(tvm.lower(s, [A, B, C], simple_mode=True))
    _run_matmul(s, A, B, C)


@pytest.mark.parametrize("parts", [("body", "reset", "update"), ("body", "update")])
def test_reduction_split_across_the_region(parts):
    """k.outer outside the region: reset (or the body on the first k.outer iteration), then
    update."""
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(jo, ko, io, ii, ji, ki)
    s[C].tensorize(ii, intrin_matmul(4, 8, 4, parts=parts))
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert ("for (i.outer.init, 0, 4)" in text) == ("reset" in parts)
    assert ("if (likely((k.outer > 0)))" in text) == ("reset" not in parts)
    _run_matmul(s, A, B, C)


def test_outer_loops_keep_their_annotations():
    A, B, C = _matmul(32, 32, 16)
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=8)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].parallel(io)
    s[C].tensorize(ii, intrin_matmul(4, 8, 8))
    assert "parallel (i.outer, 0, 8)" in str(tvm.lower(s, [A, B, C], simple_mode=True))
    _run_matmul(s, A, B, C)


# ---- mismatches ----------------------------------------------------------------------------
def _tensorized_elementwise(intrin, factor=8, **kw):
    A, B, C = _elementwise(**kw)
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=factor)
    s[C].tensorize(ji, intrin)
    return s, [A, B, C]


def test_mismatch_names_the_first_difference_of_each_side():
    s, args = _tensorized_elementwise(intrin_vadd(8),
                                      op=lambda a, b: a + b * tvm.tir.const(2.0))
    with pytest.raises(TVMError) as e:
        tvm.lower(s, args)
    msg = str(e.value)
    assert "tensorize 'vadd' on stage 'C' at axis 'j.inner'" in msg
    assert "stage:     (y[i]*2f)\n  intrinsic: y[i]" in msg


def test_mismatch_of_the_operation():
    s, args = _tensorized_elementwise(intrin_vadd(8), op=lambda a, b: a * b)
    with pytest.raises(TVMError, match=r"stage:     \(x\[i\]\*y\[i\]\)\n  intrinsic: "
                                       r"\(x\[i\] \+ y\[i\]\)"):
        tvm.lower(s, args)


def test_mismatch_of_dtype():
    s, args = _tensorized_elementwise(intrin_vadd(8), dtype="float64")
    with pytest.raises(TVMError, match="the stage computes float64, the intrinsic float32"):
        tvm.lower(s, args)


def test_mismatch_of_the_region_size():
    s, args = _tensorized_elementwise(intrin_vadd(8), factor=4)
    with pytest.raises(TVMError, match="axis 'j' covers 4 elements inside the tensorized "
                                       "loops, but the intrinsic's axis 'i' has extent 8"):
        tvm.lower(s, args)


def test_guard_inside_the_region_is_refused():
    s, args = _tensorized_elementwise(intrin_vadd(8), m=30)
    with pytest.raises(TVMError, match="boundary guard .* depends on loops inside the "
                                       "tensorized region"):
        tvm.lower(s, args)


def test_split_reduction_needs_an_update():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, intrin_matmul(4, 8, 4, parts=("body",)))
    with pytest.raises(TVMError, match="k.outer lie outside the tensorized region.*"
                                       "reduce_update"):
        tvm.lower(s, [A, B, C])


def test_compact_buffer_on_a_strided_region():
    """A compact 2-d buffer bound to a block of a wider tensor: storage flattening refuses
    it and says how to declare the buffer."""
    x = te.placeholder((2, 8), name="x")
    y = te.placeholder((2, 8), name="y")
    z = te.compute((2, 8), lambda i, j: x[i, j] + y[i, j], name="z")
    intrin = te.decl_tensor_intrin(
        z.op, lambda ins, outs: outs[0].vstore([0, 0], ins[0].vload([0, 0])),
        default_buffer_params={"offset_factor": 1})
    A, B, C = _elementwise()
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(*C.op.axis, 2, 8)
    s[C].tensorize(ii, intrin)
    with pytest.raises(TVMError, match="declare the buffer with symbolic strides"):
        tvm.lower(s, [A, B, C])


def test_buffer_without_offset_on_an_offset_region():
    x = te.placeholder((8,), name="x")
    z = te.compute((8,), lambda i: x[i] * 2.0, name="z")
    intrin = te.decl_tensor_intrin(
        z.op, lambda ins, outs: outs[0].vstore([0], ins[0].vload([0], "float32x8") * 2.0))
    A = te.placeholder((32,), name="A")
    C = te.compute((32,), lambda i: A[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=8)
    s[C].tensorize(ii, intrin)
    with pytest.raises(TVMError, match=r"buffer 'x' bound to tensor 'A'.*offset_factor=1"):
        tvm.lower(s, [A, C])


# ---- schedule errors -------------------------------------------------------------------------
def test_tensorize_checks_its_arguments():
    A, B, C = _elementwise()
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    with pytest.raises(ScheduleError, match="already split or fused away"):
        s[C].tensorize(C.op.axis[1], intrin_vadd(8))
    with pytest.raises(ScheduleError, match="must be a te.decl_tensor_intrin"):
        s[C].tensorize(ji, "vadd")
    s[C].tensorize(ji, intrin_vadd(8))
    with pytest.raises(ScheduleError, match="tensorized already"):
        s[C].tensorize(jo, intrin_vadd(8))
    with pytest.raises(ScheduleError, match="is a placeholder"):
        s[A].tensorize(ji, intrin_vadd(8))


def test_stage_computed_inside_the_region_is_refused():
    A = te.placeholder((8, 32), name="A")
    T = te.compute((8, 32), lambda i, j: A[i, j] * 2.0, name="T")
    C = te.compute((8, 32), lambda i, j: T[i, j] + A[i, j], name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[T].compute_at(s[C], ji)
    s[C].tensorize(ji, intrin_vadd(8))
    with pytest.raises(ScheduleError, match="stage 'T' is computed at loop 'j.inner' inside "
                                            "the tensorized region"):
        tvm.lower(s, [A, C])


def test_decl_tensor_intrin_errors():
    x = te.placeholder((8,), name="x")
    t = te.compute((8,), lambda i: x[i] * 2.0, name="t")
    z = te.compute((8,), lambda i: t[i] + 1.0, name="z")
    with pytest.raises(ValueError, match="inputs of an intrinsic must be placeholders"):
        te.decl_tensor_intrin(z.op, lambda ins, outs: None)
    with pytest.raises(ValueError, match="got 2 values"):
        te.decl_tensor_intrin(t.op, lambda ins, outs: (None, None))
    with pytest.raises(NotImplementedError, match="scalar_params"):
        te.decl_tensor_intrin(t.op, lambda ins, outs: None, scalar_params=[te.var("s")])
    with pytest.raises(TypeError, match="te.compute operation"):
        te.decl_tensor_intrin(x.op, lambda ins, outs: None)


def test_decl_tensor_intrin_buffers():
    intrin = intrin_matmul(4, 8, 2)
    assert [b.name for b in intrin.buffers] == ["a", "b", "c"]
    assert [list(map(int, b.shape)) for b in intrin.buffers] == [[4, 2], [2, 8], [4, 8]]
    vadd = intrin_vadd(8)
    assert all(b.offset_factor == 1 and b.elem_offset is not None for b in vadd.buffers)
    assert repr(vadd) == "TensorIntrin(vadd)"


def test_stage_computed_inside_another_drops_guards_that_always_hold():
    """A GEMM computed per row block of its consumer: its guard against the axis' domain
    (``D.i.outer*4 + C.i.inner < 16``) always holds, so it does not refuse the tensorized
    region it depends on."""
    A, B, C = _matmul()
    D = te.compute(C.shape, lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    rows, _ = s[D].split(D.op.axis[0], factor=4)
    s[C].compute_at(s[D], rows)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].reorder(io, jo, ii, ji, C.op.reduce_axis[0])
    s[C].tensorize(ii, intrin_matmul(4, 8, 16, parts=("body",)))
    f = tvm.build(s, [A, B, D])
    a = np.random.uniform(size=(16, 16)).astype("float32")
    b = np.random.uniform(size=(16, 16)).astype("float32")
    d = tvm.nd.array(np.zeros((16, 16), "float32"))
    f(tvm.nd.array(a), tvm.nd.array(b), d)
    np.testing.assert_allclose(d.numpy(), a @ b + 1, rtol=1e-5)
