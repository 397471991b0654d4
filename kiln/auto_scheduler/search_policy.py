"""``SketchPolicy``: Ansor's search over a task's sketches.

Each round (:meth:`SketchPolicy.continue_search_one_round`):

1. **population**: the best candidates measured so far plus random annotations of random
   sketches (:func:`.annotation.sample_candidate`), ``population_size`` in all;
2. **evolution**: for ``num_iters`` generations, parents drawn in proportion to their rank
   under the cost model are mutated (:func:`.annotation.mutate`), or, a share
   ``crossover_ratio`` of the children, crossed with a second parent of the same sketch
   (:func:`.annotation.crossover`; a child whose state does not replay is dropped), and
   the best ``population_size`` of parents and children survive;
3. **measurement**: the best-scored unmeasured candidates, with a share ``eps_greedy``
   (half of the first batch, before the model has learned anything) drawn at random
   instead, filled (:meth:`.Sketch.fills`; exploration), are measured as one batch;
   the cost model is updated with the results and every score is recomputed.

The first round, before any measurement, skips step 2 when the model has not learned
(:attr:`.cost_model.CostModel.learned`): an analytic model costs 0.3-0.5 s a state on a
conv, and evolving under it scored some 300 states (6.8 s of choosing per trial of a
32-trial depthwise search, 13.1 s of an 8-trial one) to refine a ranking the first
measurements replace; the population is ranked and the best measured.

A GPU state over the task's hardware limits (threads or shared memory per block,
:func:`.hardware_params.hardware_check`) scores ``-inf``: it is never measured. No
candidate is measured twice. ``best_state``/``best_cost`` hold the fastest so far,
``seconds`` the wall time spent choosing states and measuring them.
``init_search_callbacks=[PreloadMeasuredStates(log)]`` resumes a search: the task's records
in the log count as measured, seed the population and train the cost model.
"""

from __future__ import annotations

import math
import random
import time

from .annotation import Candidate, candidate_of, crossover, mutate, sample_candidate
from .cost_model import CostModel, XGBModel
from .hardware_params import hardware_check
from .measure import MeasureInput
from .measure_record import load_records, same_target
from .sketch import generate_sketches

__all__ = ["SearchPolicy", "SketchPolicy", "SearchCallback", "PreloadMeasuredStates"]

DEFAULT_PARAMS = {"population_size": 64, "num_iters": 4, "eps_greedy": 0.05,
                  "crossover_ratio": 0.05, "retry_search_one_round_on_empty": 8}


class SearchPolicy:
    """Chooses the states to measure for a task (base class)."""


class SearchCallback:
    """Called once by a search policy before it searches (base class)."""

    def callback(self, policy: SketchPolicy) -> None:
        raise NotImplementedError


class PreloadMeasuredStates(SearchCallback):
    """Resume from the log ``filename``: its records of the policy's task (workload key
    and target) count as measured states of the search."""

    def __init__(self, filename: str) -> None:
        self.filename = str(filename)

    def callback(self, policy: SketchPolicy) -> None:
        task = policy.search_task
        rows = [(inp, res) for inp, res in load_records(self.filename)
                if inp.task.workload_key == task.workload_key
                and same_target(inp.task.target, str(task.target))]
        policy.preload([MeasureInput(task, inp.state) for inp, _ in rows],
                       [res for _, res in rows])


