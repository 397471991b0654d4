"""auto_scheduler: sketches from rules, replayable states, correct samples, the search."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

import kiln
from kiln import auto_scheduler
from kiln.auto_scheduler.annotation import (
    aligned_factorizations,
    candidate_of,
    crossover,
    factorizations,
    mutate,
    sample_candidate,
    tail_tilings,
)
from kiln.auto_scheduler.cost_model import AnalyticCostModel, CostModel, map_states
from kiln.auto_scheduler.feature import state_features
from kiln.auto_scheduler.loop_state import AnnotationStep, ComputeAtStep, SplitStep, State
from kiln.auto_scheduler.sketch import MAX_UNROLLED_VECTORS, cpu_budget, generate_sketches

from . import workloads  # noqa: F401 - registers the workloads
from .workloads import reference

GEMM = ("as_test_matmul", (64, 64, 64, "float32"))
GEMM_ADD = ("as_test_matmul_add", (64, 64, 64, "float32"))
CONV = ("as_test_conv2d", (1, 16, 14, 14, 16, 3, 1))
VECTOR_SUM = ("as_test_vector_sum", (4096,))
ROW_MAX = ("as_test_row_max", (4, 32, 48))
RELU_CHAIN = ("as_test_relu_chain", (8, 256))


def _task(workload) -> auto_scheduler.SearchTask:
    name, args = workload
    return auto_scheduler.SearchTask(func=name, args=args, target="llvm")


def _check(task, state, name: str, rng: np.random.Generator) -> None:
    sch, args = task.compute_dag.apply_steps_from_state(state)
    mod = kiln.build(sch, args, "llvm")
    shapes = [tuple(int(s) for s in t.shape) for t in args]
    inputs = [rng.random(s, dtype=np.float32) for s in shapes[:-1]]
    out = kiln.nd.empty(shapes[-1])
    mod(*[kiln.nd.array(x) for x in inputs], out)
    np.testing.assert_allclose(out.numpy(), reference(name, inputs), rtol=1e-4, atol=1e-4)


def test_compute_dag_prints_each_stage():
    text = str(_task(GEMM_ADD).compute_dag)
    assert "A = PLACEHOLDER [64, 64]" in text
    assert "matmul(i, j) reduce=" in text and "out(i, j) =" in text


def test_sketch_rules():
    gemm = [str(s) for s in generate_sketches(_task(GEMM).compute_dag)]
    assert gemm == ["C: multi-level tiling SSRSRS",
                    "C: cache write; C.local: multi-level tiling fused into C"]
    fused = [str(s) for s in generate_sketches(_task(GEMM_ADD).compute_dag)]
    assert fused == ["out: skip; matmul: multi-level tiling fused into out"]
    conv = [str(s) for s in generate_sketches(_task(CONV).compute_dag)]
    assert conv[0] == "conv: multi-level tiling SSRSRS; pad: skip"  # padding computed apart
    assert len(conv) == 2


def test_rfactor_rule_for_reductions_with_little_parallelism():
    """A long vector's sum (one output, 4096 elements reduced) and a max over 32x48 of 4
    rows get two rfactor sketches beside the plain one; the steps of the inner one on the
    two reduction loops: fuse, split, rfactor over the inner part, vectorize it."""
    for workload in (VECTOR_SUM, ROW_MAX):
        rules = [str(s) for s in generate_sketches(_task(workload).compute_dag)]
        assert rules == ["C: skip", "C: rfactor inner", "C: rfactor outer"]
    inner = generate_sketches(_task(ROW_MAX).compute_dag)[1]
    kinds = [(type(step).__name__, step.stage) for step in inner.steps]
    assert kinds[:4] == [("FuseStep", "C"), ("SplitStep", "C"), ("RfactorStep", "C"),
                         ("ReorderStep", "C.rf")]
    assert inner.steps[2].iter == "y@x@.1"
    assert AnnotationStep("C.rf", "y@x@.1", "vectorize") in inner.steps
    # plenty of outputs for the reduced elements: no rfactor (GEMM 64: 4096 outputs of 64)
    assert not any("rfactor" in str(s) for s in generate_sketches(_task(GEMM).compute_dag))


@pytest.mark.parametrize("workload", [VECTOR_SUM, ROW_MAX], ids=lambda w: w[0])
def test_rfactor_states_are_correct(workload):
    """Random annotations of each rfactor sketch build and match numpy."""
    task = _task(workload)
    sketches = generate_sketches(task.compute_dag)
    rng, nrng = random.Random(4), np.random.default_rng(0)
    for k in (1, 2):
        c = sample_candidate([sketches[k]], rng)
        _check(task, c.state(sketches[k]), workload[0], nrng)


def test_factorizations_divide_and_bound_the_innermost():
    fs = factorizations(512, 4)
    assert all(np.prod(f) == 512 and f[-1] <= 64 for f in fs)
    assert (1, 1, 8, 64) in fs and (1, 1, 1, 512) not in fs


def test_a_random_state_is_correct():
    task = _task(GEMM)
    sketches = generate_sketches(task.compute_dag)
    c = sample_candidate(sketches, random.Random(1))
    _check(task, c.state(sketches[c.sketch]), GEMM[0], np.random.default_rng(0))


@pytest.mark.slow
@pytest.mark.parametrize("workload", [GEMM, GEMM_ADD, CONV], ids=lambda w: w[0])
def test_random_states_are_correct(workload):
    """Property test: random annotations of every sketch and their mutations build and
    match numpy (a conv candidate takes seconds to compile)."""
    task = _task(workload)
    sketches = generate_sketches(task.compute_dag)
    rng, nrng = random.Random(1), np.random.default_rng(0)
    for _ in range(2):
        cand = sample_candidate(sketches, rng)
        mate = sample_candidate([sketches[cand.sketch]], rng)
        child = crossover(cand, replace(mate, sketch=cand.sketch), sketches[cand.sketch], rng)
        sk = sketches[cand.sketch]
        for c in (cand, mutate(mutate(cand, rng, sk), rng, sk), child):
            _check(task, c.state(sketches[c.sketch]), workload[0], nrng)
    # the conv's 14 columns: a vectorized tile of whole vectors with a partial last tile
    tailed = [c for c in (sample_candidate(sketches, rng) for _ in range(100))
              if _has_tail(c.state(sketches[c.sketch]))]
    assert bool(tailed) == (workload is CONV)
    for c in tailed[:2]:
        _check(task, c.state(sketches[c.sketch]), workload[0], nrng)


def _has_tail(state: State) -> bool:
    return any(isinstance(s, SplitStep) and s.tail for s in state.steps)


def test_crossover_child_is_legal_and_correct():
    """GEMM + bias + ReLU (one sketch, two tiled stages): a child takes each stage's tile
    sizes and unroll limit from one parent, replays, and computes the right result."""
    task = _task(GEMM_ADD)
    sketches = generate_sketches(task.compute_dag)
    (sketch,) = sketches
    rng = random.Random(7)
    a, b = sample_candidate(sketches, rng), sample_candidate(sketches, rng)
    child = next(c for c in (crossover(a, b, sketch, rng) for _ in range(32))
                 if c.key() not in (a.key(), b.key()))
    stage_of = {i: sketch.steps[i].stage for i in (*child.tiles, *child.unrolls)}
    for stage in set(stage_of.values()):
        mine = [i for i, st in stage_of.items() if st == stage]
        assert any(all(child.tiles.get(i) == p.tiles.get(i)
                       and child.unrolls.get(i) == p.unrolls.get(i) for i in mine)
                   for p in (a, b))
    policy = auto_scheduler.SketchPolicy(task, auto_scheduler.RandomModel(0), seed=0,
                                         verbose=0)
    assert policy.replays(child)
    _check(task, child.state(sketch), GEMM_ADD[0], np.random.default_rng(0))
    other = sample_candidate(generate_sketches(_task(GEMM).compute_dag), random.Random(0))
    with pytest.raises(ValueError, match="one sketch"):
        crossover(replace(other, sketch=0), replace(other, sketch=1), sketch, rng)


def test_evolution_by_crossover_keeps_replaying_states():
    """With every child a crossover child, the population still holds only states that
    replay (children that do not are dropped)."""
    task = _task(GEMM)
    policy = auto_scheduler.SketchPolicy(
        task, auto_scheduler.RandomModel(0),
        params={"population_size": 8, "num_iters": 2, "crossover_ratio": 1.0},
        seed=0, verbose=0)
    pop = policy.evolutionary_search(policy.sample_initial_population(8))
    assert pop and all(policy.replays(c) for c in pop)


def test_state_json_round_trip():
    task = _task(GEMM)
    sketches = generate_sketches(task.compute_dag)
    c = sample_candidate(sketches, random.Random(3))
    state = c.state(sketches[c.sketch])
    again = State.from_json(state.to_json())
    assert again.key() == state.key()
    assert kiln.lower(*task.compute_dag.apply_steps_from_state(again)) is not None


def test_a_logged_state_maps_back_to_its_candidate():
    """Resuming a search from a log needs the candidate of each logged state."""
    for workload in (GEMM, CONV, ROW_MAX):
        sketches = generate_sketches(_task(workload).compute_dag)
        rng = random.Random(5)
        for _ in range(4):
            c = sample_candidate(sketches, rng)
            logged = State.from_json(c.state(sketches[c.sketch]).to_json())
            assert candidate_of(sketches, logged).key() == c.key()
    gemm = generate_sketches(_task(GEMM).compute_dag)
    assert candidate_of(gemm, State([])) is None


def test_evolutionary_search_keeps_the_best_scored():
    task = _task(GEMM)
    policy = auto_scheduler.SketchPolicy(task, auto_scheduler.RandomModel(0),
                                         params={"population_size": 6, "num_iters": 2},
                                         seed=0, verbose=0)
    pop = policy.evolutionary_search(policy.sample_initial_population(6))
    scores = policy._score(pop)
    assert scores == sorted(scores, reverse=True) and len(pop) >= 1


def test_unregistered_workload_is_named():
    with pytest.raises(ValueError, match="not registered"):
        auto_scheduler.SearchTask(func="nope", args=(1,), target="llvm")


def test_xgb_model_learns_from_measurements():
    """Before ``min_train`` successes it predicts with the analytic model; then it fits
    a rank model on the measured states' loop features."""
    task = _task(GEMM)
    sketches = generate_sketches(task.compute_dag)
    rng = random.Random(2)
    states = [c.state(sketches[c.sketch])
              for c in (sample_candidate(sketches, rng) for _ in range(6))]
    pytest.importorskip("xgboost")
    model = auto_scheduler.XGBModel(min_train=4)
    assert all(np.isfinite(model.predict(task, states[:2])))  # the analytic fallback
    inputs = [auto_scheduler.MeasureInput(task, s) for s in states]
    results = [auto_scheduler.MeasureResult((1e-4 * (k + 1),), 0, 0.1, 0.0)
               for k in range(len(states))]
    model.update(inputs, results)
    assert model.booster is not None
    assert len(model.predict(task, states)) == len(states)


