"""Book §1.2 "Vector Add": define, schedule, lower, build, run, argument checks, save/load."""

import subprocess
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm

n = 100


def test_numpy_scalar_loop():
    """§1.2.1: the scalar-loop vector add agrees with numpy's ``a + b``."""
    np.random.seed(0)
    a = np.random.normal(size=n).astype(np.float32)
    b = np.random.normal(size=n).astype(np.float32)
    c = a + b

    def vector_add(a, b, c):
        for i in range(n):
            c[i] = a[i] + b[i]

    d = np.empty(shape=n, dtype=np.float32)
    vector_add(a, b, d)
    np.testing.assert_array_equal(c, d)


def test_get_abc_is_deterministic():
    a, b, c = d2ltvm.get_abc(n)
    a2, b2, _ = d2ltvm.get_abc(n)
    assert a.dtype == b.dtype == c.dtype == np.float32
    assert a.shape == b.shape == c.shape == (n,)
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)


def test_tensor_and_operation_types():
    """§1.2.2: placeholders and computes are Tensors made by PlaceholderOp / ComputeOp."""
    A, B, C = d2ltvm.vector_add(n)
    assert type(A).__name__ == "Tensor" and type(C).__name__ == "Tensor"
    assert (A.dtype, [int(x) for x in A.shape]) == ("float32", [100])
    assert (C.dtype, [int(x) for x in C.shape]) == ("float32", [100])
    assert type(A.op).__name__ == "PlaceholderOp"
    assert type(C.op).__name__ == "ComputeOp"
    assert A.op.__class__.__bases__[0].__name__ == "Operation"


def test_schedule_and_lower(lower_text):
    """§1.2.3: the default schedule lowers to one loop over i."""
    A, B, C = d2ltvm.vector_add(n)
    s = te.create_schedule(C.op)
    assert type(s).__name__ == "Schedule"
    assert type(s[C]).__name__ == "Stage"
    assert type(s[C.op]).__name__ == "Stage"
    text = lower_text(s, [A, B, C])
    assert "produce c" in text
    assert "for (i, 0, 100)" in text
    assert "c[i] = (a[i] + b[i])" in text


@pytest.fixture(scope="module")
def mod():
    A, B, C = d2ltvm.vector_add(n)
    s = te.create_schedule(C.op)
    return tvm.build(s, [A, B, C])


def test_build_and_run(mod):
    """§1.2.4: build, feed tvm.nd arrays, compare with numpy."""
    assert type(mod).__name__ == "Module"
    y = tvm.nd.array(np.ones(2))
    assert type(y).__name__ == "NDArray"
    np.testing.assert_array_equal(y.asnumpy(), np.array([1.0, 1.0]))

    a, b, c = d2ltvm.get_abc(100, tvm.nd.array)
    mod(a, b, c)
    np.testing.assert_array_equal(a.asnumpy() + b.asnumpy(), c.asnumpy())


def test_wrong_shape_is_rejected(mod):
    """§1.2.5: a 200-long input violates the declared shape (100,)."""
    a, b, c = d2ltvm.get_abc(200, tvm.nd.array)
    with pytest.raises(tvm.TVMError) as err:
        mod(a, b, c)
    assert "shape[0]" in str(err.value)


def test_wrong_dtype_is_rejected(mod):
    """§1.2.5: a float64 input violates the default dtype float32."""
    A, B, C = d2ltvm.vector_add(n)
    assert (A.dtype, B.dtype, C.dtype) == ("float32", "float32", "float32")
    a, b, c = d2ltvm.get_abc(100, tvm.nd.array)
    a = tvm.nd.array(a.asnumpy().astype("float64"))
    with pytest.raises(tvm.TVMError) as err:
        mod(a, b, c)
    assert "dtype" in str(err.value)


LOAD_AND_RUN = """
import sys
import numpy as np
import kiln as tvm
from kiln.contrib import d2ltvm

loaded_mod = tvm.runtime.load_module(sys.argv[1])
a, b, c = d2ltvm.get_abc(100, tvm.nd.array)
loaded_mod(a, b, c)
np.testing.assert_array_equal(a.asnumpy() + b.asnumpy(), c.asnumpy())
print("LOADED-OK")
"""


@pytest.mark.parametrize("fname", ["vector-add.tar", "vector-add.so"])
def test_export_and_load(mod, tmp_path, kiln_env, fname):
    """§1.2.6: export_library, then load_module here and in a fresh interpreter."""
    path = tmp_path / fname
    mod.export_library(str(path))
    assert path.exists()

    loaded_mod = tvm.runtime.load_module(str(path))
    a, b, c = d2ltvm.get_abc(100, tvm.nd.array)
    loaded_mod(a, b, c)
    np.testing.assert_array_equal(a.asnumpy() + b.asnumpy(), c.asnumpy())

    proc = subprocess.run(
        [sys.executable, "-c", LOAD_AND_RUN, str(path)],
        cwd=tmp_path,
        env=kiln_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "LOADED-OK" in proc.stdout
