"""R5: a relay model run by a graph executor on the server; R6: the device pool."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import rpc

from .conftest import TIMEOUT, N, vector_add


@pytest.fixture(scope="module")
def relay_model(tmp_path_factory):
    """(exported archive, input name, input, params, local scores) of a small ONNX model."""
    pytest.importorskip("onnx")
    from kiln import relay
    from kiln.relay import testing

    model = testing.residual_block()
    name, x = testing.random_input(model)
    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        factory = relay.build(mod, target="llvm", params=params)
    gm = factory["default"](tvm.cpu(0))
    gm.run(**{name: x})
    path = tmp_path_factory.mktemp("rpc-relay") / "model.tar"
    factory.export_library(str(path))
    return str(path), name, x, factory.get_params(), gm.get_output(0).numpy()


def test_relay_model_runs_remotely(remote, relay_model):
    """R5: the same scores as the local graph executor; inputs and params are local."""
    path, name, x, params, local = relay_model
    remote.upload(path)
    remote_lib = remote.load_module("model.tar")
    assert remote_lib.type_key == "GraphExecutorFactory"
    remote_rt = remote_lib["default"](remote.cpu())
    from kiln.contrib import graph_executor

    assert graph_executor.GraphModule(remote_rt) is remote_rt  # TVM's wrapping, remotely too
    remote_rt.set_input(**params)
    remote_rt.run(**{name: tvm.nd.array(x)})
    scores = remote_rt.get_output(0)
    assert isinstance(scores, rpc.RemoteNDArray) and remote_rt.get_num_outputs() == 1
    np.testing.assert_allclose(scores.asnumpy(), local, rtol=1e-5, atol=1e-6)
    # an input already on the server, and get_input
    remote_rt.set_input(name, tvm.nd.array(np.zeros_like(x), remote.cpu()))
    np.testing.assert_array_equal(remote_rt.get_input(0).numpy(), np.zeros_like(x))
    assert remote_rt.benchmark(number=1, repeat=1) > 0
    with pytest.raises(KeyError, match="no input 'nope'"):
        remote_rt.set_input("nope", x)
    with pytest.raises(tvm.TVMError, match="not callable"):
        remote_lib(x)


def test_book_graph_runtime_create_over_rpc(remote, relay_model, vadd_so):
    """Book §1.4.4: graph_runtime.create(graph, remote_mod, ctx), params set from local."""
    from kiln.contrib import graph_executor, graph_runtime
    from kiln.runtime.graph_executor import load_module

    path, name, x, params, local = relay_model
    graph = load_module(path).get_graph_json()
    remote.upload(path)
    remote_mod = remote.load_module("model.tar")
    ctx = remote.cpu()
    remote_rt = graph_runtime.create(graph, remote_mod, ctx)
    remote_rt.set_input(**params)
    remote_rt.run(**{name: tvm.nd.array(x)})
    np.testing.assert_allclose(remote_rt.get_output(0).asnumpy(), local, rtol=1e-5, atol=1e-6)
    assert isinstance(graph_executor.create(remote_mod, None, ctx), rpc.RemoteGraphModule)
    with pytest.raises(rpc.RemoteError, match="not the one of the uploaded archive"):
        graph_runtime.create('{"tensors": []}', remote_mod, ctx)
    remote.upload(vadd_so)
    with pytest.raises(NotImplementedError, match="holds only kernels"):
        graph_runtime.create(graph, remote.load_module("vector-add.so"), ctx)
    with pytest.raises(NotImplementedError, match="needs the module loaded on that server"):
        graph_runtime.create(load_module(path), None, ctx)


def _double_on(remote, k):
    """A pool job: run vector add on k's data on the job's server."""
    remote.upload(_double_on.lib, "v.so")
    f = remote.load_module("v.so")
    dev = remote.cpu()
    a = tvm.nd.array(np.full(N, k, "float32"), dev)
    c = tvm.nd.empty((N,), "float32", dev)
    f(a, a, c)
    if k == 3:
        raise ValueError("job 3 fails on purpose")
    return float(c.numpy()[0])


@pytest.fixture
def two_servers():
    with rpc.Server("127.0.0.1", 0, silent=True) as s1, \
            rpc.Server("127.0.0.1", 0, silent=True) as s2:
        yield s1, s2


def test_pool_distributes_jobs_over_two_servers(two_servers, vadd_so):
    """R6: every job gives a value or an error record; both servers work."""
    s1, s2 = two_servers
    _double_on.lib = vadd_so
    with rpc.DevicePool([("127.0.0.1", s1.port), ("127.0.0.1", s2.port)],
                        timeout=TIMEOUT) as pool:
        assert pool.size == 2
        res = pool.map(_double_on, range(8))
    assert [r.index for r in res] == list(range(8))
    assert [r.value for r in res if r.ok] == [2.0 * k for k in range(8) if k != 3]
    assert res[3].error == "ValueError: job 3 fails on purpose"
    assert {r.server for r in res} <= {f"127.0.0.1:{s.port}" for s in two_servers}


def test_pool_measure(two_servers, tmp_path, vadd_so):
    s1, s2 = two_servers
    jobs = [rpc.MeasureJob(vadd_so, [((N,), "float32")] * 3, number=3, repeat=2)
            for _ in range(3)]
    jobs.append(rpc.MeasureJob(str(tmp_path / "missing.so"), []))
    big = tmp_path / "v64.so"
    vector_add(64).export_library(str(big))
    jobs.append(rpc.MeasureJob(str(big), [((N,), "float32")] * 3))  # wrong shapes
    with rpc.DevicePool([("127.0.0.1", s1.port), ("127.0.0.1", s2.port)],
                        timeout=TIMEOUT) as pool:
        res = pool.measure(jobs)
    for r in res[:3]:
        assert r.error is None and len(r.costs) == 2 and r.mean > 0
    assert "does not exist" in res[3].error and res[3].costs == ()
    assert "expected 64, got 100" in res[4].error


def test_pool_survives_a_dead_server(two_servers, vadd_so):
    s1, s2 = two_servers
    _double_on.lib = vadd_so
    dead = s2.port
    with rpc.DevicePool([("127.0.0.1", s1.port), ("127.0.0.1", dead)],
                        timeout=TIMEOUT) as pool:
        s2.stop()
        res = pool.map(_double_on, [1, 2, 4, 5])
    # the job the dead server took (if any) was put back and ran on s1
    assert [r.value for r in res] == [2.0, 4.0, 8.0, 10.0]
    assert {r.server for r in res} == {f"127.0.0.1:{s1.port}"}
    assert f"127.0.0.1:{dead}" in pool.unreachable


def test_pool_with_no_reachable_server():
    with rpc.Server("127.0.0.1", 0, silent=True) as s:
        port = s.port
    with pytest.raises(rpc.RPCError, match="no server could be reached"):
        rpc.DevicePool([("127.0.0.1", port)], timeout=TIMEOUT)
