"""The C compiler driver: turns C source into a cached shared library.

``compile_shared(source)`` returns the path of a shared library built from ``source``. Builds
are cached on disk under ``$KILN_CACHE_DIR`` (default ``$XDG_CACHE_HOME/kiln`` or
``~/.cache/kiln``), keyed by the source, the compiler (path and ``--version``) and the flags;
each entry is checked against its record before it is returned, built under a lock and
renamed into place (``compile_cache.py``), so concurrent processes can share the cache and a
damaged entry is rebuilt, never loaded. A cache directory that cannot be written, or whose
disk is full (the compiler says so: ``No space left on device``), gives a temporary one.
Which compiler runs, and the ``-march`` a target selects, are the target's facts
(``kiln.target.cc``, ``kiln.target.cpu``); the compiler runs without a sanitizer runtime in
``LD_PRELOAD`` (:func:`compiler_env`).

A library can also be built from parts, each cached on its own: :func:`compile_object`
compiles one translation unit (a kernel) into an object file, cached under the key its
caller chose (:func:`object_entry`: what determines the source, plus the compiler and its
flags), and :func:`link_shared` links objects and a small glue translation unit into a
shared library, cached under the objects' keys and the glue. The objects of one library are
compiled side by side, :func:`compile_jobs` at a time (``KILN_COMPILE_JOBS``, default: the
CPUs this process may run on).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ..errors import CompileError
from ..target.cc import compiler_command, find_compiler
from ..target.cpu import host_cpu_id
from .compile_cache import CacheEntry, atomic_write_text, build, cache_entry, lookup

__all__ = [
    "DEFAULT_FLAGS",
    "cache_dir",
    "find_compiler",
    "compiler_version",
    "build_flags",
    "compile_shared",
    "compile_jobs",
    "object_entry",
    "object_argv",
    "compile_object",
    "link_shared",
    "compiler_env",
    "compile_asm",
    "runtime_header",
    "shared_suffix",
]

DEFAULT_FLAGS: tuple[str, ...] = (
    "-O3",
    "-std=gnu11",
    "-shared",
    "-fPIC",
    "-fopenmp",
    "-march=native",
)
# Flags dropped (with a retry) when the compiler turns out not to support them.
_OPTIONAL_FLAGS = ("-fopenmp", "-march=native")
_MAX_QUOTED_LINES = 20
#: what a compiler (or its assembler or linker) says when the disk is full
_NO_SPACE = os.strerror(errno.ENOSPC)


def shared_suffix() -> str:
    """File suffix of shared libraries on this platform."""
    return ".dll" if sys.platform == "win32" else ".so"


def cache_dir() -> Path:
    """The compile cache directory (read from the environment on every call)."""
    env = os.environ.get("KILN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "kiln"


@functools.cache
def compiler_version(command: tuple[str, ...]) -> str:
    """``<compiler> --version`` output, run once per process per compiler."""
    try:
        res = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, errors="replace", timeout=60
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise CompileError(
            f"cannot run the C compiler {command[0]!r} ({e}); set CC to a working C compiler, "
            "e.g. CC=gcc"
        ) from None
    return res.stdout + res.stderr


def build_flags(extra: list[str] | tuple[str, ...] | None = None) -> list[str]:
    """DEFAULT_FLAGS plus ``extra``. An ``-march=``/``-mcpu=`` in ``extra`` replaces
    ``-march=native``, an ``-O`` level replaces ``-O3``, and ``-fno-openmp`` removes
    ``-fopenmp``."""
    extra = list(extra or ())
    flags = list(DEFAULT_FLAGS)
    if any(f.startswith(("-march=", "-mcpu=")) for f in extra):
        flags.remove("-march=native")
    if any(re.fullmatch(r"-O[0-9sgz]?|-Ofast", f) for f in extra):
        flags.remove("-O3")
    if "-fno-openmp" in extra:
        flags.remove("-fopenmp")
        extra = [f for f in extra if f != "-fno-openmp"]
    if sys.platform == "darwin" and "-undefined" not in extra:
        flags += ["-undefined", "dynamic_lookup"]
    return flags + extra


def _cache_key(source: str, command: tuple[str, ...], flags: list[str]) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(command), compiler_version(command), "\0".join(flags)):
        h.update(part.encode("utf-8", "surrogateescape"))
        h.update(b"\0\1\0")
    if "-march=native" in flags:
        h.update(host_cpu_id().encode())
    return h.hexdigest()


# (compiler command, flag) -> whether the compiler accepts the flag; filled on demand.
_FLAG_OK: dict[tuple[tuple[str, ...], str], bool] = {}


def _flag_supported(command: tuple[str, ...], flag: str) -> bool:
    key = (command, flag)
    if key not in _FLAG_OK:
        with tempfile.TemporaryDirectory(prefix="kiln-probe-") as d:
            src = Path(d) / "probe.c"
            src.write_text("int kiln_probe(void) { return 0; }\n")
            res = subprocess.run(
                [*command, "-shared", "-fPIC", flag, "-o", str(Path(d) / "probe.so"), str(src)],
                capture_output=True,
            )
            _FLAG_OK[key] = res.returncode == 0
    return _FLAG_OK[key]


def _run(command: tuple[str, ...], args: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [*command, *args], capture_output=True, text=True, errors="replace",
            env=compiler_env(os.environ),
        )
    except OSError as e:
        raise CompileError(
            f"cannot run the C compiler {command[0]!r} ({e}); set CC to a working C compiler, "
            "e.g. CC=gcc"
        ) from None


def compiler_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for the C compiler: without a sanitizer runtime in ``LD_PRELOAD`` (a sanitized
    process preloads ASan for its kernels; the compiler does not need it, and starting ASan
    in every compiler process costs a third of a sanitized test run). The C++ runtime that
    :func:`kiln.runtime.sanitize.sanitizer_env` preloads right after ASan goes with it."""
    out = dict(env)
    preload: list[str] = []
    after_sanitizer = False
    for p in filter(None, out.get("LD_PRELOAD", "").split(":")):
        name = Path(p).name
        if name.startswith(("libasan", "libubsan")) or (
                after_sanitizer and name.startswith("libstdc++")):
            after_sanitizer = True
            continue
        after_sanitizer = False
        preload.append(p)
    if preload:
        out["LD_PRELOAD"] = ":".join(preload)
    else:
        out.pop("LD_PRELOAD", None)
    return out


