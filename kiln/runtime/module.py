"""Runtime modules: a loaded shared library of packed functions, its export and import.

A kiln library exports ``kiln_module_info()`` (JSON: functions, entry, target) and
``kiln_last_error()``; libraries built by :meth:`Module.from_source` also export
``kiln_module_source()``, the C source they were built from, so an exported ``.so`` is
self-describing. Loading a library that makes packed calls installs the runtime's callback
into it (``packed_call``). ``export_library("x.tar")`` writes an archive holding ``module.json``,
``lib.so`` and ``lib.c`` instead.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import json
import os
import re
import shutil
import statistics
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import TVMError
from . import fastcall as _fc
from . import packed_call
from .cache_flush import cache_flush_cpu_non_first_arg  # noqa: F401 - an f_preproc
from .compile_cache import CacheEntry
from .compiler import compile_asm, compile_shared, link_shared, shared_suffix
from .device import Device
from .registry import get_global_func

__all__ = ["Module", "PackedFunc", "BenchmarkResult", "load_module"]

_SHARED_SUFFIXES = (".so", ".dylib", ".dll")
_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
_ARCHIVE_INFO = "module.json"
_ARCHIVE_FORMAT = "kiln-module"
_DEFINES_INFO = re.compile(r"\bkiln_module_info\s*\(\s*(void)?\s*\)\s*\{")


class PackedFunc:
    """A compiled function: call it with NDArrays and Python/numpy scalars."""

    __slots__ = ("name", "_fptr", "_errptr", "_module")

    def __init__(self, name: str, fptr: int, errptr: int, module: Module) -> None:
        self.name = name
        self._fptr = fptr
        self._errptr = errptr
        self._module = module  # keeps the library loaded

    def __call__(self, *args: Any) -> None:
        try:
            return _fc.CALL(self._fptr, self._errptr, args)
        except TypeError as e:
            raise TypeError(f"{self.name}(): {e}") from None
        except TVMError as e:  # chained to a failed call_packed's exception, if any
            raise e from packed_call.take_error()

    def bind(self, *args: Any) -> Callable[[], None]:
        """``self(*args)`` as a call without arguments, for arguments that never change (a
        graph module's arrays): the arguments' tuple made once, no Python frame per call.
        Its errors are not chained to a failed ``call_packed``'s exception (the caller
        chains :func:`packed_call.take_error`)."""
        _fc.backend()  # resolved now: the partial keeps the implementation in use
        return functools.partial(_fc.CALL, self._fptr, self._errptr, args)

    def __repr__(self) -> str:
        return f"<PackedFunc {self.name}>"


class BenchmarkResult:
    """Per-repeat mean times in seconds (``results``) and their statistics."""

    def __init__(self, results: Sequence[float]) -> None:
        self.results: tuple[float, ...] = tuple(float(r) for r in results)
        if not self.results:
            raise ValueError("BenchmarkResult needs at least one result")
        self.mean = statistics.fmean(self.results)
        self.median = statistics.median(self.results)
        self.min = min(self.results)
        self.max = max(self.results)
        self.std = statistics.pstdev(self.results)

    def __repr__(self) -> str:
        return (
            f"BenchmarkResult(min={self.min:.6g}, mean={self.mean:.6g}, "
            f"median={self.median:.6g}, max={self.max:.6g}, std={self.std:.6g}, "
            f"results={self.results})"
        )

    def __str__(self) -> str:
        ms = [x * 1e3 for x in (self.mean, self.median, self.max, self.min, self.std)]
        head = "Execution time summary:\n" + "".join(
            f"{h:>12} " for h in ("mean (ms)", "median (ms)", "max (ms)", "min (ms)", "std (ms)")
        )
        return head + "\n" + "".join(f"{v:12.4f} " for v in ms)


def _c_string(text: str) -> str:
    """``text`` as a C string literal (one literal per line, concatenated): its UTF-8 bytes,
    with ``\\``, ``"``, ``?`` (trigraphs) escaped and other control and non-ASCII bytes as
    octal. One ``str.replace`` per special character, 3x faster on ResNet-18's megabyte of
    kernels than a regular expression's callback per match."""
    raw = text.encode("utf-8", "surrogateescape").decode("latin-1")
    for c in '\\"?':  # the backslash first: the others' escapes add backslashes
        raw = raw.replace(c, "\\" + c)
    if _C_OCTAL.search(raw):
        raw = _C_OCTAL.sub(lambda m: f"\\{ord(m.group()):03o}", raw)
    return '"' + raw.replace("\n", '\\n"\n  "') + '"'


