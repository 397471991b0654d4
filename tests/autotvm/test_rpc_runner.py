"""RPCRunner: tuning on RPC servers; every remote failure is one candidate's error record."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from kiln import autotvm, rpc
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput, create_measure_batch

from ..rpc.conftest import start_server_process
from ._templates import MODES, numpy_gemm

E = MeasureErrorNo


@pytest.fixture(scope="module")
def server_port():
    """The port of ``python -m kiln.exec.rpc_server`` started for these tests."""
    sp, port = start_server_process("-m", "kiln.exec.rpc_server", "--host", "127.0.0.1",
                                    "--port", "0")
    yield port
    sp.stop()


def _dead_port() -> int:
    """A localhost port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _option(**runner_kw):
    kw = dict(host="127.0.0.1", number=2, repeat=1, timeout=10, cooldown_interval=0)
    kw.update(runner_kw)
    return autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2, timeout=30),
                                  runner=autotvm.RPCRunner("kiln-test", **kw))


def _faulty_inputs(task, modes):
    space = task.config_space
    return [MeasureInput(task.target, task, space.get(space.index_of([MODES.index(m), 2])))
            for m in modes]


def test_tune_small_gemm_on_an_rpc_server(server_port, tmp_path):
    task = autotvm.task.create("test_gemm", (64, 64, 64), "llvm")
    log = tmp_path / "gemm.log"
    tuner = autotvm.RandomTuner(task, seed=0)
    tuner.tune(6, _option(port=server_port, check_correctness=True),
               callbacks=[autotvm.callback.log_to_file(str(log))])
    records = list(autotvm.record.load_from_file(log))
    assert len(records) == 6 and tuner.trials_done == 6
    assert all(res.error_no == E.NO_ERROR and all(c > 0 for c in res.costs)
               for _, res in records)
    assert tuner.best_flops > 0
    with autotvm.apply_history_best(str(log)):
        _, args = task.instantiate()
    assert len(args) == 3


def test_remote_failures_are_per_candidate(server_port):
    task = autotvm.task.create("test_faulty", (32,), "llvm")
    modes = ["ok", "wrong", "raise", "no_lower", "ok"]
    batch = create_measure_batch(task, _option(port=server_port, check_correctness=True))
    try:
        got = dict(zip(modes, batch(_faulty_inputs(task, modes)), strict=False))
        results = batch(_faulty_inputs(task, modes))
    finally:
        batch.close()
    assert got["wrong"].error_no == E.WRONG_ANSWER
    assert "differs from the reference" in got["wrong"].costs[0]
    assert got["raise"].error_no == E.INSTANTIATION_ERROR
    assert got["no_lower"].error_no == E.COMPILE_HOST
    assert [r.error_no for r in results] == [0, E.WRONG_ANSWER, E.INSTANTIATION_ERROR,
                                             E.COMPILE_HOST, 0]


@pytest.mark.parametrize("ref", ["fallback", "ref_func"])
def test_two_sessions_share_one_reference(server_port, ref):
    """n_parallel=2 on one server: two candidates at once; the first makes the reference
    (the fallback config run remotely, or numpy here) and the other waits for it."""
    task = autotvm.task.create("test_faulty", (16,), "llvm")
    kw = {"ref_func": numpy_gemm} if ref == "ref_func" else {}
    modes = ["wrong", "ok", "wrong", "ok"]
    batch = create_measure_batch(task, _option(port=server_port, n_parallel=2,
                                               check_correctness=True, **kw))
    try:
        results = batch(_faulty_inputs(task, modes))
    finally:
        batch.close()
    assert [r.error_no for r in results] == [E.WRONG_ANSWER, 0, E.WRONG_ANSWER, 0]


def test_dead_server_gives_error_results(tmp_path, caplog):
    task = autotvm.task.create("test_gemm", (16, 16, 16), "llvm")
    log = tmp_path / "dead.log"
    tuner = autotvm.RandomTuner(task, seed=0)
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        tuner.tune(4, _option(port=_dead_port()),
                   callbacks=[autotvm.callback.log_to_file(str(log))])
    records = list(autotvm.record.load_from_file(log))
    assert tuner.trials_done == 4 and len(records) == 4
    for _, res in records:
        assert res.error_no == E.RUNTIME_DEVICE
        assert "cannot connect" in res.costs[0]
    assert "no RPC server answers" in caplog.text


def test_a_dead_server_in_the_list_is_left_out(tmp_path):
    task = autotvm.task.create("test_gemm", (16, 16, 16), "llvm")
    with rpc.Server("127.0.0.1", 0, silent=True) as live:
        tuner = autotvm.RandomTuner(task, seed=1)
        results = []
        tuner.tune(4, _option(host=None, servers=[("127.0.0.1", _dead_port()),
                                                  f"127.0.0.1:{live.port}"]),
                   callbacks=[lambda t, i, r: results.extend(r)])
    assert [r.error_no for r in results] == [0, 0, 0, 0]


@pytest.mark.slow
def test_hang_and_crash_on_the_server():
    """A hung kernel is a RUN_TIMEOUT (the server kills it and keeps serving); one that
    crashes is RUNTIME_DEVICE, and the next candidate runs in a new session."""
    sp, port = start_server_process("-m", "kiln.exec.rpc_server", "--host", "127.0.0.1",
                                    "--port", "0")
    try:
        task = autotvm.task.create("test_faulty", (32,), "llvm")
        modes = ["ok", "hang", "ok", "crash", "ok"]
        batch = create_measure_batch(task, _option(port=port, timeout=3))
        try:
            res = batch(_faulty_inputs(task, modes))
        finally:
            batch.close()
    finally:
        sp.stop()
    assert [r.error_no for r in res] == [0, E.RUN_TIMEOUT, 0, E.RUNTIME_DEVICE, 0]
    assert "timed out" in res[1].costs[0]
    assert "lost" in res[3].costs[0]


