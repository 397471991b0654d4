"""Target triples (``llvm -target=x86_64-pc-linux-gnu``, book §1.4).

kiln compiles CPU code with this machine's C compiler, so the only triple it accepts is the
host's: :func:`host_triple` spells it as LLVM does, and :func:`check_triple` rejects any
other architecture or OS with a message that names the host triple.
"""

from __future__ import annotations

import platform
import sys

from kiln.errors import TVMError

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


def is_host_arch(triple: str) -> bool:
    """Whether ``triple`` names this machine's architecture (an ``x86_64`` triple on an
    x86-64 host), whatever its OS."""
    return _triple_arch_sys(triple)[0] == _host_arch()


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