#: the bytes (as latin-1 characters) written as octal escapes: control (but newline) and
#: non-ASCII
_C_OCTAL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\xff]")



def _metadata_c(source: str, info: dict[str, Any]) -> str:
    """C text appended by Module.from_source: module info (if missing) and the source."""
    parts = [
        "\n/* ---- appended by kiln.runtime.Module.from_source ---- */",
        '#define KILN_EXPORT_ __attribute__((visibility("default")))',
    ]
    if not _DEFINES_INFO.search(source):
        parts.append(
            "KILN_EXPORT_ const char* kiln_module_info(void) {\n  return "
            + _c_string(json.dumps(info))
            + ";\n}"
        )
    parts.append(
        "KILN_EXPORT_ const char* kiln_module_source(void) {\n  static const char s[] =\n  "
        + _c_string(source)
        + ";\n  return s;\n}\n"
    )
    return "\n".join(parts)


def _symbol(lib: ctypes.CDLL, name: str) -> int:
    """Address of an exported symbol, or 0."""
    try:
        return int(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0)
    except AttributeError:
        return 0


def _call_string(lib: ctypes.CDLL, name: str) -> str | None:
    addr = _symbol(lib, name)
    if not addr:
        return None
    raw = ctypes.CFUNCTYPE(ctypes.c_char_p)(addr)()
    return None if raw is None else raw.decode("utf-8", "surrogateescape")


