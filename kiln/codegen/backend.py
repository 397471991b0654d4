"""One backend per target kind, behind one interface, found by ``backend_for(target)``.

``kiln.build`` lowers (``kiln.driver.pipeline.LOWER_PHASES``), runs the backend's target
phases (``TARGET_PHASES[backend.name]``), then asks the backend for the ``source`` of the
functions and for a loaded runtime module (``compile``). Adding a target kind means a
``Backend`` subclass in its own module, an entry in ``_BACKENDS`` and its phases in the
pipeline table.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any

from kiln.errors import TVMError
from kiln.target import Target


class Backend(ABC):
    """Code generation and compilation for one kind of target."""

    #: the key of this backend's phases in ``kiln.driver.pipeline.TARGET_PHASES``
    name: str

    @abstractmethod
    def source(self, funcs: list, target: Target) -> str:
        """The source code of ``funcs`` (the result of the target phases)."""

    @abstractmethod
    def compile(self, funcs: list, source: str, target: Target) -> Any:
        """Compile ``source`` and return the loaded runtime module of ``funcs``."""


#: target kind -> (module, class) of its backend; modules are imported on first use
_BACKENDS = {
    "llvm": ("kiln.codegen.c_backend", "CBackend"),
    "c": ("kiln.codegen.c_backend", "CBackend"),
    "cuda": ("kiln.codegen.cuda_backend", "CUDABackend"),
    "nvptx": ("kiln.codegen.cuda_backend", "CUDABackend"),
}


def backend_for(target: Target) -> Backend:
    """The backend that compiles for ``target``'s kind."""
    entry = _BACKENDS.get(str(target.kind))
    if entry is None:
        raise TVMError(f"no backend for target kind '{target.kind}'; kiln has backends for "
                       f"{', '.join(sorted(_BACKENDS))}")
    module, cls = entry
    return getattr(importlib.import_module(module), cls)()
