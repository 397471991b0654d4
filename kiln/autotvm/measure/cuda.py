"""CUDA candidates between the builder and the runner: a built module as one file, and the
GPU it is timed on.

The builder compiles a candidate with NVRTC in a forked child (which never touches the GPU:
the architecture comes from the runner, :func:`device_build_kwargs`, or from an RPC server's
GPU, :func:`arch_of`) and saves it with ``export_library`` (kiln/codegen/cuda_archive.py:
the split host/device functions, the CUDA source and its cubin in one tar file), which an
RPC server loads like any other library. The local runner's worker process, which owns the
GPU, loads it back with :func:`load_candidate` and times it on ``cuda(0)`` with CUDA events
(``CUDAModule.time_evaluator``). Without a GPU loading raises ``TVMError("no CUDA device
...")``, which the runner records as that candidate's error.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from kiln.errors import TVMError

__all__ = ["is_cuda_target", "device_build_kwargs", "build_target", "save_candidate",
           "read_candidate", "load_candidate", "arch_of", "CANDIDATE_SUFFIX"]

#: the file name suffix of a saved CUDA candidate
CANDIDATE_SUFFIX = ".cuda.tar"


def is_cuda_target(target) -> bool:
    """True for targets of the ``cuda`` family (``cuda``, ``nvptx``, with options)."""
    return str(target or "llvm").split()[0] in ("cuda", "nvptx")


def device_build_kwargs(device_id: int = 0) -> dict[str, Any]:
    """What the builder needs to know of the GPU that will time the candidates (run in the
    runner's worker): ``{"arch": "sm_90"}``, or ``{}`` without a GPU."""
    from kiln.runtime import cuda_driver
    from kiln.runtime.device import cuda

    if not cuda(device_id).exist:
        return {}
    return {"arch": cuda_driver.device_arch(device_id)}


def build_target(target, build_kwargs: dict[str, Any]) -> str:
    """The target string to build a candidate with: ``target`` plus ``-arch`` of the
    runner's GPU when the target names none."""
    text = str(target)
    if "arch" in build_kwargs and "-arch" not in text:
        text += f" -arch={build_kwargs['arch']}"
    return text


def save_candidate(mod, directory: str) -> str:
    """Write the CUDA module ``mod`` (what ``kiln.build(..., "cuda")`` returned) to a new
    archive in ``directory`` (``export_library``); returns its path."""
    fd, path = tempfile.mkstemp(suffix=CANDIDATE_SUFFIX, dir=directory)
    os.close(fd)
    mod.export_library(path)
    return path


def read_candidate(path: str):
    """The CUDA module saved by :func:`save_candidate` (its kernels load into a GPU at the
    first call)."""
    from kiln.runtime.module import load_module

    return load_module(path)


def arch_of(compute_version: str | None) -> dict[str, Any]:
    """``{"arch": "sm_XY"}`` of a GPU's compute version ``"X.Y"`` (``{}`` for None)."""
    if not compute_version:
        return {}
    major, minor = str(compute_version).split(".")[:2]
    return {"arch": f"sm_{major}{minor}"}


def load_candidate(path: str, device_id: int = 0):
    """``(module, device)``: a candidate saved by :func:`save_candidate`, ready to run on
    ``cuda(device_id)``. Raises TVMError when there is no such GPU."""
    from kiln.runtime.device import cuda

    dev = cuda(device_id)
    if not dev.exist:
        raise TVMError(f"no CUDA device: cuda({device_id}) does not exist on this machine, so "
                       "CUDA candidates are built but cannot be timed")
    return read_candidate(path), dev
