"""topi.x86's injective schedule vectorizes by the widest type a stage computes with, not
by its output's: a float32 computation stored as uint16 (a bf16 rounding) or int8 gets
float32's lanes, a stage whose output is its widest type keeps its output's lanes."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.target import Target
from kiln.te.schedule import InferBound
from kiln.topi.x86 import bf16, bf16_intrin
from kiln.topi.x86.injective import compute_dtype

from .common import randn

SHAPE = (4, 256)


def _bf16_round(x: te.Tensor) -> te.Tensor:
    return te.compute(x.shape, lambda *i: bf16_intrin.round_to_bf16(x(*i)), name="r",
                      tag="elemwise")


def _stages() -> tuple[list[te.Tensor], dict[str, te.Tensor]]:
    """The inputs ``x, y`` (float32), ``a, b`` (int8) and the four stages reading them."""
    x = te.placeholder(SHAPE, name="x")
    y = te.placeholder(SHAPE, name="y")
    a = te.placeholder(SHAPE, name="a", dtype="int8")
    b = te.placeholder(SHAPE, name="b", dtype="int8")
    return [x, y, a, b], {"bf16_round": _bf16_round(x), "cast_int8": topi.cast(x, "int8"),
                          "add_float32": topi.add(x, y), "add_int8": topi.add(a, b)}


def _vector_lanes(out: te.Tensor) -> int:
    """The extent of the loop the injective schedule vectorizes in ``out``'s stage."""
    s = topi.x86.schedule_injective(out)
    (iv,) = [iv for iv, a in s[out.op].iter_var_attrs.items() if a.kind == "vectorize"]
    return int(InferBound(s)[iv].extent)


@pytest.mark.parametrize("mcpu, expected", [
    ("skylake-avx512", {"bf16_round": 16, "cast_int8": 16, "add_float32": 16, "add_int8": 64}),
    ("haswell", {"bf16_round": 8, "cast_int8": 8, "add_float32": 8, "add_int8": 32}),
])
def test_lanes_are_the_widest_computed_types(monkeypatch, mcpu, expected):
    monkeypatch.delenv("KILN_VECTOR_BYTES", raising=False)
    with Target(f"llvm -mcpu={mcpu}"):
        got = {name: _vector_lanes(out) for name, out in _stages()[1].items()}
    assert got == expected


def test_compute_dtype_skips_index_arithmetic():
    """A padding condition compares int32 indices: an int8 pad still computes in int8."""
    a = te.placeholder(SHAPE, name="a", dtype="int8")
    x = te.placeholder(SHAPE, name="x")
    assert compute_dtype(topi.nn.pad(a, (0, 1), (0, 1)).op) == "int8"
    assert compute_dtype(_bf16_round(x).op) == "float32"
    assert compute_dtype(topi.cast(a, "float32").op) == "float32"


def test_results_equal_numpy():
    x, y = randn(SHAPE, 1) * 100, randn(SHAPE, 2)
    a = np.random.default_rng(3).integers(-60, 60, SHAPE).astype(np.int8)
    b = np.random.default_rng(4).integers(-60, 60, SHAPE).astype(np.int8)
    expected = {"bf16_round": bf16.np_to_bf16_bits(x), "cast_int8": x.astype(np.int8),
                "add_float32": x + y, "add_int8": a + b}
    inputs, stages = _stages()
    outs = list(stages.values())
    with Target("llvm"):
        s = topi.x86.schedule_injective(outs)
    mod = kiln.build(s, [*inputs, *outs], "llvm")
    res = [kiln.nd.array(np.zeros(SHAPE, out.dtype)) for out in outs]
    mod(*(kiln.nd.array(v) for v in (x, y, a, b)), *res)
    for name, r in zip(stages, res, strict=True):
        np.testing.assert_array_equal(r.numpy(), expected[name], err_msg=name)
