"""``tvm.contrib.cc``: drive the host C compiler to make shared libraries and executables.

``create_shared(output, objects)`` runs ``cc -shared -fPIC -o output objects options``, as
classic TVM's does; it is the ``fcompile`` that ``Module.export_library(path,
fcompile=...)`` calls with the module's C source. ``cross_compiler`` wraps another compiler
(or such a function) with fixed options into a new ``fcompile``. Which compiler runs is
kiln's one lookup (:mod:`kiln.target.cc`: ``$CC``, else gcc, cc or clang on PATH).
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Callable, Sequence

from kiln.errors import CompileError
from kiln.target.cc import compiler_command
from kiln.target.triple import host_triple

__all__ = ["create_shared", "create_executable", "cross_compiler", "get_target_triple"]

FCompile = Callable[..., None]


def _command(cc: str | None) -> list[str]:
    return [cc] if cc else list(compiler_command())


def _as_list(items: str | Sequence[str] | None) -> list[str]:
    if items is None:
        return []
    return [items] if isinstance(items, str) else list(items)


def _compile(output: str, objects: str | Sequence[str], options: str | Sequence[str] | None,
             cc: str | None, cwd: str | None, shared: bool) -> None:
    """Run ``cc [-shared -fPIC] -o output objects options``; CompileError with its log."""
    cmd = _command(cc)
    if shared:
        cmd += ["-shared", "-fPIC"]
    cmd += ["-o", os.fspath(output), *map(os.fspath, _as_list(objects)), *_as_list(options)]
    try:
        res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, errors="replace")
    except OSError as e:
        raise CompileError(f"cannot run the C compiler {cmd[0]!r}: {e}") from None
    if res.returncode != 0:
        raise CompileError("Compilation error:\n" + " ".join(cmd) + "\n" + res.stdout
                           + res.stderr)


def create_shared(output: str, objects: str | Sequence[str],
                  options: str | Sequence[str] | None = None, cc: str | None = None,
                  cwd: str | None = None) -> None:
    """Link ``objects`` (object or C source files) into the shared library ``output``."""
    _compile(output, objects, options, cc, cwd, shared=True)


def create_executable(output: str, objects: str | Sequence[str],
                      options: str | Sequence[str] | None = None, cc: str | None = None,
                      cwd: str | None = None) -> None:
    """Compile and link ``objects`` into the executable ``output``."""
    _compile(output, objects, options, cc, cwd, shared=False)


def get_target_triple(cc: str | None = None) -> str:
    """The target triple the compiler produces code for (``cc -dumpmachine``); this
    machine's triple when the compiler does not say."""
    return _target_triple(cc)


def _target_triple(cc: str | None) -> str:
    try:
        res = subprocess.run([*_command(cc), "-dumpmachine"], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        return host_triple()
    return res.stdout.strip() if res.returncode == 0 and res.stdout.strip() else host_triple()


create_shared.output_format = "so"  # type: ignore[attr-defined]
create_shared.get_target_triple = get_target_triple  # type: ignore[attr-defined]
create_executable.output_format = ""  # type: ignore[attr-defined]


def cross_compiler(compile_func: str | FCompile,
                   options: str | Sequence[str] | None = None,
                   output_format: str | None = None,
                   get_target_triple: Callable[[], str] | None = None) -> FCompile:
    """A new ``fcompile`` that calls ``compile_func`` (a function like :func:`create_shared`,
    or the name of a compiler) with ``options`` prepended to the options of each call.

    >>> fcompile = cross_compiler("aarch64-linux-gnu-gcc", options=["-O3"])  # doctest: +SKIP
    >>> mod.export_library("lib.so", fcompile=fcompile)                      # doctest: +SKIP
    """
    base = _as_list(options)
    if isinstance(compile_func, str):
        triple = functools.partial(_target_triple, compile_func)
        compile_func = functools.partial(create_shared, cc=compile_func)
    else:
        triple = getattr(compile_func, "get_target_triple", None)
    func = compile_func

    def _fcompile(output: str, objects: str | Sequence[str],
                  options: str | Sequence[str] | None = None) -> None:
        func(output, objects, base + _as_list(options))

    _fcompile.output_format = output_format or getattr(  # type: ignore[attr-defined]
        func, "output_format", "so")
    _fcompile.get_target_triple = get_target_triple or triple  # type: ignore[attr-defined]
    return _fcompile
