"""Targets: ``llvm``, ``llvm -mcpu=...``, ``c`` (all the C backend on the CPU) and ``cuda``."""

from __future__ import annotations

import shlex

from kiln.errors import TVMError

_CPU_KINDS = ("llvm", "c")
_GPU_KINDS = ("cuda", "nvptx")


class Target:
    """A parsed target string: its kind and ``-key=value`` options."""

    def __init__(self, target: str | Target = "llvm"):
        if isinstance(target, Target):
            self.kind, self.attrs, self.text = target.kind, dict(target.attrs), target.text
            return
        parts = shlex.split(str(target))
        if not parts:
            raise TVMError("empty target string; use 'llvm', 'c' or 'cuda'")
        self.kind = parts[0]
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

    @property
    def is_cpu(self) -> bool:
        return self.kind in _CPU_KINDS

    @property
    def device_type(self) -> int:
        return 1 if self.is_cpu else 2

    def c_flags(self) -> list[str]:
        """Extra C compiler flags: ``-mcpu=X`` selects ``-march=X``."""
        cpu = self.attrs.get("mcpu")
        return [f"-march={cpu}"] if cpu else []

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Target({self.text!r})"


def create(target: str) -> Target:
    return Target(target)
