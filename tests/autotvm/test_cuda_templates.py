"""AutoTVM on CUDA: the templates ``conv2d_nchw.cuda``, ``dense_large_batch.cuda`` and
``matmul.cuda`` (their spaces, limits, fallback and tuned dispatch), their configs compiled by
NVRTC and checked on the CPU emulator of generated kernels against numpy, and the
measurement loop (real builder; the runner reports the missing GPU here and times on
``cuda(0)`` where there is one)."""

from __future__ import annotations

import importlib
import time

import numpy as np
import pytest

import kiln
from kiln import autotvm, te, topi
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput, MeasureResult
from kiln.autotvm.measure.cuda import read_candidate, save_candidate
from kiln.autotvm.task.space import FallbackConfigEntity, InstantiationError, SplitEntity
from kiln.codegen.cuda_backend import CUDABackend
from kiln.driver.build import build_module
from kiln.target import Target

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import NVRTC_MISSING, have_nvrtc

conv2d = importlib.import_module("kiln.topi.cuda.conv2d")
dense_mod = importlib.import_module("kiln.topi.cuda.dense")

needs_nvrtc = pytest.mark.skipif(not have_nvrtc(), reason=NVRTC_MISSING)
needs_emulator = pytest.mark.skipif(not cuda_emulator.available(), reason="no g++ (emulator)")

CONV_SHAPE = ((1, 8, 10, 10), (16, 8, 3, 3))
#: the matmul of the correctness tests: M, K, N, dtype
MATMUL_ARGS = (64, 48, 128, "float32")
RNG = np.random.default_rng(0)


def _conv_task(shape=CONV_SHAPE):
    data = te.placeholder(shape[0], name="data")
    kernel = te.placeholder(shape[1], name="kernel")
    return autotvm.task.create(conv2d.CONV2D_NCHW, (data, kernel, (1, 1), (1, 1), (1, 1),
                                                    "float32"), target="cuda")


def _conv_reference(x, w):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((x.shape[0], w.shape[0], x.shape[2], x.shape[3]), "float32")
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("nchw,fc->nfhw", xp[:, :, dy:dy + x.shape[2], dx:dx + x.shape[3]],
                             w[:, :, dy, dx])
    return out


def _emulate(sched, args, inputs, out_shape):
    mod = kiln.build(sched, args, target="cuda -arch=sm_80")
    out = np.zeros(out_shape, "float32")
    cuda_emulator.Emulated(mod)(*inputs, out)
    return out


def _config(task, **splits):
    """The config of ``task`` with the given split knobs, every other knob at its first
    choice."""
    space = task.config_space
    knobs = [space.space_map[name].entities.index(SplitEntity(splits[name]))
             if name in splits else 0 for name in space.space_map]
    return space.get(space.index_of(knobs))


def _valid_configs(task, n, seed=0):
    """``n`` random configs of ``task`` the template accepts (with their schedules)."""
    rng = np.random.default_rng(seed)
    found = []
    while len(found) < n:
        cfg = task.config_space.get(int(rng.integers(len(task.config_space))))
        try:
            found.append((cfg, task.instantiate(cfg)))
        except InstantiationError:
            continue
    return found


# ---------------------------------------------------------------------------------------
# spaces, limits, dispatch
# ---------------------------------------------------------------------------------------
def test_conv2d_space_has_tvm_knobs():
    task = _conv_task()
    assert list(task.config_space.space_map) == [
        "tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry", "tile_rx", "auto_unroll_max_step",
        "unroll_explicit"]
    assert task.config_space.space_map["tile_f"].num_outputs == 4
    assert task.flop == 2 * 16 * 10 * 10 * 8 * 9


def test_matmul_space_holds_the_assignment_and_the_128_tiles():
    task = autotvm.task.create(dense_mod.MATMUL, (4096, 4096, 4096, "float32"), "cuda")
    space = task.config_space.space_map
    assert SplitEntity([-1, 1, 16, 4]) in space["tile_y"].entities  # the assignment's
    assert SplitEntity([-1, 2, 16, 4]) in space["tile_x"].entities  # 128-wide, 8 per thread
    assert SplitEntity([-1, 16]) in space["tile_k"].entities
    assert space["vectorize_fetch"].entities[-1].val == 4