class Module:
    """A loaded kiln library. Call it to run its entry function, or look functions up by
    name with ``mod["name"]`` / ``mod.get_function("name")``."""

    def __init__(
        self,
        lib_path: str,
        *,
        functions: Sequence[str],
        entry: str | None,
        target: str,
        source: str | None = None,
        keepalive: Any = None,
    ) -> None:
        try:
            self._lib = ctypes.CDLL(lib_path)
        except OSError as e:
            raise TVMError(f"cannot load library {lib_path}: {e}") from None
        packed_call.install(self._lib)
        self.library_path = lib_path
        self.functions: list[str] = list(functions)
        self.entry_name = entry
        self.target = target
        self.type_key = target.split()[0] if target.split() else "c"
        self.imported_modules: list[Module] = []
        self._source = source
        self._keepalive = keepalive  # e.g. the temp dir of an extracted archive
        self._errptr = _symbol(self._lib, "kiln_last_error")
        self._funcs: dict[str, PackedFunc] = {}
        self._entry: PackedFunc | None = None
        if entry:
            try:
                self._entry = self.get_function(entry)
            except AttributeError:
                raise TVMError(f"{lib_path}: entry function '{entry}' is not in the "
                               "library's function list or symbols") from None

    @classmethod
    def from_source(
        cls,
        source: str,
        function_names: Sequence[str],
        entry: str | None,
        target_kind: str,
        flags: list[str] | None = None,
    ) -> Module:
        """Compile C ``source`` (cached) and load it. ``function_names`` are the packed
        functions it defines; ``entry`` is the one ``mod(...)`` calls."""
        info = {"functions": list(function_names), "entry": entry, "target": target_kind}
        full = source + _metadata_c(source, info)
        path = compile_shared(full, flags=flags, name=entry or "lib")
        return cls(path, functions=function_names, entry=entry, target=target_kind,
                   source=source)

    @classmethod
    def from_objects(
        cls,
        objects: list[CacheEntry],
        glue: str,
        function_names: Sequence[str],
        entry: str | None,
        target_kind: str,
        source: str,
        flags: list[str] | None = None,
    ) -> Module:
        """Link the compiled ``objects`` and the C ``glue`` (cached, ``link_shared``) and load
        the library; ``source`` is the C source of the whole (the objects' and the glue's),
        which the library embeds as :meth:`from_source`'s does."""
        info = {"functions": list(function_names), "entry": entry, "target": target_kind}
        path = link_shared(objects, glue + _metadata_c(source, info), flags=flags,
                           name=entry or "lib")
        return cls(path, functions=function_names, entry=entry, target=target_kind,
                   source=source)

    # ---- calling ---------------------------------------------------------------------
    def get_function(self, name: str, query_imports: bool = False) -> PackedFunc:
        """The packed function ``name``; AttributeError if the module has none."""
        f = self._funcs.get(name)
        if f is not None:
            return f
        fptr = _symbol(self._lib, name) if name in self.functions else 0
        if not fptr:
            if query_imports:
                for m in self.imported_modules:
                    if name in m.functions:
                        return m.get_function(name)
            raise AttributeError(
                f"Module has no function '{name}' (functions: {', '.join(self.functions)})"
            )
        f = self._funcs[name] = PackedFunc(name, fptr, self._errptr, self)
        return f

    def __getitem__(self, name: str) -> PackedFunc:
        if not isinstance(name, str):
            raise TypeError("module function names are strings")
        return self.get_function(name)

    def __call__(self, *args: Any) -> None:
        f = self._entry
        if f is None:
            raise TVMError("this module has no entry function; use mod['name'](...)")
        try:  # inlined PackedFunc.__call__: this is the hot path
            return _fc.CALL(f._fptr, f._errptr, args)
        except TypeError as e:
            raise TypeError(f"{f.name}(): {e}") from None
        except TVMError as e:
            raise e from packed_call.take_error()

    def import_module(self, module: Module) -> None:
        """Attach a dependent module (e.g. device code)."""
        self.imported_modules.append(module)

    # ---- inspection ------------------------------------------------------------------
    def get_source(self, fmt: str = "") -> str:
        """The C source (``fmt`` "" or "c"), or the assembly (``fmt`` "asm" or "s")."""
        if fmt in ("", "c", "cc"):
            return self._source or ""
        if fmt in ("asm", "s"):
            if not self._source:
                raise TVMError("this module keeps no source to generate assembly from")
            return compile_asm(self._source)
        raise TVMError(f"get_source: unsupported format {fmt!r} (use '', 'c' or 'asm')")

    def __repr__(self) -> str:
        return f"Module({self.type_key}, {id(self):x})"

    # ---- export / benchmark ------------------------------------------------------------
    def export_library(self, file_name: str | os.PathLike[str],
                       fcompile: Callable[..., None] | None = None, **kwargs: Any) -> None:
        """Save the module: ``*.so``/``*.dylib``/``*.dll`` copies the shared library (its
        source and metadata are embedded); ``*.tar`` (or ``.tar.gz``/``.tgz``) writes an
        archive of ``module.json``, ``lib.so`` and ``lib.c``. Load with :func:`load_module`.
        With ``fcompile`` (e.g. ``tvm.contrib.cc.create_shared``), ``fcompile(file_name,
        [lib.c], **kwargs)`` builds the file from the module's C source instead."""
        path = os.fspath(file_name)
        if self.imported_modules:
            raise TVMError("export_library: modules with imported modules are not supported yet")
        parent = os.path.dirname(os.path.abspath(path))
        if fcompile is not None:
            self._compile_with(path, fcompile, kwargs)
        elif path.endswith(_SHARED_SUFFIXES):
            fd, tmp = tempfile.mkstemp(dir=parent, prefix=".tmp-kiln-")
            os.close(fd)
            try:
                shutil.copyfile(self.library_path, tmp)
                os.chmod(tmp, 0o755)
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        elif path.endswith(_TAR_SUFFIXES):
            self._write_archive(path, parent)
        else:
            raise TVMError(
                f"export_library: unsupported file type {path!r}; "
                "use .so, .dylib, .dll, .tar, .tar.gz or .tgz"
            )

    def _compile_with(self, path: str, fcompile: Callable[..., None],
                      kwargs: dict[str, Any]) -> None:
        """Write the module's C source, with its metadata, and let ``fcompile`` build it."""
        if not self._source:
            raise TVMError("export_library(fcompile=...): this module has no C source to "
                           "compile (it was loaded without one)")
        info = {"functions": self.functions, "entry": self.entry_name, "target": self.target}
        with tempfile.TemporaryDirectory(prefix="kiln-export-") as d:
            src = os.path.join(d, "lib.c")
            Path(src).write_text(self._source + _metadata_c(self._source, info),
                                 errors="surrogateescape")
            fcompile(path, [src], **kwargs)

    def _write_archive(self, path: str, parent: str) -> None:
        lib_name = "lib" + shared_suffix()
        info = {
            "format": _ARCHIVE_FORMAT,
            "version": 1,
            "library": lib_name,
            "source": "lib.c",
            "functions": self.functions,
            "entry": self.entry_name,
            "target": self.target,
        }
        mode = "w:gz" if path.endswith((".gz", ".tgz")) else "w"
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".tmp-kiln-")
        os.close(fd)
        try:
            with tempfile.TemporaryDirectory(prefix="kiln-export-") as d, \
                    tarfile.open(tmp, mode) as tar:
                Path(d, _ARCHIVE_INFO).write_text(json.dumps(info, indent=1))
                Path(d, "lib.c").write_text(self._source or "", errors="surrogateescape")
                for name in (_ARCHIVE_INFO, lib_name, "lib.c"):
                    src = self.library_path if name == lib_name else os.path.join(d, name)
                    tar.add(src, arcname=name)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def time_evaluator(
        self,
        func_name: str,
        dev: Device | None = None,
        number: int = 10,
        repeat: int = 1,
        min_repeat_ms: float = 0,
        f_preproc: str = "",
        ctx: Device | None = None,
    ) -> Callable[..., BenchmarkResult]:
        """A function that times ``func_name`` on its arguments: after one warm-up call, each
        of ``repeat`` measurements runs the function ``number`` times and records the mean;
        with ``min_repeat_ms``, ``number`` grows until one measurement lasts that long.
        ``f_preproc`` names a global function run on the arguments before each measurement
        (``"cache_flush_cpu_non_first_arg"``: empty the CPU caches, runtime/cache_flush.py).
        ``ctx=`` is accepted for the book's spelling of ``dev``; with neither, ``cpu(0)``."""
        dev = dev if dev is not None else ctx
        if dev is None:
            from .device import cpu

            dev = cpu(0)
        preproc = get_global_func(f_preproc) if f_preproc else None
        return time_evaluator(self.get_function(func_name, query_imports=True), dev, number,
                              repeat, min_repeat_ms, preproc)


