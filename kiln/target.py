"""Targets: ``llvm``, ``llvm -mcpu=...``, ``c`` (all the C backend on the CPU) and ``cuda``.

A target is also a context, as in TVM::

    with tvm.target.create("cuda"):            # or tvm.target.Target("cuda")
        nt = tvm.target.Target.current(allow_none=False).max_num_threads   # 1024
"""

from __future__ import annotations

import platform
import shlex
import sys

from kiln.errors import TVMError

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

    ``with target:`` makes it :meth:`current` (nested contexts stack)."""

    _stack: list[Target] = []

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
        """The innermost target of the enclosing ``with target:`` blocks."""
        if Target._stack:
            return Target._stack[-1]
        if not allow_none:
            raise TVMError("Target.current(allow_none=False): no target is in scope; use "
                           "`with tvm.target.Target('cuda'):` (or 'llvm')")
        return None

    def __enter__(self) -> Target:
        Target._stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        Target._stack.pop()

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

    def c_flags(self) -> list[str]:
        """Extra C compiler flags: ``-mcpu=X`` selects ``-march=X``. A ``-target=<triple>``
        (or ``-mtriple=``) must name this machine: see :func:`check_triple`."""
        for key in ("target", "mtriple"):
            if key in self.attrs:
                check_triple(self.attrs[key])
        cpu = self.attrs.get("mcpu")
        return [f"-march={cpu}"] if cpu else []

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Target({self.text!r})"


# ---- target triples (``llvm -target=x86_64-pc-linux-gnu``, book §1.4) ----------------------
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "i386": "x86",
                 "i486": "x86", "i586": "x86", "i686": "x86"}


def _host_arch() -> str:
    m = platform.machine().lower()
    return _ARCH_ALIASES.get(m, m)


def _host_sys() -> str:
    return {"win32": "windows", "cygwin": "windows"}.get(sys.platform, sys.platform)


def host_triple() -> str:
    """This machine's target triple in LLVM's spelling, e.g. ``x86_64-pc-linux-gnu`` (what
    ``llvm-config --host-target`` prints there)."""
    arch, system = _host_arch(), _host_sys()
    vendor = "pc" if arch in ("x86_64", "x86") else "unknown"
    if system == "darwin":
        return f"{arch}-apple-darwin"
    if system == "windows":
        return f"{arch}-pc-windows-msvc"
    return f"{arch}-{vendor}-{system}-gnu"


def _triple_arch_sys(triple: str) -> tuple[str, str]:
    """(arch, os) of a triple: ``armv6k-unknown-linux-gnueabi`` -> ("armv6k", "linux")."""
    parts = triple.lower().split("-")
    arch = _ARCH_ALIASES.get(parts[0], parts[0])
    system = next((name for p in parts[1:] for name in ("linux", "darwin", "windows", "win32")
                   if p.startswith(name)), "")
    return arch, "windows" if system == "win32" else system


def check_triple(triple: str) -> None:
    """Accept ``-target=<triple>`` when it names this machine's architecture and OS (vendor
    and ABI fields are not compared); otherwise raise TVMError naming the host triple: kiln
    compiles CPU code with the host's C compiler and has no cross-compiler."""
    if _triple_arch_sys(triple) != (_host_arch(), _host_sys()):
        raise TVMError(
            f"cannot compile for target triple {triple!r}: kiln builds CPU code with this "
            f"machine's C compiler, whose triple is {host_triple()!r}, and cannot "
            "cross-compile; build on a machine of that architecture (it may run "
            "`python -m kiln.exec.rpc_server` for the rest), or drop -target=")


def create(target: str | Target) -> Target:
    """``tvm.target.create(s)``: the classic spelling of ``Target(s)``."""
    return Target(target)


def cuda(model: str = "unknown", arch: str | None = None, options=None) -> Target:
    """``tvm.target.cuda()``: a CUDA target (``arch`` like ``"sm_80"``)."""
    text = f"cuda -model={model}" + (f" -arch={arch}" if arch else "")
    return Target(" ".join([text, *(options or [])]))
