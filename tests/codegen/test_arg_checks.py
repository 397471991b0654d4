"""The argument checks are described once (kiln/codegen/arg_checks.py) and rendered into the C
entry and the CUDA host checker: both give the same message for the same bad call."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.codegen.arg_checks import describe
from kiln.codegen.cuda_host import ArgChecker
from kiln.runtime.ndarray import DLTensor


def _func():
    """``B[i, j] = A[i, j] + C[j]`` over shapes (n, 4) and (n * 2,) ... a const dim, a bound
    symbolic dim and a composite one."""
    n = te.var("n")
    A = te.placeholder((n, 4), name="A")
    C = te.placeholder((n * 2,), name="C")
    B = te.compute((n, 4), lambda i, j: A[i, j] + C[i], name="B")
    s = te.create_schedule(B.op)
    return s, [A, C, B]


@contextlib.contextmanager
def _on_cuda(*arrays):
    """The NDArrays described as cuda(0) tensors while the block runs."""
    for a in arrays:
        DLTensor.from_address(a._handle).device.device_type = 2
    try:
        yield
    finally:
        for a in arrays:
            DLTensor.from_address(a._handle).device.device_type = 1


def _message(fn, *args) -> str:
    with pytest.raises(kiln.TVMError) as info:
        fn(*args)
    return str(info.value)


@pytest.mark.parametrize("case", ["count", "ndim", "dtype", "const_dim", "composite_dim",
                                  "scalar_for_tensor"])
def test_c_and_cuda_checks_say_the_same(case):
    s, args = _func()
    mod = kiln.build(s, args)
    func = kiln.lower(s, args)["main"]
    checker = ArgChecker(func.__class__(func.params, func.buffer_map, func.body,
                                        "default_function"))
    nd = kiln.nd.array
    a, c, b = nd(np.zeros((3, 4), "float32")), nd(np.zeros(6, "float32")), \
        nd(np.zeros((3, 4), "float32"))
    call = {
        "count": (a, c),
        "ndim": (nd(np.zeros(12, "float32")), c, b),
        "dtype": (a, nd(np.zeros(6, "float64")), b),
        "const_dim": (a, c, nd(np.zeros((3, 5), "float32"))),
        "composite_dim": (a, nd(np.zeros(7, "float32")), b),
        "scalar_for_tensor": (a, 1.5, b),
    }[case]
    c_msg = _message(mod, *call)
    tensors = [x for x in call if hasattr(x, "_handle")]
    with _on_cuda(*tensors):
        cuda_msg = _message(lambda *xs: checker(xs), *call)
    assert c_msg == cuda_msg


def test_device_rule_names_the_device():
    s, args = _func()
    mod = kiln.build(s, args)
    a, c, b = (kiln.nd.array(np.zeros(sh, "float32")) for sh in ((3, 4), (6,), (3, 4)))
    with _on_cuda(c):
        assert "expected a cpu tensor, got device type 2" in _message(mod, a, c, b)
    checker = ArgChecker(kiln.lower(s, args)["main"])
    assert "expected a cuda tensor, got device type 1" in _message(
        lambda *xs: checker(xs), a, c, b)


def test_description_of_shapes():
    s, args = _func()
    spec = describe(kiln.lower(s, args)["main"], "cpu")
    a, c, b = spec.args
    assert [d.kind for d in a.dims] == ["bind", "const"]
    assert [d.kind for d in c.dims] == ["deferred"]
    assert [d.kind for d in b.dims] == ["deferred", "const"]
    assert [(d.index, d.axis) for d in spec.deferred] == [(1, 0), (2, 0)]


def test_unbound_shape_variable_is_a_build_error():
    n = te.var("n")
    A = te.placeholder((n * 2,), name="A")
    B = te.compute((n * 2,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(kiln.TVMError, match="uses variable 'n', which is neither a scalar "
                                            "argument nor a plain dimension"):
        kiln.build(s, [A, B])


def _shape_also_scalar(tensors_first: bool):
    """``B = A * 2`` over (n, m), with ``n`` and ``m`` also passed as scalar arguments, after
    the tensors (``[A, B, n, m]``) or before them (``[n, m, A, B]``)."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    return s, ([A, B, n, m] if tensors_first else [n, m, A, B])


@pytest.mark.parametrize("tensors_first", [True, False])
def test_shape_variable_passed_as_scalar_is_checked_against_the_shape(tensors_first):
    """As in TVM, scalar arguments are bound first and each dimension they give is checked:
    the C entry declares ``n`` once, and C and the CUDA host checker say the same."""
    s, args = _shape_also_scalar(tensors_first)
    func = kiln.lower(s, args)["main"]
    (tensor_a,) = [a for a in describe(func, "cpu").args if a.var.name == "A"]
    assert [d.kind for d in tensor_a.dims] == ["deferred", "deferred"]
    mod = kiln.build(s, args)
    checker = ArgChecker(func.__class__(func.params, func.buffer_map, func.body,
                                        "default_function"))
    a = kiln.nd.array(np.arange(30, dtype="float32").reshape(10, 3))
    b = kiln.nd.array(np.zeros((10, 3), "float32"))

    def call(n):
        return (a, b, n, 3) if tensors_first else (n, 3, a, b)

    mod(*call(10))
    np.testing.assert_allclose(b.numpy(), a.numpy() * 2)
    a_index = 0 if tensors_first else 2
    want = (f"Assert fail: (n == arg{a_index}.shape[0]), Argument arg{a_index}.shape[0] has an "
            f"unsatisfied constraint: expected 12, got 10")
    assert _message(mod, *call(12)) == want
    with _on_cuda(a, b):
        assert checker(call(10))[func.params[2 if tensors_first else 0]] == 10
        assert _message(lambda *xs: checker(xs), *call(12)) == want


def test_entry_and_compute_are_compiled_apart():
    """The packed entry (the argument checks) is marked ``KILN_ENTRY`` (GCC: -O1) and the
    compute function ``KILN_COMPUTE`` (never inlined into it), so the compute function keeps
    the command line's optimization level."""
    from kiln.runtime import compiler

    s, args = _func()
    src = kiln.build(s, args, target="c", name="f").get_source()
    assert "KILN_COMPUTE\nstatic int32_t f_compute(" in src
    assert "KILN_ENTRY\nKILN_DLL int32_t f(" in src
    if compiler._is_gcc(compiler.compiler_command()):
        assert "\nf_compute:" in compiler.compile_asm(src)  # a function of its own
