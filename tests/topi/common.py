"""Helpers of the topi tests: build a computation with a schedule, run it, compare."""

from __future__ import annotations

import os

import numpy as np

import kiln
from kiln import topi

RNG_SEED = 0


def rng(seed: int = RNG_SEED) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(shape, seed: int = RNG_SEED, dtype="float32") -> np.ndarray:
    return rng(seed).standard_normal(shape).astype(dtype)


def run(sched, outs, inputs, arrays, out_shapes=None) -> list[np.ndarray]:
    """Schedule ``outs`` with ``sched``, build, run on ``arrays`` (for ``inputs``), return
    the outputs as numpy arrays (``out_shapes`` for outputs of symbolic shape)."""
    outs = outs if isinstance(outs, list | tuple) else [outs]
    s = sched(list(outs))
    mod = kiln.build(s, list(inputs) + list(outs), target="llvm")
    args = [kiln.nd.array(a) for a in arrays]
    shapes = out_shapes or [[int(d) for d in o.shape] for o in outs]
    res = [kiln.nd.array(np.zeros(shp, dtype=o.dtype)) for shp, o in zip(shapes, outs,
                                                                          strict=True)]
    mod(*args, *res)
    return [r.asnumpy() for r in res]


#: the schedule families :func:`check` runs; ``KILN_TOPI_SCHEDULES=x86`` (the sanitized tier,
#: tests/reliability/test_sanitize.py) leaves out the generic ones, whose root loop nests the
#: plain run covers
SCHEDULE_FAMILIES = ("generic", "x86")


def schedules(name: str):
    """The schedules called ``name`` of :data:`SCHEDULE_FAMILIES` (or of the families named,
    comma-separated, in ``$KILN_TOPI_SCHEDULES``)."""
    chosen = os.environ.get("KILN_TOPI_SCHEDULES", ",".join(SCHEDULE_FAMILIES)).split(",")
    families = [family for family in SCHEDULE_FAMILIES if family in chosen]
    if not families:
        raise ValueError(f"KILN_TOPI_SCHEDULES={','.join(chosen)!r} names none of "
                         f"{SCHEDULE_FAMILIES}")
    return [getattr(getattr(topi, family), name) for family in families]


def check(name: str, outs, inputs, arrays, expected, rtol=1e-5, atol=1e-5):
    """Run ``outs`` with ``topi.generic.<name>`` and ``topi.x86.<name>`` (see
    :func:`schedules`) and compare each output with ``expected`` (an array or a list of
    arrays)."""
    expected = expected if isinstance(expected, list | tuple) else [expected]
    for sched in schedules(name):
        got = run(sched, outs, inputs, arrays, [np.shape(e) for e in expected])
        for g, e in zip(got, expected, strict=True):
            assert g.shape == tuple(e.shape), (sched.__module__, g.shape, e.shape)
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol,
                                       err_msg=f"schedule {sched.__module__}.{name}")
