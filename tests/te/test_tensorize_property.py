"""Tensorize never changes results: a GEMM tiled at random (block sizes, order of the outer
loops, which of body / reset / update the intrinsic gives, a parallel outer loop, an
epilogue stage computing the GEMM at the root or inside its own loop) with its
``mi x nj x kc`` block replaced by an intrinsic (written in kiln's IR, so no C compiler quirk
hides a binding error), built and compared with numpy. Hypothesis draws
the schedules; the examples are the same on every run (derandomized)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln as tvm
from kiln import te

from .test_tensorize import intrin_matmul


@st.composite
def tensorized_gemms(draw):
    mi, nj, kc = (draw(st.sampled_from(v)) for v in ((1, 2, 4), (4, 8), (2, 4, 8)))
    M, N = mi * draw(st.integers(1, 3)), nj * draw(st.integers(1, 3))
    whole = draw(st.booleans())  # the whole reduction inside the tensorized region
    K = kc if whole else kc * draw(st.integers(2, 3))
    outer = draw(st.permutations(["io", "jo"] if whole else ["io", "jo", "ko"]))
    parts = ("body",) if whole else draw(st.sampled_from(
        [("body", "reset", "update"), ("body", "update"), ("reset", "update")]))
    return dict(mi=mi, nj=nj, kc=kc, M=M, N=N, K=K, outer=outer, parts=parts,
                parallel=draw(st.booleans()),
                epilogue=draw(st.sampled_from([None, "root", "compute_at"])))


def build_case(c):
    A = te.placeholder((c["M"], c["K"]), name="A")
    B = te.placeholder((c["K"], c["N"]), name="B")
    k = te.reduce_axis((0, c["K"]), name="k")
    C = te.compute((c["M"], c["N"]), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    out = te.compute(C.shape, lambda i, j: C[i, j] * 2.0 + 1.0, name="D") \
        if c["epilogue"] else C
    s = te.create_schedule(out.op)
    if c["epilogue"] == "compute_at":  # C's rows: one block of the epilogue's rows
        rows, _ = s[out].split(out.op.axis[0], factor=c["mi"])
        s[C].compute_at(s[out], rows)
    loops = {}
    loops["io"], ii = s[C].split(C.op.axis[0], factor=c["mi"])
    loops["jo"], ji = s[C].split(C.op.axis[1], factor=c["nj"])
    if "ko" in c["outer"]:
        loops["ko"], ki = s[C].split(k, factor=c["kc"])
    else:
        ki = k
    s[C].reorder(*(loops[name] for name in c["outer"]), ii, ji, ki)
    first = loops[c["outer"][0]]
    if c["parallel"] and first is not loops.get("ko") and c["epilogue"] != "compute_at":
        s[C].parallel(first)
    s[C].tensorize(ii, intrin_matmul(c["mi"], c["nj"], c["kc"], parts=c["parts"]))
    return s, [A, B, out]


@pytest.mark.slow
@settings(max_examples=16, derandomize=True)
@given(tensorized_gemms())
def test_tensorize_never_changes_results(case):
    s, args = build_case(case)
    f = tvm.build(s, args)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, size=(case["M"], case["K"])).astype("float32")
    b = rng.uniform(-1, 1, size=(case["K"], case["N"])).astype("float32")
    d = tvm.nd.array(np.full((case["M"], case["N"]), np.nan, "float32"))
    f(tvm.nd.array(a), tvm.nd.array(b), d)
    want = a @ b
    if case["epilogue"]:
        want = want * 2 + 1
    np.testing.assert_allclose(d.numpy(), want, rtol=1e-5, atol=1e-5)
