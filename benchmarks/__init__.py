"""kiln's benchmark suites.

Each suite is a module with ``NAME``, ``DESCRIPTION``, ``run(quick=..., out_dir=...,
profile=...)`` (writes ``results/<NAME>.json`` and ``results/<NAME>.md``, returns the
markdown) and ``main(argv)``. Register a new suite by adding it to ``SUITES``; run them all
with ``python -m benchmarks`` (or ``python benchmarks/run.py``). See docs/benchmarks.md.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# suite name -> module implementing it, in the order `python -m benchmarks` runs them
SUITES: dict[str, str] = {
    "foundation": "benchmarks.foundation",
    "cpu": "benchmarks.cpu",
    "ops": "benchmarks.ops",
    "models": "benchmarks.models",
    "tuning": "benchmarks.tuning",
    "gpu": "benchmarks.gpu",
    "gpu_tuning": "benchmarks.gpu_tuning",
    "gpu_models": "benchmarks.gpu_models",
    "gpu_sweep": "benchmarks.gpu_sweep",
    "gpu_conv": "benchmarks.gpu_conv",
    "gpu_autoschedule": "benchmarks.gpu_autoschedule",
    "fused": "benchmarks.fused",
    "cost_model": "benchmarks.cost_model",
    "dynamic": "benchmarks.dynamic",
    "auto_scheduler": "benchmarks.auto_scheduler",
    "precision": "benchmarks.precision",
    "vta": "benchmarks.vta",
}


#: suites `python -m benchmarks` (and `kiln bench`) skip unless named: tuning takes ~15 min,
#: gpu, gpu_models, gpu_sweep, gpu_conv, gpu_tuning and gpu_autoschedule need a GPU, fused is
#: the seed-002 study (docs/fused_loop.md), cost_model the cost model's validation and dynamic the
#: dynamic-shape models (docs/dynamic.md), auto_scheduler single operators tuned
#: (docs/auto_scheduler.md), precision the models again in bf16 (`kiln bench models
#: --precision bf16`, docs/precision.md)
NOT_DEFAULT = {"tuning", "gpu", "gpu_models", "gpu_sweep", "gpu_conv", "fused", "gpu_tuning",
               "gpu_autoschedule",
               "cost_model", "dynamic", "auto_scheduler", "precision"}


def get_suite(name: str) -> ModuleType:
    """The module of suite ``name``; KeyError if there is none."""
    if name not in SUITES:
        raise KeyError(f"unknown benchmark suite {name!r} (known: {', '.join(SUITES)})")
    return importlib.import_module(SUITES[name])
