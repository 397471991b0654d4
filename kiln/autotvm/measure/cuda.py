"""CUDA candidates between the builder and the runner: a built module as one file, and the
GPU it is timed on.

The builder compiles a candidate with NVRTC in a forked child (which never touches the GPU:
the architecture comes from the runner, :func:`device_build_kwargs`) and writes it with
:func:`save_candidate`: the split host/device functions (``ir.save_json``), the CUDA source
and its cubin, as ``kiln.codegen.cuda_archive.module_document`` describes a CUDA module.
The runner's worker process, which owns the GPU, loads it back with :func:`load_candidate`
and times it on ``cuda(0)`` with CUDA events
(``CUDAModule.time_evaluator``). Without a GPU loading raises ``TVMError("no CUDA device
...")``, which the runner records as that candidate's error.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from kiln.errors import TVMError

__all__ = ["is_cuda_target", "device_build_kwargs", "build_target", "save_candidate",
           "read_candidate", "load_candidate", "CANDIDATE_SUFFIX"]

#: the file name suffix of a saved CUDA candidate
CANDIDATE_SUFFIX = ".cuda.json"


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
    file in ``directory``; returns its path."""
    from kiln.codegen.cuda_archive import module_document

    fd, path = tempfile.mkstemp(suffix=CANDIDATE_SUFFIX, dir=directory)
    with os.fdopen(fd, "w") as f:
        json.dump(module_document(mod), f)
    return path


def read_candidate(path: str):
    """The CUDA module saved by :func:`save_candidate` (its kernels load into a GPU at the
    first call)."""
    from kiln.codegen.cuda_archive import module_from_document

    with open(path) as f:
        doc = json.load(f)
    try:
        return module_from_document(doc)
    except TVMError:
        raise TVMError(f"{path} is not a CUDA candidate saved by kiln's LocalBuilder") from None


def load_candidate(path: str, device_id: int = 0):
    """``(module, device)``: a candidate saved by :func:`save_candidate`, ready to run on
    ``cuda(device_id)``. Raises TVMError when there is no such GPU."""
    from kiln.runtime.device import cuda

    dev = cuda(device_id)
    if not dev.exist:
        raise TVMError(f"no CUDA device: cuda({device_id}) does not exist on this machine, so "
                       "CUDA candidates are built but cannot be timed")
    return read_candidate(path), dev
