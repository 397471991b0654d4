"""Make ``import tvm`` (and the book's ``import d2ltvm``) resolve to kiln.

Classic-TVM programs — the book "Dive into Deep Learning Compiler", course assignments, old
tutorials — say ``import tvm`` and ``from tvm import te``. After :func:`install_as_tvm` those
imports give kiln's own module objects, so ``tvm.te is kiln.te`` and nothing is copied:

============================  ===============================
import                        resolves to
============================  ===============================
``tvm``, ``tvm.X.Y``          ``kiln``, ``kiln.X.Y``
``d2ltvm``, ``d2l_tvm``       ``kiln.contrib.d2ltvm``
``topi``, ``topi.X``          ``kiln.topi``, ``kiln.topi.X`` (TVM 0.7's top-level package)
``vta``, ``vta.X``            ``kiln.vta``, ``kiln.vta.X`` (the VTA accelerator, docs/vta.md)
============================  ===============================

Only what kiln has resolves: ``import tvm.foo`` where kiln has no ``kiln.foo`` raises
``ModuleNotFoundError`` naming ``kiln.foo``. The finder sits first on ``sys.meta_path``, so an
installed Apache TVM is shadowed while the alias is installed.

This module imports nothing from kiln at import time; kiln modules are imported only when an
aliased name is imported. ``python -m kiln.as_tvm script.py`` runs a script with the alias on.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

__all__ = ["install_as_tvm", "uninstall_as_tvm", "is_installed", "ALIASES"]

#: Top-level alias name -> the kiln module it stands for.
ALIASES: dict[str, str] = {
    "tvm": "kiln",
    "d2ltvm": "kiln.contrib.d2ltvm",
    "d2l_tvm": "kiln.contrib.d2ltvm",
    "topi": "kiln.topi",
    "vta": "kiln.vta",
}


def _target_name(fullname: str) -> str | None:
    """Return the kiln module name that ``fullname`` aliases, or None if it is not ours."""
    head, dot, rest = fullname.partition(".")
    target = ALIASES.get(head)
    if target is None:
        return None
    return f"{target}.{rest}" if dot else target


def _resolve(kiln_name: str) -> types.ModuleType | None:
    """Import and return the kiln module ``kiln_name``; None if kiln has no such module.

    A module-valued attribute of the parent package counts too (``kiln.nd`` may be an alias of
    ``kiln.runtime.ndarray`` rather than a file). Errors raised while importing a kiln module
    that does exist (a missing optional dependency, a bug) propagate unchanged.
    """
    if kiln_name in sys.modules:
        return sys.modules[kiln_name]
    parent_name, _, child = kiln_name.rpartition(".")
    if parent_name:
        parent = _resolve(parent_name)
        if parent is None:
            return None
        attr = getattr(parent, child, None)
        if isinstance(attr, types.ModuleType):
            return attr
        if not hasattr(parent, "__path__"):
            return None
    if importlib.util.find_spec(kiln_name) is None:
        return None
    return importlib.import_module(kiln_name)


class _AliasLoader(importlib.abc.Loader):
    """Loader that hands back an already-imported kiln module instead of executing code."""

    def __init__(self, module: types.ModuleType) -> None:
        self._module = module
        self._real_spec = getattr(module, "__spec__", None)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self._module

    def exec_module(self, module: types.ModuleType) -> None:
        # The import system has just set module.__spec__ to the alias spec; put kiln's back so
        # that the module keeps its real identity (reload, pickling, tracebacks).
        if self._real_spec is not None:
            module.__spec__ = self._real_spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder for the names in :data:`ALIASES` and their submodules."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: D401 - importlib protocol
        kiln_name = _target_name(fullname)
        if kiln_name is None:
            return None
        module = _resolve(kiln_name)
        if module is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: the tvm alias maps it to {kiln_name!r}, "
                f"which kiln does not have",
                name=fullname,
            )
        return importlib.machinery.ModuleSpec(
            fullname,
            _AliasLoader(module),
            origin=getattr(module, "__file__", None),
            is_package=hasattr(module, "__path__"),
        )


def _installed_finders() -> list[object]:
    return [f for f in sys.meta_path if isinstance(f, _AliasFinder)]


def is_installed() -> bool:
    """Return True when the tvm alias is on ``sys.meta_path``."""
    return bool(_installed_finders())


def _is_alias_name(name: str) -> bool:
    return _target_name(name) is not None


def install_as_tvm(force: bool = False) -> None:
    """Make ``import tvm`` / ``import d2ltvm`` / ``import topi`` resolve to kiln's modules.

    Idempotent. If another ``tvm`` (say Apache TVM) was already imported in this process, the
    alias would mix two libraries, so this raises ``RuntimeError`` unless ``force=True``, which
    drops those modules from ``sys.modules`` first (objects already created from them stay).
    """
    foreign = [
        name
        for name, mod in list(sys.modules.items())
        if _is_alias_name(name)
        and mod is not None
        and not getattr(mod, "__name__", "").startswith("kiln")
    ]
    if foreign:
        if not force:
            raise RuntimeError(
                "install_as_tvm(): a module that is not kiln is already imported as "
                f"{foreign[0]!r}; call install_as_tvm() before importing it, or pass force=True"
            )
        for name in foreign:
            del sys.modules[name]
    if not is_installed():
        sys.meta_path.insert(0, _AliasFinder())


def uninstall_as_tvm() -> None:
    """Remove the alias finder and forget the aliased names (the kiln modules stay imported)."""
    for finder in _installed_finders():
        sys.meta_path.remove(finder)
    for name, mod in list(sys.modules.items()):
        if _is_alias_name(name) and getattr(mod, "__name__", "").startswith("kiln"):
            del sys.modules[name]
