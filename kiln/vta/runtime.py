"""The VTA runtime: ``ext_dev`` arrays in the simulator's DRAM, and compiled programs that
submit their instruction and micro-op buffers to the simulator.

Importing ``kiln.vta`` registers :class:`DramAllocator` for ``kiln.ext_dev``, so
``tvm.nd.array(x, tvm.ext_dev(0))`` places ``x`` in the accelerator's DRAM. A
:class:`VTAModule` (what ``vta.build`` returns) holds a ``Program``; calling it with arrays
(``ext_dev`` arrays, or host arrays, which are copied in and out) writes its micro-op
buffer once, adds each argument's tile address to the DRAM addresses of the instructions
that name it, encodes the stream and runs it on ``vta.testing.simulator``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.errors import TVMError
from kiln.runtime.device import EXT_DEV, Device
from kiln.runtime.ndarray import NDArray, register_device_allocator

from . import simulator
from .env import Environment
from .isa import Insn, MemId, MemInsn, encode
from .program import UOP_RELOC, Program
from .timing import tile_bytes

__all__ = ["DramAllocator", "VTAModule", "register"]


class DramAllocator:
    """``ext_dev`` NDArrays: a pointer is a byte address in the simulated DRAM."""

    def alloc(self, nbytes: int, device: Device) -> int:
        return simulator.dram().alloc(nbytes)

    def free(self, ptr: int, device: Device) -> None:
        simulator.dram().free(ptr)

    def copy_from_host(self, dst: int, src: np.ndarray, device: Device) -> None:
        simulator.dram().write(dst, src)

    def copy_to_host(self, dst: np.ndarray, src: int, device: Device) -> None:
        raw = simulator.dram().read(src, dst.nbytes)
        dst.reshape(-1)[:] = raw.view(dst.dtype)


def register() -> None:
    """Make ``ext_dev`` arrays live in the simulator's DRAM."""
    register_device_allocator(EXT_DEV, DramAllocator())


class VTAModule:
    """A compiled VTA function (``f(A, B, C)``)."""

    type_key = "vta"

    def __init__(self, program: Program, env: Environment, name: str) -> None:
        self.program = program
        self.env = env
        self.name = name
        self._uop_addr: int | None = None

    @property
    def entry_name(self) -> str:
        return self.name

    @property
    def functions(self) -> list[str]:
        return [self.name]

    def __getitem__(self, name: str) -> VTAModule:
        if name != self.name:
            raise AttributeError(f"VTA module has no function {name!r} (it has {self.name!r})")
        return self

    get_function = __getitem__

    def __call__(self, *args: Any) -> None:
        prog = self.program
        if len(args) != len(prog.arg_names):
            raise TVMError(f"{self.name} expects {len(prog.arg_names)} arguments "
                           f"({', '.join(prog.arg_names)}), got {len(args)}")
        dram = simulator.dram()
        staged: list[tuple[int, Any]] = []
        addrs = []
        for k, arg in enumerate(args):
            addrs.append(self._address(k, arg, staged))
        try:
            simulator.run(b"".join(encode(i, self.env) for i in self._relocated(addrs)))
            for addr, host in staged:
                if isinstance(host, NDArray):
                    out = np.empty(host.shape, host.dtype)
                    out.reshape(-1)[:] = dram.read(addr, out.nbytes).view(out.dtype)
                    host.copyfrom(out)
                else:
                    host.reshape(-1)[:] = dram.read(addr, host.nbytes).view(host.dtype)
        finally:
            for addr, _ in staged:
                dram.free(addr)

    def _address(self, k: int, arg: Any, staged: list) -> int:
        """The DRAM address of argument ``k``; host arrays are copied into DRAM."""
        prog = self.program
        shape, dtype = prog.arg_shapes[k], np.dtype(prog.arg_dtypes[k])
        if isinstance(arg, NDArray) and arg.device.device_type == EXT_DEV:
            host_shape, host_dtype = tuple(arg.shape), np.dtype(arg.dtype)
            addr = arg._ptr  # an ext_dev array's pointer is its DRAM address
        elif isinstance(arg, (NDArray, np.ndarray)):
            host_shape, host_dtype = tuple(arg.shape), np.dtype(arg.dtype)
            addr = simulator.dram().alloc(int(np.prod(shape)) * dtype.itemsize)
            simulator.dram().write(addr, np.ascontiguousarray(
                arg.numpy() if isinstance(arg, NDArray) else arg))
            staged.append((addr, arg))
        else:
            raise TVMError(f"{self.name}: argument {prog.arg_names[k]} must be an array, got "
                           f"{type(arg).__name__}")
        if host_shape != shape or host_dtype != dtype:
            raise TVMError(f"{self.name}: argument {prog.arg_names[k]} must be {dtype} "
                           f"{list(shape)}, got {host_dtype} {list(host_shape)}")
        return addr

    def _relocated(self, addrs: list[int]) -> list[Insn]:
        if self._uop_addr is None:
            words = np.array(self.program.uops or [0], np.uint32)
            self._uop_addr = simulator.dram().alloc(words.nbytes)
            simulator.dram().write(self._uop_addr, words)
        out = []
        for insn, reloc in zip(self.program.insns, self.program.relocs, strict=True):
            if reloc is not None:
                base = self._uop_addr if reloc == UOP_RELOC else addrs[reloc]
                assert isinstance(insn, MemInsn)
                size = tile_bytes(insn, self.env) if insn.memory_type != MemId.UOP else 4
                insn = MemInsn(**{**insn.__dict__, "dram_base": insn.dram_base + base // size})
            out.append(insn)
        return out

    def get_source(self, fmt: str = "") -> str:
        """The instruction stream, one instruction a line (dependence flags ``pPuU``:
        pop prev/next, push prev/next)."""
        return disassemble(self.program.insns)

    def export_library(self, path: str, **_ignored: Any) -> None:
        """Save the module as a tar archive (:mod:`kiln.vta.module_file`); load it with
        ``kiln.runtime.load_module``, or upload it to an RPC server and
        ``remote.load_module`` it there."""
        from .module_file import export_archive

        export_archive(self, path)

    save = export_library

    def __repr__(self) -> str:
        return f"VTAModule({self.name}, {len(self.program.insns)} instructions)"


def disassemble(insns: list[Insn]) -> str:
    return "\n".join(f"{i:5d}  {simulator.disassemble_one(x)}" for i, x in enumerate(insns))
