"""Tuning records and dispatch: the log round trip, pick_best and apply_history_best."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput, MeasureResult
from kiln.autotvm.record import decode, encode, load_from_file, pick_best, save_to_file

from ._templates import gemm


def _records(task, entries):
    """(MeasureInput, MeasureResult) for (config index, mean seconds or None = failed)."""
    out = []
    for idx, cost in entries:
        cfg = task.config_space.get(idx)
        if cost is None:
            res = MeasureResult(("the kernel crashed",), int(MeasureErrorNo.RUNTIME_DEVICE),
                                0.5, 1.0)
        else:
            res = MeasureResult((cost, cost), 0, 0.5, 1.0)
        out.append((MeasureInput(task.target, task, cfg), res))
    return out


def test_record_round_trip(tmp_path):
    task = autotvm.task.create("test_gemm", (64, 32, 16), "llvm")
    recs = _records(task, [(5, 1e-3), (17, None), (200, 2e-4)])
    log = tmp_path / "t.log"
    save_to_file(recs, log)
    lines = log.read_text().splitlines()
    assert len(lines) == 3
    back = list(load_from_file(log))
    for (inp, res), (inp2, res2) in zip(recs, back, strict=True):
        assert inp2.task.workload == inp.task.workload == ("test_gemm", 64, 32, 16)
        assert str(inp2.target) == "llvm"
        assert inp2.config == inp.config and inp2.config.index == inp.config.index
        assert res2.error_no == res.error_no and res2.costs == tuple(res.costs)
    assert encode(*back[0]) == lines[0]
    assert decode("   \n") is None
    with pytest.raises(ValueError, match="not a kiln tuning record"):
        decode('{"input": 3}')
    (tmp_path / "bad.log").write_text(lines[0] + "\nnot json\n")
    with pytest.raises(ValueError, match="bad.log:2"):
        list(load_from_file(tmp_path / "bad.log"))


def test_pick_best_keeps_fastest_success_per_workload(tmp_path):
    t1 = autotvm.task.create("test_gemm", (64, 32, 16), "llvm")
    t2 = autotvm.task.create("test_gemm", (16, 16, 16), "llvm")
    log = tmp_path / "all.log"
    save_to_file(_records(t1, [(5, 1e-3), (17, None), (200, 2e-4), (9, 3e-4)])
                 + _records(t2, [(3, 5e-5), (4, 4e-5)]), log)
    pick_best(log, tmp_path / "best.log")
    best = {inp.task.workload: inp.config.index
            for inp, _ in load_from_file(tmp_path / "best.log")}
    assert best == {t1.workload: 200, t2.workload: 4}


def test_apply_history_best_dispatches_the_best_config(tmp_path, caplog):
    task = autotvm.task.create("test_gemm", (64, 32, 16), "llvm")
    log = tmp_path / "t.log"
    save_to_file(_records(task, [(5, 1e-3), (17, None), (200, 2e-4), (9, 3e-4)]), log)
    best = task.config_space.get(200)
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        with autotvm.apply_history_best(str(log)) as ctx:
            assert ctx.query(None, task.workload) == best
            s, args = gemm(64, 32, 16)
            s2, args2 = task.instantiate()
            other = gemm(64, 32, 8)  # not in the log: falls back
    assert not any("(64, 32, 16)" in r.getMessage() for r in caplog.records)
    assert any("('test_gemm', 64, 32, 8)" in r.getMessage() for r in caplog.records)
    want = str(tvm.lower(*task.instantiate(best)))
    assert str(tvm.lower(s, args)) == want == str(tvm.lower(s2, args2))
    assert str(tvm.lower(*other)) != want
    # the compiled best config computes the product
    a = np.random.default_rng(0).random((64, 32), dtype=np.float32)
    b = np.random.default_rng(1).random((32, 16), dtype=np.float32)
    c = tvm.nd.empty((64, 16))
    tvm.build(s, args)(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5)
    # outside the context the template is back to its fallback config
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        assert str(tvm.lower(*gemm(64, 32, 16))) != want


def test_tune_then_apply_history_best(tmp_path):
    task = autotvm.task.create("test_gemm", (32, 32, 32), "llvm")
    log = tmp_path / "tune.log"
    tuner = autotvm.RandomTuner(task, seed=3)
    tuner.tune(4, autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2), runner=autotvm.LocalRunner(number=2)),
        callbacks=[autotvm.callback.log_to_file(str(log))])
    with autotvm.apply_history_best(str(log)):
        s, args = gemm(32, 32, 32)
    assert str(tvm.lower(s, args)) == str(tvm.lower(*task.instantiate(tuner.best_config)))


def test_tensor_arguments_round_trip(tmp_path):
    from kiln import te

    @autotvm.template("test_tensor_args")
    def scale(A, factor):
        C = te.compute(A.shape, lambda i, j: A[i, j] * factor, name="C")
        s = te.create_schedule(C.op)
        cfg = autotvm.get_config()
        cfg.define_split("t", C.op.axis[1])
        cfg["t"].apply(s, C, C.op.axis[1])
        return s, [A, C]

    A = te.placeholder((4, 8), name="A")
    task = autotvm.task.create("test_tensor_args", (A, 2.0), "llvm")
    assert task.workload == ("test_tensor_args", ("TENSOR", (4, 8), "float32"), 2.0)
    log = tmp_path / "t.log"
    save_to_file(_records(task, [(2, 1e-6)]), log)
    (inp, _), = load_from_file(log)
    assert inp.task.workload == task.workload
    s, args = inp.task.instantiate(inp.config)  # placeholders rebuilt from the workload
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    c = tvm.nd.empty((4, 8))
    tvm.build(s, args)(tvm.nd.array(a), c)
    np.testing.assert_allclose(c.numpy(), a * 2)
    with autotvm.apply_history_best(str(log)):
        s2, args2 = scale(A, 2.0)
    assert str(tvm.lower(s2, args2)) == str(tvm.lower(*task.instantiate(inp.config)))
