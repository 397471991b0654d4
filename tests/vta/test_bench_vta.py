"""benchmarks/vta.py (``kiln bench vta``) on a small layer: correct, and two virtual threads
take fewer simulated cycles than one (deterministic cycle counts, not timings)."""

from benchmarks import vta as bench


def test_latency_hiding_on_a_small_layer():
    one = bench.measure(32, 8, 4, 8, 1, vthreads=1)
    two = bench.measure(32, 8, 4, 8, 1, vthreads=2)
    assert one["correct"] and two["correct"]
    assert one["gemm_busy_cycles"] == two["gemm_busy_cycles"] == 8 * 8 * 2 * 2 * 9
    assert two["cycles"] < one["cycles"]
    assert two["utilization"] > one["utilization"]
