"""The layout pass's dense weight packing (``dense`` -> ``dense_pack``, weights packed once
at compile time) and models built with it, against onnxruntime."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.ir.expr import Var  # noqa: E402
from kiln.relay.alter_layout import alter_op_layout  # noqa: E402
from kiln.relay.graph import Graph, call, const, input_node  # noqa: E402
from kiln.topi.x86.packed_dense import pack_dense_weight  # noqa: E402

from . import models  # noqa: E402

_rng = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _avx512_blocks(monkeypatch):
    """Panels of 32 columns (two AVX-512 registers), whatever this machine's vectors."""
    monkeypatch.setenv("KILN_VECTOR_BYTES", "64")


def _weights(*shape) -> np.ndarray:
    return (_rng.standard_normal(shape) * 0.3).astype(np.float32)


def test_layout_pass_packs_each_weight_once():
    x = input_node("x", (9, 16))
    w = const(_weights(40, 16), "w")
    b = const(_weights(40), "b")
    y1 = call("dense", [x, w, b], name="fc1")
    y2 = call("dense", [x, w], name="fc2")  # the same weight: one packed constant
    g = alter_op_layout(Graph([x], [call("add", [y1, y2])]))
    packs = [n for n in g.nodes if n.op == "dense_pack"]
    assert len(packs) == 2 and not any(n.op == "dense" for n in g.nodes)
    assert packs[0].inputs[1] is packs[1].inputs[1]
    packed = packs[0].inputs[1]
    assert packed.is_const and packed.shape == (1, 16, 64)  # one panel of 4 vectors
    np.testing.assert_array_equal(packed.value, pack_dense_weight(w.value, 64))
    assert packs[0].inputs[2] is b and [n.attrs["units"] for n in packs] == [40, 40]
    assert packs[0].shape == (9, 40)


def test_dense_with_a_computed_weight_is_not_packed():
    x, w = input_node("x", (9, 16)), input_node("w", (40, 16))
    g = alter_op_layout(Graph([x, w], [call("dense", [x, w])]))
    assert [n.op for n in g.nodes if not n.is_input] == ["dense"]


@pytest.mark.parametrize("rows, packed", [(1, False), (5, False), (6, True),
                                          (Var("n"), True)])
def test_rows_below_one_register_block_keep_dense(rows, packed):
    x = input_node("x", (rows, 16))  # AVX-512: blocks of 6 rows x 4 vectors
    g = alter_op_layout(Graph([x], [call("dense", [x, const(_weights(40, 16), "w")])]))
    assert [n.op for n in g.nodes if n.op.startswith("dense")] == \
        ["dense_pack" if packed else "dense"]


def _linear_gelu_model(shape, k: int, n: int):
    """``gelu(x @ W + b) + r`` (MatMul, Add, the erf form of GELU, a residual add of a
    second input) on ``x`` of ``shape`` (rank 2 or 3, leading dims may be names)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Div", ["hb", "sqrt2"], ["hs"]),
             helper.make_node("Erf", ["hs"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["hb", "e1"], ["g2"]),
             helper.make_node("Mul", ["g2", "half"], ["g"]),
             helper.make_node("Add", ["g", "r"], ["y"])]
    inits = [numpy_helper.from_array(v, name) for name, v in (
        ("w", _weights(k, n)), ("b", _weights(n)), ("sqrt2", np.float32(np.sqrt(2))),
        ("one", np.float32(1)), ("half", np.float32(0.5)))]
    out = [*shape[:-1], n]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape)),
                     helper.make_tensor_value_info("r", TensorProto.FLOAT, out)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("shape, n", [
    ((13, 20), 40),  # 2-D: a row tail, a partial panel
    pytest.param((2, 5, 24), 64, marks=pytest.mark.slow)])  # 3-D activations [B, S, K]
def test_linear_gelu_residual_is_one_packed_kernel(shape, n):
    model = _linear_gelu_model(shape, shape[-1], n)
    feed = {"x": _weights(*shape), "r": _weights(*shape[:-1], n)}
    lib, y = models.build_and_run(model, feed)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(y, sess.run(None, feed)[0], rtol=1e-4, atol=1e-4)
    kernels = [st["func"] for st in lib.plan["steps"] if "func" in st]
    assert len([f for f in kernels if "dense_pack" in f]) == 1
    assert not any("dense_pack" not in f and ("erf" in f or "multiply" in f) for f in kernels)


# ---- the dense_pack.x86 AutoTVM template -----------------------------------------------
def _packed_graph() -> Graph:
    x = input_node("x", (16, 32))
    y = call("dense", [x, const(_weights(64, 32), "w"), const(_weights(64), "b")])
    return Graph([x], [call("relu", [y])])


def _dense_pack_task():
    from kiln import autotvm

    (task,) = autotvm.task.extract_from_program(_packed_graph(), {}, "llvm",
                                                ops=["dense_pack"])
    return task


def test_dense_pack_template_space_and_fallback():
    """Knobs sized by the target's vectors (panels of four AVX-512 registers: 16, 32 or 64
    columns per block, up to 6 rows); the fallback config is the hand schedule."""
    import kiln
    from kiln import autotvm
    from kiln.topi.x86 import schedule_dense_pack

    task = _dense_pack_task()
    assert task.name == "dense_pack.x86" and task.flop == 2 * 16 * 32 * 64
    space = task.config_space.space_map
    assert [e.val for e in space["tile_n"].entities] == [16, 32, 64]
    assert [e.val for e in space["tile_m"].entities] == [1, 2, 3, 6]
    s_cfg, args = task.instantiate(autotvm.task.FallbackConfigEntity())
    assert str(kiln.lower(s_cfg, args)) == str(kiln.lower(schedule_dense_pack(args[-1]),
                                                          args))


@pytest.mark.slow  # measures configs in worker processes
def test_tuned_dense_pack_record_applies_in_relay_build(tmp_path):
    import kiln
    from kiln import autotvm, relay
    from kiln.contrib import graph_executor

    task, log = _dense_pack_task(), str(tmp_path / "tune.json")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=1, timeout=30),
                                    runner=autotvm.LocalRunner(number=2, repeat=1, timeout=30))
    tuner = autotvm.RandomTuner(task, seed=3)
    tuner.tune(3, option, callbacks=[autotvm.callback.log_to_file(log)])
    best, _ = autotvm.ApplyHistoryBest(log).best_by_workload[("cpu", task.workload)]
    g = _packed_graph()
    with autotvm.apply_history_best(log), relay.build_config(opt_level=3):
        lib = relay.build(g, "llvm")
    assert f"dense_pack.x86 config #{best.index}" in lib.summary
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    x = _weights(16, 32)
    gm.run(x=x)
    dense = next(n for n in g.nodes if n.op == "dense")
    w, b = dense.inputs[1].value, dense.inputs[2].value
    np.testing.assert_allclose(gm.get_output(0).numpy(), np.maximum(x @ w.T + b, 0),
                               rtol=1e-5, atol=1e-5)
