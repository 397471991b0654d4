"""Sanitized builds: kernels compiled with AddressSanitizer and UndefinedBehaviorSanitizer.

``KILN_SANITIZE=address,undefined`` in the environment, ``kiln.build(..., sanitize=...)`` or
``PassContext(config={"kiln.sanitize": "address,undefined"})`` (the config wins over the
environment) selects the sanitizers. What this module guarantees:

* :func:`requested_sanitizers` is the one reading of that choice, checked: an unknown name is
  a ``TVMError`` listing the known ones.
* :func:`sanitize_flags` are the compiler flags; a report ends the process with a message on
  stderr (``-fno-sanitize-recover``), so a sanitized run either has no report or fails.
  They build at ``-O1`` (the sanitizers' advice, and 2 to 5 times faster to compile than
  ``-O3``) with ``-g1``: the line tables that a report's stack trace names, without the
  variable locations of ``-g``, whose tracking takes half the compile time of a large kernel.
  As compiler flags, they are part of the compile cache key.
* :func:`require_runtime` raises a ``TVMError`` saying how to run the process (the
  ``LD_PRELOAD`` of :func:`sanitizer_env`) when an AddressSanitizer kernel would be loaded
  into a process without the ASan runtime: ``dlopen`` of such a library aborts the process.
  UBSan's runtime loads with the library and needs nothing.

Sanitized builds also turn on kiln's own bound checks (``tir.instrument_bound_checkers``,
``kiln/tir/instrument_bound_checkers.py``). docs/reliability.md shows how to run them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import subprocess
from collections.abc import Mapping, Sequence

from ..errors import TVMError
from ..target.cc import compiler_command

__all__ = ["SANITIZERS", "SANITIZE_CONFIG", "parse_sanitizers", "requested_sanitizers",
           "sanitize_flags", "require_runtime", "asan_runtime", "sanitizer_env"]

#: the sanitizers kiln builds with, by their ``-fsanitize=`` names
SANITIZERS: tuple[str, ...] = ("address", "undefined")
#: the PassContext config key that selects them (else the environment's ``KILN_SANITIZE``)
SANITIZE_CONFIG = "kiln.sanitize"
#: what a sanitized process needs besides the preload: leak checking off (the Python
#: interpreter holds memory until exit), a report ends the process with a stack trace
_OPTIONS = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:allocator_may_return_null=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


def parse_sanitizers(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """The sanitizers named by ``spec`` (``"address,undefined"``, a list, or None/"" for
    none), in :data:`SANITIZERS` order."""
    if spec is None:
        return ()
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    chosen = {str(n).strip() for n in names if str(n).strip()}
    unknown = sorted(chosen - set(SANITIZERS))
    if unknown:
        raise TVMError(f"unknown sanitizer {', '.join(map(repr, unknown))}: kiln builds with "
                       f"{', '.join(SANITIZERS)} (e.g. KILN_SANITIZE=address,undefined)")
    return tuple(s for s in SANITIZERS if s in chosen)


def requested_sanitizers(config: Mapping) -> tuple[str, ...]:
    """The sanitizers of PassContext ``config``, else of ``$KILN_SANITIZE``."""
    if SANITIZE_CONFIG in config:
        return parse_sanitizers(config[SANITIZE_CONFIG])
    return parse_sanitizers(os.environ.get("KILN_SANITIZE"))


def sanitize_flags(sanitizers: Sequence[str]) -> list[str]:
    """The C compiler flags that build with ``sanitizers`` (none for none)."""
    if not sanitizers:
        return []
    return [f"-fsanitize={','.join(sanitizers)}", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer", "-g1", "-O1"]


def require_runtime(sanitizers: Sequence[str]) -> None:
    """Raise a ``TVMError`` unless this process can load kernels built with ``sanitizers``."""
    if "address" in sanitizers and not _asan_loaded():
        raise TVMError(
            "a kernel built with sanitize='address' can only be loaded into a process that "
            "starts with the AddressSanitizer runtime (loading it here would abort the "
            f"process): run it as LD_PRELOAD={asan_runtime()} ASAN_OPTIONS=detect_leaks=0 "
            "python ... (kiln.runtime.sanitize.sanitizer_env() gives the environment), or "
            "build with sanitize='undefined' only")


def _asan_loaded() -> bool:
    return hasattr(ctypes.CDLL(None), "__asan_init")


@functools.cache
def asan_runtime() -> str:
    """The path of the C compiler's ASan runtime (``<cc> -print-file-name=libasan.so``)."""
    path = _compiler_file("libasan.so", "ASan runtime")
    if path is None:
        raise TVMError(f"the C compiler {compiler_command()[0]!r} has no AddressSanitizer runtime "
                       f"(libasan.so); install it (e.g. the libasan package of your GCC)")
    return path


@functools.cache
def cxx_runtime() -> str | None:
    """The C++ runtime (libstdc++) the C compiler links with (the system's, by soname, for a
    compiler without one), or None where there is none.

    Preloaded after the ASan runtime: ASan's ``__cxa_throw`` interceptor resolves the real
    function once, at start, and a process that loads libstdc++ only later (a C++ extension
    module imported by a test: matplotlib's, onnxruntime's) dies at its first C++ exception
    with a failed ASan CHECK and exit status 1."""
    path = _compiler_file("libstdc++.so", "C++ runtime")
    if path is None:  # a C-only compiler: the system's C++ runtime, by its soname
        return ctypes.util.find_library("stdc++")
    real = os.path.realpath(path)
    try:
        with open(real, "rb") as f:
            return real if f.read(4) == b"\x7fELF" else None
    except OSError:
        return None


def _compiler_file(name: str, what: str) -> str | None:
    """``<cc> -print-file-name=NAME`` as an absolute path, or None when the compiler has none."""
    command = compiler_command()
    try:
        res = subprocess.run([*command, f"-print-file-name={name}"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise TVMError(f"cannot ask the C compiler {command[0]!r} for its {what} "
                       f"({e})") from None
    path = res.stdout.strip()
    return path if res.returncode == 0 and os.path.isabs(path) else None


def sanitizer_env(base: Mapping[str, str] | None = None,
                  sanitizers: Sequence[str] = SANITIZERS) -> dict[str, str]:
    """``base`` (default: this process's environment) for a child process that builds and
    runs kernels with ``sanitizers``: ``KILN_SANITIZE``, the ASan runtime (and the C++
    runtime after it, :func:`cxx_runtime`) preloaded, and the options that make a report end
    the process."""
    env = dict(os.environ if base is None else base)
    env["KILN_SANITIZE"] = ",".join(sanitizers)
    env.update(_OPTIONS)
    if "address" in sanitizers:
        preload = [asan_runtime(), cxx_runtime(),
                   *env.get("LD_PRELOAD", "").split(":")]
        env["LD_PRELOAD"] = ":".join(dict.fromkeys(filter(None, preload)))
    return env
