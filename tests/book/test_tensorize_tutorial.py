"""Classic TVM's tutorial "Use Tensorize to Leverage Hardware Intrinsics", ported: a GEMV
micro-kernel in C linked into the module (``pragma import_c``; and, as the tutorial does, as
LLVM IR with ``pragma import_llvm``), the GEMM's inner loops replaced by a call of it, then
the reduction split across the tensorized region with ``gemv_reset``/``gemv_update``; every
result against numpy, and the lowered programs as the tutorial prints them.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te

from .conftest import normalize

N, M, L = 1024, 512, 64
FACTOR = 16

GEMV_UPDATE = """
int gemv_update(float *cc, float *aa, float *bb, int m, int l, int stride) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < l; ++j) {
      cc[i] += aa[j] * bb[i * stride + j];
    }
  }
  return 0;
}
"""
GEMV_RESET = """
int gemv_reset(float *cc, int m) {
  for (int i = 0; i < m; ++i) {
    cc[i] = 0.0;
  }
  return 0;
}
"""


#: the tutorial's ``gemv_update`` in LLVM IR (it has clang write it from the C above)
GEMV_UPDATE_LL = """
define i32 @gemv_update(float* %cc, float* %aa, float* %bb, i32 %m, i32 %l, i32 %stride) {
entry:
  %m_pos = icmp sgt i32 %m, 0
  br i1 %m_pos, label %rows, label %done
rows:
  %i = phi i32 [ 0, %entry ], [ %i.next, %row_end ]
  %c.ptr = getelementptr float, float* %cc, i32 %i
  %row = mul i32 %i, %stride
  %l_pos = icmp sgt i32 %l, 0
  br i1 %l_pos, label %cols, label %row_end
cols:
  %j = phi i32 [ 0, %rows ], [ %j.next, %cols ]
  %a.ptr = getelementptr float, float* %aa, i32 %j
  %a = load float, float* %a.ptr
  %b.idx = add i32 %row, %j
  %b.ptr = getelementptr float, float* %bb, i32 %b.idx
  %b = load float, float* %b.ptr
  %prod = fmul float %a, %b
  %c = load float, float* %c.ptr
  %sum = fadd float %c, %prod
  store float %sum, float* %c.ptr
  %j.next = add i32 %j, 1
  %j.more = icmp slt i32 %j.next, %l
  br i1 %j.more, label %cols, label %row_end
row_end:
  %i.next = add i32 %i, 1
  %i.more = icmp slt i32 %i.next, %m
  br i1 %i.more, label %rows, label %done
done:
  ret i32 0
}
"""


def gemm():
    A = te.placeholder((N, L), name="A")
    B = te.placeholder((M, L), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    return A, B, C


def intrin_gemv(m, l, with_reset=False):
    """The tutorial's intrinsic: ``c[i] = sum_k a[k] * b[i, k]`` by ``gemv_update``; with
    ``with_reset``, the (body, reset, update) triple of its second part."""
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    Ab = tvm.tir.decl_buffer(a.shape, a.dtype, name="A", offset_factor=1, strides=[1])
    Bb = tvm.tir.decl_buffer(b.shape, b.dtype, name="B", offset_factor=1,
                             strides=[te.var("s1"), 1])
    Cb = tvm.tir.decl_buffer(c.shape, c.dtype, name="C", offset_factor=1, strides=[1])

    def intrin_func(ins, outs):
        aa, bb = ins
        cc = outs[0]

        def _body():
            ib = tvm.tir.ir_builder.create()
            ib.emit(tvm.tir.call_extern("int32", "gemv_update", cc.access_ptr("w"),
                                        aa.access_ptr("r"), bb.access_ptr("r"), m, l,
                                        bb.strides[0]))
            return ib.get()

        def _reduce_reset():
            ib = tvm.tir.ir_builder.create()
            ib.emit(tvm.tir.call_extern("int32", "gemv_reset", cc.access_ptr("w"), m))
            return ib.get()

        def _reduce_update():
            return _body()

        if not with_reset:
            return _body()
        return _body(), _reduce_reset(), _reduce_update()

    return te.decl_tensor_intrin(c.op, intrin_func, binds={a: Ab, b: Bb, c: Cb})


def _check(func, A, B, C):
    dev = tvm.cpu(0)
    a = np.random.uniform(size=(N, L)).astype(A.dtype)
    b = np.random.uniform(size=(M, L)).astype(B.dtype)
    c = tvm.nd.array(np.zeros((N, M), dtype=C.dtype), dev)
    func(tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
    np.testing.assert_allclose(c.numpy(), np.dot(a, b.T), rtol=1e-3)


def test_plain_schedule(lower_text):
    A, B, C = gemm()
    s = te.create_schedule(C.op)
    assert "C[((i*512) + j)] = (C[((i*512) + j)] + (A[((i*64) + k)]*B[((j*64) + k)]))" in \
        lower_text(s, [A, B, C])


def test_tensorize_gemv():
    """The tutorial's first program: ``j.inner`` and ``k`` become one ``gemv_update``
    call, which accumulates into C (zeros, as the tutorial passes)."""
    A, B, C = gemm()
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=FACTOR)
    s[C].reorder(x, yo, yi, z)
    gemv = intrin_gemv(FACTOR, L)
    s[C].tensorize(yi, gemv)
    assert normalize(str(tvm.lower(s, [A, B, C], simple_mode=True))) == normalize("""
