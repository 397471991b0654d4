"""``benchmarks.compile_time`` on a tiny model (no timing assertions): the cold build runs
the C compiler, the cached one runs none."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from benchmarks import compile_time  # noqa: E402


@pytest.mark.slow  # two builds with the C compiler: 1-4 s
def test_cold_build_compiles_and_cached_build_does_not(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))  # restored after the test
    r = compile_time.measure("conv_bias_relu")
    assert r["kernels"] >= 1
    assert r["cold"]["cc"] > 0 and r["cached"]["cc"] == 0
    assert not any(k.startswith("profile") for k in r)
    assert compile_time._fmt(r, "cold").startswith("cold ")


@pytest.mark.slow  # two builds with the C compiler under cProfile: 1-4 s
def test_profile_lists_the_cold_and_the_cached_build(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    r = compile_time.measure("conv_bias_relu", profile=5)
    assert "function calls" in r["profile_cold"] and "function calls" in r["profile_cached"]


@pytest.mark.slow  # two builds and each kernel compiled again: 2-5 s
def test_kernels_ranks_each_translation_unit(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    rows = compile_time.measure("conv_bias_relu", kernels=True)["kernel_costs"]
    assert rows and all(r["lines"] > 0 and r["lower"] >= 0 and r["cc"] >= 0 for r in rows)
    assert [r["lower"] + r["cc"] for r in rows] == sorted((r["lower"] + r["cc"] for r in rows),
                                                         reverse=True)
    assert "translation units" in compile_time._kernel_table(rows)
