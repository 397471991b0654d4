"""Narrow integers (int8/uint8/int16/uint16) in generated C wrap modulo 2**bits at every
intermediate, as in TVM and numpy, although C computes them in ``int`` (kiln/codegen/c_narrow.py;
docs/codegen.md "Narrow integer arithmetic")."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te
from kiln import tir as T

from . import cuda_emulator
from .cuda_workloads import build_cuda, have_nvrtc

NARROW = ["uint8", "int8", "uint16", "int16"]
N = 64


def _inputs(dtype: str, seed: int = 0, count: int = 2) -> list[np.ndarray]:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(info.min, info.max, N, endpoint=True).astype(dtype)
              for _ in range(count)]
    arrays[0][:4] = [info.max, info.min, info.max - 1, 0]  # where a promoted value escapes
    return arrays


def _build(outs, ins, vectorize: bool = False):
    s = te.create_schedule([o.op for o in outs])
    if vectorize:
        for o in outs:
            _, xi = s[o].split(o.op.axis[0], factor=32)
            s[o].vectorize(xi)
    return kiln.build(s, [*ins, *outs])


def _run(outs, ins, arrays, vectorize: bool = False, mod=None) -> list[np.ndarray]:
    mod = mod or _build(outs, ins, vectorize)
    res = [kiln.nd.empty((N,), o.dtype) for o in outs]
    mod(*[kiln.nd.array(x) for x in arrays], *res)
    return [r.numpy() for r in res]


def _c_compute(s, args) -> str:
    src = kiln.build(s, args).get_source()
    return src[:src.index("KILN_DLL int32_t")]


def test_fused_shift_pair_wraps_as_numpy():
    """``(a << 4) >> 6`` on uint8: the left shift's result is cut to 8 bits before the right
    shift reads its high bits (C alone gives 200 << 4 >> 6 = 50, numpy 2)."""
    A = te.placeholder((N,), "uint8", "A")
    B = te.compute((N,), lambda i: (A[i] << T.const(4, "uint8")) >> T.const(6, "uint8"), "B")
    a = np.arange(200, 200 + N).astype("uint8")
    (b,) = _run([B], [A], [a])
    np.testing.assert_array_equal(b, (a << 4) >> 6)
    assert b[0] == 2


def _consumers(x, y, dtype):
    """One narrow result ``x`` (that may carry high bits in C) read by each operation whose
    result depends on them, with its numpy twin; ``y`` is a third input (an operand of ``x``
    would let the simplifier fold ``max(a + b, b)``, which kiln.arith assumes cannot wrap)."""
    c = T.const
    d = (y & c(7, dtype)) + c(1, dtype)  # a divisor in 1..8 that is itself a sum
    return [
        (x >> c(2, dtype), lambda xv, yv: xv >> 2),
        (x // d, lambda xv, yv: xv // ((yv & 7) + 1)),
        (x % d, lambda xv, yv: xv % ((yv & 7) + 1)),
        (T.truncdiv(x, d), lambda xv, yv: (np.sign(xv) * (np.abs(xv.astype("int64"))
                                                          // ((yv & 7) + 1)))),
        (T.Cast("int32", x), lambda xv, yv: xv.astype("int32")),
        (T.Cast("float32", x), lambda xv, yv: xv.astype("float32")),
        (T.Select(x < y, c(1, "int32"), c(0, "int32")), lambda xv, yv: (xv < yv).astype("int32")),
        (te.max(x, y), lambda xv, yv: np.maximum(xv, yv)),
        (T.Select(y > c(0, dtype), x, y) >> c(1, dtype),
         lambda xv, yv: np.where(yv > 0, xv, yv) >> 1),
    ]


_PRODUCERS = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "not": (lambda a, b: ~a, lambda a, b: ~a),
    "shl": (lambda a, b: a << T.const(3, a.dtype), lambda a, b: a << 3),
}


@pytest.mark.slow
@pytest.mark.parametrize("vectorize", [False, True], ids=["scalar", "vector"])
@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_results_feed_high_bit_readers(dtype, vectorize):
    """Each of ``+ - * ~ <<`` feeds a shift, division, modulo, widening cast, comparison,
    max and select: all as numpy with the same wraparound (scalar C and vector lanes)."""
    A, B, C = (te.placeholder((N,), dtype, x) for x in "ABC")
    outs, refs = [], []
    a, b, c = _inputs(dtype, count=3)
    with np.errstate(over="ignore"):
        for k, (make, ref) in enumerate(_PRODUCERS.values()):
            for j, (_, cref) in enumerate(_consumers(make(A[0], B[0]), C[0], dtype)):
                if vectorize and j in (1, 2):
                    continue  # floordiv/floormod of vectors: not in the C vector backend
                outs.append(_stage((A, B, C), make, j, f"O{k}_{j}", dtype))
                refs.append(cref(ref(a, b), c))
    got = _run(outs, [A, B, C], [a, b, c], vectorize)
    for o, g, r in zip(outs, got, refs, strict=True):
        np.testing.assert_array_equal(g, r.astype(o.dtype), err_msg=o.name)


def _stage(ins, make, j, name, dtype):
    A, B, C = ins
    return te.compute((N,), lambda i: _consumers(make(A[i], B[i]), C[i], dtype)[j][0], name)


def test_cut_only_where_a_high_bit_reader_needs_it():
    """A store truncates by itself and a ``+``/``*`` chain is cut only at its reader: the C
    stays as written for plain narrow arithmetic."""
    A = te.placeholder((N,), "uint8", "A")
    B = te.placeholder((N,), "uint8", "B")
    C = te.compute((N,), lambda i: (A[i] ^ B[i]) * B[i] + A[i], "C")
    D = te.compute((N,), lambda i: ((A[i] ^ B[i]) * B[i]) >> T.const(1, "uint8"), "D")
    s = te.create_schedule([C.op, D.op])
    body = _c_compute(s, [A, B, C, D])
    assert "C[i] = (((uint32_t)(A[i] ^ B[i]) * B[i]) + A[i]);" in body
    assert "D[i_1] = (((uint8_t)((uint32_t)(A[i_1] ^ B[i_1]) * B[i_1])) >> ((uint8_t)1));" in body


def test_wide_types_print_unchanged():
    """int32/float programs print no narrowing or widening casts."""
    A = te.placeholder((N,), "int32", "A")
    B = te.compute((N,), lambda i: ((A[i] * 3 + 1) << 2) >> 1, "B")
    s = te.create_schedule(B.op)
    body = _c_compute(s, [A, B])
    assert "B[i] = ((((A[i] * 3) + 1) << 2) >> 1);" in body
    assert "uint32_t" not in body.split("_compute(", 1)[1]


@pytest.mark.parametrize("dtype", NARROW)
def test_vector_lanes_wrap_in_their_type(dtype):
    """GCC vector lanes (``uint8x32``, ...) compute in the element type: a wrapped sum or
    product is compared, widened and selected lane by lane as numpy does."""
    A, B, C = (te.placeholder((N,), dtype, x) for x in "ABC")
    outs = [te.compute((N,), lambda i: A[i] * B[i] + C[i], "P"),
            te.compute((N,), lambda i: T.Cast("int32", A[i] + B[i]), "W"),
            te.compute((N,), lambda i: T.Select(A[i] - B[i] < C[i], A[i], C[i]), "S")]
    a, b, c = _inputs(dtype, count=3)
    mod = _build(outs, [A, B, C], vectorize=True)
    assert f"*({dtype}x32_u*)" in mod.get_source()
    got = _run(outs, [A, B, C], [a, b, c], mod=mod)
    with np.errstate(over="ignore"):
        want = [a * b + c, (a + b).astype("int32"), np.where(a - b < c, a, c)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_uint16_product_does_not_overflow_int():
    """65535 * 65535 overflows C's ``int`` (undefined behaviour): the product is computed in
    uint32 and cut to 16 bits before the division reads it."""
    A = te.placeholder((N,), "uint16", "A")
    B = te.compute((N,), lambda i: (A[i] * A[i]) // T.const(3, "uint16"), "B")
    a = np.full(N, 65535, "uint16")
    a[1::2] = 40000
    (b,) = _run([B], [A], [a])
    np.testing.assert_array_equal(b, (a * a) // 3)


def _random_expr(rng, dtype, depth):
    """A random narrow-integer expression over ``a``/``b`` and its numpy twin."""
    bits = np.iinfo(dtype).bits
    if depth == 0 or rng.random() < 0.15:
        k = int(rng.integers(0, 2))
        return (lambda a, b, k=k: (a, b)[k]), (lambda a, b, k=k: (a, b)[k])
    fa, ra = _random_expr(rng, dtype, depth - 1)
    fb, rb = _random_expr(rng, dtype, depth - 1)
    op = str(rng.choice(["add", "sub", "mul", "not", "and", "or", "xor", "shl", "shr",
                         "shr_var", "div", "max", "select", "cast"]))
    s = int(rng.integers(0, bits))
    c = T.const
    table = {
        "add": (lambda x, y: x + y, lambda x, y: x + y),
        "sub": (lambda x, y: x - y, lambda x, y: x - y),
        "mul": (lambda x, y: x * y, lambda x, y: x * y),
        "not": (lambda x, y: ~x, lambda x, y: ~x),
        "and": (lambda x, y: x & y, lambda x, y: x & y),
        "or": (lambda x, y: x | y, lambda x, y: x | y),
        "xor": (lambda x, y: x ^ y, lambda x, y: x ^ y),
        "shl": (lambda x, y: x << c(s, dtype), lambda x, y: x << s),
        "shr": (lambda x, y: x >> c(s, dtype), lambda x, y: x >> s),
        "shr_var": (lambda x, y: x >> (y & c(bits - 1, dtype)),
                    lambda x, y: x >> (y & (bits - 1))),
        "div": (lambda x, y: T.truncdiv(x, (y & c(7, dtype)) + c(1, dtype)),
                lambda x, y: (np.sign(x) * (np.abs(x.astype("int64")) // ((y & 7) + 1)))
                .astype(dtype)),
        "max": (lambda x, y: te.max(x, y), np.maximum),
        "select": (lambda x, y: T.Select(x < y, x + y, y), lambda x, y: np.where(x < y, x + y, y)),
        "cast": (lambda x, y: T.Cast(dtype, T.Cast("int32", x) - T.Cast("int32", y)),
                 lambda x, y: (x.astype("int32") - y.astype("int32")).astype(dtype)),
    }
    f, r = table[op]
    return ((lambda a, b: f(fa(a, b), fb(a, b))),
            (lambda a, b: r(ra(a, b), rb(a, b))))


def _random_stage(f, A, B, widen: bool, name: str):
    def body(i):
        x = f(A[i], B[i])
        return T.Cast("int32", x) if widen else x
    return te.compute((N,), body, name)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_narrow_programs_match_numpy(seed):
    """Random expression trees over the four narrow types, stored narrow and widened to int32,
    against numpy evaluating each operation in the same dtype."""
    rng = np.random.default_rng(seed)
    ins, arrays, outs, refs = [], [], [], []
    with np.errstate(over="ignore"):
        for dtype in NARROW:
            A = te.placeholder((N,), dtype, f"A_{dtype}")
            B = te.placeholder((N,), dtype, f"B_{dtype}")
            a, b = _inputs(dtype, seed)
            ins += [A, B]
            arrays += [a, b]
            for k in range(3):
                f, r = _random_expr(rng, dtype, 4)
                widen = k == 2
                outs.append(_random_stage(f, A, B, widen, f"O_{dtype}_{k}"))
                ref = r(a, b).astype(dtype)
                refs.append(ref.astype("int32") if widen else ref)
    got = _run(outs, ins, arrays)
    for o, g, r in zip(outs, got, refs, strict=True):
        np.testing.assert_array_equal(g, r, err_msg=o.name)


@pytest.mark.slow
@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
def test_cuda_kernel_cuts_narrow_results():
    """The CUDA writer shares the rule (C++ promotes the same way)."""
    A = te.placeholder((N,), "uint8", "A")
    B = te.compute((N,), lambda i: te.max((A[i] << T.const(4, "uint8")) >> T.const(6, "uint8"),
                                          A[i] + A[i]), "B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    mod = build_cuda(s, [A, B])
    assert "(unsigned char)" in mod.imported_modules[0].get_source()
    a = np.arange(200, 200 + N).astype("uint8")
    b = np.zeros(N, "uint8")
    cuda_emulator.Emulated(mod)(a, b)
    np.testing.assert_array_equal(b, np.maximum((a << 4) >> 6, a + a))
    if have_nvrtc():
        assert ".visible .entry" in mod.imported_modules[0].get_source("ptx")
