"""Targets: ``llvm``, ``llvm -mcpu=...``, ``c`` (all the C backend on the CPU) and ``cuda``.

A target string is parsed into its kind and ``-key=value`` options; the target then answers
what code generation and schedules ask about the machine: thread limits (``cuda``), the C
compiler flags and the CPU description (:attr:`Target.cpu`: vector width, registers, ISA
features). A target is also a context, as in TVM::

    with tvm.target.create("cuda"):            # or tvm.target.Target("cuda")
        nt = tvm.target.Target.current(allow_none=False).max_num_threads   # 1024
"""

from __future__ import annotations

import shlex
import threading

from kiln.errors import TVMError

from .cpu import CPUInfo, cpu_for_mcpu, generic_cpu, host_cpu, march_flags
from .triple import check_triple, is_host_arch

#: device limits TVM's targets report by default (``-max_num_threads=N`` etc. override them)
_CUDA_DEFAULTS = {"max_num_threads": 1024, "thread_warp_size": 32,
                  "max_shared_memory_per_block": 49152}
_CPU_DEFAULTS = {"max_num_threads": 1, "thread_warp_size": 1}

_CPU_KINDS = ("llvm", "c")
_GPU_KINDS = ("cuda", "nvptx")


class TargetKind(str):
    """``target.kind``: the kind's name, a string ("llvm", "c", "cuda") that also has TVM's
    ``.name``."""

    @property
    def name(self) -> str:
        return str.__str__(self)


class Target:
    """A parsed target string: its kind and ``-key=value`` options.

    ``with target:`` makes it :meth:`current` (nested contexts stack, per thread)."""

    _local = threading.local()  # each thread enters its own targets, as in TVM

    def __init__(self, target: str | Target = "llvm"):
        if isinstance(target, Target):
            self.kind, self.attrs, self.text = target.kind, dict(target.attrs), target.text
            return
        parts = shlex.split(str(target))
        if not parts:
            raise TVMError("empty target string; use 'llvm', 'c' or 'cuda'")
        self.kind = TargetKind(parts[0])
        if self.kind not in _CPU_KINDS + _GPU_KINDS:
            raise TVMError(
                f"unknown target '{self.kind}'; kiln supports 'llvm', 'c' (CPU, via the "
                f"system C compiler) and 'cuda'")
        self.attrs: dict[str, str] = {}
        for p in parts[1:]:
            if not p.startswith("-"):
                raise TVMError(f"target option {p!r} must look like -key=value")
            key, _, value = p.lstrip("-").partition("=")
            self.attrs[key] = value or "true"
        self.text = str(target)

    @staticmethod
    def current(allow_none: bool = True) -> Target | None:
        """The innermost target of this thread's enclosing ``with target:`` blocks."""
        stack = Target._stack()
        if stack:
            return stack[-1]
        if not allow_none:
            raise TVMError("Target.current(allow_none=False): no target is in scope; use "
                           "`with tvm.target.Target('cuda'):` (or 'llvm')")
        return None

    @staticmethod
    def _stack() -> list[Target]:
        if not hasattr(Target._local, "stack"):
            Target._local.stack = []
        return Target._local.stack

    def __enter__(self) -> Target:
        Target._stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        Target._stack().pop()

    def _limit(self, name: str) -> int:
        if name in self.attrs:
            return int(self.attrs[name])
        return (_CPU_DEFAULTS if self.is_cpu else _CUDA_DEFAULTS).get(name, 0)

    @property
    def max_num_threads(self) -> int:
        """Threads per block (1 on a CPU target)."""
        return self._limit("max_num_threads")

    @property
    def thread_warp_size(self) -> int:
        return self._limit("thread_warp_size")

    @property
    def max_shared_memory_per_block(self) -> int:
        return self._limit("max_shared_memory_per_block")

    @property
    def keys(self) -> list[str]:
        return ["cpu"] if self.is_cpu else ["cuda", "gpu"]

    @property
    def model(self) -> str:
        return self.attrs.get("model", "unknown")

    @property
    def mcpu(self) -> str:
        return self.attrs.get("mcpu", "")

    @property
    def is_cpu(self) -> bool:
        return self.kind in _CPU_KINDS

    @property
    def device_type(self) -> int:
        return 1 if self.is_cpu else 2

    @property
    def cpu(self) -> CPUInfo:
        """The CPU this target's code (a GPU target's host code) is planned for: the
        ``-mcpu`` CPU when :data:`kiln.target.cpu.MCPU_ISA` knows it, a generic CPU for a
        triple of another architecture, else this machine (:func:`kiln.target.cpu.host_cpu`)."""
        triple = self.attrs.get("mtriple") or self.attrs.get("target")
        if self.is_cpu and triple and not is_host_arch(triple):
            return generic_cpu()
        if self.is_cpu and self.mcpu not in ("", "native"):
            described = cpu_for_mcpu(self.mcpu)
            if described is not None:
                return described
        return host_cpu()

    def c_flags(self) -> list[str]:
        """Extra C compiler flags: ``-mcpu=X`` selects ``-march=X``. A ``-target=<triple>``
        (or ``-mtriple=``) must name this machine: see :func:`check_triple`."""
        for key in ("target", "mtriple"):
            if key in self.attrs:
                check_triple(self.attrs[key])
        return march_flags(self.mcpu)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Target({self.text!r})"


def current_cpu() -> CPUInfo:
    """The CPU the kernels being scheduled are for: that of the innermost ``with target:``
    block (:attr:`Target.cpu`), else this machine."""
    tgt = Target.current()
    return tgt.cpu if tgt is not None else host_cpu()


def create(target: str | Target) -> Target:
    """``tvm.target.create(s)``: the classic spelling of ``Target(s)``."""
    return Target(target)


def cuda(model: str = "unknown", arch: str | None = None, options=None) -> Target:
    """``tvm.target.cuda()``: a CUDA target (``arch`` like ``"sm_80"``)."""
    text = f"cuda -model={model}" + (f" -arch={arch}" if arch else "")
    return Target(" ".join([text, *(options or [])]))
