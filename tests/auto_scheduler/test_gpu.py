"""auto_scheduler GPU sketches (``target="cuda"``): the rules (tiling, cross-thread
reduction, unroll pragmas), the hardware limits, and random states, their mutations and
crossover children checked against numpy on kiln's CUDA emulator (compiled by NVRTC where
it is installed); tuning runs on a real GPU only."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import numpy as np
import pytest

import kiln
from kiln import auto_scheduler, te
from kiln.auto_scheduler.annotation import crossover, mutate, sample_candidate
from kiln.auto_scheduler.gpu_model import GPUOccupancyModel, occupancy_score
from kiln.auto_scheduler.hardware_params import (
    DEFAULT_MAX_VTHREAD_EXTENT,
    HardwareParams,
    KernelResources,
    fits_gpu,
    hardware_check,
    kernel_resources,
)
from kiln.auto_scheduler.loop_state import (
    AnnotationStep,
    CacheReadStep,
    PragmaStep,
    RfactorStep,
    SetScopeStep,
    State,
)
from kiln.auto_scheduler.sketch import generate_sketches
from kiln.auto_scheduler.sketch_gpu import GPU_UNROLL_CHOICES, reference_state

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda, run_on_gpu
from . import workloads  # noqa: F401 - registers the workloads
from .workloads import reference

GEMM = ("as_test_matmul", (32, 32, 32, "float32"))
GEMM_ADD = ("as_test_matmul_add", (32, 32, 32, "float32"))
CONV = ("as_test_conv2d", (1, 4, 6, 6, 8, 3, 1))
ROW_MAX = ("as_test_row_max", (4, 8, 6))
SHORT_ROW_MAX = ("as_test_row_max", (4, 4, 6))
ROW_NORM = ("as_test_gpu_row_norm", (3, 384))
SKINNY_GEMM = ("as_test_matmul", (2, 256, 4, "float32"))

needs_emulator = pytest.mark.skipif(not cuda_emulator.available(),
                                    reason="g++ is needed to emulate kernels")


@auto_scheduler.register_workload
def as_test_gpu_row_norm(m, n):
    """The L2 norm of each of ``m`` rows of ``n``: a long reduction, few outputs."""
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    sq = te.compute((m,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="sq")
    return [A, te.compute((m,), lambda i: te.sqrt(sq[i]), name="norm")]


def _reference(name: str, inputs: list[np.ndarray]) -> np.ndarray:
    if name == "as_test_gpu_row_norm":
        return np.sqrt((inputs[0] * inputs[0]).sum(axis=1))
    return reference(name, inputs)


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
    np.testing.assert_allclose(arrays[-1], _reference(name, arrays[:-1]), rtol=1e-4,
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
    assert [str(s) for s in generate_sketches(_task(SHORT_ROW_MAX).compute_dag, "cuda")] == \
        ["C: skip"]


def test_cross_thread_reduction_rule():
    """A long reduction with few outputs: one block per output, partial results of the
    block's threads in shared memory (rfactor), fused into an elementwise consumer or
    copied out of a write cache; a reduction with data reuse keeps its tiling sketch."""
    (row_max,) = generate_sketches(_task(ROW_MAX).compute_dag, "cuda")
    assert str(row_max) == "C: cache write; C.local: cross-thread reduction"
    assert RfactorStep("C.local", "y@x@.1") in row_max.steps
    assert SetScopeStep("C.local.rf", "shared") in row_max.steps
    assert AnnotationStep("C.local.rf", "y@x@.1", "threadIdx.x") in row_max.steps
    (norm,) = generate_sketches(_task(ROW_NORM).compute_dag, "cuda")
    assert str(norm) == "norm: skip; sq: cross-thread reduction fused into norm"
    assert SetScopeStep("sq", "local") in norm.steps
    skinny = [str(s) for s in generate_sketches(_task(SKINNY_GEMM).compute_dag, "cuda")]
    assert len(skinny) == 2 and "multi-level tiling" in skinny[0]
    assert skinny[1] == "C: cache write; C.local: cross-thread reduction"
    task = _task(ROW_NORM)
    state = sample_candidate([norm], random.Random(0)).state(norm)
    (kernel,) = kernel_resources(kiln.lower(*task.compute_dag.apply_steps_from_state(state)))
    threads = next(s.lengths[0] for s in state.steps if getattr(s, "iter", "") == "k")
    assert kernel[:2] == (4 * threads, threads)  # one float of shared memory per thread
    assert kernel.blocks == 3 and kernel.local_bytes == 4  # a row per block, one partial


def test_gpu_unroll_pragmas():
    """Each reduction's outermost reduction loop gets an ``auto_unroll_max_step`` drawn
    from Ansor's GPU choices (1024 included), by sampling and by mutation."""
    for workload, stage in [(GEMM, "C.local"), (ROW_NORM, "sq.rf"), (SHORT_ROW_MAX, "C")]:
        sketches = generate_sketches(_task(workload).compute_dag, "cuda")
        pragmas = [s for s in sketches[0].steps if isinstance(s, PragmaStep)]
        assert [(p.stage, p.value) for p in pragmas] == [(stage, None)]
        assert sketches[0].unroll_choices == GPU_UNROLL_CHOICES == (0, 16, 64, 512, 1024)
    rng = random.Random(0)
    drawn = {v for _ in range(60) for v in sample_candidate(sketches, rng).unrolls.values()}
    assert drawn == set(GPU_UNROLL_CHOICES)
    c = sample_candidate(sketches, rng)
    mutated = {v for _ in range(200)
               for v in mutate(c, rng, sketches[c.sketch]).unrolls.values()}
    assert 1024 in mutated


