"""Wrong arguments to a compiled function raise kiln.TVMError naming argument and constraint."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te


@pytest.fixture(scope="module")
def vector_add():
    A = te.placeholder((100,), name="a")
    B = te.placeholder((100,), name="b")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="c")
    s = te.create_schedule(C.op)
    return kiln.build(s, [A, B, C])


@pytest.fixture(scope="module")
def symbolic_add():
    n = te.var("n")
    A = te.placeholder((n,), name="a")
    B = te.placeholder((n,), name="b")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="c")
    s = te.create_schedule(C.op)
    return kiln.build(s, [A, B, C])


def arrays(*shapes, dtype="float32"):
    return [kiln.nd.array(np.zeros(sh, dtype=dtype)) for sh in shapes]


def test_wrong_count(vector_add):
    a, b, _ = arrays(100, 100, 100)
    with pytest.raises(kiln.TVMError, match="expected 3 arguments, got 2"):
        vector_add(a, b)


def test_wrong_shape(vector_add):
    a, b, c = arrays(200, 100, 100)
    with pytest.raises(kiln.TVMError, match=r"arg0\.shape\[0\] has an unsatisfied constraint"):
        vector_add(a, b, c)


def test_wrong_ndim(vector_add):
    a, b, c = arrays((10, 10), 100, 100)
    with pytest.raises(kiln.TVMError, match=r"arg0\.ndim is expected to equal 1, got 2"):
        vector_add(a, b, c)


def test_wrong_dtype(vector_add):
    a = kiln.nd.array(np.zeros(100, "float64"))
    b, c = arrays(100, 100)
    with pytest.raises(kiln.TVMError, match=r"arg0\.dtype is expected to be float32"):
        vector_add(a, b, c)


def test_scalar_where_tensor_expected(vector_add):
    b, c = arrays(100, 100)
    with pytest.raises(kiln.TVMError, match="arg0 .*expected a tensor"):
        vector_add(3, b, c)


def test_unsupported_python_object(vector_add):
    b, c = arrays(100, 100)
    with pytest.raises(TypeError):
        vector_add("x", b, c)


def test_shared_symbolic_shape_must_agree(symbolic_add):
    a, b, c = arrays(5, 6, 5)
    with pytest.raises(kiln.TVMError, match=r"arg1\.shape\[0\] has an unsatisfied constraint"):
        symbolic_add(a, b, c)
    a, b, c = arrays(7, 7, 7)
    symbolic_add(a, b, c)  # and the function still works afterwards


def test_wrong_device(vector_add):
    """A tensor whose DLPack device says CUDA is refused by the generated device check."""
    from kiln.runtime.ndarray import DLTensor

    a, b, c = arrays(100, 100, 100)

    t = DLTensor.from_address(a._handle)
    t.device.device_type = 2
    try:
        with pytest.raises(kiln.TVMError, match="device_type"):
            vector_add(a, b, c)
    finally:
        t.device.device_type = 1


def test_missing_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    from kiln.runtime import compiler

    if hasattr(compiler, "_compiler_command") and hasattr(compiler._compiler_command,
                                                          "cache_clear"):
        compiler._compiler_command.cache_clear()
    A = te.placeholder((3,), name="a")
    B = te.compute(A.shape, lambda i: A[i] * 3.0, name="b")
    s = te.create_schedule(B.op)
    with pytest.raises(kiln.CompileError, match="CC"):
        kiln.build(s, [A, B])


def test_compile_error_quotes_line(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    from kiln.runtime.module import Module

    src = "int f(void) { return undefined_name; }\n"
    with pytest.raises(kiln.CompileError, match="undefined_name"):
        Module.from_source(src, ["f"], "f", "c")
