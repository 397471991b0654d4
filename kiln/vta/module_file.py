"""A VTA module saved and loaded: ``f.export_library("vadd.tar")`` of what ``vta.build``
returned, and ``kiln.runtime.load_module`` of that file (which an RPC server does for an
uploaded module, so ``remote.load_module`` runs VTA programs on the server's simulator).

The archive holds ``module.json`` (format ``kiln-vta-module``: the function's name, the VTA
configuration, the arguments' names, shapes and dtypes, each instruction's relocation and
the micro-op words) and ``insns.bin``, the instruction stream as the hardware reads it
(:func:`kiln.vta.isa.encode`, 16 bytes an instruction).
"""

from __future__ import annotations

import json
import os
import tarfile
from typing import Any

from kiln.errors import TVMError
from kiln.runtime.module_archive import write_archive
from kiln.runtime.registry import register_func

from .env import Environment
from .isa import INSN_BYTES, decode, encode
from .program import Program
from .runtime import VTAModule

#: the ``format`` of a saved VTA module's ``module.json``
ARCHIVE_FORMAT = "kiln-vta-module"

__all__ = ["ARCHIVE_FORMAT", "export_archive", "load_archive"]


def export_archive(mod: VTAModule, path: str | os.PathLike[str]) -> None:
    """Write ``mod`` to the tar archive ``path`` (``.tar``, ``.tar.gz``, ``.tgz``),
    atomically."""
    prog = mod.program
    info = {"format": ARCHIVE_FORMAT, "version": 1, "name": mod.name, "env": mod.env.cfg,
            "arg_names": prog.arg_names, "arg_shapes": [list(s) for s in prog.arg_shapes],
            "arg_dtypes": prog.arg_dtypes, "relocs": prog.relocs, "uops": prog.uops}
    write_archive(path, {"module.json": json.dumps(info).encode(),
                         "insns.bin": b"".join(encode(i, mod.env) for i in prog.insns)},
                  "VTA module")


@register_func(f"runtime.module.loadfile_{ARCHIVE_FORMAT}")
def load_archive(path: str, tar: tarfile.TarFile, info: dict[str, Any]) -> VTAModule:
    """The VTA module in archive ``path`` (open as ``tar``, its ``module.json`` read into
    ``info``); ``kiln.runtime.load_module`` calls it for format ``kiln-vta-module``."""
    member = tar.extractfile("insns.bin")
    if member is None:
        raise TVMError(f"cannot load {path}: insns.bin is not a regular file")
    stream = member.read()
    try:
        env = Environment(dict(info["env"]))
        if len(stream) % INSN_BYTES:
            raise ValueError(f"the instruction stream has {len(stream)} bytes")
        insns = [decode(stream[k:k + INSN_BYTES], env) for k in range(0, len(stream), INSN_BYTES)]
        program = Program(insns, list(info["relocs"]), list(info["uops"]),
                          list(info["arg_names"]), [tuple(s) for s in info["arg_shapes"]],
                          list(info["arg_dtypes"]))
        if len(program.relocs) != len(insns):
            raise ValueError("one relocation per instruction is needed")
    except (KeyError, ValueError, TypeError) as e:
        raise TVMError(f"cannot load {path}: damaged VTA module archive ({e})") from None
    return VTAModule(program, env, str(info["name"]))
