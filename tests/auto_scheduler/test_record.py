"""auto_scheduler logs: a line per state, the best record, ApplyHistoryBest, bad lines."""

from __future__ import annotations

import random

import pytest

from kiln import auto_scheduler
from kiln.auto_scheduler import MeasureErrorNo, MeasureInput, MeasureResult
from kiln.auto_scheduler.annotation import sample_candidate
from kiln.auto_scheduler.loop_state import SplitStep, State
from kiln.auto_scheduler.sketch import generate_sketches

from . import workloads  # noqa: F401 - registers the workloads


def _states(task, n):
    sketches = generate_sketches(task.compute_dag)
    rng = random.Random(0)
    return [c.state(sketches[c.sketch])
            for c in (sample_candidate(sketches, rng) for _ in range(n))]


def test_records_round_trip_and_the_best_is_the_fastest_success(tmp_path):
    task = auto_scheduler.SearchTask(func="as_test_matmul", args=(64, 64, 64, "float32"),
                                     target="llvm")
    s1, s2, s3 = _states(task, 3)
    results = [MeasureResult((3e-5, 2e-5, 4e-5), 0, 0.5, 1.0),
               MeasureResult(("boom",), int(MeasureErrorNo.WRONG_ANSWER), 0.5, 2.0),
               MeasureResult((1e-4,), 0, 0.5, 3.0)]
    log = str(tmp_path / "log.json")
    auto_scheduler.save_records(log, [MeasureInput(task, s) for s in (s1, s2, s3)], results)
    rows = list(auto_scheduler.load_records(log))
    assert [r.error_no for _, r in rows] == [0, 5, 0]
    assert rows[1][1].costs == ("boom",)
    assert rows[0][0].state.key() == s1.key()
    best_inp, best_res = auto_scheduler.load_best_record(log, task.workload_key, "llvm")
    assert best_inp.state.key() == s1.key() and best_res.cost == 3e-5
    assert auto_scheduler.load_best_record(log, '["other"]') is None
    ctx = auto_scheduler.ApplyHistoryBest(log)
    assert ctx.query("c", task.workload_key).key() == s1.key()  # llvm and c share records
    assert ctx.query("llvm", '["other"]') is None


def test_a_malformed_line_names_its_number(tmp_path):
    log = tmp_path / "bad.json"
    log.write_text('{"i": 1}\n')
    with pytest.raises(ValueError, match="bad.json:1"):
        list(auto_scheduler.load_records(str(log)))


def test_a_tail_split_round_trips_and_old_records_load(tmp_path):
    """A vectorized tile with a tail (4 of 14 columns) keeps its tail strategy through the
    log and apply_best; a five-field split record (before tails) loads without one."""
    task = auto_scheduler.SearchTask(func="as_test_matmul", args=(16, 16, 14, "float32"),
                                     target="llvm")
    sketches = generate_sketches(task.compute_dag)
    rng = random.Random(0)
    state = next(s for s in (c.state(sketches[c.sketch])
                             for c in (sample_candidate(sketches, rng) for _ in range(200)))
                 if any(isinstance(t, SplitStep) and t.tail for t in s.steps))
    log = str(tmp_path / "log.json")
    auto_scheduler.save_records(log, [MeasureInput(task, state)],
                                [MeasureResult((1e-5,), 0, 0.5, 1.0)])
    ((inp, _),) = auto_scheduler.load_records(log)
    assert inp.state.key() == state.key()
    assert [s.tail for s in inp.state.steps if isinstance(s, SplitStep)] == \
        [s.tail for s in state.steps if isinstance(s, SplitStep)]
    sch, _ = task.apply_best(log)
    assert "partition" in {rel.strategy for st in sch.stages for rel in st.relations
                           if hasattr(rel, "strategy")}
    old = State.from_json([["SP", "C", "j", 14, [2, 7]]])
    assert old.steps[0] == SplitStep("C", "j", 14, (2, 7)) and old.steps[0].tail is None
    assert old.to_json() == [["SP", "C", "j", 14, [2, 7]]]
