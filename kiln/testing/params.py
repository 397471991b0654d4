"""Module-level pytest parameters and fixtures, as TVM's tests declare them.

``size = tvm.testing.parameter(1, 10)`` makes a fixture named by the variable it is assigned to
that takes each value in turn. ``n, dtype = tvm.testing.parameters((1, "f32"), (2, "i8"))``
makes fixtures that take their values *together* (one test per tuple, not the product); that
pairing is done by :mod:`kiln.testing.plugin`, which the test session must load, as in TVM.
``@tvm.testing.fixture(cache_return_value=True)`` computes an expensive fixture once per
combination of its arguments and hands each test a deep copy.
"""

from __future__ import annotations

import copy
import functools
import itertools
import pickle
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["parameter", "parameters", "fixture", "PARAMETRIZE_GROUP"]

#: Attribute of a :func:`parameters` fixture function: ``(group id, values, ids)``, read by the
#: plugin to parametrize the fixtures of one group together.
PARAMETRIZE_GROUP = "_kiln_parametrize_group"

_group_ids = itertools.count()


def _param(request: Any) -> Any:
    return request.param


def _grouped_param(request: Any) -> Any:
    if not hasattr(request, "param"):
        raise RuntimeError(f"fixture {request.fixturename!r} comes from tvm.testing.parameters,"
                           " which needs the plugin: pytest_plugins = [\"tvm.testing.plugin\"]")
    return request.param


def parameter(*values: Any, ids: Any = None) -> Any:
    """A pytest fixture taking each of ``values`` in turn, named by the variable it is
    assigned to in a test module: ``size = tvm.testing.parameter(1, 10, 100)``."""
    import pytest

    return pytest.fixture(params=list(values), ids=ids)(_param)


def parameters(*value_sets: Sequence[Any], ids: Any = None) -> tuple[Any, ...]:
    """Fixtures that take their values together, one tuple of ``value_sets`` per test:
    ``size, dtype = tvm.testing.parameters((1, "float32"), (2, "int8"))``."""
    import pytest

    if not value_sets:
        raise ValueError("parameters() needs at least one tuple of values")
    width = len(value_sets[0])
    if any(len(v) != width for v in value_sets):
        raise ValueError(f"parameters(): every value set must have {width} values")
    group = next(_group_ids)
    fixtures = []
    for column in zip(*value_sets, strict=True):
        def func(request: Any) -> Any:
            return _grouped_param(request)

        setattr(func, PARAMETRIZE_GROUP, (group, list(column), ids))
        fixtures.append(pytest.fixture(func))
    return tuple(fixtures)


def _cached(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` computing once per distinct (picklable) arguments, returning deep copies."""
    cache: dict[bytes, Any] = {}

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            key = pickle.dumps((args, sorted(kwargs.items())))
        except Exception:  # unpicklable arguments: no caching, as TVM does
            return func(*args, **kwargs)
        if key not in cache:
            cache[key] = func(*args, **kwargs)
        return copy.deepcopy(cache[key])

    return wrapper


def fixture(func: Callable[..., Any] | None = None, *, cache_return_value: bool = False) -> Any:
    """``@tvm.testing.fixture`` / ``@tvm.testing.fixture(cache_return_value=True)``: a pytest
    fixture, computed once per combination of its arguments when ``cache_return_value``."""
    import pytest

    def wrap(f: Callable[..., Any]) -> Any:
        return pytest.fixture(_cached(f) if cache_return_value else f)

    return wrap if func is None else wrap(func)
