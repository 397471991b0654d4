"""auto_scheduler GPU sketches (``target="cuda"``): the rules, the tile limits, and random
states, their mutations and crossover children checked against numpy on kiln's CUDA
emulator (compiled by NVRTC where it is installed); tuning runs on a real GPU only."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

import kiln
from kiln import auto_scheduler
from kiln.auto_scheduler.annotation import crossover, mutate, sample_candidate
from kiln.auto_scheduler.loop_state import AnnotationStep, CacheReadStep, State
from kiln.auto_scheduler.sketch import generate_sketches
from kiln.auto_scheduler.sketch_gpu import MAX_VTHREAD_EXTENT, reference_state

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda, run_on_gpu
from . import workloads  # noqa: F401 - registers the workloads
from .workloads import reference

GEMM = ("as_test_matmul", (32, 32, 32, "float32"))
GEMM_ADD = ("as_test_matmul_add", (32, 32, 32, "float32"))
CONV = ("as_test_conv2d", (1, 4, 6, 6, 8, 3, 1))
ROW_MAX = ("as_test_row_max", (4, 8, 6))

needs_emulator = pytest.mark.skipif(not cuda_emulator.available(),
                                    reason="g++ is needed to emulate kernels")


def _task(workload, target: str = "cuda") -> auto_scheduler.SearchTask:
    name, args = workload
    return auto_scheduler.SearchTask(func=name, args=args, target=target)


def _inputs(args, rng: np.random.Generator) -> list[np.ndarray]:
    shapes = [tuple(int(s) for s in t.shape) for t in args]
    return [rng.random(s, dtype=np.float32) for s in shapes[:-1]] + \
        [np.zeros(shapes[-1], np.float32)]


def _check_on_emulator(task, state: State, name: str, rng: np.random.Generator) -> None:
    sch, args = task.compute_dag.apply_steps_from_state(state)
    arrays = _inputs(args, rng)
    cuda_emulator.Emulated(build_cuda(sch, args))(*arrays)
    np.testing.assert_allclose(arrays[-1], reference(name, arrays[:-1]), rtol=1e-4,
                               atol=1e-4)


def test_gpu_sketch_rules():
    gemm = generate_sketches(_task(GEMM).compute_dag, "cuda")
    assert [str(s) for s in gemm] == [
        "C: cache write; C.local: multi-level tiling SSSRRSRS fused into C; "
        "A: cache read shared at C.local; B: cache read shared at C.local"]
    steps = gemm[0].steps
    binds = [(s.stage, s.kind) for s in steps if isinstance(s, AnnotationStep)]
    assert binds == [("C", "blockIdx.x"), ("C", "vthread"), ("C", "threadIdx.x"),
                     ("A.shared", "threadIdx.x"), ("B.shared", "threadIdx.x")]
    assert CacheReadStep("A", "shared", ("C.local",)) in steps
    fused = [str(s) for s in generate_sketches(_task(GEMM_ADD).compute_dag, "cuda")]
    assert fused == ["out: skip; matmul: multi-level tiling SSSRRSRS fused into out; "
                     "A: cache read shared at matmul; B: cache read shared at matmul"]
    conv = str(generate_sketches(_task(CONV).compute_dag, "cuda")[0])
    assert "pad: cache read shared at conv.local" in conv and conv.endswith("pad: inline")
    assert [str(s) for s in generate_sketches(_task(ROW_MAX).compute_dag, "cuda")] == \
        ["C: skip"]


def test_gpu_tiles_keep_the_thread_limits():
    """Threads per block at most the target's, virtual threads at most 8; each shared
    fetch is split by exactly the block's thread count."""
    sketches = generate_sketches(_task(("as_test_matmul", (512, 512, 512, "float32")))
                                 .compute_dag, "cuda")
    (sketch,) = sketches
    threads_refs, vthread_refs = None, None
    for refs, bound in sketch.limits:
        if bound == MAX_VTHREAD_EXTENT:
            vthread_refs = refs
        elif bound == kiln.target.Target("cuda").max_num_threads:
            threads_refs = refs
    rng = random.Random(0)
    for _ in range(20):
        c = sample_candidate(sketches, rng)
        threads = math.prod(c.tiles[j][k] for j, k in threads_refs)
        assert threads <= 1024
        assert math.prod(c.tiles[j][k] for j, k in vthread_refs) <= MAX_VTHREAD_EXTENT
        state = c.state(sketch)
        fetch = [state.steps[i] for i in sketch.fused_follows]
        assert len(fetch) == 2 and all(s.lengths == (threads,) for s in fetch)