def test_rpc_runner_arguments_are_checked():
    with pytest.raises(ValueError, match="tracker"):
        autotvm.RPCRunner("key")
    with pytest.raises(ValueError, match="not both"):
        autotvm.RPCRunner("key", "localhost", 9090, servers=[("localhost", 9091)])
    with pytest.raises(ValueError, match="host:port"):
        autotvm.RPCRunner("key", servers=["localhost"])
    with pytest.raises(NotImplementedError, match="cache_flush"):
        autotvm.RPCRunner("key", "localhost", 9090, enable_cpu_cache_flush=True)
    r = autotvm.RPCRunner("key", servers=["a:1", ("b", 2)], n_parallel=3)
    assert r.slots == [("a", 1), ("b", 2), ("a", 1)]
    with pytest.raises(ValueError, match="tracker"):
        autotvm.measure.request_remote("key")


def test_request_and_check_remote(server_port):
    with autotvm.measure.request_remote("key", "127.0.0.1", server_port, timeout=10) as r:
        assert r.cpu().exist
    assert autotvm.measure.check_remote("llvm", "key", "127.0.0.1", server_port)
    assert not autotvm.measure.check_remote("llvm", "key", "127.0.0.1", _dead_port())


@pytest.mark.slow
def test_tune_through_a_tracker_with_two_servers(tmp_path):
    """RPCRunner(key, tracker host, port): each batch on every server of the key at once."""
    task = autotvm.task.create("test_gemm", (16, 16, 16), "llvm")
    with rpc.Tracker("127.0.0.1", 0, silent=True) as tracker:
        addr = ("127.0.0.1", tracker.port)
        with rpc.Server("127.0.0.1", 0, silent=True, tracker_addr=addr, key="kiln-test"), \
                rpc.Server("127.0.0.1", 0, silent=True, tracker_addr=addr, key="kiln-test"):
            client = rpc.connect_tracker(*addr)
            deadline = time.monotonic() + 20
            while client.summary()["queue_info"].get("kiln-test", {}).get("free") != 2:
                assert time.monotonic() < deadline, "the servers did not register"
                time.sleep(0.02)
            runner = autotvm.RPCRunner("kiln-test", *addr, priority=2, number=2, repeat=1,
                                       timeout=10, cooldown_interval=0)
            tuner = autotvm.RandomTuner(task, seed=0)
            log = tmp_path / "tracker.log"
            tuner.tune(4, autotvm.measure_option(
                builder=autotvm.LocalBuilder(n_parallel=2, timeout=30), runner=runner),
                callbacks=[autotvm.callback.log_to_file(str(log))])
            assert runner._tracker is not None
    records = list(autotvm.record.load_from_file(log))
    assert len(records) == 4 and all(res.error_no == E.NO_ERROR for _, res in records)


def test_a_tracker_without_servers_of_the_key_fails_each_candidate(caplog):
    task = autotvm.task.create("test_gemm", (16, 16, 16), "llvm")
    with rpc.Tracker("127.0.0.1", 0, silent=True) as tracker:
        batch = create_measure_batch(task, _option(port=tracker.port))
        try:
            with caplog.at_level(logging.WARNING, logger="autotvm"):
                res = batch([MeasureInput(task.target, task, task.config_space.get(0))])
        finally:
            batch.close()
    assert res[0].error_no == E.RUNTIME_DEVICE
    assert "no RPC server is registered under key 'kiln-test'" in res[0].costs[0]


def _cuda_matmul_task():
    from kiln.topi.cuda.dense import MATMUL

    return autotvm.task.create(MATMUL, (64, 32, 64, "float32"), "cuda")


def test_cuda_candidates_go_to_the_server_as_archives(server_port):
    """Without a GPU on the server every CUDA candidate is an error result naming the
    missing device, after the archive was uploaded and loaded there."""
    from ..codegen.cuda_workloads import NVRTC_MISSING, have_nvrtc

    if not have_nvrtc():
        pytest.skip(NVRTC_MISSING)
    import kiln

    if kiln.cuda(0).exist:
        pytest.skip("this machine has a GPU: test_tune_cuda_on_an_rpc_server runs instead")
    task = _cuda_matmul_task()
    runner = autotvm.RPCRunner("kiln-test", host="127.0.0.1", port=server_port, number=1,
                               repeat=1, timeout=10)
    assert runner.get_build_kwargs(task) == {}  # the server has no GPU to ask
    measure = create_measure_batch(task, autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=1, timeout=60), runner=runner))
    (result,) = measure([MeasureInput(task.target, task, task.config_space.get(0))])
    assert result.error_no == E.RUNTIME_DEVICE
    assert "CUDA" in str(result.costs[0])


@pytest.mark.gpu
def test_tune_cuda_on_an_rpc_server(server_port, tmp_path):
    import kiln

    if not kiln.cuda(0).exist:
        pytest.skip("no CUDA GPU")
    task = _cuda_matmul_task()
    runner = autotvm.RPCRunner("kiln-test", host="127.0.0.1", port=server_port, number=2,
                               repeat=1, timeout=30, check_correctness=True)
    assert runner.get_build_kwargs(task)["arch"].startswith("sm_")
    log = tmp_path / "cuda.log"
    tuner = autotvm.RandomTuner(task, seed=0)
    tuner.tune(4, autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2),
                                         runner=runner),
               callbacks=[autotvm.callback.log_to_file(str(log))])
    records = list(autotvm.record.load_from_file(log))
    assert len(records) == 4
    assert any(res.error_no == E.NO_ERROR for _, res in records)
