"""The kernels of a transformer layer: reshapes sunk below the dense epilogues
(kiln.relay.sink_reshape), GELU's diamond fused into its dense kernel, reshape-only groups as
views of their input's storage (transform.view_groups), decomposed layer norms as one
operator (kiln.relay.combine_layer_norm); on small graphs (values against numpy) and a small
BERT layer."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from kiln import relay  # noqa: E402
from kiln.relay import transform as T  # noqa: E402
from kiln.relay.graph import Graph, call, const, input_node  # noqa: E402
from kiln.relay.sink_reshape import sink_reshape  # noqa: E402
from kiln.relay.testing import bert_encoder  # noqa: E402

from .models import build_and_run  # noqa: E402

RNG = np.random.default_rng(0)


def _f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


W, B = _f32(16, 16), _f32(16)


def _linear_gelu_residual() -> Graph:
    """``x [1, 8, 16]``: rows, dense, reshape back, bias, exact GELU, residual add."""
    x = input_node("x", (1, 8, 16))
    rows = call("reshape", [x], newshape=(8, 16))
    y = call("reshape", [call("dense", [rows, const(W)])], newshape=(1, 8, 16))
    h = call("add", [y, const(B)])
    phi = call("erf", [call("divide", [h, const(np.float32(np.sqrt(2)))])])
    g = call("multiply", [call("multiply", [h, call("add", [phi, const(np.float32(1))])]),
                          const(np.float32(0.5))])
    return Graph([x], [call("add", [g, x])])


def test_reshape_sinks_below_the_epilogue_and_gelu_fuses_into_dense():
    sunk = sink_reshape(_linear_gelu_residual())
    groups = T.fuse_ops(sunk)
    dense = next(grp for grp in groups if any(n.op == "dense" for n in grp.nodes))
    assert [n.op for n in dense.nodes] == ["dense", "add", "divide", "erf", "add", "multiply",
                                           "multiply", "add"]
    assert dense.output.shape == (8, 16)  # the epilogue runs on the dense's rows
    views = T.view_groups(groups, sunk)
    kernels = [grp for grp in groups if grp.output.uid not in views]
    # the residual's reshape of the graph input stays a copy (an input has no storage),
    # the output's reshape too (a graph output); nothing else but the dense kernel
    assert len(kernels) == 3, [k.describe() for k in kernels]


def test_a_diamond_joins_only_when_its_paths_meet():
    x = input_node("x", (4, 8))
    d = call("dense", [x, const(_f32(8, 8))])
    a = call("sigmoid", [d])
    g = Graph([x], [call("multiply", [d, a]), a])  # ``a``, a graph output, is on a path
    groups = T.fuse_ops(g)
    assert [n.op for n in groups[0].nodes] == ["dense"]


def test_views_share_the_storage_and_extend_its_lifetime():
    x = input_node("x", (4, 8))
    d = call("dense", [x, const(_f32(8, 8))])
    r = call("reshape", [d], newshape=(2, 16))
    g = Graph([x], [call("dense", [r, const(_f32(3, 16))])])
    groups = T.fuse_ops(g)
    views = T.view_groups(groups, g)
    assert views == {r.uid: d.uid}
    kernels = [grp for grp in groups if grp.output.uid not in views]
    assign, sizes, _ = T.plan_memory(kernels, g, views)
    assert assign[r.uid] == assign[d.uid]
    assert T.lifetimes(kernels, g, views)[d.uid][1] == len(kernels) - 1


def _kernels_of(mod, params=None) -> list[str]:
    """The kernels ``relay.build`` compiles for ``mod`` (the front half only: no C)."""
    from kiln.ir.transform import PassContext
    from kiln.relay.build_module import optimize_and_fuse
    from kiln.target import Target

    with PassContext(opt_level=3):
        g, groups = optimize_and_fuse(mod, params, Target("llvm"))
    views = T.view_groups(groups, g)
    return [grp.describe() for grp in groups if grp.output.uid not in views]


def _kernels(model) -> list[str]:
    """The kernels ``relay.build`` compiles for the ONNX ``model``."""
    return _kernels_of(*relay.frontend.from_onnx(model))


def test_small_bert_layer_kernels():
    """One encoder layer: 3 QKV projections with bias, stored in the heads' layout (3; no
    head transposes: kiln.relay.head_layout), QK^T with its scale (1), softmax (1), PV (1),
    the output projection reading the heads, with bias and residual (1), layer norm (1),
    the first MLP layer with bias and GELU (1), the second with bias and residual (1), layer
    norm (1); embeddings: 2 (the values against onnxruntime: test_model_zoo)."""
    kernels = _kernels(bert_encoder(seq=16, layers=1, hidden=64, heads=2, ffn=128, vocab=50))
    assert len(kernels) == 13, kernels
    assert sum("erf + add + multiply + multiply" in k for k in kernels) == 1
    assert sum(k.startswith("softmax ") for k in kernels) == 1
    assert not any(k.startswith("reshape  ") for k in kernels)


def _decomposed_layer_norm(gamma: np.ndarray, beta: np.ndarray):
    """The residual add and layer norm as exporters wrote them before opset 17."""
    from onnx import TensorProto, helper, numpy_helper

    names = ["x", "r", "xr", "m", "d", "d2", "v", "ve", "s", "n", "ng", "y"]
    ops = [("Add", ["x", "r"]), ("ReduceMean", ["xr"]), ("Sub", ["xr", "m"]),
           ("Pow", ["d", "two"]), ("ReduceMean", ["d2"]), ("Add", ["v", "eps"]),
           ("Sqrt", ["ve"]), ("Div", ["d", "s"]), ("Mul", ["n", "g"]), ("Add", ["ng", "b"])]
    nodes = [helper.make_node(op, ins, [out], **({"axes": [-1]} if op == "ReduceMean" else {}))
             for (op, ins), out in zip(ops, names[2:], strict=True)]
    inits = [numpy_helper.from_array(v, k) for k, v in
             {"two": np.array(2.0, "float32"), "eps": np.array(1e-5, "float32"), "g": gamma,
              "b": beta}.items()]
    io = [helper.make_tensor_value_info(k, TensorProto.FLOAT, [2, 8, 16]) for k in "xry"]
    graph = helper.make_graph(nodes, "ln", io[:2], io[2:], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_decomposed_layer_norm_is_one_kernel_and_matches_numpy():
    gamma, beta = _f32(16), _f32(16)
    m = _decomposed_layer_norm(gamma, beta)
    assert [k.split("  ")[0] for k in _kernels(m)] == ["add", "layer_norm"]
    x, r = _f32(2, 8, 16), _f32(2, 8, 16)
    _, y = build_and_run(m, {"x": x, "r": r})
    xr = (x + r).astype(np.float64)
    ref = (xr - xr.mean(-1, keepdims=True)) / np.sqrt(xr.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, ref * gamma + beta, rtol=1e-4, atol=1e-4)


def test_reshape_of_a_reshape_and_to_the_same_shape_disappear():
    x = input_node("x", (2, 6))
    r = call("reshape", [call("reshape", [call("relu", [x])], newshape=(3, 4))],
             newshape=(2, 6))
    g = sink_reshape(Graph([x], [call("sigmoid", [r])]))
    assert [n.op for n in g.nodes if not n.is_input] == ["relu", "sigmoid"]


def test_relay_build_of_the_sunk_graph_matches_numpy():
    from scipy import special

    import kiln
    from kiln.contrib import graph_executor

    with relay.build_config(opt_level=3):
        lib = relay.build(_linear_gelu_residual(), "llvm")
    assert lib.summary.splitlines()[0].startswith("3 kernels"), lib.summary
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    x = _f32(1, 8, 16)
    gm.run(x=x)
    h = x.astype(np.float64) @ W.T + B
    ref = 0.5 * h * (1 + special.erf(h / np.sqrt(2))) + x
    np.testing.assert_allclose(gm.get_output(0).numpy(), ref, rtol=1e-5, atol=1e-5)


def test_attention_scale_and_mask_fuse_into_the_scores_kernel():
    """``softmax(reshape(q @ k) / sqrt(d) + (1 - mask) * -10000)``: the scale and the mask add
    in the batch_matmul kernel (the mask's reshape a view), softmax one kernel."""
    import kiln
    from kiln.contrib import graph_executor

    q, k = input_node("q", (4, 8, 16)), input_node("k", (4, 16, 8))
    m = input_node("m", (1, 1, 1, 8))
    scores = call("reshape", [call("batch_matmul", [q, k])], newshape=(1, 4, 8, 8))
    bias = call("multiply", [call("subtract", [const(np.float32(1)), m]),
                             const(np.float32(-10000))])
    scaled = call("add", [call("divide", [scores, const(np.float32(4))]), bias])
    g = Graph([q, k, m], [call("softmax", [scaled], axis=3)])
    assert [k.split("  ")[0] for k in _kernels_of(g)] == [
        "subtract + multiply + reshape", "batch_matmul + divide + add", "softmax"]
    with relay.build_config(opt_level=3):
        lib = relay.build(g, "llvm")
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    qv, kv = _f32(4, 8, 16), _f32(4, 16, 8)
    mv = np.array([1, 1, 1, 1, 1, 1, 0, 0], np.float32).reshape(1, 1, 1, 8)
    gm.run(q=qv, k=kv, m=mv)
    s = (qv @ kv).reshape(1, 4, 8, 8).astype(np.float64) / 4 + (1 - mv) * -10000
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(gm.get_output(0).numpy(), e / e.sum(-1, keepdims=True),
                               rtol=1e-5, atol=1e-6)