def _quote_lines(stderr: str, src_path: Path, source: str) -> list[str]:
    """``line N: <text>`` for each line of the source that the compiler's output names."""
    lines = source.splitlines()
    seen: list[int] = []
    pattern = re.compile(r"^(.*?):(\d+):", re.MULTILINE)
    for m in pattern.finditer(stderr):
        if Path(m.group(1)).name != src_path.name:
            continue
        n = int(m.group(2))
        if n not in seen and 1 <= n <= len(lines):
            seen.append(n)
    return [f"  line {n}: {lines[n - 1].strip()}" for n in seen[:_MAX_QUOTED_LINES]]


def _compile_error(
    res: subprocess.CompletedProcess[str], argv: list[str], src_path: Path, source: str
) -> CompileError:
    stderr = (res.stderr or "") + (res.stdout or "")
    if len(stderr) > 8000:
        stderr = stderr[:8000] + "\n... (compiler output truncated)"
    msg = [f"C compilation failed (exit status {res.returncode}):", stderr.rstrip()]
    quoted = _quote_lines(stderr, src_path, source)
    if quoted:
        msg += ["Offending lines of the generated source:", *quoted]
    msg += [f"Source kept at: {src_path}", "Command: " + shlex.join(argv)]
    return CompileError("\n".join(msg))


def _workaround_flags(command: tuple[str, ...]) -> list[str]:
    """Flags that avoid known miscompilations and slow code of the compiler in use.

    GCC 12 and 13 at -O3 with AVX2/AVX-512 if-convert guarded loads in a loop nest such as
    ``P[o*5+i] = (o*5+i < 10 || o*5+i >= 47) ? 0 : A[o*5+i-10]`` into wrong code (zeros are
    stored; seen with GCC 12.2 on AVX2 and AVX-512 and with GCC 13.3 on AVX-512); kiln's
    padding stages produce exactly this shape, so tree loop if-conversion is turned off for
    GCC 12 and 13 (tests/runtime/test_compiler_workarounds.py has the reproducer).

    GCC's predictive commoning (on at -O3) carries loaded values from one loop iteration to
    the next. In a register-blocked convolution (7 pixels x 8 input channels unrolled) it
    keeps every shifted input window live across the kernel-width loop, spills them and
    runs 3x slower (AVX2, GCC 12); on kiln's other kernels (depthwise, pooling, Winograd)
    it measured neutral, so it is off for every GCC.
    """
    if not _is_gcc(command):
        return []
    flags = ["-fno-predictive-commoning"]
    if re.search(r"\s1[23]\.\d+\.\d+", compiler_version(command).splitlines()[0]):
        flags.append("-fno-tree-loop-if-convert")
    return flags


