"""VTA's tutorial programs, from examples/vta/ (loaded by path: examples/ is no package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "vta"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kiln_example_vta_{name}",
                                                  EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_vadd, _mm, _conv = _load("getting_started"), _load("matrix_multiply"), _load("convolution")
vector_add = _vadd.vector_add
matmul, matmul_reference, random_int8 = _mm.matmul, _mm.matmul_reference, _mm.random_int8
conv2d, conv2d_reference = _conv.conv2d, _conv.conv2d_reference
