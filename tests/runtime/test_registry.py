"""The global function registry: tvm.register_func / tvm.get_global_func / tvm._ffi."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import TVMError


def test_register_and_call_a_numpy_routine():
    @kiln.register_func("test.kiln.sort")
    def sort(x):
        return np.sort(x)

    try:
        f = kiln.get_global_func("test.kiln.sort")
        np.testing.assert_array_equal(f(np.array([3, 1, 2])), [1, 2, 3])
        assert "test.kiln.sort" in kiln.runtime.list_global_func_names()
        from kiln._ffi import get_global_func

        assert get_global_func("test.kiln.sort") is sort
    finally:
        kiln.runtime.remove_global_func("test.kiln.sort")


def test_override_missing_and_decorator_forms():
    kiln.register_func("test.kiln.one", lambda: 1)
    try:
        with pytest.raises(TVMError, match="already registered"):
            kiln.register_func("test.kiln.one", lambda: 2)
        kiln.register_func("test.kiln.one", lambda: 2, override=True)
        assert kiln.get_global_func("test.kiln.one")() == 2
    finally:
        kiln.runtime.remove_global_func("test.kiln.one")

    @kiln.register_func
    def test_kiln_named():
        return "named"

    try:
        assert kiln.get_global_func("test_kiln_named")() == "named"
    finally:
        kiln.runtime.remove_global_func("test_kiln_named")
    assert kiln.get_global_func("test.kiln.none", allow_missing=True) is None
    with pytest.raises(ValueError, match="Cannot find global function test.kiln.none"):
        kiln.get_global_func("test.kiln.none")
