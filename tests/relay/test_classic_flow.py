"""The book's §1.3 flow, TVM 0.6/0.7 style: ``graph, mod, params = relay.build(...)``,
``graph_runtime.create(graph, mod, ctx)``, ``save_param_dict`` / ``load_params`` and
``export_library`` + ``runtime.load_module`` of the library alone."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_runtime  # noqa: E402
from kiln.relay import testing  # noqa: E402


def _build(model):
    relay_mod, relay_params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        return relay.build(relay_mod, "llvm", params=relay_params)


def test_book_save_and_load(tmp_path):
    model = testing.residual_block()
    name, x = testing.random_input(model)
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {name: x})[0]

    graph, mod, params = _build(model)
    assert isinstance(graph, str) and isinstance(params, dict)
    ctx = tvm.cpu()
    rt = graph_runtime.create(graph, mod, ctx)
    rt.set_input(**params)
    rt.set_input(name, tvm.nd.array(x))
    rt.run()
    scores = rt.get_output(0).asnumpy()
    np.testing.assert_allclose(scores, ref, rtol=1e-4, atol=1e-4)

    mod_fn, graph_fn, params_fn = (str(tmp_path / f) for f in
                                   ("model.tar", "model.json", "model.params"))
    mod.export_library(mod_fn)
    with open(graph_fn, "w") as f:
        f.write(graph)
    with open(params_fn, "wb") as f:
        f.write(relay.save_param_dict(params))

    loaded_graph = open(graph_fn).read()
    loaded_mod = tvm.runtime.load_module(mod_fn)
    loaded_params = open(params_fn, "rb").read()
    loaded_rt = graph_runtime.create(loaded_graph, loaded_mod, ctx)
    loaded_rt.load_params(loaded_params)
    loaded_rt.run(**{name: x})
    tvm.testing.assert_allclose(loaded_rt.get_output(0).asnumpy(), scores)


def test_param_dict_round_trip_and_errors():
    params = {"w": tvm.nd.array(np.arange(6, dtype="float32").reshape(2, 3)),
              "b": np.ones(3, "int32")}
    back = relay.load_param_dict(relay.save_param_dict(params))
    np.testing.assert_array_equal(back["w"].numpy(), params["w"].numpy())
    assert back["b"].dtype == "int32"
    with pytest.raises(tvm.TVMError, match="not a kiln parameter blob"):
        relay.load_param_dict(b"garbage")


def test_create_refuses_what_is_not_a_graph():
    _, mod, _ = _build(testing.conv_bias_relu())
    with pytest.raises(tvm.TVMError, match="graph JSON"):
        graph_runtime.create(42, mod, tvm.cpu())
    with pytest.raises(tvm.TVMError, match="not a kiln execution graph"):
        graph_runtime.create('{"a": 1}', mod, tvm.cpu())
    with pytest.raises(tvm.TVMError, match="compiled library"):
        graph_runtime.create(_build(testing.conv_bias_relu()).get_graph_json(), None)


def test_loaded_factory_removes_its_directory(tmp_path):
    lib = _build(testing.conv_bias_relu())
    lib.export_library(str(tmp_path / "m.tar"))
    loaded = relay.load_module(str(tmp_path / "m.tar"))
    folder = os.path.dirname(loaded.lib.library_path)
    assert os.path.isdir(folder)
    del loaded
    gc.collect()
    assert not os.path.exists(folder)