def test_gpu_state_json_round_trip():
    task = _task(GEMM)
    sketches = generate_sketches(task.compute_dag, "cuda")
    state = sample_candidate(sketches, random.Random(2)).state(sketches[0])
    again = State.from_json(state.to_json())
    assert again.key() == state.key()
    assert ["CR", "A", "shared", ["C.local"]] in state.to_json()
    assert kiln.lower(*task.compute_dag.apply_steps_from_state(again)) is not None


def test_the_reference_of_a_gpu_task_builds_for_the_gpu():
    """The unscheduled computation cannot run on a GPU: a GPU task's candidates are
    checked against its simplest GPU schedule, one thread per output element."""
    task = _task(CONV)
    sch, args = task.instantiate(None)
    assert "blockIdx.x" in str(kiln.lower(sch, args))
    build_cuda(sch, args)
    assert task.instantiate(reference_state(task.compute_dag))[1] == args


@pytest.mark.slow
@needs_emulator
@pytest.mark.parametrize("workload", [GEMM, GEMM_ADD, CONV, ROW_MAX], ids=lambda w: w[0])
def test_random_gpu_states_are_correct_on_the_emulator(workload):
    """Property test: the reference of a GPU task, random GPU states, their mutations and
    crossover children (the states a GPU search measures) compute what numpy computes."""
    task = _task(workload)
    sketches = generate_sketches(task.compute_dag, "cuda")
    policy = auto_scheduler.SketchPolicy(task, auto_scheduler.RandomModel(0), seed=0,
                                         verbose=0)
    rng, nrng = random.Random(3), np.random.default_rng(0)
    a, b = sample_candidate(sketches, rng), sample_candidate(sketches, rng)
    children = [mutate(mutate(a, rng), rng),
                crossover(a, replace(b, sketch=a.sketch), sketches[a.sketch], rng)]
    states = [c.state(sketches[c.sketch]) for c in [a] + [
        c for c in children if sketches[c.sketch].allows(c.tiles) and policy.replays(c)]]
    for state in [reference_state(task.compute_dag), *states]:
        _check_on_emulator(task, state, workload[0], nrng)


@pytest.mark.gpu
@pytest.mark.slow
def test_tune_on_a_gpu(tmp_path):
    """Where a GPU exists: a few GPU states measured (each checked against the
    unscheduled computation on the GPU), the best one replayed and run."""
    if not kiln.cuda(0).exist:
        pytest.skip("no CUDA GPU: GPU tuning measures nothing here")
    task = _task(("as_test_matmul", (128, 128, 128, "float32")))
    log = str(tmp_path / "gpu.json")
    options = auto_scheduler.TuningOptions(
        num_measure_trials=8, num_measures_per_round=4, verbose=0,
        builder=auto_scheduler.LocalBuilder(n_parallel=2, timeout=60),
        runner=auto_scheduler.LocalRunner(number=2, repeat=1, min_repeat_ms=0, timeout=30),
        measure_callbacks=[auto_scheduler.RecordToFile(log)])
    task.tune(options, auto_scheduler.SketchPolicy(
        task, params={"population_size": 8, "num_iters": 1}, seed=0, verbose=0))
    errors = {r.error_no for _, r in auto_scheduler.load_records(log)}
    assert auto_scheduler.MeasureErrorNo.NO_ERROR in errors
    assert auto_scheduler.MeasureErrorNo.WRONG_ANSWER not in errors
    sch, args = task.apply_best(log)
    arrays = _inputs(args, np.random.default_rng(0))
    out = run_on_gpu(sch, args, arrays)[-1]
    np.testing.assert_allclose(out, arrays[0] @ arrays[1], rtol=1e-4, atol=1e-4)
