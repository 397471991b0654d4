"""The pytest plugin TVM's conftest files load: ``pytest_plugins = ["tvm.testing.plugin"]``.

Loaded, it guarantees:

- the markers TVM's tests use (``gpu``, ``cuda``, ``llvm``, ...) are registered;
- a test taking ``target`` (directly or through a fixture) that no ``parametrize`` mark sets is
  run once per target under test (:func:`kiln.testing.targets_under_test`), those not enabled
  here skipped, less those ``@exclude_targets`` names, ``xfail`` where
  ``@known_failing_targets`` says;
- the ``dev`` fixture is the device of the test's ``target``;
- the fixtures made by one :func:`kiln.testing.parameters` call take their values together.
"""

from __future__ import annotations

from typing import Any

import pytest

import kiln

from .params import PARAMETRIZE_GROUP
from .targets import target_params

__all__ = ["MARKERS", "dev", "pytest_configure", "pytest_generate_tests"]

#: Marker name -> what it says about a test.
MARKERS: dict[str, str] = {
    "gpu": "runs on a GPU (skipped where the GPU it needs is missing)",
    "cpu": "runs on the CPU",
    "llvm": "needs the llvm target (kiln's C backend)",
    "cuda": "needs the cuda target (an NVIDIA GPU)",
    "nvptx": "needs the nvptx target",
    "cudnn": "needs cuDNN",
    "cublas": "needs cuBLAS",
    "tensorcore": "needs a GPU with tensor cores",
    "rocm": "needs the rocm target",
    "opencl": "needs the opencl target",
    "vulkan": "needs the vulkan target",
    "metal": "needs the metal target",
    "hexagon": "needs the hexagon target",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


def _parametrized_names(metafunc: pytest.Metafunc) -> set[str]:
    """The argument names that ``parametrize`` marks on the test already set."""
    names: set[str] = set()
    for mark in metafunc.definition.iter_markers("parametrize"):
        argnames = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if isinstance(argnames, str):
            argnames = argnames.split(",")
        names.update(n.strip() for n in argnames)
    return names


def _parametrize_target(metafunc: pytest.Metafunc) -> None:
    if "target" in metafunc.fixturenames and "target" not in _parametrized_names(metafunc):
        metafunc.parametrize("target", target_params(metafunc.function), scope="session")


def _parametrize_groups(metafunc: pytest.Metafunc) -> None:
    """Parametrize the fixtures of each :func:`parameters` group the test uses, together."""
    groups: dict[int, tuple[list[str], list[list[Any]], Any]] = {}
    for name, fixturedefs in metafunc.definition._fixtureinfo.name2fixturedefs.items():
        spec = getattr(fixturedefs[-1].func, PARAMETRIZE_GROUP, None)
        if spec is not None:
            group, values, ids = spec
            names, columns, _ = groups.setdefault(group, ([], [], ids))
            names.append(name)
            columns.append(values)
    for names, columns, ids in groups.values():
        rows = list(zip(*columns, strict=True)) if len(names) > 1 else columns[0]
        metafunc.parametrize(",".join(names), rows, indirect=True, ids=ids)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    _parametrize_target(metafunc)
    _parametrize_groups(metafunc)


@pytest.fixture
def dev(target: str) -> Any:
    """The device of the test's ``target`` (``kiln.device(target)``)."""
    return kiln.device(target)
