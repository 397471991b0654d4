"""The dynamic benchmark suite runs, on one small size (no timing assertions): every tail
strategy builds, is checked against numpy before it is timed, and reports its compile time,
code size and the widths of its dispatch paths; a model's section reports the kernel calls
of its dynamic and specialised builds."""

from __future__ import annotations

import pytest

from benchmarks import dynamic


@pytest.mark.slow  # eight builds
def test_tail_strategy_section_reports_every_strategy():
    cfg = {**dynamic.settings(quick=True), "kernel_sizes": [37], "repeat": 1,
           "min_time": 1e-4}
    figures, details = dynamic.bench_strategies(cfg, lambda _msg: None)
    assert set(details) == set(dynamic.STRATEGIES)
    assert details["dispatch 8/4/2"]["dispatch_widths"] == (8, 4, 2)
    assert details["predicate"]["dispatch_widths"] is None
    assert all(d["kernel_c_lines"] > 0 and d["compile_s"] > 0 for d in details.values())
    assert len(figures) == len(dynamic.STRATEGIES) * 3


@pytest.mark.slow  # two builds of a small model
def test_model_section_reports_kernel_calls_of_both_builds():
    from kiln.relay import testing

    cfg = {**dynamic.settings(quick=True), "repeat": 1, "min_time": 1e-4}
    model = testing.mlp_block(seq="seq", d=8, hidden=16)
    figures, details = dynamic.bench_model("mlp", model, "x", [3], lambda s: (s, 8), cfg,
                                           lambda _msg: None)
    kernels = details["sizes"][3]["kernels_s"]
    assert set(kernels) == {"dynamic", "specialised"}
    assert all(calls and all(s > 0 for _, s in calls) for calls in kernels.values())
    assert any(f.key == "mlp.3.kernels" and f.reference for f in figures)
