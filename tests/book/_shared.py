"""Helpers shared by the book's tests: loading examples, reading allocations, references."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_example(folder: str, name: str):
    """Import ``examples/<folder>/<name>.py`` by path (examples/ is not a package)."""
    path = REPO_ROOT / "examples" / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def allocated(text: str, name: str) -> int:
    """The element count of ``allocate name[float32 * count]`` in the lowered code."""
    found = re.search(rf"allocate {re.escape(name)}\[float32 \* (\d+)\]", text)
    assert found, f"no allocation of {name}"
    return int(found.group(1))


def conv_reference(data: np.ndarray, weight: np.ndarray, p: int, s: int) -> np.ndarray:
    """data (ic, n, n), weight (oc, ic, k, k) -> (oc, on, on): zero padding p, stride s
    (``topi.testing.conv2d_nchw_python`` of a batch of one)."""
    from kiln.topi.testing import conv2d_nchw_python

    return conv2d_nchw_python(data[None], weight, s, p)[0]
