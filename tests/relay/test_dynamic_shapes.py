"""Whole models with a symbolic dimension (docs/dynamic.md, "Whole models"): imported with
their ``dim_param`` kept, built once, run at several sizes (1 included) against onnxruntime,
with one memory plan per input shape cached by the graph module."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import kiln  # noqa: E402
from kiln import cli, relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.relay import testing  # noqa: E402
from kiln.relay.alter_layout import alter_op_layout  # noqa: E402
from kiln.runtime.graph_executor import eval_dim, plan_storages  # noqa: E402


def _dynamic_batch(m):
    """``m`` with dimension 0 of its input and output named ``batch``."""
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "batch"
    return m


def _build(m, **shape):
    mod, params = relay.frontend.from_onnx(m, shape=shape or None)
    with relay.build_config(opt_level=3):
        return relay.build(mod, target="llvm", params=params)


def _check(gm, m, name, shapes):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in shapes:
        x = np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)
        gm.set_input(name, x)
        gm.run()
        y = gm.get_output(0).numpy()
        ref = sess.run(None, {name: x})[0]
        assert y.shape == ref.shape
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_mlp_block_dynamic_sequence_length():
    m = testing.mlp_block(seq="seq", d=8, hidden=16)
    mod, _ = relay.frontend.from_onnx(m)
    assert [str(d) for d in mod["main"].inputs[0].shape] == ["seq", "8"]
    lib = _build(m)
    assert lib.plan["storages"] is None and lib.plan["shape_vars"] == {"seq": ["x", 0]}
    assert "memory plan: at run time" in lib.summary
    # each dense layer is one packed kernel over the symbolic rows (no row-block calls)
    dense = [st for st in lib.plan["steps"] if "dense" in st["func"]]
    assert len(dense) == 2 and all("dense_pack" in st["func"] and "rows" not in st
                                   for st in dense)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    _check(gm, m, "x", [(7, 8), (1, 8), (75, 8), (0, 8)])


def test_unpacked_dense_runs_in_row_blocks():
    m = testing.mlp_block(seq="seq", d=8, hidden=16)
    mod, params = relay.frontend.from_onnx(m)
    with relay.build_config(opt_level=3, disabled_pass=["AlterOpLayout"]):
        lib = relay.build(mod, target="llvm", params=params)
    # the dense groups run in blocks of 64 and 8 rows, then single rows (75 = 64 + 8 + 3)
    dense = [st["rows"] for st in lib.plan["steps"] if "dense" in st["func"]]
    assert [[k[0] for k in d["kernels"]] for d in dense] == [[64, 8, 1], [64, 8, 1]]
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    _check(gm, m, "x", [(7, 8), (75, 8)])


def test_group_mixing_rows_gets_a_symbolic_kernel():
    from onnx import TensorProto, helper

    g = helper.make_graph(  # softmax over the symbolic axis: rows are not independent
        [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    lib = _build(m)
    assert not any("rows" in st for st in lib.plan["steps"])
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    _check(gm, m, "x", [(1, 3), (5, 3)])


def test_conv_model_dynamic_batch_and_plan_cache():
    m = _dynamic_batch(testing.conv_bias_relu(c=3, f=4, hw=5))
    lib = _build(m)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    _check(gm, m, "x", [(1, 3, 5, 5), (3, 3, 5, 5), (2, 3, 5, 5)])
    assert gm.num_cached_plans == 3  # batch 1 (the start), 3, 2
    _check(gm, m, "x", [(3, 3, 5, 5), (1, 3, 5, 5)])
    assert gm.num_cached_plans == 3  # a size seen before reuses its arrays and calls


@pytest.mark.parametrize("hw, winograd", [(24, True), (5, False)])
def test_dynamic_batch_chooses_winograd_as_for_one_image(hw, winograd):
    """A 3x3 convolution over a symbolic batch takes Winograd where it pays for one image
    (its kernels run an image at a time, ``relay.row_blocks``), as the build for batch 1."""
    m = _dynamic_batch(testing.conv_bias_relu(c=4, f=8, hw=hw))
    mod, params = relay.frontend.from_onnx(m)
    ops = {n.op for n in alter_op_layout(relay.optimize(mod, params)).nodes}
    assert ("conv2d_winograd_NCHWc" in ops) is winograd
    assert ("conv2d_NCHWc" in ops) is not winograd


@pytest.mark.slow  # a Winograd build (5 s)
def test_dynamic_batch_winograd_runs_at_every_batch():
    m = _dynamic_batch(testing.conv_bias_relu(c=4, f=8, hw=24))
    lib = _build(m)
    assert "winograd" in lib.summary and "(blocks of 1 rows)" in lib.summary
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    _check(gm, m, "x", [(1, 4, 24, 24), (0, 4, 24, 24), (3, 4, 24, 24)])


@pytest.mark.slow  # two builds
def test_dynamic_build_matches_the_specialised_build():
    m = _dynamic_batch(testing.gemm_classifier(c=4, hw=4, classes=5))
    x = np.random.default_rng(0).standard_normal((2, 4, 4, 4)).astype(np.float32)
    out = []
    for lib in (_build(m), _build(m, x=(2, 4, 4, 4))):
        gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
        gm.set_input("x", kiln.nd.array(x))  # an NDArray of a new shape rebinds too
        gm.run()
        out.append(gm.get_output(0).numpy())
    np.testing.assert_allclose(out[0], out[1], rtol=1e-5, atol=1e-6)


def test_dynamic_export_load_and_cli(tmp_path, capsys):
    m = testing.mlp_block(seq="seq", d=8, hidden=16)
    onnx_path, kiln_path = tmp_path / "mlp.onnx", tmp_path / "mlp.kiln"
    onnx.save(m, onnx_path)
    assert cli.main(["compile", str(onnx_path), "-o", str(kiln_path), "--quiet"]) == 0
    gm = graph_executor.GraphModule(relay.load_module(kiln_path)["default"](kiln.cpu(0)))
    _check(gm, m, "x", [(5, 8), (1, 8)])
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    capsys.readouterr()
    assert cli.main(["run", str(kiln_path), "--input", str(tmp_path / "x.npy"), "--output",
                     str(tmp_path / "y.npy")]) == 0
    assert np.load(tmp_path / "y.npy").shape == (4, 8)


def test_operator_without_symbolic_support_names_op_and_dim():
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="r")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])],
        [onnx.numpy_helper.from_array(np.array([-1, 2], np.int64), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with pytest.raises(NotImplementedError, match=r"Reshape .*symbolic dimension n \(axis 0"):
        relay.frontend.from_onnx(m)
    mod, _ = relay.frontend.from_onnx(m, shape={"x": (3, 4)})  # a value for it compiles
    assert mod["main"].outputs[0].shape == (6, 2)


def test_gpu_build_of_a_dynamic_graph_is_not_implemented():
    mod, params = relay.frontend.from_onnx(testing.mlp_block(seq="seq", d=8, hidden=16))
    with pytest.raises(NotImplementedError, match=r"symbolic dimensions \(seq\) compiles "
                                                  r"for CPU targets only, not cuda"):
        relay.build(mod, target="cuda", params=params)


def test_plan_storages_best_fit():
    # (first step, last step, bytes): the third reuses the first's storage (dead by step 2)
    assign, sizes = plan_storages([(0, 1, 100), (1, 2, 50), (2, 3, 80), (3, 4, 200)])
    assert assign == [0, 1, 0, 1] and sizes == [100, 200]


def test_eval_dim():
    env = {"batch": 6, "seq": 7}
    assert eval_dim(3, env) == 3
    assert eval_dim("(batch*512)", env) == 3072
    assert eval_dim("floordiv((seq + 3), 2)", env) == 5
    assert eval_dim("max(batch, floormod(seq, 4))", env) == 6
    with pytest.raises(kiln.TVMError, match="cannot evaluate"):
        eval_dim("__import__('os')", env)


def test_attention_block_with_symbolic_operands(caplog):
    """Both products of attention (``q k^T``, ``softmax(...) v``) have the symbolic sequence
    length in their operands; they take the x86 schedule (topi.x86.batch_matmul's register
    blocks, no fallback to the generic one) and one build runs every length, 0 and the
    block's edges included."""
    m = testing.attention_block(seq="seq", d=8)
    with caplog.at_level("WARNING", logger="kiln.relay.strategy"):
        lib = _build(m)
    assert "matmul" in lib.summary and "softmax" in lib.summary
    assert not [r for r in caplog.records if "matmul" in r.getMessage()]
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    _check(gm, m, "x", [(1, 8), (7, 8), (8, 8), (9, 8), (33, 8), (70, 8), (0, 8)])
