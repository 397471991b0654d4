"""CUDA candidates between the builder and the runner: a built module as one file, and the
GPU it is timed on.

The builder compiles a candidate with NVRTC in a forked child (which never touches the GPU:
the architecture comes from the runner, :func:`device_build_kwargs`) and writes it with
:func:`save_candidate`: the split host/device functions (``ir.save_json``), the CUDA source
and its cubin. The runner's worker process, which owns the GPU, loads it back with
:func:`load_candidate` and times it on ``cuda(0)`` with CUDA events
(``CUDAModule.time_evaluator``). Without a GPU loading raises ``TVMError("no CUDA device
...")``, which the runner records as that candidate's error.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from typing import Any

from kiln.errors import TVMError

__all__ = ["is_cuda_target", "device_build_kwargs", "build_target", "save_candidate",
           "read_candidate", "load_candidate", "CANDIDATE_SUFFIX"]

#: the file name suffix of a saved CUDA candidate
CANDIDATE_SUFFIX = ".cuda.json"
_FORMAT = "kiln-autotvm-cuda-1"


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


def _split_doc(sp) -> list:
    kernels = [[k.name, k.body, [[p.var, p.kind, p.dtype, p.read_only] for p in k.params],
                dict(k.thread_vars), list(k.grid), list(k.block), k.shared_bytes, k.uses_fp16]
               for k in sp.kernels]
    return [sp.func, sp.host_body, dict(sp.workspaces), kernels]


def _split_from_doc(doc):
    from kiln.tir.split_host_device import Kernel, KernelParam, SplitFunc

    func, host_body, workspaces, kernels = doc
    return SplitFunc(func, host_body, [
        Kernel(name, body, [KernelParam(*p) for p in params], dict(thread_vars), list(grid),
               list(block), int(shared), bool(fp16))
        for name, body, params, thread_vars, grid, block, shared, fp16 in kernels],
        dict(workspaces))


def save_candidate(mod, directory: str) -> str:
    """Write the CUDA module ``mod`` (what ``kiln.build(..., "cuda")`` returned) to a new
    file in ``directory``; returns its path."""
    from kiln.ir.serialize import save_json

    device = mod.imported_modules[0]
    splits = [mod.get_function(name).split for name in mod.functions]
    doc = {"format": _FORMAT, "target": mod.target,
           "arch": device.arch, "source": device.source,
           "image": base64.b64encode(device.compile_for(device.arch)).decode(),
           "functions": save_json([_split_doc(sp) for sp in splits])}
    fd, path = tempfile.mkstemp(suffix=CANDIDATE_SUFFIX, dir=directory)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    return path


def read_candidate(path: str):
    """The CUDA module saved by :func:`save_candidate` (its kernels load into a GPU at the
    first call)."""
    from kiln.codegen.cuda_backend import cuda_module
    from kiln.ir.serialize import load_json

    with open(path) as f:
        doc = json.load(f)
    if doc.get("format") != _FORMAT:
        raise TVMError(f"{path} is not a CUDA candidate saved by kiln's LocalBuilder")
    splits = [_split_from_doc(d) for d in load_json(doc["functions"])]
    return cuda_module(splits, doc["source"], doc["target"], doc["arch"],
                       base64.b64decode(doc["image"]))


def load_candidate(path: str, device_id: int = 0):
    """``(module, device)``: a candidate saved by :func:`save_candidate`, ready to run on
    ``cuda(device_id)``. Raises TVMError when there is no such GPU."""
    from kiln.runtime.device import cuda

    dev = cuda(device_id)
    if not dev.exist:
        raise TVMError(f"no CUDA device: cuda({device_id}) does not exist on this machine, so "
                       "CUDA candidates are built but cannot be timed")
    return read_candidate(path), dev
