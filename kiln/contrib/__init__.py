"""Extra modules built on kiln's public API (``tvm.contrib`` under the alias).

Nothing is imported eagerly: ``from kiln.contrib import d2ltvm`` loads the book's helpers
(:mod:`kiln.contrib.d2ltvm`) only when asked for, and ``kiln.contrib.graph_executor`` (an
attribute access) imports that module on first use.
"""

import importlib

_SUBMODULES = {"cblas", "cc", "clang", "cublas", "cudnn", "d2ltvm", "download",
               "graph_executor", "graph_runtime", "mkl", "nvcc", "spacetime", "utils", "util"}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