def _is_gcc(command: tuple[str, ...]) -> bool:
    """Whether ``command`` is GCC (also when run as ``cc``), from its ``--version``."""
    try:
        version = compiler_version(command)
    except Exception:  # noqa: BLE001 - the version is advisory only
        return False
    first = version.splitlines()[0] if version else ""
    is_gcc = "gcc" in first.lower() or "Free Software Foundation" in version
    return is_gcc and "clang" not in first.lower()


def compile_shared(source: str, *, flags: list[str] | None = None, name: str = "lib") -> str:
    """Compile C ``source`` into a shared library and return its path.

    ``flags`` are extra compiler flags (see :func:`build_flags`). The result is cached on
    disk; a cache hit runs no compiler, and the path returned is always of a library that
    matches its cache record (a damaged entry is rebuilt with a warning; an unwritable cache
    directory gives a temporary one). Raises CompileError when no compiler is found or the
    compiler rejects the source (the message quotes the offending source lines).
    """
    command = compiler_command()
    all_flags = build_flags(flags) + _workaround_flags(command)
    key = _cache_key(source, command, all_flags)
    entry = cache_entry(cache_dir(), name, key, shared_suffix())

    def make(entry: CacheEntry, out: Path) -> None:
        _compile(command, all_flags, source, entry.path.with_suffix(".c"), out)

    return lookup(entry) or build(entry, make)


def _compile(command: tuple[str, ...], flags: list[str], source: str, src_path: Path,
             out: Path, objects: list[str] | tuple[str, ...] = ()) -> None:
    """Compile ``source`` (saved at ``src_path``) into ``out`` (a shared library linked with
    ``objects``, or an object file under ``-c``), retrying without the optional flags the
    compiler turns out not to support."""
    atomic_write_text(src_path, source)
    used = list(flags)
    link = [] if "-c" in used else [*objects, "-lm"]
    argv = [*used, "-o", str(out), str(src_path), *link]
    res = _run(command, argv)
    if res.returncode != 0:
        dropped = [f for f in _OPTIONAL_FLAGS if f in used and not _flag_supported(command, f)]
        if dropped:
            used = [f for f in used if f not in dropped]
            argv = [*used, "-o", str(out), str(src_path), *link]
            res = _run(command, argv)
    if res.returncode != 0:
        if _NO_SPACE in res.stderr + res.stdout:  # a full cache: build in a temporary one
            raise OSError(errno.ENOSPC, f"the C compiler could not write {out}: {_NO_SPACE}")
        raise _compile_error(res, [*command, *argv], src_path, source)


def compile_jobs() -> int:
    """How many compilers run side by side: ``KILN_COMPILE_JOBS``, else the CPUs this
    process may run on."""
    env = os.environ.get("KILN_COMPILE_JOBS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _object_command(flags: list[str] | tuple[str, ...] | None
                    ) -> tuple[tuple[str, ...], list[str]]:
    """The compiler in use and every flag an object file is compiled with for ``flags``."""
    command = compiler_command()
    return command, [f for f in build_flags(flags) if f != "-shared"] + ["-c"] \
        + _workaround_flags(command)


def object_entry(key: str, *, flags: list[str] | None = None, name: str = "kernel"
                 ) -> CacheEntry:
    """The cache entry of the object file whose source ``key`` determines (a hex digest
    chosen by the caller), compiled with ``flags`` by the compiler in use."""
    command, all_flags = _object_command(flags)
    return cache_entry(cache_dir(), name, _cache_key(key, command, all_flags), ".o")


def object_argv(flags: list[str] | None = None) -> list[str]:
    """The command line, without ``-o <object> <source>``, that :func:`compile_object` runs
    for a kernel source that starts with the runtime header, compiled with ``flags``: the
    compiler, its flags and the precompiled runtime header where there is one (for timing a
    kernel's compilation alone, ``benchmarks.compile_time --kernels``)."""
    command, all_flags = _object_command(flags)
    header = precompiled_runtime_header(command, all_flags)
    return [*command, *all_flags, *(["-include", header] if header else [])]


