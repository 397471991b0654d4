"""Book §4.10 "Pooling" on CPU: max and average pooling (3 x 3 window, padding 1, stride 1)
with the default schedules and the optimized ones of examples/book/ch4_10_pooling.py.

The optimized schedules start with ``te.schedule.AutoInlineInjective(sch)``; the example's
``inline_injective`` (the same rule spelled with compute_inline) must give identical code.
``schedule_avg`` finds PoolSum as ``Y.op.input_tensors[0]`` (a property, as in TVM).
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm
from tests.book._shared import load_example


ex = load_example("book", "ch4_10_pooling")
TARGET = "llvm"
SIZES = [(64, 64, 3), (3, 13, 3)]  # the book's (c, n, k), and an odd one

def pool_reference(pool_type, x, k):
    """3-D (c, n, n) pooling with a k x k window, padding 1, stride 1; the average divides
    by k * k, padding included, as d2ltvm.pool does."""
    pad = -np.inf if pool_type == "max" else 0.0
    padded = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1)), constant_values=pad)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))
    return windows.max(axis=(-2, -1)) if pool_type == "max" else windows.mean(axis=(-2, -1))


def run_and_check(pool_type, sch, args, size):
    c, n, k = size
    mod = tvm.build(sch, args, TARGET)
    data, _, out = d2ltvm.get_conv_data(c, c, n, k, 1, 1, tvm.nd.array)
    mod(data, out)
    np.testing.assert_allclose(out.asnumpy(), pool_reference(pool_type, data.asnumpy(), k),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", SIZES)
def test_default_max(size):
    run_and_check("max", *ex.default_max(size), size)


@pytest.mark.parametrize("size", SIZES)
def test_default_avg(size):
    run_and_check("avg", *ex.default_avg(size), size)


@pytest.mark.parametrize("size", SIZES)
def test_optimized_max(size):
    run_and_check("max", *ex.optimized_max(size), size)


@pytest.mark.parametrize("size", SIZES)
def test_schedule_avg(size):
    run_and_check("avg", *ex.schedule_avg(size), size)


def test_auto_inline_injective_matches_compute_inline():
    """AutoInlineInjective inlines exactly the stages inline_injective inlines."""
    texts = [str(tvm.lower(*ex.optimized_max((8, 9, 3), inline=inline), simple_mode=True))
             for inline in (ex.auto_inline_injective, ex.inline_injective)]
    assert texts[0] == texts[1]


def test_default_max_lowered(golden, lower_text):
    sch, args = ex.default_max((64, 64, 3))
    text = lower_text(sch, args)
    assert "allocate PaddedX[float32 * 278784]" in text
    assert "produce PoolMax { for (c, 0, 64) { for (h, 0, 64) { for (w, 0, 64) {" in text
    assert "max(PoolMax[" in text
    golden("ch4_10_pooling_default_max", str(tvm.lower(sch, args, simple_mode=True)))


def test_default_avg_lowered(golden, lower_text):
    sch, args = ex.default_avg((64, 64, 3))
    text = lower_text(sch, args)
    assert "allocate PaddedX[float32 * 278784]" in text
    assert "allocate PoolSum[float32 * 262144]" in text
    assert "produce PoolAvg" in text
    golden("ch4_10_pooling_default_avg", str(tvm.lower(sch, args, simple_mode=True)))


def test_optimized_max_lowered(golden, lower_text):
    """PaddedX is inlined (the padding test moves into PoolMax); rows run in parallel."""
    sch, args = ex.optimized_max((64, 64, 3))
    text = lower_text(sch, args)
    assert "PaddedX" not in text
    assert text.startswith("produce PoolMax { parallel (c.h.fused, 0, 4096) {")
    assert "tvm_if_then_else(" in text
    golden("ch4_10_pooling_optimized_max", str(tvm.lower(sch, args, simple_mode=True)))


def test_schedule_avg_lowered(golden, lower_text):
    """PoolSum is computed inside PoolAvg's loops; PaddedX is inlined."""
    sch, args = ex.schedule_avg((64, 64, 3))
    text = lower_text(sch, args)
    assert "PaddedX" not in text
    assert text.startswith("produce PoolAvg { parallel (c.h.fused, 0, 4096) {")
    assert text.index("produce PoolSum") > text.index("parallel (c.h.fused")
    golden("ch4_10_pooling_schedule_avg", str(tvm.lower(sch, args, simple_mode=True)))