def test_gpu_tiles_keep_the_thread_limits():
    """Threads per block at most the target's, virtual threads at most 8; each shared
    fetch is split by exactly the block's thread count."""
    sketches = generate_sketches(_task(("as_test_matmul", (512, 512, 512, "float32")))
                                 .compute_dag, "cuda")
    (sketch,) = sketches
    threads_refs, vthread_refs = None, None
    for refs, bound in sketch.limits:
        if bound == DEFAULT_MAX_VTHREAD_EXTENT:
            vthread_refs = refs
        elif bound == kiln.target.Target("cuda").max_num_threads:
            threads_refs = refs
    rng = random.Random(0)
    for _ in range(20):
        c = sample_candidate(sketches, rng)
        threads = math.prod(c.tiles[j][k] for j, k in threads_refs)
        assert threads <= 1024
        assert math.prod(c.tiles[j][k] for j, k in vthread_refs) <= DEFAULT_MAX_VTHREAD_EXTENT
        state = c.state(sketch)
        fetch = [state.steps[i] for i in sketch.fused_follows]
        assert len(fetch) == 2 and all(s.lengths == (threads,) for s in fetch)


@pytest.mark.parametrize("workload", [GEMM, ROW_NORM, ROW_MAX], ids=lambda w: w[0])
def test_gpu_state_json_round_trip(workload):
    """Every step of a GPU state (cache read, rfactor, set_scope, unroll pragma) prints
    and parses back to the same state."""
    task = _task(workload)
    sketches = generate_sketches(task.compute_dag, "cuda")
    state = sample_candidate(sketches, random.Random(2)).state(sketches[0])
    again = State.from_json(json.loads(json.dumps(state.to_json())))
    assert again.key() == state.key()
    kinds = {r[0] for r in state.to_json()}
    assert "PR" in kinds and ("CR" in kinds or {"RF", "SS"} <= kinds)
    assert kiln.lower(*task.compute_dag.apply_steps_from_state(again)) is not None


