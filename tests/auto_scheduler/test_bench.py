"""The auto_scheduler benchmark suite on small sizes (no timing assertions): every
operator's logged state and hand schedule build and match numpy, and a short search and
AutoTVM's XGB tuner each give one curve point per trial."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from benchmarks import auto_scheduler as bench
from kiln import auto_scheduler
from kiln.auto_scheduler.annotation import sample_candidate
from kiln.auto_scheduler.sketch import generate_sketches

SMALL = {"gemm1024": (32, 32, 32), "gemm2048": (16, 32, 48), "conv64": (4, 8, 8),
         "conv256": (8, 6, 4), "depthwise": (4, 8), "row_sum": (8, 64),
         "elementwise": (8, 32)}


@pytest.mark.slow  # two builds per operator
@pytest.mark.parametrize("key", list(SMALL))
def test_logged_state_and_hand_schedule_match_numpy(key, tmp_path):
    op = replace(bench.OPERATORS[key], args=SMALL[key])
    task = bench._task(op)
    sketch = generate_sketches(task.compute_dag)[0]
    state = sample_candidate([sketch], random.Random(0)).state(sketch)
    log = tmp_path / "log.json"
    auto_scheduler.save_records(str(log), [auto_scheduler.MeasureInput(task, state)],
                                [auto_scheduler.MeasureResult((1e-5,), 0, 0.1, 0.0)])
    res = bench.compare(op, task, log, repeat=1)
    assert res["auto_scheduler"]["correct"] and res["hand"]["correct"]


@pytest.mark.slow  # four measured candidates
def test_short_searches_give_one_curve_point_per_trial(tmp_path):
    pytest.importorskip("xgboost")  # the curve's AutoTVM side is XGBTuner
    op = replace(bench.OPERATORS["gemm1024"], args=SMALL["gemm1024"])
    _, search = bench.tune(op, 2, tmp_path / "as.json", lambda _msg: None,
                           {"population_size": 8, "num_iters": 1})  # a short search
    xgb = bench.autotvm_curve(op, 2, tmp_path / "xgb.log", lambda _msg: None)
    assert len(search["curve_gflops"]) == 2 and len(xgb["curve_gflops"]) == 2
    assert "| 2 |" in "\n".join(bench._curve_table(
        {"a": search["curve_gflops"], "b": xgb["curve_gflops"]}))