def test_configs_over_the_block_limits_are_rejected():
    task = _conv_task()
    space = task.config_space
    knobs = {name: 0 for name in space.space_map}
    big = [i for i, e in enumerate(space.space_map["tile_x"].entities) if e.size[2] == 10]
    many = [i for i, e in enumerate(space.space_map["tile_f"].entities) if e.size[2] == 16]
    tall = [i for i, e in enumerate(space.space_map["tile_y"].entities) if e.size[2] == 10]
    knobs.update(tile_x=big[0], tile_f=many[0], tile_y=tall[0])  # 16*10*10 = 1600 threads
    cfg = space.get(space.index_of(list(knobs.values())))
    with pytest.raises(InstantiationError, match="threads per block"):
        task.instantiate(cfg)
    gemm = autotvm.task.create(dense_mod.MATMUL, (512, 512, 512, "float32"), "cuda")
    sm = gemm.config_space.space_map
    pick = {name: 0 for name in sm}
    wide = [i for i, e in enumerate(sm["tile_y"].entities) if e.size[1] * e.size[2] * e.size[3]
            == 256]
    pick.update(tile_y=wide[0], tile_x=wide[0], tile_k=len(sm["tile_k"]) - 1)  # 2*256*32*4 B
    with pytest.raises(InstantiationError, match="shared memory"):
        gemm.instantiate(gemm.config_space.get(gemm.config_space.index_of(list(pick.values()))))


def _block_dims(sched, args) -> list:
    """threadIdx.x/y/z extents of the (one) kernel of a CUDA build (not compiled)."""
    mod = build_module(kiln.lower(sched, args), Target("cuda"), CUDABackend(compile_now=False))
    host = mod.get_function(mod.entry_name)
    return [int(b.value) for b in host.split.kernels[0].block]


def test_schedule_uses_the_fallback_outside_tuning_and_the_record_inside():
    data, kernel = te.placeholder(CONV_SHAPE[0]), te.placeholder(CONV_SHAPE[1])
    with Target("cuda"):
        out = topi.cuda.conv2d_nchw(data, kernel, 1, 1, 1)
        fallback = _block_dims(topi.cuda.schedule_conv2d_nchw([out]), [data, kernel, out])
    task = autotvm.task.create(conv2d.CONV2D_NCHW, (data, kernel, 1, 1, 1, "float32"), "cuda")
    cfg = _config(task, tile_f=[-1, 2, 4, 1], tile_y=[-1, 1, 2, 1], tile_x=[-1, 1, 5, 1])
    record = (MeasureInput(task.target, task, cfg),
              MeasureResult((1e-3,), 0, 1.0, time.time()))
    with autotvm.apply_history_best([record]), Target("cuda"):
        out = topi.cuda.conv2d_nchw(data, kernel, 1, 1, 1)
        tuned = _block_dims(topi.cuda.schedule_conv2d_nchw([out]), [data, kernel, out])
    assert fallback == [5, 5, 4]  # threads x/y/z: the fallback's [8, 8, 4] fitted to 10, 10, 16
    assert tuned == [5, 2, 4]