def test_hardware_params_limit_shared_memory_and_threads():
    """A state over the shared memory or threads of a block is rejected before it is
    scored or measured (``-inf``); the limits come from ``HardwareParams``, else the
    target."""
    assert HardwareParams().for_target("cuda") == HardwareParams(
        max_shared_memory_per_block=49152, max_local_memory_per_block=1020,
        max_threads_per_block=1024, max_vthread_extent=8, warp_size=32)
    task = _task(GEMM)
    (sketch,) = generate_sketches(task.compute_dag, "cuda")
    rng = random.Random(0)
    states = [sample_candidate([sketch], rng).state(sketch) for _ in range(4)]
    used = [max(kernel_resources(kiln.lower(*task.compute_dag.apply_steps_from_state(s))))
            for s in states]
    shared = sorted(u[0] for u in used)
    limit = shared[len(shared) // 2]
    small = HardwareParams(max_shared_memory_per_block=limit).for_target("cuda")
    fits = [fits_gpu(task.compute_dag, s, small) for s in states]
    assert fits == [u[0] <= limit for u in used] and not all(fits) and any(fits)
    few_threads = HardwareParams(max_threads_per_block=1).for_target("cuda")
    assert fits_gpu(task.compute_dag, states[0], few_threads) == (used[0][1] == 1)
    name, args = GEMM
    small_task = auto_scheduler.SearchTask(func=name, args=args, target="cuda",
                                           hardware_params=HardwareParams(
                                               max_shared_memory_per_block=limit))
    policy = auto_scheduler.SketchPolicy(small_task, auto_scheduler.RandomModel(0), seed=0,
                                         params={"population_size": 4, "num_iters": 0},
                                         verbose=0)
    for c in policy.evolutionary_search(policy.sample_initial_population(4)):
        assert fits_gpu(task.compute_dag, c.state(policy.sketches[c.sketch]), small)


def test_local_arrays_beyond_the_registers_do_not_fit():
    """A register tile larger than a thread's registers spills (an H100 refused to launch
    one of 1 MiB): ``fits_gpu`` counts each kernel's local bytes per thread."""
    task = _task(GEMM)
    (sketch,) = generate_sketches(task.compute_dag, "cuda")
    state = sample_candidate([sketch], random.Random(0)).state(sketch)
    (kernel,) = kernel_resources(kiln.lower(*task.compute_dag.apply_steps_from_state(state)))
    assert kernel.local_bytes >= 4 and kernel.blocks >= 1
    fits = fits_gpu(task.compute_dag, state, HardwareParams(
        max_local_memory_per_block=kernel.local_bytes).for_target("cuda"))
    spills = fits_gpu(task.compute_dag, state, HardwareParams(
        max_local_memory_per_block=kernel.local_bytes - 4).for_target("cuda"))
    assert fits and not spills


def test_occupancy_model_ranks_parallel_register_tiled_states_first():
    """Before it has learned, a GPU search ranks by occupancy: more threads and blocks,
    then larger register tiles; a kernel no SM can hold scores -inf."""
    flop = 2.0 * 1024 ** 3
    one_thread = KernelResources(16384, 1, 64, 65536)
    tiled = KernelResources(40960, 256, 256, 64)
    untiled = KernelResources(40960, 256, 256, 4)
    too_big = KernelResources(0, 1024, 64, 1024)  # 1024 threads x 288 registers
    scores = [occupancy_score([k], flop, 108) for k in (one_thread, tiled, untiled, too_big)]
    assert scores[1] > scores[2] > scores[0] > -math.inf and scores[3] == -math.inf
    model = auto_scheduler.XGBModel()
    assert isinstance(model._analytic_model(_task(GEMM)), GPUOccupancyModel)
    assert not isinstance(model._analytic_model(_task(GEMM, "llvm")), GPUOccupancyModel)


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
@pytest.mark.parametrize("workload", [GEMM, GEMM_ADD, CONV, ROW_MAX, ROW_NORM, SKINNY_GEMM],
                         ids=lambda w: f"{w[0]}{w[1][:3]}")
def test_random_gpu_states_are_correct_on_the_emulator(workload):
    """Property test: the reference of a GPU task, random GPU states, their mutations and
    crossover children (the states a GPU search measures) compute what numpy computes."""
    task = _task(workload)
    sketches = generate_sketches(task.compute_dag, "cuda")
    policy = auto_scheduler.SketchPolicy(task, auto_scheduler.RandomModel(0), seed=0,
                                         verbose=0)
    rng, nrng = random.Random(3), np.random.default_rng(0)
    states = [reference_state(task.compute_dag)]
    for k, sketch in enumerate(sketches):
        a, b = (replace(sample_candidate([sketch], rng), sketch=k) for _ in range(2))
        children = [mutate(mutate(a, rng, sketch), rng, sketch),
                    crossover(a, b, sketch, rng)]
        states += [c.state(sketch) for c in [a] + [
            c for c in children if sketch.allows(c.tiles) and policy.replays(c)]]
    for state in states:
        _check_on_emulator(task, state, workload[0], nrng)


@pytest.mark.gpu
@pytest.mark.slow  # NVRTC compiles each state for sm_80 and sm_90
@pytest.mark.parametrize("workload", [ROW_NORM, ROW_MAX, SKINNY_GEMM], ids=lambda w: w[0])
def test_cross_thread_states_on_a_gpu(workload):
    """Where a GPU exists: a random state of each sketch (cross-thread reductions, whose
    threads meet at a barrier the emulator does not test) against numpy on cuda(0)."""
    task = _task(workload)
    rng, nrng = random.Random(1), np.random.default_rng(1)
    for sketch in generate_sketches(task.compute_dag, "cuda"):
        sch, args = task.compute_dag.apply_steps_from_state(
            sample_candidate([sketch], rng).state(sketch))
        arrays = _inputs(args, nrng)
        out = run_on_gpu(sch, args, arrays)[-1]
        np.testing.assert_allclose(out, _reference(workload[0], arrays[:-1]), rtol=1e-4,
                                   atol=1e-4)


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


def test_the_check_and_the_occupancy_model_share_one_lowering(monkeypatch):
    """A GPU state is lowered once: ``hardware_check`` and ``GPUOccupancyModel`` read the
    same remembered kernel resources; a state that does not lower fits nothing."""
    from kiln.auto_scheduler import hardware_params

    task = _task(GEMM)
    sketches = generate_sketches(task.compute_dag, "cuda")
    rng = random.Random(1)
    states = [c.state(sketches[c.sketch])
              for c in (sample_candidate(sketches, rng) for _ in range(3))]
    lowered = []
    real = hardware_params.kernel_resources
    monkeypatch.setattr(hardware_params, "kernel_resources",
                        lambda mod: lowered.append(1) or real(mod))
    fits = hardware_check(task)(states)
    scores = GPUOccupancyModel().predict(task, states)
    assert len(lowered) == len({s.key() for s in states})
    assert [math.isfinite(s) for s in scores] == [True] * 3 and len(fits) == 3
    broken = State([AnnotationStep("C", "no_such_loop", "vectorize")])
    assert hardware_check(task)([broken]) == [False]
    assert GPUOccupancyModel().predict(task, [broken]) == [-math.inf]
