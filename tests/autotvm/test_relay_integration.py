"""AutoTVM on a kiln.relay model: task extraction, tuned configs in relay.build, the
whole-model tuning driver and ``kiln tune``."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

import kiln  # noqa: E402
from kiln import autotvm, relay  # noqa: E402
from kiln.autotvm.task.relay_integration import workload_of  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.relay import testing  # noqa: E402

TEMPLATES = {"conv2d_NCHWc.x86", "depthwise_conv2d_NCHWc.x86", "dense.x86"}


def _import(model):
    return relay.frontend.from_onnx(model)


def _run(lib, model):
    name, x = testing.random_input(model)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.set_input(name, x)
    gm.run()
    return x, gm.get_output(0).numpy()


def _reference(model, x):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _option():
    return autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2, timeout=30),
                                  runner=autotvm.LocalRunner(number=2, repeat=2, timeout=30))


# ---- extraction ------------------------------------------------------------------------
def test_extract_dedupes_workloads_and_counts_flops():
    mod, params = _import(testing.residual_block(c=8, hw=9))
    tasks = autotvm.task.extract_from_program(mod, params, target="llvm")
    assert len(tasks) == 1  # the block's two 3x3 convolutions have the same workload
    (task,) = tasks
    assert task.name == "conv2d_NCHWc.x86" and task.num_uses == 2
    assert task.flop == 2 * 8 * 9 * 9 * 8 * 3 * 3
    assert len(task.config_space) > 1
    assert {"tile_ow", "tile_oc", "parallel_axis", "unroll_ic"} <= \
        set(task.config_space.space_map)


def test_extract_every_tunable_kind_and_filter_ops():
    mod, params = _import(testing.depthwise())
    names = [t.name for t in autotvm.task.extract_from_program(mod, params, "llvm")]
    assert "depthwise_conv2d_NCHWc.x86" in names and "conv2d_NCHWc.x86" in names
    mod, params = _import(testing.gemm_classifier())
    tasks = autotvm.task.extract_from_program(mod, params, "llvm", ops=["nn.dense"])
    assert [t.name for t in tasks] == ["dense.x86"]
    assert tasks[0].flop > 0
    assert {t.name for t in autotvm.task.extract_from_program(mod, params, "llvm")} <= \
        TEMPLATES


@pytest.mark.parametrize("target, block", [("llvm -mcpu=skylake-avx512", 16),
                                           ("llvm -mcpu=haswell", 8)])
def test_extract_sees_the_kernels_relay_build_compiles(target, block):
    """Extraction runs relay.build's front half under the target: its channel blocks, and
    one use per kernel relay.build compiles."""
    mod, params = _import(testing.residual_block(c=32, hw=9))
    tasks = autotvm.task.extract_from_program(mod, params, target)
    assert {t.workload[1][1][-1] for t in tasks} == {block}  # data [N, C/b, H, W, b]
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, target, params=params)
    kernels = [line for line in lib.summary.splitlines() if "conv2d_NCHWc" in line]
    assert sum(t.num_uses for t in tasks) == len(kernels) == 2


def test_extract_errors():
    mod, params = _import(testing.conv_bias_relu())
    with pytest.raises(ValueError, match="no tunable template"):
        autotvm.task.extract_from_program(mod, params, "llvm", ops=["softmax"])
    with pytest.raises(TypeError, match="kiln.relay module"):
        autotvm.task.extract_from_program(None, params, "llvm")
    with relay.build_config(opt_level=2):  # no layout pass: no NCHWc kernels to tune
        assert autotvm.task.extract_from_program(mod, params, "llvm") == []


# ---- the fallback config is the hand schedule ------------------------------------------
@pytest.mark.parametrize("model", [testing.residual_block, testing.depthwise,
                                   testing.gemm_classifier])
def test_fallback_config_is_the_hand_schedule(model):
    from kiln.topi.x86 import schedule_auto

    m = model()
    mod, params = _import(m)
    for task in autotvm.task.extract_from_program(mod, params, "llvm"):
        s_cfg, args = task.instantiate(autotvm.task.FallbackConfigEntity())
        s_hand = schedule_auto([args[-1]])
        assert str(kiln.lower(s_cfg, args)) == str(kiln.lower(s_hand, args)), task


# ---- tuned configs in relay.build ------------------------------------------------------
@pytest.mark.parametrize("model", [testing.residual_block, testing.depthwise])
def test_tuned_model_matches_onnxruntime(model, tmp_path):
    m = model()
    mod, params = _import(m)
    log = tmp_path / "tune.json"
    tasks = autotvm.task.extract_from_program(mod, params, "llvm")
    for task in tasks:
        tuner = autotvm.RandomTuner(task, seed=1)
        tuner.tune(2, _option(), callbacks=[autotvm.callback.log_to_file(str(log))])
        assert tuner.best_config is not None
    best = autotvm.ApplyHistoryBest(str(log))
    with autotvm.apply_history_best(str(log)):
        with relay.build_config(opt_level=3):
            lib = relay.build(mod, "llvm", params=params)
    for task in tasks:
        cfg, _ = best.best_by_workload[("cpu", task.workload)]
        assert f"{task.name} config #{cfg.index}" in lib.summary
    x, y = _run(lib, m)
    np.testing.assert_allclose(y, _reference(m, x), rtol=1e-4, atol=1e-4)
    untuned = relay.build(mod, "llvm", params=params)
    assert "autotvm" not in untuned.summary


def test_apply_config_forces_a_config_in_the_graph():
    m = testing.conv_bias_relu()
    mod, params = _import(m)
    (task,) = autotvm.task.extract_from_program(mod, params, "llvm")
    last = task.config_space.get(len(task.config_space) - 1)
    with autotvm.ApplyConfig(last):
        lib = relay.build(mod, "llvm", params=params)
    assert f"config #{last.index}" in lib.summary
    x, y = _run(lib, m)
    np.testing.assert_allclose(y, _reference(m, x), rtol=1e-4, atol=1e-4)


def test_workload_keys_match_the_log(tmp_path):
    mod, params = _import(testing.conv_bias_relu())
    (task,) = autotvm.task.extract_from_program(mod, params, "llvm")
    from kiln.relay.alter_layout import alter_op_layout

    g = alter_op_layout(relay.optimize(mod, params))
    (node,) = [n for n in g.nodes if n.op == "conv2d_NCHWc"]
    assert workload_of(node) == task.workload


# ---- the whole-model driver -----------------------------------------------------------
def test_parse_budget():
    from kiln.autotvm.graph_tuning import parse_budget

    assert parse_budget("10m") == 600 and parse_budget("90s") == 90
    assert parse_budget("1h30m") == 5400 and parse_budget("2.5m") == 150
    assert parse_budget("45") == 45
    for bad in ("", "ten", "10x", "0", "-1m", "5 5"):
        with pytest.raises(ValueError, match="budget"):
            parse_budget(bad)


def test_budget_weights_follow_flops():
    from kiln.autotvm.graph_tuning import budget_weights

    mod, params = _import(testing.depthwise())
    tasks = autotvm.task.extract_from_program(mod, params, "llvm")
    w = budget_weights(tasks)
    assert abs(sum(w) - 1) < 1e-9 and all(x > 0 for x in w)
    heavy = max(range(len(tasks)), key=lambda i: tasks[i].flop * tasks[i].num_uses)
    assert w[heavy] == max(w)


def test_hand_config_index_is_the_fallback():
    from kiln.autotvm.graph_tuning import hand_config_index

    mod, params = _import(testing.residual_block())
    (task,) = autotvm.task.extract_from_program(mod, params, "llvm")
    idx = hand_config_index(task)
    s1, args1 = task.instantiate(task.config_space.get(idx))
    s2, args2 = task.instantiate(autotvm.task.FallbackConfigEntity())
    assert str(kiln.lower(s1, args1)) == str(kiln.lower(s2, args2))


@pytest.mark.slow
def test_tune_graph_measures_the_hand_schedule_first(tmp_path):
    import io

    from kiln.autotvm.graph_tuning import hand_config_index

    m = testing.gemm_classifier()
    mod, params = _import(m)
    log = tmp_path / "t.json"
    out = io.StringIO()
    best = tmp_path / "best.json"
    tasks, report = autotvm.tune_graph(mod, params, str(log), budget_s=60, n_trial=2,
                                       tuner="random", option=_option(), stream=out,
                                       best_file=str(best), verify_top=1, verify_rounds=2)
    assert len(report) == len(tasks) >= 2
    records = list(autotvm.record.load_from_file(str(log)))
    winners = {inp.task.workload: inp.config.index
               for inp, _ in autotvm.record.load_from_file(str(best))}
    for task in tasks:
        mine = [inp.config.index for inp, _ in records if inp.task.workload == task.workload]
        # the hand config first, a second trial, then 2 rounds of {hand, best of the two}
        assert mine[0] == hand_config_index(task) and len(mine) in (4, 6)
        assert winners[task.workload] in mine[:2]
    for r in report:
        assert r["best_s"] is not None and r["best_s"] <= r["hand_s"]
    assert "verified" in out.getvalue()
    with pytest.raises(ValueError, match="unknown tuner"):
        autotvm.tune_tasks(tasks, str(log), 1, tuner="annealing")


@pytest.mark.slow
def test_tune_tasks_with_history(tmp_path):
    """A second run given the first one's log skips the configs measured then (the hand
    config is measured again: it anchors the verification) and seeds the xgb model."""
    import io

    from kiln.autotvm.graph_tuning import hand_config_index

    pytest.importorskip("xgboost")
    mod, params = _import(testing.gemm_classifier())
    tasks = autotvm.task.extract_from_program(mod, params, "llvm")
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    autotvm.tune_tasks(tasks, str(first), 60, option=_option(), tuner="random", n_trial=3,
                       verify_top=0, stream=io.StringIO())
    out = io.StringIO()
    autotvm.tune_tasks(tasks, str(second), 60, option=_option(), tuner="xgb", n_trial=3,
                       verify_top=0, stream=out, history=str(first), min_seed_records=2)
    before = {(inp.task.workload, inp.config.index)
              for inp, _ in autotvm.record.load_from_file(str(first))}
    hands = {(t.workload, hand_config_index(t)) for t in tasks}
    again = {(inp.task.workload, inp.config.index)
             for inp, _ in autotvm.record.load_from_file(str(second))}
    assert again and (again & before) <= hands
    assert "configs measured before, cost model trained on its template's records" \
        in out.getvalue()


# ---- kiln tune -------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_tune(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from kiln.cli import main

    path = tmp_path / "m.onnx"
    path.write_bytes(testing.conv_bias_relu().SerializeToString())
    log = tmp_path / "tune.json"
    rc = main(["tune", str(path), "--budget", "30s", "--log", str(log), "--trials", "2",
               "--tuner", "random", "--repeat", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert log.exists() and "1 tuning tasks" in out
    assert "1 of" in out and "kernels use tuned configs" in out
    assert "kiln tuned" in out and "onnxruntime" in out and "MISMATCH" not in out


@pytest.mark.parametrize("argv, message", [
    (["tune", "missing.onnx"], "missing.onnx: no such file"),
    (["tune", "MODEL", "--budget", "ten minutes"], "--budget"),
    (["tune", "MODEL", "--budget", "0s"], "more than zero"),
    (["tune", "MODEL", "--trials", "0"], "--trials 0"),
    (["tune", "MODEL", "--log", "no/such/dir/t.json"], "does not exist"),
    (["tune", "MODEL", "--history", "no/such/old.json"], "--history no/such/old.json: no such"),
    (["tune", "MODEL", "--history", "MODEL"], "not a kiln tuning log"),
    (["tune", "MODEL", "--history", "BADLOG"], "bad.json:1: not a kiln tuning record"),
    (["tune", "MODEL", "--min-seed-records", "0"], "--min-seed-records 0"),
])
def test_cli_tune_errors(tmp_path, capsys, argv, message):
    from kiln.cli import main

    path = tmp_path / "m.onnx"
    path.write_bytes(testing.conv_bias_relu().SerializeToString())
    bad = tmp_path / "bad.json"
    bad.write_text('{"input": 1}\n')
    argv = [{"MODEL": str(path), "BADLOG": str(bad)}.get(a, a) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