def time_evaluator(func: Callable[..., Any], dev: Device, number: int = 10, repeat: int = 1,
                   min_repeat_ms: float = 0, preproc: Callable[..., Any] | None = None
                   ) -> Callable[..., BenchmarkResult]:
    """A function that times ``func`` on its arguments by the wall clock, ``dev.sync()``
    after each measurement: after one warm-up call, each of ``repeat`` measurements runs
    ``func`` ``number`` times and records the mean; with ``min_repeat_ms``, ``number`` grows
    until one measurement lasts that long. ``preproc(*args)``, when given, runs before each
    measurement, untimed."""
    if repeat < 1 or number < 1:
        raise ValueError("time_evaluator: number and repeat must be >= 1")

    def evaluator(*args: Any) -> BenchmarkResult:
        func(*args)
        dev.sync()
        n = int(number)
        results = []
        for _ in range(repeat):
            if preproc is not None:
                preproc(*args)
            elapsed = 0.0
            while True:
                if elapsed > 0.0:
                    per_call_ms = elapsed * 1e3 / n
                    n = max(int(min_repeat_ms / per_call_ms) + 1, int(n * 1.618))
                start = time.perf_counter()
                for _ in range(n):
                    func(*args)
                dev.sync()
                elapsed = time.perf_counter() - start
                if elapsed * 1e3 >= min_repeat_ms:
                    break
                if elapsed <= 0.0:
                    n *= 2
            results.append(elapsed / n)
        return BenchmarkResult(results)

    return evaluator


