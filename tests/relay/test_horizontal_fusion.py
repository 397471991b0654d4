"""Horizontal fusion in graphs (kiln/relay/horizontal_fusion.py, issue 18): the pass finds
the independent small groups of one depth (an inception block's branches), fuses them into
one kernel (``create_fused_loop``) when the cost rule says so, keeps a valid run order and
memory plan, is switched off by its PassContext key, and leaves results unchanged."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

import kiln  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.ir.transform import PassContext  # noqa: E402
from kiln.relay import horizontal_fusion as hf  # noqa: E402
from kiln.relay import testing  # noqa: E402
from kiln.relay.build_module import optimize_and_fuse  # noqa: E402
from kiln.relay.transform import lifetimes  # noqa: E402
from kiln.target import Target  # noqa: E402

OFF = {"relay.horizontal_fusion": False}


def _groups(model):
    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        return optimize_and_fuse(mod, params, Target("llvm"))


def _run(model, feed, **ctx):
    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3, **ctx):
        lib = relay.build(mod, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    m.set_input(**feed)
    m.run()
    return lib, m.get_output(0).numpy()


def test_finds_the_branches_of_an_inception_block():
    graph, groups = _groups(testing.inception_block())
    kernels = hf.horizontal_fusion(groups)
    (fused,) = [k for k in kernels if isinstance(k, hf.HorizontalGroup)]
    # the three 1x1 convolutions reading x and the pooled branch's layout transform
    assert [g.describe().split("  ")[0] for g in fused.groups] == \
        ["conv2d_NCHWc + add + relu"] * 3 + ["layout_transform"]
    depth = hf.group_depths(groups)
    assert len({depth[id(g)] for g in fused.groups}) == 1
    # every group in exactly one kernel, each kernel after the kernels producing its inputs
    assert sorted(id(g) for k in kernels for g in getattr(k, "groups", [k])) == \
        sorted(id(g) for g in groups)
    done: set[int] = set()
    for k in kernels:
        needed = {i.uid for n in k.nodes for i in n.inputs} - {n.uid for n in k.nodes}
        assert all(uid in done for uid in needed if uid in {o.uid for g in groups
                                                            for o in g.outputs})
        done |= {o.uid for o in k.outputs}
    # the fused outputs are written in one step: none reuses another's storage
    live = lifetimes(kernels, graph)
    steps = {live[o.uid][0] for o in fused.outputs}
    assert len(steps) == 1


def _reference(model):
    ort = pytest.importorskip("onnxruntime")
    name, x = testing.random_input(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return {name: x}, sess.run(None, {name: x})[0]


def _concat_of_two_convs(c=32, f=16, hw=9):
    """``concat(relu(conv1x1_a(x)), relu(conv1x1_b(x)))``: two small independent groups."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((f, c, 1, 1)).astype(np.float32), w)
             for w in ("wa", "wb")]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"]),
             helper.make_node("Conv", ["x", "wb"], ["b"]),
             helper.make_node("Relu", ["a"], ["ar"]), helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Concat", ["ar", "br"], ["y"], axis=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * f, hw, hw])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_fused_inputs_of_a_concat_match_onnxruntime():
    model = _concat_of_two_convs()
    feed, ref = _reference(model)
    lib, y = _run(model, feed)
    assert lib.summary.count("conv2d_NCHWc") == 2 and "horizontal:" in lib.summary
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_fused_inception_block_matches_onnxruntime():
    model = testing.inception_block()
    feed, ref = _reference(model)
    lib, y = _run(model, feed)
    assert "horizontal:" in lib.summary
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_same_results_with_and_without_the_pass():
    model = testing.inception_block(c=48, hw=7, seed=3)
    feed, ref = _reference(model)
    lib_on, y_on = _run(model, feed)
    lib_off, y_off = _run(model, feed, config=OFF)
    assert "horizontal:" not in lib_off.summary
    assert len(lib_on.plan["steps"]) < len(lib_off.plan["steps"])
    np.testing.assert_allclose(y_on, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_on, y_off, rtol=1e-5, atol=1e-5)


def test_switched_off_by_its_key_and_disabled_pass_and_below_opt_level_3():
    cpu = Target("llvm")
    assert hf.is_enabled(PassContext(opt_level=3), cpu)
    assert not hf.is_enabled(PassContext(opt_level=3, config=OFF), cpu)
    assert not hf.is_enabled(PassContext(opt_level=3, disabled_pass=["HorizontalFusion"]), cpu)
    assert not hf.is_enabled(PassContext(opt_level=2), cpu)
    assert not hf.is_enabled(PassContext(opt_level=3), Target("cuda"))


