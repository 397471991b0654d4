"""``s[s_scan].env_threads(threads)``: a scan run as one persistent CUDA kernel.

The whole recurrence runs inside the thread axes; each step ends with a barrier, so a step
may read rows that other threads wrote (the rotation below). Checked on the lowered form,
compiled with NVRTC where installed, run on the CPU emulator of
tests/codegen/cuda_emulator.py, and on a GPU where there is one.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.errors import ScheduleError

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda, run_on_gpu

RNG = np.random.default_rng(0)
THREADS = 8


def rotating_scan():
    """Row t is row t-1 rotated left by one, plus X[t]: each thread reads a value another
    thread wrote in the previous step."""
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n), name="s_state")
    s_init = te.compute((1, n), lambda _, i: X[0, i], name="s_init")
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, (i + 1) % n] + X[t, i],
                          name="s_update")
    s_scan = te.scan(s_init, s_update, s_state, inputs=[X], name="scan")
    s = te.create_schedule(s_scan.op)
    tx = te.thread_axis((0, THREADS), "threadIdx.x")
    s[s_scan].env_threads([tx])
    for stage in (s_init, s_update):
        _, xi = s[stage].split(stage.op.axis[1], factor=THREADS)
        s[stage].bind(xi, tx)
    return s, X, s_scan


def reference(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    out[0] = x[0]
    for t in range(1, len(x)):
        out[t] = np.roll(out[t - 1], -1) + x[t]
    return out


def test_lowered_form():
    s, X, s_scan = rotating_scan()
    assert s[s_scan].env_thread_axes[0].thread_tag == "threadIdx.x"
    text = str(tvm.lower(s, [X, s_scan], simple_mode=True))
    # the thread axis encloses the init and the loop; a barrier ends the init and each step
    attr = text.index("// attr [threadIdx.x] thread_extent = 8")
    loop = text.index("for (scan.idx, 0, (m - 1))")
    assert attr < text.index("produce s_init") < loop, text
    assert text.count('tvm_storage_sync("shared")') == 2, text
    assert text.rindex('tvm_storage_sync("shared")') > text.index("produce s_update"), text


def test_one_kernel():
    s, X, s_scan = rotating_scan()
    mod = build_cuda(s, [X, s_scan], name="rot")
    src = mod.imported_modules[0].get_source()
    assert src.count("__global__") == 1, src
    assert src.count("__syncthreads()") == 2, src


@pytest.mark.slow  # compiling the emulated kernel with g++ takes seconds
@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
def test_emulated():
    s, X, s_scan = rotating_scan()
    mod = build_cuda(s, [X, s_scan], name="rot")
    x = RNG.random((9, 20)).astype("float32")
    out = np.zeros_like(x)
    cuda_emulator.Emulated(mod)(x, out)
    np.testing.assert_allclose(out, reference(x), rtol=1e-5)


@pytest.mark.gpu
def test_on_gpu():
    s, X, s_scan = rotating_scan()
    x = RNG.random((9, 20)).astype("float32")
    _, out = run_on_gpu(s, [X, s_scan], [x, np.zeros_like(x)])
    np.testing.assert_allclose(out, reference(x), rtol=1e-5)


# ---- errors --------------------------------------------------------------------------------
def _cumsum_schedule():
    n = 16
    X = te.placeholder((4, n), name="X")
    state = te.placeholder((4, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((4, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    scan = te.scan(init, update, state, name="scan")
    return te.create_schedule(scan.op), init, update, scan


def test_error_not_a_scan():
    s, _, update, _ = _cumsum_schedule()
    with pytest.raises(ScheduleError, match=r"stage 'update'.*composite operations"):
        s[update].env_threads([te.thread_axis((0, 4), "threadIdx.x")])


def test_error_thread_without_extent():
    s, _, _, scan = _cumsum_schedule()
    with pytest.raises(ScheduleError, match=r"'threadIdx.x' has no extent"):
        s[scan].env_threads([te.thread_axis("threadIdx.x")])


def test_error_not_a_thread_axis():
    s, _, update, scan = _cumsum_schedule()
    with pytest.raises(ScheduleError, match="expected GPU thread axes"):
        s[scan].env_threads([update.op.axis[0]])


def test_error_set_twice():
    s, _, _, scan = _cumsum_schedule()
    s[scan].env_threads(te.thread_axis((0, 4), "threadIdx.x"))
    with pytest.raises(ScheduleError, match="already set"):
        s[scan].env_threads([te.thread_axis((0, 2), "threadIdx.y")])


def test_several_blocks_not_implemented():
    s, _, _, scan = _cumsum_schedule()
    with pytest.raises(NotImplementedError, match="grid-wide barrier"):
        s[scan].env_threads([te.thread_axis((0, 4), "blockIdx.x")])