#: archive formats other modules load: format -> the module that registers its loader as
#: ``runtime.module.loadfile_<format>`` (imported by name when first needed, as TVM finds a
#: module loader by its global function's name)
ARCHIVE_LOADERS = {"kiln-cuda-module": "kiln.codegen.cuda_archive",
                   "kiln-vta-module": "kiln.vta.module_file"}


def _archive_loader(fmt: str) -> Callable[..., Any]:
    name = f"runtime.module.loadfile_{fmt}"
    loader = get_global_func(name, allow_missing=True)
    if loader is None:
        importlib.import_module(ARCHIVE_LOADERS[fmt])
        loader = get_global_func(name)
    return loader


def _load_archive(path: str) -> Module:
    tmp = tempfile.TemporaryDirectory(prefix="kiln-module-")
    try:
        with tarfile.open(path) as tar:
            try:
                raw = tar.extractfile(_ARCHIVE_INFO)
            except KeyError:
                raw = None
            if raw is None:
                raise TVMError(
                    f"cannot load {path}: not a kiln module archive (no {_ARCHIVE_INFO})"
                )
            info = json.loads(raw.read().decode("utf-8"))
            if info.get("format") in ARCHIVE_LOADERS:
                tmp.cleanup()
                return _archive_loader(info["format"])(path, tar, info)
            if info.get("format") != _ARCHIVE_FORMAT:
                raise TVMError(f"cannot load {path}: not a kiln module archive")
            names = [info["library"], info["source"]]
            for name in names:
                if os.path.basename(name) != name:
                    raise TVMError(f"cannot load {path}: bad member name {name!r}")
                member = tar.extractfile(name)
                if member is None:
                    raise TVMError(f"cannot load {path}: {name} is not a regular file")
                Path(tmp.name, name).write_bytes(member.read())
    except (tarfile.TarError, KeyError, ValueError, OSError) as e:
        tmp.cleanup()
        raise TVMError(f"cannot load {path}: damaged kiln module archive ({e})") from None
    except BaseException:
        tmp.cleanup()
        raise
    source = Path(tmp.name, info["source"]).read_text(errors="surrogateescape")
    return Module(
        os.path.join(tmp.name, info["library"]),
        functions=info["functions"],
        entry=info.get("entry"),
        target=info.get("target", "c"),
        source=source,
        keepalive=tmp,
    )


def _load_shared(path: str) -> Module:
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise TVMError(f"cannot load {path}: not a loadable shared library ({e})") from None
    text = _call_string(lib, "kiln_module_info")
    if text is None:
        raise TVMError(f"cannot load {path}: not a kiln library (it has no kiln_module_info)")
    try:
        info = json.loads(text)
    except json.JSONDecodeError as e:
        raise TVMError(f"cannot load {path}: bad kiln_module_info JSON ({e})") from None
    return Module(
        path,
        functions=info.get("functions", []),
        entry=info.get("entry"),
        target=info.get("target", "c"),
        source=_call_string(lib, "kiln_module_source"),
    )


def load_module(path: str | os.PathLike[str], fmt: str = "") -> Module:
    """Load a module saved by :meth:`Module.export_library` (a shared library or a tar
    archive). Raises TVMError when the file is missing or is not a kiln module."""
    p = os.path.abspath(os.fspath(path))
    if not os.path.isfile(p):
        raise TVMError(f"cannot load module: {p} does not exist")
    if p.endswith(_TAR_SUFFIXES) or (not p.endswith(_SHARED_SUFFIXES) and tarfile.is_tarfile(p)):
        return _load_archive(p)
    return _load_shared(p)