def test_cost_rule():
    big = hf.PARALLEL_WORK
    a, b, c = object(), object(), object()
    # together they reach the parallel threshold, none dominates: fused
    assert hf.pays([(big // 2, a), (big // 2, b)]) == [a, b]
    # too little work for a fork/join
    assert hf.pays([(big // 8, a), (big // 8, b)]) == []
    # one branch holds more than half of the work: it keeps its kernel, the rest is tried
    assert hf.pays([(3 * big, a), (big // 2, b), (big // 2, c)]) == [b, c]
    assert hf.pays([(big - 1, a), (big // 4, b)]) == []


def test_large_branches_keep_their_kernels():
    _, groups = _groups(testing.inception_block())
    large = [g for g in groups if hf.group_work(g) >= hf.PARALLEL_WORK]
    assert len(large) == 2  # the 3x3 and the 5x5 convolutions: their own parallel loops
    kernels = hf.horizontal_fusion(groups)
    assert all(g in kernels for g in large)


def test_a_fused_schedule_that_does_not_apply_falls_back_to_one_kernel_per_group(
        monkeypatch, caplog):
    from kiln.errors import ScheduleError
    from kiln.relay import strategy

    def fail(outs):
        raise ScheduleError("no fused schedule")

    monkeypatch.setattr(strategy, "schedule_branches", fail)
    model = _concat_of_two_convs()
    feed, ref = _reference(model)
    with caplog.at_level("WARNING", logger="kiln.relay.strategy"):
        lib, y = _run(model, feed)
    assert "horizontal fusion failed" in caplog.text and "horizontal:" not in lib.summary
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def _record_for(node, log):
    """A hand-made tuning record: config 0 of the template of ``node`` (a tunable graph
    node), as if a tuner had measured it."""
    from kiln import autotvm
    from kiln.autotvm.measure.measure import MeasureInput, MeasureResult
    from kiln.autotvm.task import relay_integration
    from kiln.topi.x86 import tunable  # noqa: F401 - registers the templates

    name, args = relay_integration.task_args(node)
    task = autotvm.task.create(name, args, "llvm")
    result = MeasureResult((1e-5,), 0, 0.1, 0.0)
    autotvm.record.save_to_file([(MeasureInput(task.target, task, task.config_space.get(0)),
                                  result)], str(log))
    assert task.workload == relay_integration.workload_of(node)


def _conv_with_8_outputs(groups):
    """The inception block's 1x1 convolution with 8 output channels (its own workload)."""
    return next(g for g in groups for n in g.nodes
                if n.op == "conv2d_NCHWc" and n.inputs[1].shape[-1] == 8)


def test_a_tuned_branch_keeps_its_kernel_and_the_reason_is_logged(tmp_path, caplog):
    from kiln import autotvm

    _, groups = _groups(testing.inception_block())
    tuned = _conv_with_8_outputs(groups)
    log = tmp_path / "tuned.log"
    _record_for(next(n for n in tuned.nodes if n.op == "conv2d_NCHWc"), log)
    with autotvm.apply_history_best(str(log)), \
            caplog.at_level("DEBUG", logger="kiln.relay.horizontal_fusion"):
        kernels = hf.horizontal_fusion(groups)
    assert tuned in kernels
    (fused,) = [k for k in kernels if isinstance(k, hf.HorizontalGroup)]
    assert tuned not in fused.groups and len(fused.groups) == 3
    assert "keeps its kernel: a tuning record holds a conv2d_NCHWc.x86 config" in caplog.text
    # without the record it is a branch
    assert any(tuned in k.groups for k in hf.horizontal_fusion(groups)
               if isinstance(k, hf.HorizontalGroup))


@pytest.mark.slow
def test_a_tuned_branch_is_built_with_its_config(tmp_path):
    from kiln import autotvm

    model = testing.inception_block()
    _, groups = _groups(model)
    log = tmp_path / "tuned.log"
    _record_for(next(n for n in _conv_with_8_outputs(groups).nodes
                     if n.op == "conv2d_NCHWc"), log)
    feed, ref = _reference(model)
    with autotvm.apply_history_best(str(log)):
        lib, y = _run(model, feed)
    assert "horizontal:" in lib.summary and "conv2d_NCHWc.x86 config #0" in lib.summary
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