class SketchPolicy(SearchPolicy):
    """Sketches, random annotation, evolutionary search under ``program_cost_model``
    (an :class:`~.cost_model.XGBModel` by default)."""

    def __init__(self, task, program_cost_model: CostModel | None = None,
                 params: dict | None = None, seed: int | None = None, verbose: int = 1,
                 init_search_callbacks=None) -> None:
        self.search_task = task
        self.cost_model = program_cost_model or XGBModel()
        self.params = {**DEFAULT_PARAMS, **(params or {})}
        self.rng = random.Random(seed)
        self.verbose = verbose
        self.sketches = generate_sketches(task.compute_dag, task.target,
                                          task.hardware_params)
        self.fits = hardware_check(task)
        self.measured: dict[tuple, float] = {}  # candidate key -> seconds (inf if failed)
        self._candidates: dict[tuple, Candidate] = {}
        self._scores: dict[tuple, float] = {}
        self.best_state = None
        self.best_cost = math.inf
        #: wall seconds spent choosing states ("search") and building and timing them
        #: ("measure"), over every round
        self.seconds = {"search": 0.0, "measure": 0.0}
        for cb in init_search_callbacks or ():
            cb.callback(self)

    def preload(self, inputs: list[MeasureInput], results) -> None:
        """Count measured ``inputs`` (states of this task, as from a log) as measured by
        this search: never measured again, seeds of the population, training data."""
        self._record([candidate_of(self.sketches, inp.state) for inp in inputs], inputs,
                     results)

    # ---- search -----------------------------------------------------------------------
    def sample_initial_population(self, n: int) -> list[Candidate]:
        """``n`` random candidates, every other one filled (:meth:`.Sketch.fills`: a
        register tile at least half full, one parallel iteration per core at least)."""
        return [sample_candidate(self.sketches, self.rng, filled=k % 2 == 0)
                for k in range(n)]

    def evolutionary_search(self, population: list[Candidate]) -> list[Candidate]:
        """The population after ``num_iters`` generations, best first."""
        size = self.params["population_size"]
        pop = self._best_unique(population, size)
        for _ in range(self.params["num_iters"]):
            weights = [1.0 / (rank + 1) for rank in range(len(pop))]
            children = [self._child(pop, weights) for _ in pop]
            pop = self._best_unique(pop + [c for c in children if c is not None], size)
        return pop

    def _child(self, pop: list[Candidate], weights: list[float]) -> Candidate | None:
        """A mutation of a parent drawn by rank, or (a share ``crossover_ratio``) the
        crossover of two such parents of one sketch; None for a child that breaks its
        sketch's limits or (crossover) whose state does not replay."""
        a = self.rng.choices(pop, weights)[0]
        mates = [(c, w) for c, w in zip(pop, weights, strict=True)
                 if c.sketch == a.sketch and c is not a]
        if not mates or self.rng.random() >= self.params["crossover_ratio"]:
            child = mutate(a, self.rng, self.sketches[a.sketch])
        else:
            b = self.rng.choices([c for c, _ in mates], [w for _, w in mates])[0]
            child = crossover(a, b, self.sketches[a.sketch], self.rng)
            if not self.replays(child):
                return None
        return (child if self.sketches[child.sketch].allows(child.tiles, child.unrolls)
                else None)

    def replays(self, c: Candidate) -> bool:
        """Whether candidate ``c``'s state applies to a fresh schedule of the task."""
        try:
            self.search_task.compute_dag.apply_steps_from_state(c.state(self.sketches[c.sketch]))
        except Exception:  # noqa: BLE001 - any failing primitive makes the state illegal
            return False
        return True

    def continue_search_one_round(self, num_measure: int, measurer):
        """Search, measure up to ``num_measure`` new states; ``(inputs, results)``."""
        start = time.perf_counter()
        picks: list[Candidate] = []
        for _ in range(self.params["retry_search_one_round_on_empty"]):
            picks = self._pick(num_measure)
            if picks:
                break
        chosen = time.perf_counter()
        self.seconds["search"] += chosen - start
        if not picks:
            return [], []
        states = [c.state(self.sketches[c.sketch]) for c in picks]
        inputs, results = measurer.measure(self.search_task, self, states)
        self.seconds["measure"] += time.perf_counter() - chosen
        self._record(picks, inputs, results)
        return inputs, results

    def search(self, num_measure_trials: int, num_measures_per_round: int, measurer,
               early_stopping: int | None = None) -> int:
        """Rounds until ``num_measure_trials`` states are measured, no new one is found, or
        ``early_stopping`` trials brought no better state; the number measured."""
        done, improved_at = 0, 0
        start = time.time()
        while done < num_measure_trials:
            if early_stopping is not None and done - improved_at >= early_stopping:
                break
            best_before = self.best_cost
            inputs, _ = self.continue_search_one_round(
                min(num_measures_per_round, num_measure_trials - done), measurer)
            if not inputs:
                break
            done += len(inputs)
            if self.best_cost < best_before:
                improved_at = done
            if self.verbose:
                flops = self.search_task.compute_dag.flop_ct()
                best = flops / self.best_cost / 1e9 if self.best_cost < math.inf else 0.0
                print(f"{self.search_task.desc or self.search_task.workload_key}: "
                      f"trials {done}/{num_measure_trials} | best {best:.2f} GFLOPS | "
                      f"{time.time() - start:.1f} s (search {self.seconds['search']:.1f}"
                      f" s, measure {self.seconds['measure']:.1f} s)", flush=True)
        return done

    # ---- helpers ----------------------------------------------------------------------
    def _record(self, cands: list[Candidate | None], inputs, results) -> None:
        """Note measured states (``cands[i]`` made ``inputs[i]``; None: a state no sketch
        of this search makes, from a log of other rules) and train the cost model."""
        for c, inp, res in zip(cands, inputs, results, strict=True):
            if c is not None:
                self._candidates[c.key()] = c
                self.measured[c.key()] = min(res.cost, self.measured.get(c.key(), math.inf))
            if res.cost < self.best_cost:
                self.best_state, self.best_cost = inp.state, res.cost
        if inputs:
            self.cost_model.update(inputs, results)
        self._scores.clear()  # the model may have learned: score afresh

    def _score(self, cands: list[Candidate]) -> list[float]:
        """The model's score of each candidate, ``-inf`` for a state over the hardware
        limits (checked first: the model scores only states that fit)."""
        todo = list({c.key(): c for c in cands if c.key() not in self._scores}.values())
        if todo:
            states = [c.state(self.sketches[c.sketch]) for c in todo]
            fit = self.fits(states)
            kept = [s for s, ok in zip(states, fit, strict=True) if ok]
            scores = iter(self.cost_model.predict(self.search_task, kept) if kept else ())
            for c, ok in zip(todo, fit, strict=True):
                self._scores[c.key()] = next(scores) if ok else -math.inf
        return [self._scores[c.key()] for c in cands]

    def _best_unique(self, cands: list[Candidate], n: int) -> list[Candidate]:
        unique = list({c.key(): c for c in cands}.values())
        scores = self._score(unique)
        ranked = sorted(zip(scores, range(len(unique)), strict=True), key=lambda x: -x[0])
        return [unique[i] for s, i in ranked[:n] if s > -math.inf]

    def _pick(self, n: int) -> list[Candidate]:
        """The next batch: best-scored unmeasured candidates and a few random filled ones
        within the hardware limits (a share ``eps_greedy``; half the first batch, whose
        ranking the model has learned nothing for). Before the first measurement, a model
        that has not learned ranks the random population without evolving it (its fixed
        rule is what the measurements replace)."""
        size = self.params["population_size"]
        seeds = [self._candidates[k] for k, _ in sorted(self.measured.items(),
                                                        key=lambda kv: kv[1])[:size // 4]
                 if self.measured[k] < math.inf]
        population = seeds + self.sample_initial_population(size)
        pop = (self.evolutionary_search(population) if self.measured or self.cost_model.learned
               else self._best_unique(population, size))
        n_random = int(round(n * (self.params["eps_greedy"] if self.measured else 0.5)))
        picks: dict[tuple, Candidate] = {}
        for c in pop:
            if len(picks) >= n - n_random:
                break
            if c.key() not in self.measured:
                picks[c.key()] = c
        randoms = list({c.key(): c for c in (sample_candidate(self.sketches, self.rng,
                                                              filled=True)
                                              for _ in range(4 * max(n_random, 1)))
                        if c.key() not in self.measured and c.key() not in picks}.values())
        fit = self.fits([c.state(self.sketches[c.sketch]) for c in randoms])
        for c in [c for c, ok in zip(randoms, fit, strict=True) if ok][:n - len(picks)]:
            picks[c.key()] = c
        for k, c in picks.items():
            self._candidates[k] = c
        return list(picks.values())
