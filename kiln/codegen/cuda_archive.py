"""A CUDA module saved and loaded: ``mod.export_library("kernels.tar")`` of what
``kiln.build(..., target="cuda")`` returned, and ``kiln.runtime.load_module`` of that file.

A CUDA module is the host side of each function (kiln's host program is interpreted by
Python, so it is saved as its lowered, split IR: :func:`module_document`) and the device
module (the CUDA C source and its compiled image for one GPU architecture). The archive holds
``module.json`` (format ``kiln-cuda-module``, the target, the architecture, the functions and
the entry), ``host.json`` (the split functions, ``kiln.ir.save_json``), ``kernels.cu`` and
``kernels.cubin``. Loading needs no compiler and no GPU; a GPU of another architecture
recompiles the kernels from the saved source at the first launch, as a fresh build does.

AutoTVM's CUDA builder hands its candidates to the runner (local, or an RPC server) as such
archives.
"""

from __future__ import annotations

import json
import os
import tarfile
from typing import Any

from kiln.errors import TVMError
from kiln.ir.serialize import load_json, save_json
from kiln.runtime.module_archive import write_archive
from kiln.runtime.registry import register_func
from kiln.tir.split_host_device import Kernel, KernelParam, SplitFunc

from .cuda_backend import cuda_module

#: the ``format`` of an exported CUDA module's ``module.json``
ARCHIVE_FORMAT = "kiln-cuda-module"
_MEMBERS = ("module.json", "host.json", "kernels.cu", "kernels.cubin")

__all__ = ["ARCHIVE_FORMAT", "export_archive", "load_archive"]


def _split_doc(sp: SplitFunc) -> list:
    kernels = [[k.name, k.body, [[p.var, p.kind, p.dtype, p.read_only] for p in k.params],
                dict(k.thread_vars), list(k.grid), list(k.block), k.shared_bytes, k.uses_fp16]
               for k in sp.kernels]
    return [sp.func, sp.host_body, dict(sp.workspaces), kernels]


def _split_from_doc(doc: list) -> SplitFunc:
    func, host_body, workspaces, kernels = doc
    return SplitFunc(func, host_body, [
        Kernel(name, body, [KernelParam(*p) for p in params], dict(thread_vars), list(grid),
               list(block), int(shared), bool(fp16))
        for name, body, params, thread_vars, grid, block, shared, fp16 in kernels],
        dict(workspaces))


def _parts(mod) -> tuple[dict[str, Any], str, str, bytes]:
    """``(info, host IR, CUDA source, image)`` of CUDA module ``mod``."""
    device = mod.imported_modules[0]
    splits = [mod.get_function(name).split for name in mod.functions]
    info = {"format": ARCHIVE_FORMAT, "version": 1, "target": mod.target,
            "arch": device.arch, "functions": list(mod.functions), "entry": mod.entry_name}
    return info, save_json([_split_doc(sp) for sp in splits]), device.source, \
        device.compile_for(device.arch)


def _module(info: dict[str, Any], host: str, source: str, image: bytes):
    splits = [_split_from_doc(d) for d in load_json(host)]
    mod = cuda_module(splits, source, info["target"], info["arch"], image)
    mod.entry_name = info.get("entry", mod.entry_name)
    return mod


def export_archive(mod, path: str | os.PathLike[str]) -> None:
    """Write CUDA module ``mod`` to the tar archive ``path`` (``.tar``, ``.tar.gz``,
    ``.tgz``), atomically: a reader never sees a half-written file."""
    info, host, source, image = _parts(mod)
    write_archive(path, dict(zip(_MEMBERS, (json.dumps(info, indent=1).encode(),
                                            host.encode(), source.encode(), image),
                                 strict=True)), "CUDA module")


@register_func(f"runtime.module.loadfile_{ARCHIVE_FORMAT}")
def load_archive(path: str, tar: tarfile.TarFile, info: dict[str, Any]):
    """The CUDA module in archive ``path`` (open as ``tar``, its ``module.json`` read into
    ``info``); ``kiln.runtime.load_module`` calls it for format ``kiln-cuda-module``."""
    blobs = {}
    for name in _MEMBERS[1:]:
        member = tar.extractfile(name)
        if member is None:
            raise TVMError(f"cannot load {path}: {name} is not a regular file")
        blobs[name] = member.read()
    try:
        return _module(info, blobs["host.json"].decode(), blobs["kernels.cu"].decode(),
                       blobs["kernels.cubin"])
    except (KeyError, ValueError, TypeError) as e:
        raise TVMError(f"cannot load {path}: damaged CUDA module archive ({e})") from None