def compile_object(entry: CacheEntry, source: str, *, flags: list[str] | None = None,
                   info: dict | None = None) -> str:
    """The object file of ``entry`` (from :func:`object_entry` with the same ``flags``),
    compiled from C ``source`` unless a valid one is cached; ``info`` is recorded beside it
    (``compile_cache.lookup_info``). Errors as :func:`compile_shared`'s."""
    command, all_flags = _object_command(flags)

    def make(entry: CacheEntry, out: Path) -> None:
        header = precompiled_runtime_header(command, all_flags) \
            if source.startswith(runtime_header()) else None
        _compile(command, all_flags + (["-include", header] if header else []), source,
                 entry.path.with_suffix(".c"), out)

    return build(entry, make, info)


#: the precompiled runtime headers this process built or checked, by header path
_PCH_READY: dict[str, bool] = {}


def precompiled_runtime_header(command: tuple[str, ...], flags: list[str]) -> str | None:
    """The path of a copy of the runtime header that GCC finds precompiled (``<path>.gch``
    beside it) for ``flags``, built once per cache directory, compiler and flags; None for
    another compiler or where it cannot be built.

    A kernel's source starts with the runtime header, whose include guard then skips the
    pasted copy after ``-include <path>``: GCC reads the declarations from the precompiled
    file instead of parsing the C library's headers again for every kernel (10 to 15% of
    the compiler's time on a small kernel), and the object file is the same. A
    precompiled header GCC cannot use (another compiler build, other flags) is ignored and
    the header parsed as it is."""
    if not _is_gcc(command):
        return None
    pch_flags = [f for f in flags if f != "-c"]
    key = _cache_key(runtime_header(), command, pch_flags)
    entry = cache_entry(cache_dir(), "kiln_c_runtime", key, ".h.gch")
    header = entry.directory / f"{entry.stem}.h"
    if not _PCH_READY.get(str(header)) or not header.is_file():
        def make(entry: CacheEntry, out: Path) -> None:
            atomic_write_text(header, runtime_header())
            res = _run(command, [*pch_flags, "-x", "c-header", "-o", str(out), str(header)])
            if res.returncode != 0:
                raise CompileError(res.stderr)

        try:
            built = Path(lookup(entry) or build(entry, make)) == entry.path
            if built and not header.is_file():  # removed since: the same text again
                atomic_write_text(header, runtime_header())
        except (CompileError, OSError):
            built = False
        _PCH_READY[str(header)] = built
    return str(header) if _PCH_READY[str(header)] else None


def link_shared(objects: list[CacheEntry], glue: str, *, flags: list[str] | None = None,
                name: str = "lib") -> str:
    """A shared library linked from the built ``objects`` and the C source ``glue`` (compiled
    with them), cached under the objects' keys and ``glue``; errors as
    :func:`compile_shared`'s."""
    command = compiler_command()
    all_flags = build_flags(flags) + _workaround_flags(command)
    key = _cache_key("\0".join([glue, *(o.key for o in objects)]), command, all_flags)
    entry = cache_entry(cache_dir(), name, key, shared_suffix())

    def make(entry: CacheEntry, out: Path) -> None:
        _compile(command, all_flags, glue, entry.path.with_suffix(".c"), out,
                 [str(o.path) for o in objects])

    return lookup(entry) or build(entry, make)


def compile_asm(source: str, *, flags: list[str] | None = None) -> str:
    """The assembly the compiler generates for ``source`` (not cached)."""
    command = compiler_command()
    used = [f for f in build_flags(flags) if f not in ("-shared",)]
    with tempfile.TemporaryDirectory(prefix="kiln-asm-") as d:
        src = Path(d) / "module.c"
        src.write_text(source, encoding="utf-8", errors="surrogateescape")
        asm = Path(d) / "module.s"
        argv = [*used, "-S", "-o", str(asm), str(src)]
        res = _run(command, argv)
        if res.returncode != 0:
            raise _compile_error(res, [*command, *argv], src, source)
        return asm.read_text(errors="replace")


@functools.lru_cache(maxsize=1)
def runtime_header() -> str:
    """Text of kiln_c_runtime.h, the ABI header pasted at the top of generated C."""
    return (Path(__file__).with_name("kiln_c_runtime.h")).read_text(encoding="utf-8")
