"""auto_scheduler on a network for CUDA: ``extract_tasks(..., target="cuda")`` on ResNet-18
and MobileNetV2, and ``relay.build(..., target="cuda")`` replaying logged GPU states (the
topi.cuda schedule where the log has none), compiled by NVRTC and run on kiln's CUDA
emulator through the graph executor."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("onnx")

import kiln  # noqa: E402
from kiln import auto_scheduler, relay  # noqa: E402
from kiln.auto_scheduler import MeasureInput, MeasureResult  # noqa: E402
from kiln.auto_scheduler.annotation import sample_candidate  # noqa: E402
from kiln.auto_scheduler.hardware_params import HardwareParams, fits_gpu  # noqa: E402
from kiln.auto_scheduler.sketch import generate_sketches  # noqa: E402
from kiln.relay import testing  # noqa: E402

from ..codegen import cuda_emulator  # noqa: E402
from ..codegen.cuda_workloads import NVRTC_MISSING, have_nvrtc  # noqa: E402
from ..relay.test_cuda_build import _run_emulated  # noqa: E402

USE_AUTO_SCHEDULER = {"relay.backend.use_auto_scheduler": True}
needs_nvrtc = pytest.mark.skipif(not have_nvrtc(), reason=NVRTC_MISSING)
needs_emulator = pytest.mark.skipif(not cuda_emulator.available(),
                                    reason="g++ is needed to emulate kernels")


@pytest.mark.parametrize("model, n_tasks", [
    (lambda: testing.resnet18(hw=32, classes=10), 18),
    (lambda: testing.mobilenet_v2(hw=32, width=0.25, classes=10), 32),
], ids=["resnet18", "mobilenet_v2"])
def test_extract_tasks_for_cuda_from_networks(model, n_tasks):
    """One CUDA task per distinct fused group with a reduction, each with GPU sketches
    (a cross-thread reduction beside the tiling where a layer has few outputs)."""
    mod, params = relay.frontend.from_onnx(model())
    tasks, weights = auto_scheduler.extract_tasks(mod, params, target="cuda")
    assert len(tasks) == n_tasks and len(weights) == n_tasks and min(weights) >= 1
    assert {t.target for t in tasks} == {"cuda"}
    rules = [str(s) for t in tasks for s in generate_sketches(t.compute_dag, t.target)]
    assert any("SSSRRSRS" in r for r in rules)
    assert any("cross-thread reduction" in r for r in rules)


def _log_gpu_states(tasks, log: str, seed: int = 0) -> None:
    """One random state within the GPU's limits of each task's first sketch in ``log``,
    with a made-up time."""
    rng = random.Random(seed)
    params = HardwareParams().for_target("cuda")
    for task in tasks:
        sketch = generate_sketches(task.compute_dag, task.target)[0]
        state = next(s for s in (sample_candidate([sketch], rng).state(sketch)
                                 for _ in range(20))
                     if fits_gpu(task.compute_dag, s, params))
        auto_scheduler.save_records(log, [MeasureInput(task, state)],
                                    [MeasureResult((1e-5,), 0, 0.1, 0.0)])


def _build(mod, params, log: str | None):
    if log is None:
        with kiln.transform.PassContext(opt_level=3):
            return relay.build(mod, target="cuda", params=params)
    with auto_scheduler.ApplyHistoryBest(log), \
            kiln.transform.PassContext(opt_level=3, config=USE_AUTO_SCHEDULER):
        return relay.build(mod, target="cuda", params=params)


@pytest.mark.slow  # NVRTC compiles four kernels: 1-5 s each without the disk cache
@needs_nvrtc
def test_relay_build_for_cuda_replays_gpu_states_and_falls_back(tmp_path):
    """Logged GPU states replace the topi.cuda schedules of their groups; a group without
    a record keeps its topi.cuda schedule; every kernel compiles with NVRTC."""
    mod, params = relay.frontend.from_onnx(testing.gemm_classifier())
    tasks, _ = auto_scheduler.extract_tasks(mod, params, target="cuda")
    log = str(tmp_path / "gpu.json")
    _log_gpu_states(tasks[:-1], log)
    lib = _build(mod, params, log)
    assert lib.summary.count("(auto_scheduler: best state of DAG") == len(tasks) - 1
    assert lib.plan["device"] == "cuda"
    assert "__global__" in lib.lib.imported_modules[0].get_source()


@pytest.mark.slow  # g++ builds the emulated kernels of two builds
@needs_nvrtc
@needs_emulator
def test_auto_scheduled_cuda_network_matches_the_topi_cuda_build(tmp_path, monkeypatch):
    """A small CNN (conv, global pooling, dense, softmax) built from random GPU states of
    all its tasks computes on the emulator what its topi.cuda build computes."""
    model = testing.gemm_classifier()
    mod, params = relay.frontend.from_onnx(model)
    tasks, _ = auto_scheduler.extract_tasks(mod, params, target="cuda")
    log = str(tmp_path / "gpu.json")
    _log_gpu_states(tasks, log)
    name, x = testing.random_input(model)
    tuned = _run_emulated(_build(mod, params, log), {name: x}, monkeypatch)
    plain = _run_emulated(_build(mod, params, None), {name: x}, monkeypatch)
    np.testing.assert_allclose(tuned, plain, rtol=1e-4, atol=1e-5)
