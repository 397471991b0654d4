"""Book §4.4 "Broadcast Add" on CPU: (n, 1) + (n, n) with the good (parallel rows,
vectorized columns) and the bad (parallel columns, strided vectors) schedules of
examples/book/ch4_4_broadcast_add.py."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm
from tests.book._shared import load_example


ex = load_example("book", "ch4_4_broadcast_add")
TARGET = "llvm"


@pytest.mark.parametrize("name", ["default", "good", "bad"])
@pytest.mark.parametrize("n", [64, 127])
def test_broadcast_add_runs(name, n):
    s, (A, B, C) = ex.SCHEDULES[name](n)
    mod = tvm.build(s, [A, B, C], TARGET)
    a, b, c = d2ltvm.get_bcast_data((n, 1), (n, n), tvm.nd.array)
    mod(a, b, c)
    np.testing.assert_array_equal(c.asnumpy(), a.asnumpy() + b.asnumpy())


def test_good_schedule_lowered(golden, lower_text):
    """§4.4.2: A[x] is broadcast to a vector (x64) and added to a contiguous row of B."""
    s, args = ex.good_schedule(64)
    text = lower_text(s, args)
    assert text == ("produce C { parallel (x, 0, 64) { C[ramp((x*64), 1, 64)] = "
                    "(x64(A[x]) + B[ramp((x*64), 1, 64)]) } }")
    golden("ch4_4_broadcast_add_good", str(tvm.lower(s, args, simple_mode=True)))


def test_bad_schedule_lowered(golden, lower_text):
    """§4.4.3: a column at a time, B and C read with stride 64, A as a whole vector."""
    s, args = ex.bad_schedule(64)
    text = lower_text(s, args)
    assert text == ("produce C { parallel (y, 0, 64) { C[ramp(y, 64, 64)] = "
                    "(A[ramp(0, 1, 64)] + B[ramp(y, 64, 64)]) } }")
    golden("ch4_4_broadcast_add_bad", str(tvm.lower(s, args, simple_mode=True)))


def test_default_lowered(golden):
    s, args = ex.default(64)
    golden("ch4_4_broadcast_add_default", str(tvm.lower(s, args, simple_mode=True)))
