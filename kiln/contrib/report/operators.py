"""The course assignment's operators (seed 000) as the report generator sees them.

An :class:`Operator` names one example of ``examples/assignment/`` (kiln's solutions, a
module with a ``STEPS`` list of ``(title, make)`` and an AutoTVM template), its target, its
sizes (the course's, a quick run's, a small one for memory traces), how to make random
inputs and the numpy (and, where installed, PyTorch) function it is checked and timed
against. ``make(*size)`` returns ``(schedule, *tensors)`` with the output tensor last.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

Arrays = list[np.ndarray]


@dataclass(frozen=True)
class Operator:
    """One operator of the assignment: ``example`` is the module name in
    ``examples/assignment``, ``template`` the name of its AutoTVM template function."""

    name: str
    title: str
    target: str
    example: str
    template: str
    sizes: dict[str, tuple[int, ...]]
    inputs: Callable[[tuple[int, ...], np.random.Generator], Arrays]
    numpy: Callable[..., np.ndarray]
    torch: Callable[[], Callable[..., object] | None]

    @property
    def gpu(self) -> bool:
        return self.target.split()[0] == "cuda"


def examples_dir() -> Path:
    """``examples/assignment`` of the kiln source checkout this package belongs to."""
    path = Path(__file__).resolve().parents[3] / "examples" / "assignment"
    if not path.is_dir():
        raise FileNotFoundError(
            "the assignment report needs the examples/assignment folder of a kiln source "
            f"checkout, not found at {path}")
    return path


def load_example(op: Operator) -> ModuleType:
    """Import ``examples/assignment/<op.example>.py`` by path (examples/ is no package)."""
    path = examples_dir() / f"{op.example}.py"
    spec = importlib.util.spec_from_file_location(op.example, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype("float32")


def _depthwise(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``conv2d(x, w, padding=K // 2, groups=C)`` with numpy: w is (C, 1, K, K)."""
    k = w.shape[-1]
    p = k // 2
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    win = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(2, 3))
    return np.einsum("bchwij,cij->bchw", win, w[:, 0], optimize=True)


def _torch_module():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_conv1d():
    torch = _torch_module()
    if torch is None:
        return None

    def conv1d(a, w):  # the full convolution: cross-correlation with the flipped kernel
        return torch.nn.functional.conv1d(a.view(1, 1, -1), w.flip(0).view(1, 1, -1),
                                          padding=w.numel() - 1)
    return conv1d


def _torch_gemm():
    torch = _torch_module()
    return None if torch is None else torch.matmul


def _torch_depthwise():
    torch = _torch_module()
    if torch is None:
        return None

    def depthwise(x, w):
        return torch.nn.functional.conv2d(x, w, padding=w.shape[-1] // 2, groups=x.shape[1])
    return depthwise


def _conv1d_inputs(size: tuple[int, ...], rng: np.random.Generator) -> Arrays:
    M, N = size
    return [_normal(rng, M), _normal(rng, N)]


OPERATORS: list[Operator] = [
    Operator("conv1d_cpu", "1-D convolution on CPU", "llvm", "conv1d_cpu",
             "conv1d_cpu_template",
             {"course": (4096, 128), "quick": (1024, 32), "trace": (48, 8)},
             _conv1d_inputs, np.convolve, _torch_conv1d),
    Operator("conv1d_gpu", "1-D convolution on GPU", "cuda", "conv1d_gpu",
             "conv1d_gpu_template",
             {"course": (1 << 20, 128), "quick": (4096, 128), "trace": (256, 16)},
             _conv1d_inputs, np.convolve, _torch_conv1d),
    Operator("gemm_gpu", "GEMM on GPU", "cuda", "gemm_gpu", "gemm_gpu_template",
             {"course": (1024, 1024, 1024), "quick": (256, 256, 256), "trace": (64, 32, 64)},
             lambda size, rng: [_normal(rng, size[0], size[1]), _normal(rng, size[1], size[2])],
             np.matmul, _torch_gemm),
    Operator("dwsp_conv2d_gpu", "depthwise 2-D convolution on GPU", "cuda",
             "dwsp_conv2d_gpu", "dwsp_conv2d_gpu_template",
             {"course": (1, 64, 112, 112, 3), "quick": (1, 16, 56, 56, 3),
              "trace": (1, 1, 32, 32, 3)},
             lambda size, rng: [_normal(rng, *size[:4]), _normal(rng, size[1], 1, size[4],
                                                                   size[4])],
             _depthwise, _torch_depthwise),
]
