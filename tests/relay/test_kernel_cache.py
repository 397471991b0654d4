"""relay.build's kernel cache (kiln/relay/kernel_cache.py): a rebuild lowers and compiles
nothing, keys tell targets, contexts and kiln sources apart, a damaged entry is rebuilt."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from kiln import autotvm, relay, topi
from kiln.ir.transform import PassContext
from kiln.relay import horizontal_fusion, kernel_cache
from kiln.relay.build_module import optimize_and_fuse
from kiln.runtime import compiler
from kiln.target import Target

from .models import build_and_run, residual_block

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(kernel_cache.ENV, raising=False)
    return tmp_path


def _feed():
    return {"x": np.random.default_rng(0).standard_normal((1, 8, 9, 9)).astype("float32")}


def _forbid(monkeypatch):
    """Make lowering, compiling and building a group's te compute (horizontal fusion's
    measure of its work) fail: what a cached rebuild must not do."""
    def fail(*args, **kwargs):
        raise AssertionError("a cached rebuild lowered, compiled or built a compute")

    monkeypatch.setattr(kernel_cache, "select_implementations", fail)
    monkeypatch.setattr(horizontal_fusion, "group_compute", fail)
    monkeypatch.setattr(compiler, "_run", fail)


def test_rebuild_lowers_and_compiles_nothing(cache, monkeypatch):
    lib, out = build_and_run(residual_block(), _feed())
    _forbid(monkeypatch)
    again, out_again = build_and_run(residual_block(), _feed())
    np.testing.assert_array_equal(out, out_again)
    assert again.summary == lib.summary
    assert [s["func"] for s in again.plan["steps"]] == [s["func"] for s in lib.plan["steps"]]


def test_a_model_with_other_weights_reuses_every_kernel(cache, monkeypatch, tmp_path_factory):
    build_and_run(residual_block(seed=0), _feed())
    with monkeypatch.context() as m:
        _forbid(m)
        _, out = build_and_run(residual_block(seed=1), _feed())
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path_factory.mktemp("fresh")))
    np.testing.assert_array_equal(out, build_and_run(residual_block(seed=1), _feed())[1])


def test_disabled_cache_lowers_again(cache, monkeypatch):
    build_and_run(residual_block(), _feed())
    monkeypatch.setenv(kernel_cache.ENV, "0")
    calls = []
    lower = kernel_cache.select_implementations
    monkeypatch.setattr(kernel_cache, "select_implementations",
                        lambda *a: calls.append(a) or lower(*a))
    _, out = build_and_run(residual_block(), _feed())
    assert calls
    monkeypatch.delenv(kernel_cache.ENV)
    np.testing.assert_array_equal(out, build_and_run(residual_block(), _feed())[1])


def test_damaged_entries_are_rebuilt(cache, monkeypatch, caplog):
    _, out = build_and_run(residual_block(), _feed())
    objects = sorted(cache.glob("*.o"))
    assert objects
    objects[0].write_bytes(objects[0].read_bytes()[:64])  # truncated
    for record in sorted(cache.glob("*.json"))[:1]:
        record.write_text("{")  # a damaged record
    with caplog.at_level(logging.WARNING, logger="kiln.runtime"):
        _, again = build_and_run(residual_block(), _feed())
    assert "building it again" in caplog.text
    np.testing.assert_array_equal(out, again)


def test_group_work_is_cached_under_the_group_key(cache, monkeypatch):
    mod, params = relay.frontend.from_onnx(residual_block())
    tgt = Target("llvm")
    with PassContext(opt_level=3):
        _, groups = optimize_and_fuse(mod, params, tgt)
        work = [horizontal_fusion.group_work(g) for g in groups]
        assert [kernel_cache.cached_group_work(tgt)(g) for g in groups] == work  # recorded
        assert len(list(cache.glob("kiln_work-*.txt"))) == len(groups)
        _forbid(monkeypatch)
        assert [kernel_cache.cached_group_work(tgt)(g) for g in groups] == work  # looked up


def _kernel_and_key(target: str, **ctx):
    mod, params = relay.frontend.from_onnx(residual_block())
    tgt = Target(target)
    with PassContext(opt_level=3, **ctx):
        _, groups = optimize_and_fuse(mod, params, tgt)
        with tgt:
            context = kernel_cache._context_key(tgt)
    return groups[0], context


def test_keys_tell_targets_contexts_and_sources_apart(cache, monkeypatch):
    kernel, context = _kernel_and_key("llvm")
    key = kernel_cache.kernel_key(kernel, context)
    assert key == kernel_cache.kernel_key(*_kernel_and_key("llvm"))  # another graph's nodes
    others = [_kernel_and_key("llvm -mcpu=skylake-avx512"),
              _kernel_and_key("llvm", config={"tir.disable_vectorize": True}),
              _kernel_and_key("llvm", disabled_pass=["AlterOpLayout"])]
    assert len({key, *(kernel_cache.kernel_key(*o) for o in others)}) == 4
    monkeypatch.setattr(kernel_cache, "kiln_source_hash", lambda: "another kiln")
    assert kernel_cache.kernel_key(kernel, _kernel_and_key("llvm")[1]) != key


def test_no_key_where_it_cannot_tell_the_code(cache, monkeypatch):
    assert _kernel_and_key("llvm", config={"tir.add_lower_pass": [(1, print)]})[1] is None
    with autotvm.apply_history_best([]):
        assert _kernel_and_key("llvm")[1] is None
    with monkeypatch.context() as m:  # a schedule that is not kiln's
        m.setattr(topi.x86, "schedule_auto", lambda outs: None)
        assert _kernel_and_key("llvm")[1] is None
    monkeypatch.setenv(kernel_cache.ENV, "0")
    assert _kernel_and_key("llvm")[1] is None


def test_fingerprint_tells_plain_data_apart():
    from kiln.relay.fingerprint import NotPlainData, fingerprint

    a = np.arange(4, dtype="float32")
    assert fingerprint({"w": a, "k": (1, 2)}) == fingerprint({"k": [1, 2], "w": a.copy()})
    assert fingerprint({"w": a}) != fingerprint({"w": a + 1})
    assert fingerprint({"w": a}) != fingerprint({"w": a.astype("float64")})
    assert fingerprint(True) != fingerprint(1)
    with pytest.raises(NotPlainData):
        fingerprint({"pass": print})


def test_records_carry_the_lowering_cpu_seconds_field(cache):
    """Each kernel's record has the ``lower_seconds`` field benchmarks/compile_time.py ranks
    kernels by (its value is a measurement, checked by nothing here: format only)."""
    import json

    build_and_run(residual_block(), _feed())
    infos = [json.loads(p.read_text())["info"] for p in cache.glob("*.json")]
    kernels = [i for i in infos if "symbol" in i]
    assert kernels and all(isinstance(i["lower_seconds"], float) for i in kernels)