@pytest.mark.parametrize("target, lanes, registers", [("llvm -mcpu=haswell", 8, 16),
                                                      ("llvm -mcpu=skylake-avx512", 16, 32)])
def test_cpu_tiling_fits_the_targets_vectors_and_registers(target, lanes, registers):
    """Multi-level tiling on a CPU: the vectorized innermost tile is drawn in whole vectors
    of the target, and the innermost (register) tile of every drawn or mutated candidate
    holds at most half the target's vector registers of accumulators (the vectorized
    length counted in whole vectors)."""
    task = auto_scheduler.SearchTask(func="as_test_matmul", args=(256, 256, 256, "float32"),
                                     target=target)
    sketches = generate_sketches(task.compute_dag, target)
    rng = random.Random(0)
    for sk in sketches:
        (vectorized,) = sk.vector_lanes.items()
        assert vectorized[1] == lanes
        register_limit = min(b for _, b in sk.limits)
        assert register_limit == registers // 2
        for _ in range(20):
            c = sample_candidate([sk], rng)
            assert c.tiles[vectorized[0]][-1] % lanes == 0
            tiled = [t for t in c.tiles.values() if len(t) == 4]
            assert math.prod(t[3] for t in tiled) <= register_limit * lanes
        too_big = {i: (t[0] * t[3] // 64, t[1], t[2], 64) if len(t) == 4 else t
                   for i, t in c.tiles.items()}  # a 64 x 64 register tile
        assert not sk.allows(too_big)


def test_unroll_pragmas_keep_the_compile_budget():
    """An unroll pragma times the vectors of the vectorized tile stays within
    MAX_UNROLLED_VECTORS for every drawn and mutated candidate (larger ones took the C
    compiler 10-40 s): a 64-wide tile (4 AVX-512 vectors) unrolls at most 64 steps."""
    task = auto_scheduler.SearchTask(func="as_test_matmul", args=(256, 256, 256, "float32"),
                                     target="llvm -mcpu=skylake-avx512")
    sketches = generate_sketches(task.compute_dag, "llvm -mcpu=skylake-avx512")
    rng = random.Random(0)
    for sk in sketches:
        ((pragma, split, lanes, bound),) = sk.unroll_limits
        assert (lanes, bound) == (16, MAX_UNROLLED_VECTORS)
        for _ in range(20):
            c = mutate(sample_candidate([sk], rng), rng, sk)
            if sk.allows(c.tiles, c.unrolls):
                assert c.unrolls[pragma] * -(-c.tiles[split][-1] // lanes) <= bound
        wide = {**c.tiles, split: (c.tiles[split][0] * c.tiles[split][-1] // 64,
                                   *c.tiles[split][1:-1], 64)}
        assert sk.allows(wide, {pragma: 64}) == sk.allows(wide)
        assert not sk.allows(wide, {pragma: 512})


def test_filled_candidates_fill_registers_and_cores():
    """Half the initial population is drawn filled: the innermost tile at least half the
    register budget, the parallel loop at least one iteration per core."""
    task = _task(GEMM)
    sketches = generate_sketches(task.compute_dag)
    budget = cpu_budget("llvm", 4)
    rng = random.Random(1)
    for _ in range(10):
        c = sample_candidate(sketches, rng, filled=True)
        tiled = [t for t in c.tiles.values() if len(t) == 4]
        assert math.prod(t[3] for t in tiled) >= budget.register_tile // 2 * budget.lanes
        assert math.prod(t[0] for t in tiled) >= min(budget.cores, 64 * 64 // budget.lanes)
    policy = auto_scheduler.SketchPolicy(task, auto_scheduler.RandomModel(0), seed=0,
                                         verbose=0)
    pop = policy.sample_initial_population(8)
    assert all(policy.sketches[c.sketch].fills(c.tiles) for c in pop[::2])


def test_a_long_elementwise_loop_is_split_in_whole_vectors():
    """A skipped elementwise stage whose last loop is longer than 64 splits it: the outer
    part fused into the parallel loop, the inner part (whole vectors) vectorized."""
    task = _task(RELU_CHAIN)
    (sketch,) = generate_sketches(task.compute_dag)
    (split,) = [s for s in sketch.steps if isinstance(s, SplitStep)]
    assert (split.stage, split.iter) == ("out", "j")
    assert AnnotationStep("out", "j.1", "vectorize") in sketch.steps
    assert AnnotationStep("out", "i@j.0@", "parallel") in sketch.steps
    lanes = cpu_budget("llvm", 4).lanes
    rng, nrng = random.Random(0), np.random.default_rng(0)
    c = sample_candidate([sketch], rng)
    assert c.tiles[sketch.steps.index(split)][-1] % lanes == 0
    _check(task, c.state(sketch), RELU_CHAIN[0], nrng)


def test_rfactor_inner_computes_partial_sums_in_the_parallel_loop():
    """rfactor inner of a row reduction: one output's partial sums side by side (the
    factored axis last) computed at the parallel loop of the rows, as topi's reduction
    schedule: one parallel loop, no partial-sum array of every row."""
    inner = generate_sketches(_task(ROW_MAX).compute_dag)[1]
    (rf,) = [s for s in inner.steps if type(s).__name__ == "RfactorStep"]
    assert rf.factor_axis == 1
    assert ComputeAtStep("C.rf", "C", "i") in inner.steps
    assert [s for s in inner.steps if getattr(s, "kind", None) == "parallel"] == [
        AnnotationStep("C", "i", "parallel")]


def test_states_are_scored_in_parallel_as_one_by_one():
    """The cost models lower a batch of states in forked children (one per CPU): the
    scores are those of the states scored here one by one."""
    task = _task(ROW_MAX)
    sketches = generate_sketches(task.compute_dag)
    rng = random.Random(6)
    states = [c.state(sketches[c.sketch]) for c in (sample_candidate(sketches, rng)
                                                    for _ in range(8))]
    scored = AnalyticCostModel().predict(task, states)  # 8 states: in children
    assert scored == [AnalyticCostModel._score(task, s) for s in states]
    assert map_states(lambda _task, s: s.key(), task, states) == [s.key() for s in states]


def test_a_register_tile_of_partial_vectors_counts_whole_registers():
    """A conv's vectorized width of 14 (not a multiple of 16 lanes) takes a whole vector
    register per row of the register tile: 16 rows of 14 fit half of AVX-512's 32
    registers, 32 rows of 7 do not (224 elements each)."""
    task = auto_scheduler.SearchTask(func="as_test_conv2d", args=(1, 32, 14, 14, 32, 3, 1),
                                     target="llvm -mcpu=skylake-avx512")
    sk = generate_sketches(task.compute_dag, "llvm -mcpu=skylake-avx512")[0]
    c = sample_candidate([sk], random.Random(0))
    (x,) = sk.vector_lanes
    f = next(i for i, t in c.tiles.items() if len(t) == 4 and sk.steps[i].iter == "f")
    rest = {i: (math.prod(t), 1, 1, 1) if len(t) == 4 and i not in (f, x) else t
            for i, t in c.tiles.items()}
    assert sk.allows({**rest, f: (2, 1, 1, 16), x: (1, 1, 1, 14)})
    assert not sk.allows({**rest, f: (1, 1, 1, 32), x: (2, 1, 1, 7)})


def test_a_vectorized_tile_is_whole_vectors_or_at_least_half_of_one():
    """16 lanes: 1024 columns give innermost tiles of 16, 32 or 64; a conv's 14 columns,
    which no multiple of 16 divides, one vector of 14 (not 1, 2 or 7); 7 columns any."""
    innermost = {n: {f[-1] for f in aligned_factorizations(n, 4, 16)} for n in (1024, 14, 7)}
    assert innermost == {1024: {16, 32, 64}, 14: {14}, 7: {1, 7}}


def test_a_vectorized_tile_may_leave_a_tail_of_whole_vectors():
    """Beside the exact factorizations, a vectorized split draws powers of two of whole
    vectors that leave a partial tile (14 columns at 16 lanes: 4 or 8, as the hand conv
    schedule's 4; 56: 16 or 32), the outer levels factoring the tiles; 1024 has none."""
    assert {f[-1] for f in tail_tilings(14, 3, 16)} == {4, 8}
    assert {f[-1] for f in tail_tilings(56, 4, 16)} == {16, 32}
    assert (2, 2, 4) in tail_tilings(14, 3, 16) and tail_tilings(1024, 4, 16) == ()
    assert all(math.prod(f[:-1]) == -(-56 // f[-1]) for f in tail_tilings(56, 4, 16))


def test_a_tail_tile_compiles_to_vectors_and_is_correct():
    """Width 14 at this machine's lanes: a state whose vectorized tile leaves a tail
    builds to C vector statements of its length (no scalar ``ivdep`` loop), replays from
    its candidate, mutates within its tail tilings, and matches numpy."""
    workload = ("as_test_matmul", (16, 16, 14, "float32"))
    task = _task(workload)
    sk = generate_sketches(task.compute_dag)[0]  # no cache write: one stage
    (x,) = sk.vector_lanes
    rng = random.Random(0)
    c = next(c for c in (sample_candidate([sk], rng) for _ in range(200))
             if math.prod(c.tiles[x]) != 14)
    state = c.state(sk)
    assert candidate_of([sk], state).key() == c.key()
    sch, args = task.compute_dag.apply_steps_from_state(state)
    source = kiln.build(sch, args, "llvm").get_source()
    assert "ivdep" not in source and f"float32x{c.tiles[x][-1]}" in source
    _check(task, state, workload[0], np.random.default_rng(0))
    for _ in range(50):
        m = mutate(c, rng, sk)
        assert math.prod(m.tiles[x]) == 14 or m.tiles[x] in tail_tilings(14, 4, sk.vector_lanes[x])


def test_a_pure_stage_shifts_its_last_tile_inwards():
    """Cache-write sketch, 14 columns: the copy-out stage ``C`` (each element once) shifts
    its last tile of whole vectors inwards, the reduction ``C.local`` (which must not
    accumulate an element twice) partitions; the result matches numpy."""
    workload = ("as_test_matmul", (16, 16, 14, "float32"))
    task = _task(workload)
    sk = generate_sketches(task.compute_dag)[1]
    assert "cache write" in str(sk) and sk.pure_stages == {"C"}
    rng = random.Random(0)
    state = next(s for s in (sample_candidate([sk], rng).state(sk) for _ in range(200))
                 if _has_tail(s))
    assert {(s.stage, s.tail) for s in state.steps if isinstance(s, SplitStep) and s.tail} \
        == {("C", "shift_inwards"), ("C.local", "partition")}
    _check(task, state, workload[0], np.random.default_rng(0))


def test_cpu_vector_width_from_hardware_params():
    """``HardwareParams(vector_unit_bytes=16)`` (SSE) gives 4-lane vectorized tiles,
    whatever the host's width."""
    task = _task(("as_test_matmul", (16, 16, 14, "float32")))
    params = auto_scheduler.HardwareParams(vector_unit_bytes=16)
    sketches = generate_sketches(task.compute_dag, "llvm", params)
    assert all(set(sk.vector_lanes.values()) == {4} for sk in sketches)
    assert cpu_budget("llvm", 4, 16).lanes == 4 and cpu_budget("llvm", 8, 64).lanes == 8


def test_state_features_read_the_steps_without_lowering():
    """Equal steps give equal features; the per-stage level products are the tiling's
    register tile and parallel loop; every value is finite."""
    task = _task(GEMM)
    sketches = generate_sketches(task.compute_dag)
    rng = random.Random(5)
    tiled = next(sk for sk in sketches if "cache write" not in str(sk))
    c = sample_candidate([tiled], rng, filled=True)
    state = c.state(tiled)
    feats = state_features(state)
    assert feats == state_features(State.from_json(state.to_json()))
    assert all(math.isfinite(v) for v in feats.values())
    i_tiles, j_tiles = (c.tiles[k] for k in sorted(c.tiles) if len(c.tiles[k]) == 4)
    assert feats["C.L4.3"] == pytest.approx(math.log2(i_tiles[3] * j_tiles[3]))
    assert feats["C.parallel"] == pytest.approx(math.log2(i_tiles[0] * j_tiles[0]))
    assert feats["C.vectorize"] == pytest.approx(math.log2(j_tiles[3]))
    other = replace(c, tiles={**c.tiles, **{k: t[::-1] for k, t in c.tiles.items()
                                             if len(t) == 4 and t != t[::-1]}})
    if other.key() != c.key():
        assert state_features(other.state(tiled)) != feats


class _CountingModel(CostModel):
    """A fixed-rule model that counts the states it scores."""

    def __init__(self) -> None:
        self.scored = 0

    def predict(self, task, states) -> list[float]:
        self.scored += len(states)
        return [float(len(s.key())) for s in states]


def test_first_round_ranks_the_population_without_evolving():
    """Before any measurement a model that has not learned ranks the random population
    only (at most ``population_size`` states scored); once states are measured the
    population evolves (children scored too)."""
    task = _task(GEMM)
    model = _CountingModel()
    policy = auto_scheduler.SketchPolicy(task, model, params={"population_size": 8,
                                                              "num_iters": 2}, seed=0,
                                         verbose=0)
    picks = policy._pick(4)
    assert len(picks) == 4 and model.scored <= 8
    for c in picks:
        policy.measured[c.key()] = 1e-3
        policy._candidates[c.key()] = c
    model.scored = 0
    policy._pick(4)
    assert model.scored > 8
