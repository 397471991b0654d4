"""The host C compiler, as far as a target description needs it: which compiler kiln uses
and which macros it predefines for given flags.

The compiler is ``$CC`` if set (it may hold extra words, e.g. ``ccache gcc``), else the first
of gcc, cc and clang on PATH. Its predefined macros under ``-march=native`` tell which vector
ISA kiln's CPU builds really get (:mod:`kiln.target.cpu`). Compiling and caching libraries is
the job of ``kiln.runtime.compiler``, which asks this module for the command.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess

from kiln.errors import CompileError

_CANDIDATES = ("gcc", "cc", "clang")


@functools.cache
def _resolve_command(cc_env: str | None, path_env: str | None) -> tuple[str, ...]:
    if cc_env is not None and cc_env.strip():
        words = shlex.split(cc_env)
        exe = shutil.which(words[0], path=path_env)
        if exe is None:
            raise CompileError(
                f"No C compiler was found: CC={cc_env!r} is not an executable program. "
                "Set the CC environment variable to an installed C compiler, e.g. CC=gcc"
            )
        return (exe, *words[1:])
    for name in _CANDIDATES:
        exe = shutil.which(name, path=path_env)
        if exe is not None:
            return (exe,)
    raise CompileError(
        "No C compiler was found (looked for gcc, cc and clang on PATH). Install one, or set "
        "the CC environment variable to a C compiler, e.g. CC=gcc"
    )


def compiler_command() -> tuple[str, ...]:
    """The compiler command: its absolute path plus any extra words from ``$CC`` (read from
    the environment on every call). Raises CompileError when there is none."""
    return _resolve_command(os.environ.get("CC"), os.environ.get("PATH"))


def find_compiler() -> str:
    """Absolute path of the C compiler: ``$CC`` if set, else the first of gcc, cc, clang on
    PATH. Raises CompileError when there is none."""
    return compiler_command()[0]


@functools.cache
def predefined_macros(command: tuple[str, ...], flags: tuple[str, ...]) -> frozenset[str]:
    """Names of the macros ``command`` predefines when compiling C with ``flags``
    (``cc <flags> -dM -E``), asked once per process; empty when the compiler cannot run."""
    try:
        res = subprocess.run([*command, *flags, "-dM", "-E", "-x", "c", os.devnull],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(re.findall(r"#define (\w+)", res.stdout))
