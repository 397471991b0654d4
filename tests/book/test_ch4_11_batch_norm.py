"""Book §4.11 "Batch Normalization" on CPU: the default schedule (six stages) and the
optimized one (all stages inlined into one, rows in parallel, columns vectorized) of
examples/book/ch4_11_batch_norm.py.

``optimized_bn`` calls ``te.schedule.AutoInlineInjective(sch)`` as the book does; with
``inline_injective`` from examples/book/ch4_10_pooling.py instead it must give the same code.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm
from tests.book._shared import load_example


ex = load_example("book", "ch4_11_batch_norm")
inline_injective = load_example("book", "ch4_10_pooling").inline_injective
TARGET = "llvm"
SIZES = [(32, 28), (3, 13)]  # the book's (c, n), and an odd one


def run_and_check(sch, args, size):
    c, n = size
    mod = tvm.build(sch, args, TARGET)
    data, mean, var, gamma, beta, out = d2ltvm.get_bn_data(c, n, tvm.nd.array)
    mod(data, mean, var, gamma, beta, out)
    d, m, v, g, b = (t.asnumpy().astype(np.float64) for t in (data, mean, var, gamma, beta))
    np.testing.assert_allclose(out.asnumpy(), (d - m) / np.sqrt(v + 1e-5) * g + b,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", SIZES)
def test_default_bn(size):
    run_and_check(*ex.default_bn(size), size)


@pytest.mark.parametrize("size", SIZES)
def test_optimized_bn(size):
    run_and_check(*ex.optimized_bn(size), size)


def test_auto_inline_injective_matches_compute_inline():
    texts = [str(tvm.lower(*ex.optimized_bn((4, 5), inline=inline), simple_mode=True))
             for inline in (None, inline_injective)]
    assert texts[0] == texts[1]


def test_default_bn_lowered(golden, lower_text):
    sch, args = ex.default_bn((32, 28))
    text = lower_text(sch, args)
    for stage in ("T_subtract", "T_add", "compute", "T_divide", "T_multiply"):
        assert f"produce {stage} {{" in text
    assert "sqrt(T_add[" in text
    golden("ch4_11_batch_norm_default", str(tvm.lower(sch, args, simple_mode=True)))


def test_optimized_bn_lowered(golden, lower_text):
    """One stage is left: parallel over the 32 * 28 rows, the whole formula per element."""
    sch, args = ex.optimized_bn((32, 28))
    text = lower_text(sch, args)
    assert text.startswith("produce T_add { parallel (ax0.ax1.fused, 0, 896) {")
    assert "allocate" not in text
    assert "sqrt((Var[floordiv(ax0.ax1.fused, 28)] + 1e-05f))" in text
    golden("ch4_11_batch_norm_optimized", str(tvm.lower(sch, args, simple_mode=True)))
