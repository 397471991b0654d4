"""One step of a schedule sequence, measured: built, checked against numpy, timed.

:func:`run_step` builds a step's schedule for its operator's target, runs it on random
inputs, compares the output with the operator's numpy function and times it with
``time_evaluator``. A CUDA step is compiled (with NVRTC, where installed) but run only when a
GPU exists; otherwise its status says "not run". :func:`time_reference` times numpy and
PyTorch on the same inputs. Nothing here raises for a failing step: the failure is the
step's status.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .operators import Arrays, Operator

RTOL, ATOL = 1e-3, 1e-3
ENTRY = "step"


@dataclass
class Measured:
    """The outcome of one step: ``status`` is ``ok``, ``mismatch``, ``not run (...)`` or
    ``error: ...``; ``seconds`` the median run time, where it ran."""

    status: str
    seconds: float | None = None
    max_abs_err: float | None = None


def lowered_text(schedule, tensors) -> str:
    """``tvm.lower(schedule, tensors, simple_mode=True)`` as text."""
    import kiln

    return str(kiln.lower(schedule, list(tensors), simple_mode=True))


def _device(op: Operator):
    import kiln

    return kiln.cuda(0) if op.gpu else kiln.cpu(0)


def _compile_only(op: Operator, schedule, tensors) -> Measured:
    """A CUDA step without a GPU: compiled with NVRTC where it is installed."""
    import kiln
    from kiln.runtime import cuda_driver

    if not cuda_driver.available():
        return Measured("not run (no GPU, no NVRTC)")
    kiln.build(schedule, list(tensors), op.target, name=ENTRY)
    return Measured("not run (no GPU; compiled with NVRTC)")


def run_step(op: Operator, make: Callable, size: tuple[int, ...], inputs: Arrays,
             expected: np.ndarray, number: int, repeat: int) -> Measured:
    """Build ``make(*size)`` for ``op.target``, check it against ``expected`` and time it."""
    import kiln

    try:
        schedule, *tensors = make(*size)
        dev = _device(op)
        if op.gpu and not dev.exist:
            return _compile_only(op, schedule, tensors)
        mod = kiln.build(schedule, tensors, op.target, name=ENTRY)
        args = [kiln.nd.array(a, dev) for a in inputs]
        out = kiln.nd.array(np.zeros(expected.shape, "float32"), dev)
        mod(*args, out)
        err = float(np.max(np.abs(out.numpy() - expected))) if expected.size else 0.0
        if not np.allclose(out.numpy(), expected, rtol=RTOL, atol=ATOL):
            return Measured("mismatch", max_abs_err=err)
        timer = mod.time_evaluator(ENTRY, dev, number=number, repeat=repeat)
        return Measured("ok", float(np.median(timer(*args, out).results)), err)
    except Exception as e:  # noqa: BLE001 - a failing step is reported, not raised
        return Measured("error: " + " ".join(str(e).split())[:200])


def _median_seconds(fn: Callable[[], object], number: int, repeat: int) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return float(np.median(samples))


def time_reference(op: Operator, inputs: Arrays, number: int, repeat: int
                   ) -> dict[str, float | None]:
    """Median seconds of numpy and of PyTorch (None where not installed) on ``inputs``;
    PyTorch on the GPU for a GPU operator where CUDA is available, else on the CPU."""
    times: dict[str, float | None] = {
        "numpy": _median_seconds(lambda: op.numpy(*inputs), number, repeat)}
    fn = op.torch()
    if fn is None:
        times["PyTorch"] = None
        return times
    import torch

    on_gpu = op.gpu and torch.cuda.is_available()
    tensors = [torch.from_numpy(a).to("cuda" if on_gpu else "cpu") for a in inputs]

    def call():
        fn(*tensors)
        if on_gpu:
            torch.cuda.synchronize()

    with torch.no_grad():
        times["PyTorch (GPU)" if on_gpu else "PyTorch (CPU)"] = _median_seconds(
            call, number, repeat)
    return times
