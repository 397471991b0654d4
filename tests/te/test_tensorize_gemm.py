"""The tensorized CPU GEMM: kiln's loops around the hand-written micro-kernel of
``kiln.topi.x86.tensor_intrin`` (AVX-512, AVX2 or plain C by the CPU description), against
numpy; examples/cpu/gemm_tensorize.py as ``kiln bench cpu`` builds it."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.target import current_cpu
from kiln.target.cpu import CPUInfo, cpu_for_mcpu
from kiln.topi.x86.tensor_intrin import default_block, gemm_block_intrin, gemm_block_source

from ..book.conftest import REPO_ROOT


def _load_example():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gemm_tensorize", REPO_ROOT / "examples" / "cpu" / "gemm_tensorize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check(s, args, M, N, K):
    f = tvm.build(s, args)
    a = np.random.uniform(-1, 1, size=(M, K)).astype("float32")
    b = np.random.uniform(-1, 1, size=(K, N)).astype("float32")
    c = tvm.nd.array(np.full((M, N), np.nan, "float32"))
    f(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_example_schedule_on_this_machine():
    gemm = _load_example()
    mr, nr = default_block()
    M, N, K = 2 * mr, 2 * nr, 48
    s, args = gemm.gemm_tensorize_schedule(N, M=M, K=K, kc=16)
    text = str(tvm.lower(s, args, simple_mode=True))
    assert f"kiln_gemm_reset_{mr}x{nr}" in text and f"kiln_gemm_update_{mr}x{nr}" in text
    _check(s, args, M, N, K)


def test_example_schedule_refuses_partial_blocks():
    gemm = _load_example()
    mr, _ = default_block()
    with pytest.raises(ValueError, match=f"M={mr + 1} is not a multiple"):
        gemm.gemm_tensorize_schedule(64, M=mr + 1)


ISAS = {
    "avx512": (cpu_for_mcpu("sapphirerapids"), "_mm512_fmadd_ps"),
    "avx2": (cpu_for_mcpu("haswell"), "_mm256_fmadd_ps"),
    "plain C": (CPUInfo("generic", 16, 16, frozenset()), None),
}


@pytest.mark.parametrize("isa", list(ISAS))
def test_micro_kernel_of_each_vector_width(isa):
    """Each kernel flavour (by the CPU description it is written for) computes the GEMM;
    flavours this machine cannot run are only checked as text."""
    cpu, fma = ISAS[isa]
    mr, nr = default_block(cpu)
    source = gemm_block_source(mr, nr, cpu)
    assert (fma in source) if fma else ("immintrin" not in source)
    if not cpu.features <= current_cpu().features:
        pytest.skip(f"this machine has no {isa}")
    M, N, K = mr, 2 * nr, 32
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    PB = te.compute((N // nr, K, nr), lambda jo, k, ji: B[k, jo * nr + ji], name="PB")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * PB[j // nr, k, j % nr], axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=mr)
    jo, ji = s[C].split(C.op.axis[1], factor=nr)
    s[C].reorder(io, jo, ii, ji, k)
    s[C].tensorize(ii, gemm_block_intrin(mr, nr, K))
    s[C].pragma(io, "import_c", source)
    _check(s, [A, B, C], M, N, K)
