"""DaskBuilder and DaskRunner: tuning on a ``distributed.LocalCluster`` gives the local
run's log, a killed worker loses no record, and every failure is one candidate's error."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

import pytest

from kiln import autotvm
from kiln.autotvm.measure import BuildResult, MeasureErrorNo, MeasureInput, create_measure_batch

from ._templates import MODES

distributed = pytest.importorskip("distributed")

E = MeasureErrorNo
RESOURCE = "device:cpu"


def _cluster(processes: bool):
    return distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=processes,
                                    resources={RESOURCE: 1}, dashboard_address=":0",
                                    silence_logs=logging.ERROR)


@pytest.fixture(scope="module")
def client():
    """A client of a 2-worker cluster in this process (threads), one device each."""
    with _cluster(processes=False) as cluster, distributed.Client(cluster) as c:
        yield c


def _dask_option(client, **runner_kw):
    kw = dict(resource=RESOURCE, number=2, repeat=1, timeout=10)
    kw.update(runner_kw)
    return autotvm.measure_option(builder=autotvm.DaskBuilder(client, timeout=30),
                                  runner=autotvm.DaskRunner(client, **kw))


def _tune(task, option, log, n_trial: int = 6) -> list:
    tuner = autotvm.GridSearchTuner(task)
    tuner.tune(n_trial, option, callbacks=[autotvm.callback.log_to_file(str(log))])
    return list(autotvm.record.load_from_file(log))


@pytest.mark.slow
def test_tuning_on_a_cluster_gives_the_local_log(client, tmp_path):
    task = autotvm.task.create("test_gemm", (64, 64, 64), "llvm")
    local = _tune(task, autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=30),
        runner=autotvm.LocalRunner(number=2, repeat=1, timeout=10)), tmp_path / "local.log")
    dask = _tune(task, _dask_option(client), tmp_path / "dask.log")
    assert [(str(i.target), i.task.workload, i.config.index) for i, _ in dask] == \
        [(str(i.target), i.task.workload, i.config.index) for i, _ in local]
    assert len(dask) == 6
    assert all(r.error_no == E.NO_ERROR and all(c > 0 for c in r.costs) for _, r in dask)


@pytest.mark.slow
def test_failures_on_the_cluster_are_per_candidate(client):
    task = autotvm.task.create("test_faulty", (32,), "llvm")
    modes = ["ok", "wrong", "raise", "no_lower", "crash", "ok"]
    space = task.config_space
    inputs = [MeasureInput(task.target, task, space.get(space.index_of([MODES.index(m), 2])))
              for m in modes]
    batch = create_measure_batch(task, _dask_option(client))
    try:
        got = dict(zip(modes, batch(inputs), strict=False))
    finally:
        batch.close()
    assert got["ok"].error_no == E.NO_ERROR
    assert got["wrong"].error_no == E.WRONG_ANSWER
    assert got["raise"].error_no == E.INSTANTIATION_ERROR
    assert got["no_lower"].error_no == E.COMPILE_HOST
    assert got["crash"].error_no == E.RUNTIME_DEVICE and "SIGSEGV" in got["crash"].costs[0]


def test_no_worker_with_the_resource_fails_each_candidate_at_once(client, caplog):
    runner = autotvm.DaskRunner(client, resource="device:gpu7", check_correctness=False)
    builds = [BuildResult("never-read.so", (), E.NO_ERROR, None, 0.1),
              BuildResult(None, (), E.COMPILE_HOST, "no compiler", 0.1)]
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        results = runner.run([None, None], builds)
    assert [r.error_no for r in results] == [E.RUNTIME_DEVICE, E.COMPILE_HOST]
    assert "--resources device:gpu7=1" in results[0].costs[0]
    assert "device:gpu7" in caplog.text


def test_a_batch_that_stalls_fails_its_candidates(client):
    from kiln.autotvm.measure.dask import collect

    futures = [client.submit(time.sleep, 0, resources={"nobody:has": 1}, pure=False)]
    [(position, kind, why)] = list(collect(futures, idle_timeout=0.2))
    assert (position, kind) == (0, "error") and "within 0.2 s" in why


def test_the_client_is_checked():
    with pytest.raises(TypeError, match="distributed.Client"):
        autotvm.DaskBuilder("tcp://scheduler:8786")


def test_a_clear_error_without_dask(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r"kiln\[dask\]"):
        autotvm.DaskRunner(object())


def test_cli_tune_dask_without_dask(monkeypatch, tmp_path, capsys):
    from kiln.cli import main

    monkeypatch.setitem(sys.modules, "distributed", None)
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    assert main(["tune", str(model), "--dask", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "kiln[dask]" in err and len(err.splitlines()) == 1


def _kill_a_measuring_worker(client, killed: list) -> None:
    """SIGKILL the first worker seen measuring a candidate (the nanny restarts it)."""
    pids = client.run(os.getpid)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for addr, keys in client.processing().items():
            if any(str(k).startswith("measure_on_worker") for k in keys) and addr in pids:
                os.kill(pids[addr], signal.SIGKILL)
                killed.append(addr)
                return
        time.sleep(0.005)


@pytest.mark.slow
def test_a_worker_killed_mid_run_loses_no_record(tmp_path):
    task = autotvm.task.create("test_gemm", (64, 64, 64), "llvm")
    with _cluster(processes=True) as cluster, distributed.Client(cluster) as client:
        killed: list = []
        watcher = threading.Thread(target=_kill_a_measuring_worker, args=(client, killed))
        watcher.start()
        option = _dask_option(client, min_repeat_ms=200)
        records = _tune(task, option, tmp_path / "dask.log", n_trial=8)
        watcher.join()
    assert killed, "no worker was seen measuring"
    assert sorted(i.config.index for i, _ in records) == list(range(8))
    assert all(r.error_no == E.NO_ERROR for _, r in records), [r.costs for _, r in records]


@pytest.mark.slow
def test_cli_tune_on_a_dask_cluster(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from kiln.cli import main
    from kiln.relay import testing

    path = tmp_path / "m.onnx"
    path.write_bytes(testing.conv_bias_relu().SerializeToString())
    log = tmp_path / "tune.json"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  protocol="tcp://", resources={RESOURCE: 1},
                                  dashboard_address=":0", silence_logs=logging.ERROR) as cluster:
        rc = main(["tune", str(path), "--budget", "30s", "--log", str(log), "--trials", "2",
                   "--tuner", "random", "--repeat", "2", "--dask", cluster.scheduler_address])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"measuring on the Dask cluster at {cluster.scheduler_address}" in out
    records = list(autotvm.record.load_from_file(log))
    assert records and all(r.error_no == E.NO_ERROR for _, r in records)
    assert "1 of" in out and "kernels use tuned configs" in out and "MISMATCH" not in out
