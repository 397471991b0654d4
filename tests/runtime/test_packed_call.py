"""Compiled code calling functions registered in Python (``tvm.tir.call_packed``).

Covers the argument conversion (tensors as zero-copy NDArrays, ints, floats, strings), errors
coming back as Python exceptions naming the function (never a crash), both call paths (the C
extension and ctypes), export_library/load_module of a module that makes packed calls,
``tvm.runtime.convert`` of Python functions, and a C function from a library loaded into the
process.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import kiln as tvm
from kiln import TVMError, te
from kiln.runtime import fastcall
from kiln.runtime.compiler import compile_shared


def _module(name: str, *scalars, n: int = 6):
    """``B = extern(A)`` calling ``name(A, B, *scalars)``, built for llvm."""
    A = te.placeholder((n,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tvm.tir.call_packed(
        name, ins[0], outs[0], *scalars), name="B")
    return tvm.build(te.create_schedule(B.op), [A, B])


def _run(f, n: int = 6):
    a = np.arange(n, dtype="float32")
    b = tvm.nd.array(np.zeros(n, "float32"))
    f(tvm.nd.array(a), b)
    return a, b.numpy()


def test_arguments_arrive_as_views_and_python_scalars(register_global):
    got = {}

    def record(x, y, i, f, s):
        got.update(x=x.numpy(), shape=x.shape, dtype=x.dtype, scalars=(i, f, s))
        y.copyfrom(x.numpy() * i)  # written in place: the NDArray views the output

    register_global("test.packed.record", record)
    a, b = _run(_module("test.packed.record", 3, 0.5, "tag"))
    np.testing.assert_array_equal(got["x"], a)
    assert (got["shape"], got["dtype"], got["scalars"]) == ((6,), "float32", (3, 0.5, "tag"))
    assert type(got["scalars"][0]) is int and type(got["scalars"][1]) is float
    np.testing.assert_array_equal(b, a * 3)


@pytest.mark.parametrize("backend", ["c", "ctypes"])
def test_both_call_paths(register_global, backend):
    register_global("test.packed.neg", lambda x, y: y.copyfrom(-x.numpy()))
    f = _module("test.packed.neg")
    previous = fastcall.backend()
    try:
        fastcall.use_backend(backend)
    except TVMError as e:  # no C extension on this machine
        pytest.skip(str(e))
    try:
        a, b = _run(f)
    finally:
        fastcall.use_backend("ctypes" if previous == "ctypes" else "auto")
    np.testing.assert_array_equal(b, -a)


def test_unregistered_name_is_a_python_error():
    f = _module("test.packed.nobody")
    with pytest.raises(TVMError, match=r"call_packed\('test.packed.nobody'\) failed: .*no "
                                       r"function is registered as 'test.packed.nobody'"):
        _run(f)


def test_exception_inside_the_function_comes_back_chained(register_global):
    def fails(x, y):
        raise ValueError("bad input")

    register_global("test.packed.fails", fails)
    f = _module("test.packed.fails")
    with pytest.raises(TVMError, match=r"call_packed\('test.packed.fails'\) failed: "
                                       r"ValueError: bad input") as info:
        _run(f)
    assert isinstance(info.value.__cause__, ValueError)
    # the module stays usable once the function is fixed
    register_global("test.packed.fails", lambda x, y: y.copyfrom(x.numpy()))
    a, b = _run(f)
    np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("file_name", ["lib.so", "lib.tar"])
def test_export_and_load_a_module_with_packed_calls(register_global, tmp_path, file_name):
    register_global("test.packed.double", lambda x, y: y.copyfrom(x.numpy() * 2))
    path = str(tmp_path / file_name)
    _module("test.packed.double").export_library(path)
    a, b = _run(tvm.runtime.load_module(path))
    np.testing.assert_array_equal(b, a * 2)


def test_convert_makes_a_packed_func_of_a_python_function():
    f = tvm.runtime.convert(lambda x, y: x + y)
    assert isinstance(f, tvm.runtime.PackedFunc)
    assert f(2, 3) == 5
    assert tvm.runtime.convert(f) is f
    A = te.placeholder((2,), name="A")
    assert tvm.runtime.convert(A) is A  # a Tensor is callable, but not a function


def test_extern_calls_a_c_function_of_a_library_loaded_into_the_process():
    """A symbol of a shared library loaded with RTLD_GLOBAL, declared with import_c."""
    path = compile_shared('float kiln_test_scale(float x) { return 3.0f * x; }\n',
                          name="kiln_test_scale")
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    A = te.placeholder((5,), name="A")
    B = te.compute(A.shape, lambda i: tvm.tir.call_extern("float32", "kiln_test_scale", A[i]),
                   name="B")
    s = te.create_schedule(B.op)
    s[B].pragma(B.op.axis[0], "import_c", "float kiln_test_scale(float x);")
    f = tvm.build(s, [A, B])
    a = np.arange(5, dtype="float32")
    b = tvm.nd.empty((5,))
    f(tvm.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a * 3)


def test_call_packed_inside_a_parallel_loop_is_refused():
    def fcompute(ins, outs):
        ib = tvm.tir.ir_builder.create()
        with ib.for_range(0, 4, kind="parallel"):
            ib.emit(tvm.tir.call_packed("f", ins[0], outs[0]))
        return ib.get()

    A = te.placeholder((4,), name="A")
    B = te.extern(A.shape, [A], fcompute, name="B")
    with pytest.raises(NotImplementedError, match="inside a parallel loop"):
        tvm.build(te.create_schedule(B.op), [A, B])
