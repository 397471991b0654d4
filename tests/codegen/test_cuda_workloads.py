"""The chapter-5 style GPU schedules, end to end.

* ``test_gpu_*`` (marker ``gpu``): build for target ``cuda``, compile the generated CUDA with
  NVRTC for sm_80 and sm_90, then run on ``cuda(0)`` against numpy. Without a GPU everything up
  to the launch still runs and the test is skipped at the launch.
* ``test_emulated_*``: the same kernels compiled as C++ for the CPU (one std::thread per CUDA
  thread, ``__syncthreads`` a barrier; see cuda_emulator.py) and run by kiln's own host code, so
  results (and the barriers) are checked in CI without a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln

from . import cuda_emulator
from .cuda_workloads import ALL, NVRTC_MISSING, build_cuda, have_nvrtc

IDS = [f.__name__ for f in ALL]


def _check(w, outputs):
    for k, ref in w.expected.items():
        np.testing.assert_allclose(np.asarray(outputs[k], dtype="float32"),
                                   ref.astype("float32"), rtol=w.rtol, atol=w.atol)


@pytest.mark.gpu
@pytest.mark.parametrize("make", ALL, ids=IDS)
def test_gpu_workload(make):
    if not have_nvrtc():
        pytest.skip(NVRTC_MISSING)
    from kiln.codegen.cuda_backend import compile_source

    w = make()
    mod = kiln.build(w.sched, w.args, target="cuda", name=w.name)
    src = mod.imported_modules[0].get_source()
    assert 'extern "C" __global__' in src and f"{w.name}_kernel0" in src
    for arch in ("sm_80", "sm_90"):
        assert len(compile_source(src, arch)) > 0
    dev = kiln.cuda(0)
    if not dev.exist:
        pytest.skip("no CUDA GPU: compiled for sm_80 and sm_90, launch skipped")
    args = [kiln.nd.array(x, dev) if isinstance(x, np.ndarray) else x for x in w.inputs]
    mod(*args)
    _check(w, [a.numpy() if isinstance(a, kiln.nd.NDArray) else a for a in args])
    mod(*args)  # a second call reuses the loaded module
    _check(w, [a.numpy() if isinstance(a, kiln.nd.NDArray) else a for a in args])


@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
@pytest.mark.parametrize("make", ALL, ids=IDS)
def test_emulated_workload(make):
    w = make()
    mod = build_cuda(w.sched, w.args, name=w.name)
    ins = [x.copy() if isinstance(x, np.ndarray) else x for x in w.inputs]
    cuda_emulator.Emulated(mod)(*ins)
    _check(w, ins)
