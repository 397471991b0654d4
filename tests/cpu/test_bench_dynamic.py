"""The dynamic benchmark suite's tail-strategy section runs, on one small size (no timing
assertions): every strategy builds, is checked against numpy before it is timed, and reports
its compile time, code size and the widths of its dispatch paths."""

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