# ---------------------------------------------------------------------------------------
# correctness of sampled configs (NVRTC + the CPU emulator)
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
@needs_nvrtc
@needs_emulator
def test_conv2d_fallback_is_correct():
    x = RNG.random(CONV_SHAPE[0], dtype="float32")
    w = RNG.random(CONV_SHAPE[1], dtype="float32")
    data, kernel = te.placeholder(CONV_SHAPE[0]), te.placeholder(CONV_SHAPE[1])
    with Target("cuda"):
        out = topi.nn.relu(topi.cuda.conv2d_nchw(data, kernel, 1, 1, 1))
        s = topi.cuda.schedule_conv2d_nchw([out])
    got = _emulate(s, [data, kernel, out], [x, w], (1, 16, 10, 10))
    np.testing.assert_allclose(got, np.maximum(_conv_reference(x, w), 0), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@needs_nvrtc
@needs_emulator
def test_sampled_conv2d_configs_are_correct():
    task = _conv_task()
    x = RNG.random(CONV_SHAPE[0], dtype="float32")
    w = RNG.random(CONV_SHAPE[1], dtype="float32")
    ref = _conv_reference(x, w)
    for _, (s, args) in _valid_configs(task, 4):
        np.testing.assert_allclose(_emulate(s, args, [x, w], ref.shape), ref, rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.slow
@needs_nvrtc
@needs_emulator
def test_dense_with_bias_fallback_is_correct():
    x, w, b = te.placeholder((16, 64)), te.placeholder((40, 64)), te.placeholder((40,))
    xv, wv = RNG.random((16, 64), dtype="float32"), RNG.random((40, 64), dtype="float32")
    bv = RNG.random(40, dtype="float32")
    with Target("cuda"):
        out = topi.nn.relu(topi.cuda.dense(x, w, b))
        s = topi.cuda.schedule_dense([out])
    got = _emulate(s, [x, w, b, out], [xv, wv, bv], (16, 40))
    np.testing.assert_allclose(got, np.maximum(xv @ wv.T + bv, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@needs_nvrtc
@needs_emulator
def test_sampled_matmul_and_dense_configs_are_correct():
    a, b = RNG.random((64, 48), dtype="float32"), RNG.random((48, 128), dtype="float32")
    task = autotvm.task.create(dense_mod.MATMUL, MATMUL_ARGS, "cuda")
    for _, (s, args) in _valid_configs(task, 4) + [(None, task.instantiate(
            FallbackConfigEntity()))]:
        np.testing.assert_allclose(_emulate(s, args, [a, b], (64, 128)), a @ b, rtol=1e-5)
    x, w = te.placeholder((32, 64)), te.placeholder((24, 64))
    xv, wv = RNG.random((32, 64), dtype="float32"), RNG.random((24, 64), dtype="float32")
    task = autotvm.task.create(dense_mod.DENSE, (x, w, None, "float32"), "cuda")
    for _, (s, args) in _valid_configs(task, 3):
        np.testing.assert_allclose(_emulate(s, args, [xv, wv], (32, 24)), xv @ wv.T,
                                   rtol=1e-5)


@pytest.mark.slow
@needs_nvrtc
@needs_emulator
def test_saved_candidate_reads_back(tmp_path):
    """The fallback of the matmul test above: its NVRTC and emulator builds are cache hits
    when both run in one session."""
    task = autotvm.task.create(dense_mod.MATMUL, MATMUL_ARGS, "cuda")
    s, args = task.instantiate(FallbackConfigEntity())
    mod = read_candidate(save_candidate(kiln.build(s, args, "cuda -arch=sm_80"), str(tmp_path)))
    a, b = RNG.random((64, 48), dtype="float32"), RNG.random((48, 128), dtype="float32")
    c = np.zeros((64, 128), "float32")
    cuda_emulator.Emulated(mod)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


# ---------------------------------------------------------------------------------------
# the tuning loop
# ---------------------------------------------------------------------------------------
def _tune(task, n_trial, log):
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2, timeout=60),
                                    runner=autotvm.LocalRunner(number=2, repeat=2, timeout=30))
    results = []
    autotvm.RandomTuner(task, seed=0).tune(
        n_trial, option, callbacks=[lambda _t, _i, rs: results.extend(rs),
                                    autotvm.callback.log_to_file(str(log))])
    return results


@pytest.mark.slow
@needs_nvrtc
def test_tuning_without_a_gpu_builds_and_reports_the_missing_device(tmp_path):
    if kiln.cuda(0).exist:
        pytest.skip("a GPU is present: see test_tune_on_gpu")
    task = autotvm.task.create(dense_mod.MATMUL, (64, 64, 64, "float32"), "cuda")
    results = _tune(task, 3, tmp_path / "log.json")
    assert len(results) == 3
    for r in results:
        assert r.error_no == MeasureErrorNo.RUNTIME_DEVICE
        assert "no CUDA device" in r.costs[0]


@pytest.mark.gpu
@needs_nvrtc
def test_tune_on_gpu(tmp_path):
    if not kiln.cuda(0).exist:
        pytest.skip("no CUDA GPU")
    task = autotvm.task.create(dense_mod.MATMUL, (256, 256, 256, "float32"), "cuda")
    log = tmp_path / "log.json"
    results = _tune(task, 8, log)
    timed = [r for r in results if r.error_no == MeasureErrorNo.NO_ERROR]
    assert timed, [r.costs[0] for r in results]
    assert all(c > 0 for r in timed for c in r.costs)
    with autotvm.apply_history_best(str(log)):
        s, args = task.instantiate()
    mod = kiln.build(s, args, "cuda")
    a, b = RNG.random((256, 256), dtype="float32"), RNG.random((256, 256), dtype="float32")
    dev = kiln.cuda(0)
    arrays = [kiln.nd.array(a, dev), kiln.nd.array(b, dev),
              kiln.nd.array(np.zeros((256, 256), "float32"), dev)]
    mod(*arrays)
    np.testing.assert_allclose(arrays[2].numpy(), a @ b, rtol=1e-4)
