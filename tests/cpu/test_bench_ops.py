"""The ops benchmark suite's correctness checks run, on tiny sizes (no timing assertions).

Every case of benchmarks/ops.py compares kiln's output and each reference's output with a
float64 numpy result before it is timed; here that machinery runs on small instances of each
kind of case, and one case goes through the whole path (check, time, report row, plot).
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import ops


@pytest.mark.parametrize("prepare", [
    pytest.param(ops.vector_add_case(1000, 16), id="vector_add"),
    pytest.param(ops.broadcast_add_case(40), id="broadcast_add"),
    pytest.param(ops.conv1d_case(37, 11), id="conv1d"),
    pytest.param(ops.book_pool_case("max", 16, 8, 3), id="max_pool"),
    pytest.param(ops.batch_norm_case(8, 6, "fast_bn"), id="batch_norm"),
    pytest.param(ops.resnet_depthwise_case(32, 7), id="depthwise_nchwc"),
    pytest.param(ops.resnet_pool_case("avg", 16, 9), id="pool_nchwc"),
    pytest.param(ops.resnet_pool_case("max", 32, 10), id="max_pool_nchwc"),
    pytest.param(ops.resnet_conv_case(32, 9), id="conv2d_nchwc"),
    pytest.param(ops.book_pool_case("avg", 16, 10, 3, fast=True), id="fast_avg_pool"),
])
def test_case_checks_pass(prepare):
    prep = prepare()
    assert next(iter(prep.candidates)) == "kiln"
    checks = ops.check(prep)
    assert set(checks) == set(prep.candidates)
    for name, found in checks.items():
        assert found["ok"], (name, found)


def test_check_catches_a_wrong_result():
    prep = ops.vector_add_case(256, 16)()
    prep.truth = prep.truth + 1.0
    checks = ops.check(prep)
    assert not checks["kiln"]["ok"] and checks["kiln"]["max_err"] > 0.1


def test_pack_roundtrip():
    x = np.arange(32 * 3 * 5, dtype="float32").reshape(32, 3, 5)
    assert ops.pack_nchwc(x, 16).shape == (1, 2, 3, 5, 16)
    np.testing.assert_array_equal(ops.unpack_nchwc(ops.pack_nchwc(x, 16)), x)


def test_numpy_references_match_truth():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((16, 6, 6)), rng.standard_normal((16, 16, 3, 3))
    np.testing.assert_allclose(ops.np_conv2d(x, w, 1), ops.conv2d_truth(x, w, 1), atol=1e-9)
    wd = rng.standard_normal((16, 1, 3, 3))
    np.testing.assert_allclose(ops.np_depthwise(x, wd, 1, 2), ops.depthwise_truth(x, wd, 1, 2),
                               atol=1e-9)


def test_one_case_end_to_end(tmp_path):
    """check -> interleaved timing -> row -> tables -> plot, with a stand-in peak."""
    cfg = ops.settings(quick=True)
    cfg.update(case_budget_s=0.01, min_repeat=1, max_repeat=1, min_time=0.001)
    measured = {"peak": {"gflops_best": 100.0, "threads": 2},
                "triad": {"gb_s_best": 10.0, "gb_s_median": 10.0}, "peak_1thread": None}
    case = ops.Case("conv1d", "37x11", 37 * 11, "compute", 2.0 * 37 * 11,
                    ops.conv1d_case(37, 11), "toeplitz", goal=("numpy", 5.0))
    row = ops.run_case(case, cfg, measured)
    assert row["correct"] and "kiln" in row["timing"] and "numpy" in row["speedup"]
    assert row["met"] in (True, False)
    assert "37x11" in "\n".join(ops.group_table([row]))
    assert "conv1d" in "\n".join(ops.summary_table([row]))
    pytest.importorskip("matplotlib")
    assert ops.plot_group("conv1d", [row], tmp_path).exists()