produce C {
  for (i, 0, 1024) {
    for (j.outer, 0, 32) {
      call_extern("gemv_update", tvm_access_ptr(type_annotation(), C, ((i*512) + (j.outer*16)),
          16, 2), tvm_access_ptr(type_annotation(), A, (i*64), 64, 1),
          tvm_access_ptr(type_annotation(), B, (j.outer*1024), 1024, 1), 16, 64, 64)
    }
  }
}""")
    s[C].pragma(x, "import_c", GEMV_UPDATE)
    func = tvm.build(s, [A, B, C], target="llvm", name="gemv")
    _check(func, A, B, C)


def test_tensorize_gemv_with_llvm_ir():
    """The tutorial links its micro-kernel as LLVM IR (``pragma import_llvm``): llc compiles
    it into the module's C, with a prototype for the extern call."""
    from kiln.codegen import import_llvm

    try:
        import_llvm._llc()
    except tvm.CompileError as e:
        pytest.skip(str(e))
    A, B, C = gemm()
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=FACTOR)
    s[C].reorder(x, yo, yi, C.op.reduce_axis[0])
    s[C].tensorize(yi, intrin_gemv(FACTOR, L))
    s[C].pragma(x, "import_llvm", GEMV_UPDATE_LL)
    func = tvm.build(s, [A, B, C], target="llvm", name="gemv")
    assert "int32_t gemv_update(void*, void*, void*, int32_t, int32_t, int32_t);" in \
        func.get_source()
    _check(func, A, B, C)


def test_import_llvm_errors_are_compile_errors():
    from kiln.codegen import import_llvm

    with pytest.raises(tvm.CompileError, match="no C type"):
        import_llvm.prototypes("define <4 x float> @f(i32 %x) {\n}")
    with pytest.raises(tvm.CompileError, match="defines no function"):
        import_llvm.prototypes("declare i32 @g(i32)")
    try:
        import_llvm._llc()
    except tvm.CompileError:
        return
    with pytest.raises(tvm.CompileError, match="llc rejected the IR"):
        import_llvm.llvm_ir_to_c("define i32 @h( {")


def test_tensorize_for_the_reduction():
    """The tutorial's second program: ``k`` split, ``k.outer`` outside the tensorized
    region, so the intrinsic's reset runs before the ``k.outer`` loop and its update in
    it."""
    A, B, C = gemm()
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=FACTOR)
    zo, zi = s[C].split(z, factor=FACTOR)
    s[C].reorder(x, yo, zo, yi, zi)
    gemv = intrin_gemv(FACTOR, FACTOR, with_reset=True)
    s[C].tensorize(yi, gemv)
    s[C].pragma(yo, "import_c", GEMV_UPDATE + GEMV_RESET)
    text = normalize(str(tvm.lower(s, [A, B, C], simple_mode=True)))
    assert normalize("""
    for (j.outer, 0, 32) {
      call_extern("gemv_reset", tvm_access_ptr(type_annotation(), C, ((i*512) + (j.outer*16)),
          16, 2), 16)
      for (k.outer, 0, 4) {
        call_extern("gemv_update", tvm_access_ptr(type_annotation(), C, ((i*512) +
            (j.outer*16)), 16, 2), tvm_access_ptr(type_annotation(), A, ((i*64) + (k.outer*16)), 16,
            1), tvm_access_ptr(type_annotation(), B, ((j.outer*1024) + (k.outer*16)), 1024, 1), 16,
            16, 64)
      }
    }""") in text
    func = tvm.build(s, [A, B, C], target="llvm", name="gemv")
    _check(func, A, B, C)


def test_update_without_reset_starts_with_the_body():
    """(body, None, update): no reset; the body runs on the first ``k.outer`` iteration. The
    body here is the tutorial's accumulating ``gemv_update`` too, so C starts from zeros."""
    A, B, C = gemm()
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=FACTOR)
    zo, zi = s[C].split(C.op.reduce_axis[0], factor=FACTOR)
    s[C].reorder(x, yo, zo, yi, zi)
    gemv = intrin_gemv(FACTOR, FACTOR, with_reset=True)
    no_reset = te.decl_tensor_intrin(gemv.op, lambda ins, outs: (gemv.body, None,
                                                                  gemv.reduce_update),
                                     binds=dict(zip((*gemv.inputs, gemv.op.output(0)),
                                                    gemv.buffers, strict=True)))
    s[C].tensorize(yi, no_reset)
    s[C].pragma(yo, "import_c", GEMV_UPDATE)
    assert "if (likely((k.outer > 0)))" in str(tvm.lower(s, [A, B, C], simple_mode=True))
    _check(tvm.build(s, [A, B, C]), A, B, C)


def test_mismatched_intrinsic_is_reported():
    """An intrinsic of a different computation (``a[k] + b[i, k]``) cannot replace the
    GEMM's loops; the error names both sides."""
    A, B, C = gemm()
    s = te.create_schedule(C.op)
    yo, yi = s[C].split(C.op.axis[1], factor=FACTOR)
    a = te.placeholder((L,), name="a")
    b = te.placeholder((FACTOR, L), name="b")
    k = te.reduce_axis((0, L), name="k")
    c = te.compute((FACTOR,), lambda i: te.sum(a[k] + b[i, k], axis=k), name="c")
    wrong = te.decl_tensor_intrin(c.op, lambda ins, outs: tvm.tir.call_extern(
        "int32", "nothing"), name="wrong", default_buffer_params={"offset_factor": 1})
    s[C].tensorize(yi, wrong)
    with pytest.raises(tvm.TVMError, match=r"stage:     \(a\[k\]\*b\[i, k\]\)\n"
                                           r"  intrinsic: \(a\[k\] \+ b\[i, k\]\)"):
        tvm.lower(s, [A, B, C])
