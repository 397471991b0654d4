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


@pytest.fixture
def lossless_branches(monkeypatch):
    """Two threads and fused branches as fast as their hand schedules (the rule before
    issue 18's measurement): the inception block's 1x1 branches fuse, for the tests of the
    fused kernel itself (run order, memory plan, tuned records, results)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr(hf, "LOST_VECTORIZATION", 1.0)


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


def test_finds_the_branches_of_an_inception_block(lossless_branches):
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


def _concat_of_two_pools(m=3, c=8, hw=16):
    """``concat(maxpool3x3(x), maxpool3x3(z))``: two balanced plain branches (pooling has
    no register-blocked schedule) of ``m`` rows, each one thread's work unfused (63k)."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("MaxPool", [x], [y], kernel_shape=[3, 3], pads=[1] * 4)
             for x, y in (("x", "a"), ("z", "b"))]
    nodes.append(helper.make_node("Concat", ["a", "b"], ["y"], axis=1))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [m, c, hw, hw])
                     for n in "xz"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, 2 * c, hw, hw])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_fused_inputs_of_a_concat_match_onnxruntime(lossless_branches):
    model = _concat_of_two_convs()
    feed, ref = _reference(model)
    lib, y = _run(model, feed)
    assert lib.summary.count("conv2d_NCHWc") == 2 and "horizontal:" in lib.summary
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_the_inception_block_is_not_fused(monkeypatch):
    """Issue 18's misprediction: its three 1x1 convolutions lose their register-blocked
    schedules in a fused loop (1.65x), more than two threads save, on 1, 2 or 4 threads."""
    _, groups = _groups(testing.inception_block())
    for threads in ("1", "2", "4"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        assert not any(isinstance(k, hf.HorizontalGroup) for k in hf.horizontal_fusion(groups))


def test_balanced_plain_branches_of_odd_rows_are_fused_on_two_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    model = _concat_of_two_pools()
    inputs = {n: testing.random_input(model, seed=k)[1] for k, n in enumerate("xz")}
    ort = pytest.importorskip("onnxruntime")
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    lib, y = _run(model, inputs)
    assert "horizontal: max_pool2d  [complex-out-fusable] | max_pool2d" in lib.summary
    np.testing.assert_array_equal(y, ref)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # one thread: nothing to share
    _, groups = _groups(model)
    assert not any(isinstance(k, hf.HorizontalGroup) for k in hf.horizontal_fusion(groups))


@pytest.mark.slow
def test_fused_inception_block_matches_onnxruntime(lossless_branches):
    model = testing.inception_block()
    feed, ref = _reference(model)
    lib, y = _run(model, feed)
    assert "horizontal:" in lib.summary
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_same_results_with_and_without_the_pass(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # 4 threads: the c=48 block's branches fuse
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
    a, b = (hf.Branch(name, 3 * big // 4) for name in "ab")
    # two balanced plain branches: half the work each on two threads saves more than the
    # fork/join; on one thread nothing
    assert hf.pays([a, b], threads=2) == [a, b]
    assert hf.pays([a, b], threads=1) == []
    # too little work for a fork/join
    small = [hf.Branch(n, big // 8) for n in "ab"]
    assert hf.pays(small, threads=2) == []
    # a register-blocked branch that would keep one thread busy longer than the rest save:
    # it keeps its kernel, the rule is tried on the rest
    c, d = (hf.Branch(name, big // 2 + 232) for name in "cd")
    assert hf.pays([hf.Branch("x", 65_000, register_blocked=True), c, d], threads=2) == [c, d]
    assert hf.pays([hf.Branch("x", big - 1), hf.Branch("y", big // 4)], threads=2) == []


def test_cost_rule_counts_rows_and_lost_vectorization():
    w = 60_000
    # balanced plain branches of 3 rows (odd M): 6 rows, 3 on each of two threads
    odd = [hf.Branch(n, w, rows=3) for n in "ab"]
    assert hf.fused_cost(odd, 2) == pytest.approx(hf.FORK_JOIN_WORK + w)
    assert hf.pays(odd, threads=2) == odd
    # the same branches register-blocked: their fused loops lose the hand schedules' speed
    blocked = [hf.Branch(n, w, rows=3, register_blocked=True) for n in "ab"]
    assert hf.pays(blocked, threads=2) == []
    assert hf.makespan([2, 3, 2, 3], 2) == 5  # most expensive first, to the least loaded
    assert hf.makespan([5, 1], 4) == 5


def test_inception_branches_are_register_blocked():
    _, groups = _groups(testing.inception_block())
    small = [hf.branch_of(g, w) for g in groups
             if (w := hf.group_work(g)) is not None and w < hf.PARALLEL_WORK]
    convs = [b for b in small if any(n.op == "conv2d_NCHWc" for n in b.group.nodes)]
    assert len(convs) == 4 and all(b.register_blocked and b.rows == 1 for b in convs)
    assert not any(b.register_blocked for b in small if b not in convs)


def test_large_branches_keep_their_kernels():
    _, groups = _groups(testing.inception_block())
    large = [g for g in groups if hf.group_work(g) >= hf.PARALLEL_WORK]
    assert len(large) == 2  # the 3x3 and the 5x5 convolutions: their own parallel loops
    kernels = hf.horizontal_fusion(groups)
    assert all(g in kernels for g in large)


def test_a_fused_schedule_that_does_not_apply_falls_back_to_one_kernel_per_group(
        lossless_branches, monkeypatch, caplog):
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


def test_a_tuned_branch_keeps_its_kernel_and_the_reason_is_logged(lossless_branches,
                                                                 tmp_path, caplog):
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
def test_a_tuned_branch_is_built_with_its_config(lossless_branches, tmp_path):
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


def test_a_surely_large_group_is_not_small():
    """A group whose output has PARALLEL_WORK elements is skipped before its compute is
    built: its work is never below the threshold."""
    _, groups = _groups(testing.inception_block(c=64, hw=32))
    large = [g for g in groups if hf._surely_large(g)]
    assert large and len(large) < len(groups)
    for g in large:
        work = hf.group_work(g)
        assert work is None or work >= hf.PARALLEL_WORK
